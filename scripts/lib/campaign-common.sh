# Shared by scripts/gpu-campaign-bench.sh and scripts/gpu-multi-device-check.sh (sourced, not
# run): the settings both read from the environment, small helpers, and a fresh coordinator with
# one campaign of the range. Each script documents the settings in its header.

BACKEND=${BACKEND:-cuda}
FUNCTION=${FUNCTION:-exp}
FORMAT=${FORMAT:-binary64}
FROM=${FROM:-0x1p+0}
TO=${TO:-0x1p+1}
MIN_BITS=${MIN_BITS:-44}
UNIT_BITS=${UNIT_BITS:-40}
LEASE_SECONDS=${LEASE_SECONDS:-60}
BIN=${BIN:-target/release}
PG=${DATABASE_URL_BASE:-postgres://postgres@127.0.0.1:5432}
ADMIN_TOKEN=bench-admin-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
read -r -a EXTRA <<< "${WORKER_ARGS:-}"
THREAD_ARGS=()
[ -n "${THREADS:-}" ] && THREAD_ARGS=(--threads "$THREADS")
RANGE=(--function "$FUNCTION" --format "$FORMAT" --min-bits "$MIN_BITS" --from "$FROM" --to "$TO" --unit-bits "$UNIT_BITS")
export RUST_BACKTRACE=0

say() { printf '== %s\n' "$*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
# Seconds from $1 to $2 (two `now`s), with two decimals.
seconds() { python3 -c "print(f'{$2 - $1:.2f}')"; }

for b in tmd-server tmd-worker; do
  [ -x "$BIN/$b" ] || { echo "no $BIN/$b: build with cargo build --release" >&2; exit 1; }
done

# start_coordinator DB LOG: a fresh database DB, a tmd-server on a free port logging to LOG,
# one campaign of RANGE and a worker token. Sets SERVER (its URL), SERVER_PID, CAMPAIGN and
# TOKEN, and exports TMD_ADMIN_TOKEN for the admin commands.
start_coordinator() {
  local db=$1 log=$2 port
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null
  port=$(free_port)
  SERVER="http://127.0.0.1:$port"
  "$BIN/tmd-server" serve --database-url "$PG/$db" --listen "127.0.0.1:$port" \
    --admin-token "$ADMIN_TOKEN" > "$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 200); do curl -sf "$SERVER/readyz" >/dev/null && break; sleep 0.1; done
  curl -sf "$SERVER/readyz" >/dev/null || { cat "$log" >&2; exit 1; }
  export TMD_ADMIN_TOKEN="$ADMIN_TOKEN"
  CAMPAIGN=$("$BIN/tmd-server" campaign create "${RANGE[@]}" --server "$SERVER" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  TOKEN=$("$BIN/tmd-server" token create --trusted --server "$SERVER" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
}

# The number of HR-cases in a campaign's JSON export read on standard input (an array of cases,
# or an object with `hr_cases`).
count_cases() {
  python3 -c 'import json,sys
v=json.load(sys.stdin)
print(len(v["hr_cases"] if isinstance(v, dict) else v))'
}
