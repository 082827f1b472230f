#!/usr/bin/env bash
# Times the same range two ways on this machine, for the daemon's target (a campaign through the
# coordinator at most 5% slower than a local search): `tmd-worker search` alone, then a campaign
# of the same range through `tmd-server` with one `tmd-worker run` daemon. Prints both walls and
# their ratio, and the daemon's own account (engine busy time, result requests).
#
# Needs the release binaries (target/release, or BIN=...) and a PostgreSQL (DATABASE_URL's
# server, default postgres://postgres@127.0.0.1:5432; the database TMD_BENCH_DB is dropped and
# created again). Run it on the GPU machine as is; BACKEND=cpu and a smaller range try it
# anywhere.
#
# Settings (environment): BACKEND (cuda), FUNCTION (exp), FORMAT (binary64), FROM (0x1p+0),
# TO (0x1p+1), MIN_BITS (44), UNIT_BITS (40), THREADS (all cores), WORKER_ARGS (extra flags of
# both runs, e.g. "--gpu-memory 8G" or "--devices 0,1"), LEASE_SECONDS (60),
# DIR (/tmp/tmd-gpu-bench), BIN (target/release), SEARCH_FROM (the DIR of an earlier run whose
# search is reused instead of running one: to compare two daemons against the same search),
# STATE_DIR (the daemon's state directory, $DIR/worker-state: its spool is written and synced
# once per group of results), WRAP (a command both runs are started under as `WRAP.NAME -- RUN`, NAME
# being search or daemon: WRAP="perf record -g -o /tmp/perf" profiles the search into
# /tmp/perf.search and the daemon into /tmp/perf.daemon; the walls and CPU times printed then
# include the wrapper's own).
#
# Besides the walls it prints the CPU time (user + system) of the search and of the daemon's
# process: the same units cost the same CPU, so a gap there is the daemon's own work.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${DIR:-/tmp/tmd-gpu-bench}
DB=${TMD_BENCH_DB:-tmd_gpu_bench}
. scripts/lib/campaign-common.sh
SEARCH_FROM=${SEARCH_FROM:-}
[ -n "$SEARCH_FROM" ] && SEARCH_FROM=$(cd "$SEARCH_FROM" && pwd)
rm -rf "$DIR"; mkdir -p "$DIR"
STATE_DIR=${STATE_DIR:-$DIR/worker-state}
rm -rf "$STATE_DIR"
# Sets CPU_NOW: the CPU seconds (user + system) of this shell's waited-for children so far.
# `times` runs in this shell itself: in a subshell it would count that subshell's children.
cpu_now() {
  times > "$DIR/times.txt"
  CPU_NOW=$(awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); printf "%.3f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$DIR/times.txt")
}

# wrap NAME COMMAND...: COMMAND, under WRAP (its output file named after NAME) when set.
read -r -a WRAP_CMD <<< "${WRAP:-}"
wrap() {
  local name=$1; shift
  if [ ${#WRAP_CMD[@]} -gt 0 ]; then "${WRAP_CMD[@]}.$name" -- "$@"; else "$@"; fi
}

# 1. The local search. It runs first, so the daemon below finds the kernel cache warm and
# neither run pays for compiling kernels.
if [ -n "$SEARCH_FROM" ]; then
  say "the search of $SEARCH_FROM"
  cp "$SEARCH_FROM/search.json" "$SEARCH_FROM/search.wall" "$DIR/"
  SEARCH_WALL=$(cat "$DIR/search.wall")
else
  say "tmd-worker search --backend $BACKEND ${RANGE[*]}"
  cpu_now; c0=$CPU_NOW; t0=$(now)
  wrap search "$BIN/tmd-worker" search --backend "$BACKEND" "${THREAD_ARGS[@]}" "${EXTRA[@]}" "${RANGE[@]}" \
    --output json --quiet > "$DIR/search.json" 2> "$DIR/search.log"
  t1=$(now); cpu_now; c1=$CPU_NOW
  SEARCH_WALL=$(seconds "$t0" "$t1")
  echo "$SEARCH_WALL" > "$DIR/search.wall"
  seconds "$c0" "$c1" > "$DIR/search.cpu"
fi
SEARCH_CPU=$(cat "$DIR/search.cpu" 2>/dev/null || echo nan)
SEARCH_CASES=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["hr_cases"]))' "$DIR/search.json")
say "search: ${SEARCH_WALL} s, $SEARCH_CASES HR-cases"

