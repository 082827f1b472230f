#!/usr/bin/env bash
# A whole-function campaign on one machine's GPUs, one trusted daemon per GPU, as a lab runs
# it: what the farm's ETA said along the way against the truth, and how long GPUs idled at the
# tail. Two phases, because the campaign outlasts one 10-minute device command:
#
#   bash scripts/gpu-farm-run.sh start    # coordinator, campaign, estimate, daemons, sampler
#   bash scripts/gpu-farm-run.sh finish   # waits for the end, writes the report
#
# `start` creates the campaign (`--whole`), runs `tmd-worker estimate` on GPU 0 and posts it
# (ESTIMATE=0 skips it: the ETA is then rough), starts one `tmd-worker run` per GPU
# (--devices N, its own state folder) and a sampler that reads the campaign's progress every
# SAMPLE seconds. With KILL_AT set, daemon 0 is killed with SIGKILL that many seconds after the
# daemons start and restarted RESTART_AFTER seconds later on its state folder.
# `finish` waits for the campaign to complete, then prints (and writes to $DIR/report.txt):
# the wall, each progress reading's ETA against the time truly left, the GPU-seconds idle
# at the tail (from each daemon's last result to the campaign's end) and the coordinator's
# request latencies (`requests`); and writes every result with its unit's binade and weight to
# $DIR/results.csv, to replay the readings offline (`python3 scripts/eta-replay.py $DIR UNIT_BITS`).
# `requests` prints the lease claims', result posts' and heartbeats' counts and latencies
# (p50, p99 as the upper bound of their bucket of /metrics) and the slow statements logged,
# at any time of the campaign. `finish` stops the coordinator once its report is written.
#
# Needs the release binaries (BIN, default target/release) and a PostgreSQL (DATABASE_URL_BASE,
# as scripts/wheel-postgres.sh prints). Settings (environment): FUNCTION (exp), FORMAT
# (binary64), MIN_BITS (44), UNIT_BITS (44), GPUS (2), DAEMONS (1 per GPU), BACKEND (cuda; cpu tries it anywhere), KILL_AT (unset: no kill),
# RESTART_AFTER (5), SAMPLE (10), ESTIMATE (1), DIR (/tmp/tmd-farm-run); FROM and TO (both set:
# that range instead of the whole function, e.g. a CPU rehearsal of a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

