#!/usr/bin/env bash
# Lease claims of a whole-function campaign with many daemons, back to back on one machine, for
# each --defer-marking-min in MINS (default "1024 0": the default, then every claim marking its
# own units): a fresh campaign of FUNCTION (gpu-farm-run.sh start, no estimate), DAEMONS daemons
# a GPU on GPUS GPUs, read after READ_AT seconds (150): the claims' and posts' latencies from
# /metrics, the slow statements, the progress.
#
#   eval "$(PG_OPTS='-c max_connections=300' bash scripts/wheel-postgres.sh carry/.whl)"
#   BIN=carry/bin OUT=/tmp/claims bash scripts/gpu-claims-run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MINS=${MINS:-1024 0}
READ_AT=${READ_AT:-150}
OUT=${OUT:-/tmp/tmd-claims-run}
mkdir -p "$OUT"
export GPUS=${GPUS:-1} DAEMONS=${DAEMONS:-16} ESTIMATE=0
for m in $MINS; do
  # Each run compiles its kernels afresh, as the first did.
  export TMD_DEFER_MARKING_MIN=$m DIR=/tmp/tmd-claims-$m TMD_KERNEL_CACHE=/tmp/tmd-claims-kc-$m
  echo "== --defer-marking-min $m, $GPUS GPU(s) x $DAEMONS daemons, read at $READ_AT s" \
    | tee "$OUT/claims-$m.txt"
  bash scripts/gpu-farm-run.sh start 2>> "$OUT/claims-$m.txt"
  sleep "$READ_AT"
  bash scripts/gpu-farm-run.sh requests >> "$OUT/claims-$m.txt"
  curl -sf -H "Authorization: Bearer $(cat "$DIR/admin")" \
    "$(cat "$DIR/server")/api/v1/campaigns/$(cat "$DIR/campaign")/progress" \
    | python3 -c 'import json,sys; p=json.load(sys.stdin); print("units done", p["done"]["units"], "of", p["total"]["units"], "leased", p["leased"]["units"], "percent", p["percent_done"])' \
    >> "$OUT/claims-$m.txt" || true
  pkill -f "tmd-worker run" || true
  kill "$(cat "$DIR/server.pid")" 2>/dev/null || true
  sleep 3
done
cat "$OUT"/claims-*.txt