# 2. The same range as a campaign.
start_coordinator "$DB" "$DIR/server.log"
trap 'kill $SERVER_PID 2>/dev/null || true' EXIT
say "campaign $CAMPAIGN through $SERVER: tmd-worker run --backend $BACKEND --lease-seconds $LEASE_SECONDS"
cpu_now; c0=$CPU_NOW; t0=$(now)
wrap daemon "$BIN/tmd-worker" run --server "$SERVER" --token "$TOKEN" --state-dir "$STATE_DIR" \
  --backend "$BACKEND" "${THREAD_ARGS[@]}" "${EXTRA[@]}" --lease-seconds "$LEASE_SECONDS" \
  --exit-when-idle --status-seconds 10 > "$DIR/worker.log" 2>&1
t1=$(now); cpu_now; c1=$CPU_NOW
CAMPAIGN_CPU=$(seconds "$c0" "$c1")
# The coordinator's CPU and that of its PostgreSQL connections (still open: the pool's), read
# before the queries below add to them: they share the cores with the daemon, not the search.
proc_cpu() {
  python3 - "$@" <<'PY'
import os, sys
tick, total = os.sysconf("SC_CLK_TCK"), 0
for pid in sys.argv[1:]:
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += int(f[11]) + int(f[12])
    except (OSError, IndexError, ValueError):
        pass
print(f"{total / tick:.2f}")
PY
}
COORD_CPU=$(proc_cpu "$SERVER_PID")
PG_CPU=$(proc_cpu $(psql "$PG/postgres" -Atc "SELECT pid FROM pg_stat_activity WHERE datname = '$DB'" 2>/dev/null))
CAMPAIGN_WALL=$(seconds "$t0" "$t1")
PROGRESS=$(curl -sf -H "Authorization: Bearer $ADMIN_TOKEN" "$SERVER/api/v1/campaigns/$CAMPAIGN/progress")
DONE=$(python3 -c 'import json,sys; p=json.loads(sys.argv[1]); print("%s/%s" % (p["done"]["units"], p["total"]["units"]))' "$PROGRESS")
CASES=$(curl -sf -H "Authorization: Bearer $ADMIN_TOKEN" "$SERVER/api/v1/campaigns/$CAMPAIGN/hr-cases?format=json" | count_cases)

# The daemon's start-up (to its first lease, and to its engine ready: a GPU's opening and
# self-test) and its working time, from its log's timestamps.
python3 - "$DIR/worker.log" "$SEARCH_WALL" "$CAMPAIGN_WALL" "$DONE" "$CASES" "$SEARCH_CASES" \
  "$SEARCH_CPU" "$CAMPAIGN_CPU" "$COORD_CPU" "$PG_CPU" <<'EOF'
import re, sys
from datetime import datetime
log, search, campaign, done, cases, search_cases, search_cpu, campaign_cpu, coord_cpu, pg_cpu = sys.argv[1:]
search, campaign = float(search), float(campaign)
search_cpu, campaign_cpu = float(search_cpu), float(campaign_cpu)
ansi = re.compile(r'\x1b\[[0-9;]*m')
first = leased = ready = last = None
stopped = ""
for line in open(log, errors="replace"):
    line = ansi.sub("", line)
    m = re.match(r'(\d{4}-\d\d-\d\dT[\d:.]+)Z', line)
    if not m:
        continue
    t = datetime.fromisoformat(m.group(1)[:26])
    first = first or t
    if leased is None and " leased" in line:
        leased = t
    if ready is None and "engine ready" in line:
        ready = t
    last = t
    if "tmd-worker stopped" in line:
        stopped = line.strip()
startup = (leased - first).total_seconds() if leased and first else float("nan")
working = (last - leased).total_seconds() if leased and last else float("nan")
# Since the back end starts while the first lease is asked for, the engine may be ready after
# the first lease: the start-up that still delays the first unit is start to engine ready.
engine = (ready - first).total_seconds() if ready and first else float("nan")
print(f"search wall:            {search:8.2f} s  ({search_cases} HR-cases)")
print(f"campaign wall:          {campaign:8.2f} s  ({done} units, {cases} HR-cases)")
print(f"  daemon start-up:      {startup:8.2f} s  (start to first lease)")
print(f"  daemon working:       {working:8.2f} s  (first lease to exit)")
print(f"  engine ready after:   {engine:8.2f} s  (start to engine ready; nan before the overlap)")
print(f"ratio campaign/search:  {campaign / search:8.3f}")
print(f"CPU search / daemon:    {search_cpu:8.2f} / {campaign_cpu:.2f} s  (ratio {campaign_cpu / search_cpu:.3f})")
print(f"CPU coordinator / its PostgreSQL connections: {coord_cpu} / {pg_cpu} s")
print(f"ratio working/search:   {working / search:8.3f}")
for key in ("engine_busy_percent", "slot_use_percent", "results_posted", "result_requests"):
    m = re.search(key + r'="?([\d.]+)', stopped)
    if m:
        print(f"  {key}: {m.group(1)}")
if cases != search_cases:
    print(f"WARNING: the campaign found {cases} HR-cases, the search {search_cases}")
EOF