phase=${1:-}
FUNCTION=${FUNCTION:-exp}
FORMAT=${FORMAT:-binary64}
MIN_BITS=${MIN_BITS:-44}
UNIT_BITS=${UNIT_BITS:-44}
GPUS=${GPUS:-2}
DAEMONS=${DAEMONS:-1}
RESTART_AFTER=${RESTART_AFTER:-5}
SAMPLE=${SAMPLE:-10}
ESTIMATE=${ESTIMATE:-1}
BACKEND=${BACKEND:-cuda}
DIR=${DIR:-/tmp/tmd-farm-run}
BIN=${BIN:-target/release}
PG=${DATABASE_URL_BASE:-postgres://postgres@127.0.0.1:5432}
DB=tmd_farm_run
export RUST_BACKTRACE=0
say() { printf '== %s\n' "$*" >&2; }
now() { date +%s.%N; }

# What the campaign and its estimate cover: the range FROM..TO, or the whole function.
span() { if [ -n "${FROM:-}" ] && [ -n "${TO:-}" ]; then echo "--from $FROM --to $TO"; else echo --whole; fi; }

# The flag that puts a run on GPU $1 (none on the CPU back end).
devices() { [ "$BACKEND" = cuda ] && echo "--devices $1"; true; }

# Daemon $1 (on GPU $1 modulo GPUS), appending to its log.
daemon() {
  setsid "$BIN/tmd-worker" run --server "$(cat "$DIR/server")" --token "$(cat "$DIR/token")" \
    --state-dir "$DIR/state-$1" --backend "$BACKEND" $(devices $(($1 % GPUS))) --exit-when-idle \
    --status-seconds 30 >> "$DIR/daemon-$1.log" 2>&1 < /dev/null &
  echo $! > "$DIR/daemon-$1.pid"
}

start() {
  rm -rf "$DIR"; mkdir -p "$DIR"
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
  local port; port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  local admin="farm-admin-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
  echo "$admin" > "$DIR/admin"
  echo "http://127.0.0.1:$port" > "$DIR/server"
  setsid "$BIN/tmd-server" serve --database-url "$PG/$DB" --listen "127.0.0.1:$port" \
    --admin-token "$admin" > "$DIR/server.log" 2>&1 < /dev/null &
  echo $! > "$DIR/server.pid"
  for _ in $(seq 200); do curl -sf "$(cat "$DIR/server")/readyz" >/dev/null && break; sleep 0.1; done
  export TMD_ADMIN_TOKEN=$admin TMD_SERVER=$(cat "$DIR/server")
  local t0; t0=$(now)
  "$BIN/tmd-server" campaign create --function "$FUNCTION" --format "$FORMAT" \
    --min-bits "$MIN_BITS" $(span) --unit-bits "$UNIT_BITS" > "$DIR/campaign.json"
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["id"]); print(c["units_total"], file=sys.stderr)' \
    "$DIR/campaign.json" > "$DIR/campaign" 2> "$DIR/units"
  say "campaign $(cat "$DIR/campaign"): $(cat "$DIR/units") units, created in $(python3 -c "print(f'{$(now) - $t0:.1f}')") s"
  "$BIN/tmd-server" token create --trusted --owner lab --uses $((GPUS * DAEMONS + 10)) \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' > "$DIR/token"
  if [ "$ESTIMATE" = 1 ]; then
    t0=$(now)
    "$BIN/tmd-worker" estimate -f "$FUNCTION" --format "$FORMAT" --min-bits "$MIN_BITS" $(span) \
      --unit-bits "$UNIT_BITS" --backend "$BACKEND" $(devices 0) --output json > "$DIR/estimate.json" \
      2> "$DIR/estimate.log"
    "$BIN/tmd-server" campaign estimate "$(cat "$DIR/campaign")" "$DIR/estimate.json" > /dev/null
    say "estimate posted after $(python3 -c "print(f'{$(now) - $t0:.1f}')") s"
  fi
  now > "$DIR/t_start"
  for g in $(seq 0 $((GPUS * DAEMONS - 1))); do daemon "$g"; done
  # The sampler: t, percent done, eta, its basis, units done.
  setsid bash -c '
    while :; do
      p=$(curl -sf -H "Authorization: Bearer $(cat '"$DIR"'/admin)" \
        "$(cat '"$DIR"'/server)/api/v1/campaigns/$(cat '"$DIR"'/campaign)/progress") || { sleep 1; continue; }
      printf "%s\t%s\n" "$(date +%s.%N)" "$p" >> '"$DIR"'/progress.tsv
      echo "$p" | grep -q "\"complete\":true" && break
      sleep '"$SAMPLE"'
    done' > /dev/null 2>&1 < /dev/null &
  if [ -n "${KILL_AT:-}" ]; then
    setsid bash -c "sleep $KILL_AT; kill -9 \$(cat $DIR/daemon-0.pid); date +%s.%N > $DIR/t_kill;
      sleep $RESTART_AFTER; date +%s.%N > $DIR/t_restart" > /dev/null 2>&1 < /dev/null &
    # The restart itself from this shell's function, once the kill is recorded.
    setsid bash -c "while [ ! -f $DIR/t_restart ]; do sleep 0.5; done; \
      setsid $BIN/tmd-worker run --server \$(cat $DIR/server) --token \$(cat $DIR/token) \
      --state-dir $DIR/state-0 --backend $BACKEND $(devices 0) --exit-when-idle --status-seconds 30 \
      >> $DIR/daemon-0.log 2>&1 < /dev/null" > /dev/null 2>&1 < /dev/null &
  fi
  say "$((GPUS * DAEMONS)) daemons started on $GPUS GPUs"
}

# The coordinator's request latencies from /metrics: count, p50 and p99 as their buckets' upper
# bounds, per route of the lease cycle.
requests() {
  curl -sf -H "Authorization: Bearer $(cat "$DIR/admin")" "$(cat "$DIR/server")/metrics" \
    > "$DIR/metrics.txt"
  python3 - "$DIR/metrics.txt" <<'PY'
import re, sys
b = {}
for line in open(sys.argv[1]):
    m = re.match(r'tmd_http_request_duration_seconds_bucket\{method="(\w+)",route="([^"]+)",status="(\d+)",le="([^"]+)"\} (\d+)', line)
    if not m or m[1] != "POST":
        continue
    key = (m[2], m[3])
    b.setdefault(key, []).append((float("inf") if m[4] == "+Inf" else float(m[4]), int(m[5])))
for (route, status), rows in sorted(b.items()):
    rows.sort()
    n = rows[-1][1]
    q = lambda f: next((le for le, c in rows if c >= f * n), float("inf"))
    print(f"POST {route} {status}: {n} requests, p50 <= {q(0.5)} s, p99 <= {q(0.99)} s")
PY
  printf 'slow statements logged: %s\n' "$(grep -c "slow statement" "$DIR/server.log" || true)"
}

