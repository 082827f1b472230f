#!/usr/bin/env bash
# Checks one daemon on several GPUs (`tmd-worker run --devices 0,1`): runs a local
# search of a range on all the devices, then the same range as a campaign through
# `tmd-server` twice, with one daemon on all the devices and with one daemon on the first
# device alone. Prints each campaign's wall, the ratio of the two (ideally 1/N for N equal
# devices), each device's pieces and busy share from the daemon's own account ("device use"
# lines), and whether each campaign's HR-cases equal the search's (as sets of x, bits, kind).
# Exits nonzero when a campaign is not complete or its HR-cases differ.
#
# Needs the release binaries (target/release, or BIN=...) and a PostgreSQL (DATABASE_URL_BASE,
# default postgres://postgres@127.0.0.1:5432; the database TMD_BENCH_DB is dropped and created
# again for each campaign). Modelled on scripts/gpu-campaign-bench.sh.
#
# Settings (environment): DEVICES (0,1), BACKEND (cuda), FUNCTION (exp), FORMAT (binary64),
# FROM (0x1p+0), TO (0x1p+1), MIN_BITS (44), UNIT_BITS (40), THREADS (all cores), WORKER_ARGS
# (extra flags of every run, e.g. "--gpu-memory 8G"), LEASE_SECONDS (60),
# DIR (/tmp/tmd-multi-device), BIN (target/release), SINGLE (1: also run the one-device daemon;
# 0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICES=${DEVICES:-0,1}
DIR=${DIR:-/tmp/tmd-multi-device}
SINGLE=${SINGLE:-1}
DB=${TMD_BENCH_DB:-tmd_multi_device}
FIRST_DEVICE=${DEVICES%%,*}
. scripts/lib/campaign-common.sh
rm -rf "$DIR"; mkdir -p "$DIR"

# 1. The reference: a local search on every listed device. It runs first, so the daemons find
# the kernel cache warm.
say "tmd-worker search --backend $BACKEND --devices $DEVICES ${RANGE[*]}"
t0=$(now)
"$BIN/tmd-worker" search --backend "$BACKEND" --devices "$DEVICES" "${THREAD_ARGS[@]}" "${EXTRA[@]}" \
  "${RANGE[@]}" --output json --quiet > "$DIR/search.json" 2> "$DIR/search.log"
t1=$(now)
SEARCH_WALL=$(seconds "$t0" "$t1")
say "search: ${SEARCH_WALL} s"

SERVER_PID=
trap '[ -n "$SERVER_PID" ] && kill $SERVER_PID 2>/dev/null || true' EXIT

# 2. A campaign of the range through a fresh coordinator and one daemon on the devices $1;
# writes $DIR/$2.{log,wall,progress.json,hr.json}.
campaign() {
  local devices=$1 name=$2
  start_coordinator "$DB" "$DIR/$name-server.log"
  local id=$CAMPAIGN token=$TOKEN server=$SERVER
  say "campaign $id ($name): tmd-worker run --backend $BACKEND --devices $devices"
  local t0 t1 rc=0
  t0=$(now)
  "$BIN/tmd-worker" run --server "$server" --token "$token" --state-dir "$DIR/$name-state" \
    --backend "$BACKEND" --devices "$devices" "${THREAD_ARGS[@]}" "${EXTRA[@]}" \
    --lease-seconds "$LEASE_SECONDS" --exit-when-idle --status-seconds 10 > "$DIR/$name.log" 2>&1 || rc=$?
  t1=$(now)
  [ "$rc" = 0 ] || { say "the daemon exited with $rc (log: $DIR/$name.log)"; tail -20 "$DIR/$name.log" >&2; }
  seconds "$t0" "$t1" > "$DIR/$name.wall"
  curl -sf -H "Authorization: Bearer $ADMIN_TOKEN" "$server/api/v1/campaigns/$id/progress" > "$DIR/$name-progress.json"
  curl -sf -H "Authorization: Bearer $ADMIN_TOKEN" "$server/api/v1/campaigns/$id/hr-cases?format=json" > "$DIR/$name-hr.json"
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
}

campaign "$DEVICES" multi
RUNS=(multi)
if [ "$SINGLE" = 1 ] && [ "$FIRST_DEVICE" != "$DEVICES" ]; then
  campaign "$FIRST_DEVICE" single
  RUNS+=(single)
fi

python3 - "$DIR" "$SEARCH_WALL" "$DEVICES" "$FIRST_DEVICE" "${RUNS[@]}" <<'EOF'
import json, re, sys
from datetime import datetime
dir, search_wall, devices, first, *runs = sys.argv[1:]
ansi = re.compile(r'\x1b\[[0-9;]*m')
key = lambda c: (c["x"], c["bits"], c["kind"])
want = {key(c) for c in json.load(open(f"{dir}/search.json"))["hr_cases"]}
print(f"search on devices {devices}: {float(search_wall):8.2f} s, {len(want)} HR-cases")
ok = True
walls = {}
for name in runs:
    wall = float(open(f"{dir}/{name}.wall").read())
    walls[name] = wall
    p = json.load(open(f"{dir}/{name}-progress.json"))
    done, total = p["done"]["units"], p["total"]["units"]
    hr = json.load(open(f"{dir}/{name}-hr.json"))
    got = {key(c) for c in (hr["hr_cases"] if isinstance(hr, dict) else hr)}
    same = got == want
    ok &= same and done == total
    first_t = leased = last = None
    uses, stopped = [], ""
    for line in open(f"{dir}/{name}.log", errors="replace"):
        line = ansi.sub("", line)
        m = re.match(r'(\d{4}-\d\d-\d\dT[\d:.]+)Z', line)
        if not m:
            continue
        t = datetime.fromisoformat(m.group(1)[:26])
        first_t = first_t or t
        if leased is None and " leased" in line:
            leased = t
        last = t
        if "device use" in line:
            f = dict(re.findall(r'(\w+)="?([\d.]+)', line))
            uses.append(f)
        if "tmd-worker stopped" in line:
            stopped = line
    startup = (leased - first_t).total_seconds() if leased and first_t else float("nan")
    working = (last - leased).total_seconds() if leased and last else float("nan")
    label = devices if name == "multi" else first
    print(f"campaign, one daemon on devices {label}: {wall:8.2f} s wall, {done}/{total} units, "
          f"{len(got)} HR-cases, {'equal to' if same else 'DIFFERENT from'} the search")
    print(f"  start to first lease {startup:.2f} s, first lease to exit {working:.2f} s")
    for f in uses:
        print(f"  device {f.get('device')}: {f.get('pieces')} pieces, busy {f.get('busy_s')} s "
              f"({f.get('busy_percent')}% of the daemon's uptime)")
    for k in ("units", "engine_busy_percent", "results_posted", "result_requests"):
        m = re.search(k + r'="?([\d.]+)', stopped)
        if m:
            print(f"  {k}: {m.group(1)}")
if "single" in walls:
    n = len(devices.split(","))
    r = walls["multi"] / walls["single"]
    print(f"ratio campaign on {n} devices / on 1 device: {r:.3f} (ideal {1 / n:.3f}); "
          f"speed-up {1 / r:.2f}x")
if not ok:
    print("FAILED: a campaign is not complete or its HR-cases differ from the search")
    sys.exit(1)
EOF
