#!/usr/bin/env bash
# A GPU daemon's start to its first unit, from a fresh kernel cache and again with a
# warm one, and `tmd-worker selftest`'s wall both ways, for one or several worker binaries
# alternated in one run (before and after a change on the same machine).
#
# Cold means a new, empty kernel cache (TMD_KERNEL_CACHE) and a new, empty cache of the driver's
# PTX compilations (CUDA_CACHE_PATH): what a fresh machine has. Warm is the second start with
# the same two folders. Each daemon run gets a fresh coordinator (scripts/lib/campaign-common.sh)
# with one small campaign (16 units of exp binary64 by default) and runs `tmd-worker run
# --exit-when-idle`; its log's timestamps give, from the moment the shell started it, the engine
# ready, the first unit computed and the first results posted. Prints one line per run and
# writes them to $DIR/runs.tsv.
#
# Settings (environment): WORKERS (space-separated LABEL=DIR pairs, DIR holding a tmd-worker;
# default "new=target/release"), BIN (the tmd-server's folder, target/release), REPEATS (warm
# daemon runs per worker, 2), FROM (0x1p+0), TO (0x1.01p+0), MIN_BITS (44), UNIT_BITS (40),
# DIR (/tmp/tmd-coldstart), BACKEND (cuda; cpu tries the script anywhere), and PostgreSQL as
# in campaign-common.sh (DATABASE_URL_BASE).
set -euo pipefail
cd "$(dirname "$0")/.."

FROM=${FROM:-0x1p+0}
TO=${TO:-0x1.01p+0}
DIR=${DIR:-/tmp/tmd-coldstart}
REPEATS=${REPEATS:-2}
WORKERS=${WORKERS:-new=target/release}
DB=${TMD_BENCH_DB:-tmd_coldstart}
. scripts/lib/campaign-common.sh
rm -rf "$DIR"; mkdir -p "$DIR"
printf 'run\tworker\tcache\tengine_ready_s\tfirst_unit_s\tfirst_post_s\twall_s\tunits\n' > "$DIR/runs.tsv"
SERVER_PID=
trap '[ -n "$SERVER_PID" ] && kill $SERVER_PID 2>/dev/null || true' EXIT

# daemon LABEL WORKER_DIR CACHE_STATE: one daemon run against a fresh coordinator.
n=0
daemon() {
  local label=$1 wdir=$2 state=$3 log t0 t1
  n=$((n + 1))
  log="$DIR/run$n-$label-$state.log"
  start_coordinator "$DB" "$DIR/server$n.log"
  t0=$(now)
  TMD_KERNEL_CACHE="$DIR/cache-$label/kernels" CUDA_CACHE_PATH="$DIR/cache-$label/driver" \
    "$wdir/tmd-worker" run --server "$SERVER" --token "$TOKEN" --state-dir "$DIR/state$n" \
    --backend "$BACKEND" "${EXTRA[@]}" --log info,tmd_worker=debug --exit-when-idle --status-seconds 60 > "$log" 2>&1 || true
  t1=$(now)
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
  python3 - "$log" "$t0" "$t1" "$n" "$label" "$state" >> "$DIR/runs.tsv" <<'EOF'
import re, sys
from datetime import datetime, timezone
log, t0, t1, n, label, state = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), *sys.argv[4:]
ansi = re.compile(r'\x1b\[[0-9;]*m')
marks = {"engine ready": None, "unit computed": None, "results posted": None}
units = 0
for line in open(log, errors="replace"):
    line = ansi.sub("", line)
    m = re.match(r'(\d{4}-\d\d-\d\dT[\d:.]+)Z', line)
    if not m:
        continue
    t = datetime.fromisoformat(m.group(1)[:26]).replace(tzinfo=timezone.utc).timestamp()
    for k in marks:
        if marks[k] is None and k in line:
            marks[k] = t - t0
    units += "unit computed" in line
f = lambda v: "nan" if v is None else f"{v:.2f}"
print(f"{n}\t{label}\t{state}\t" + "\t".join(f(v) for v in marks.values()) + f"\t{t1 - t0:.2f}\t{units}")
EOF
  tail -n 1 "$DIR/runs.tsv" >&2
}

# selftest LABEL WORKER_DIR CACHE_STATE: `tmd-worker selftest`, its wall from the shell.
selftest() {
  local label=$1 wdir=$2 state=$3 t0 t1 ok=passed
  t0=$(now)
  TMD_KERNEL_CACHE="$DIR/cache-$label/kernels" CUDA_CACHE_PATH="$DIR/cache-$label/driver" \
    "$wdir/tmd-worker" selftest > "$DIR/selftest-$label-$state.log" 2>&1 || ok=FAILED
  t1=$(now)
  say "selftest $label ($state cache): $ok in $(seconds "$t0" "$t1") s"
}

read -r -a workers <<< "$WORKERS"
fresh() { rm -rf "$DIR/cache-$1"; mkdir -p "$DIR/cache-$1"; }
say "daemons from empty caches"
for w in "${workers[@]}"; do fresh "${w%%=*}"; daemon "${w%%=*}" "${w#*=}" cold; done
say "daemons with the caches they filled"
for r in $(seq "$REPEATS"); do
  for w in "${workers[@]}"; do daemon "${w%%=*}" "${w#*=}" warm; done
done
say "selftest from empty caches, then warm"
for w in "${workers[@]}"; do fresh "${w%%=*}"; selftest "${w%%=*}" "${w#*=}" cold; done
for w in "${workers[@]}"; do selftest "${w%%=*}" "${w#*=}" warm; done
cat "$DIR/runs.tsv"