finish() {
  local left=${WAIT:-590}
  while [ "$left" -gt 0 ] && ! tail -n1 "$DIR/progress.tsv" 2>/dev/null | grep -q '"complete":true'; do
    sleep 5; left=$((left - 5))
  done
  tail -n1 "$DIR/progress.tsv" | grep -q '"complete":true' || { say "not complete yet"; exit 2; }
  psql "$PG/$DB" -At -F $'\t' -c "SELECT w.id, extract(epoch FROM min(r.received_at)), \
      extract(epoch FROM max(r.received_at)), count(*) FROM results r JOIN workers w ON w.id = r.worker_id \
      GROUP BY w.id ORDER BY w.id" > "$DIR/workers.tsv"
  psql "$PG/$DB" -At -c "SELECT extract(epoch FROM completed_at) FROM campaigns" > "$DIR/t_end"
  psql "$PG/$DB" -At -c "SELECT count(*) FROM hr_cases" > "$DIR/hr_cases"
  # Every result with its unit's binade and work, for replaying the progress readings offline.
  psql "$PG/$DB" -c "\\copy (SELECT u.seq, u.negative, u.exponent, u.count, \
      COALESCE(k.weight, 1) AS weight, r.elapsed_seconds, w.slots, r.worker_id, \
      extract(epoch FROM r.received_at) AS received_at FROM results r JOIN units u ON u.id = r.unit_id \
      JOIN workers w ON w.id = r.worker_id LEFT JOIN campaign_costs k ON k.campaign_id = u.campaign_id \
      AND k.negative = u.negative AND k.exponent = u.exponent ORDER BY r.received_at) \
      TO '$DIR/results.csv' CSV HEADER" > /dev/null
  python3 - "$DIR" <<'PY' | tee "$DIR/report.txt"
import json, sys, os
d = sys.argv[1]
rd = lambda n: open(os.path.join(d, n)).read().strip()
t_start, t_end = float(rd("t_start")), float(rd("t_end"))
wall = t_end - t_start
print(f"campaign of {rd('units')} units: wall {wall:.1f} s from the daemons' start; {rd('hr_cases')} HR-cases")
if os.path.exists(os.path.join(d, "t_kill")):
    print(f"daemon 0 killed at {float(rd('t_kill')) - t_start:.1f} s, restarted at {float(rd('t_restart')) - t_start:.1f} s")
rows = [l.split("\t", 1) for l in open(os.path.join(d, "progress.tsv"))]
print("t_s\tdone_%\teta_s\ttruth_s\terror_%\tbasis")
worst = 0.0
for t, p in rows:
    t, p = float(t), json.loads(p)
    w = p.get("work", {})
    eta, pct, truth = p.get("eta_seconds"), p.get("percent_done", 0.0), t_end - t
    err = (eta - truth) / truth * 100 if eta is not None and truth > 1 else None
    if err is not None and pct >= 10 and truth > 30:
        worst = max(worst, abs(err))
    print(f"{t - t_start:.0f}\t{pct:.1f}\t{'-' if eta is None else f'{eta:.0f}'}\t{truth:.0f}\t"
          f"{'-' if err is None else f'{err:+.1f}'}\t{w.get('eta_basis', '')}")
print(f"worst ETA error from 10% done on (while more than 30 s were left): {worst:.1f}%")
idle = 0.0
busy = 0.0
for line in open(os.path.join(d, "workers.tsv")):
    name, first, last, n = line.split("\t")
    idle += t_end - float(last)
    busy += float(last) - t_start
    print(f"worker {name}: {n.strip()} results, last at {float(last) - t_start:.1f} s, idle at the tail {t_end - float(last):.1f} s")
print(f"tail idle: {idle:.1f} GPU-seconds of {idle + busy:.1f} ({100 * idle / (idle + busy):.2f}%)")
PY
  requests | tee -a "$DIR/report.txt"
  # The coordinator goes with the report; the database stays for a look (`start` drops it).
  kill "$(cat "$DIR/server.pid")" 2>/dev/null || true
}

case "$phase" in
  start) start ;;
  finish) finish ;;
  requests) requests ;;
  *) echo "usage: $0 start|finish|requests" >&2; exit 1 ;;
esac
