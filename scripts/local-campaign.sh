#!/usr/bin/env bash
# The main job: a real campaign on this machine. Uses the PostgreSQL at 127.0.0.1:5432 (or
# initdb's a private one), starts a coordinator and a worker, runs a small campaign, shows its
# progress and prints the HR-cases found, with the REST URLs to query them.
#
# Settings (environment): FUNCTION (exp), FORMAT (binary64), FROM (0x1p+0), TO (0x1.001p+0),
# MIN_BITS (36), UNIT_BITS (36), PORT (8080 or a free one), TMD_LOCAL_DIR (/tmp/tmd-local),
# TMD_LOCAL_DB (tmd_local, dropped and created again),
# KEEP=1 to leave the coordinator running at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

FUNCTION=${FUNCTION:-exp}
FORMAT=${FORMAT:-binary64}
FROM=${FROM:-0x1p+0}
TO=${TO:-0x1.001p+0}
MIN_BITS=${MIN_BITS:-36}
UNIT_BITS=${UNIT_BITS:-36}
DIR=${TMD_LOCAL_DIR:-/tmp/tmd-local}
ADMIN_TOKEN=${TMD_ADMIN_TOKEN:-local-admin-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')}
export RUST_BACKTRACE=0

# Bold only on a terminal: a log file would keep the escape codes.
if [ -t 2 ] && [ -z "${NO_COLOR:-}" ]; then
  say() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }
else
  say() { printf '== %s\n' "$*" >&2; }
fi
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

bash scripts/setup.sh >&2
say "building tmd-server and tmd-worker (release)"
# The same build as the test command's (scripts/test.sh): one set of features, built once.
cargo build --release -q --workspace --bins
BIN=target/release
mkdir -p "$DIR"

# PostgreSQL: the machine's, else a private cluster.
if port_open 5432; then
  PG="postgres://postgres@127.0.0.1:5432"
else
  PG_PORT_FILE="$DIR/pg/port"
  if [ -f "$PG_PORT_FILE" ] && port_open "$(cat "$PG_PORT_FILE")"; then
    PG="postgres://postgres@127.0.0.1:$(cat "$PG_PORT_FILE")"
  else
    say "no PostgreSQL on 127.0.0.1:5432: starting a private cluster in $DIR/pg"
    initdb=$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n1 || true)
    if [ -z "$initdb" ]; then
      echo "no PostgreSQL: install Debian's postgresql package (sudo apt-get install postgresql)," \
        "or run this script as root, which installs it" >&2
      exit 1
    fi
    pg_ctl=$(dirname "$initdb")/pg_ctl
    as_pg=()
    if [ "$(id -u)" = 0 ]; then mkdir -p "$DIR/pg"; chown -R postgres "$DIR/pg"; as_pg=(runuser -u postgres --); fi
    [ -f "$DIR/pg/data/PG_VERSION" ] || "${as_pg[@]}" "$initdb" -A trust -U postgres -D "$DIR/pg/data" >/dev/null
    p=$(free_port)
    "${as_pg[@]}" "$pg_ctl" -D "$DIR/pg/data" -l "$DIR/pg/log" -o "-p $p -c listen_addresses=127.0.0.1 -c unix_socket_directories=$DIR/pg" -w start >/dev/null
    echo "$p" > "$PG_PORT_FILE"
    PG="postgres://postgres@127.0.0.1:$p"
  fi
fi
DB=${TMD_LOCAL_DB:-tmd_local}
psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
DATABASE_URL="$PG/$DB"

PORT=${PORT:-8080}
port_open "$PORT" && PORT=$(free_port)
SERVER="http://127.0.0.1:$PORT"
say "starting the coordinator on $SERVER (log: $DIR/server.log)"
"$BIN/tmd-server" serve --database-url "$DATABASE_URL" --listen "127.0.0.1:$PORT" \
  --admin-token "$ADMIN_TOKEN" > "$DIR/server.log" 2>&1 &
SERVER_PID=$!
WORKER_PID=
cleanup() {
  [ -n "$WORKER_PID" ] && kill "$WORKER_PID" 2>/dev/null || true
  if [ "${KEEP:-0}" != 1 ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT
for _ in $(seq 100); do curl -sf "$SERVER/readyz" >/dev/null && break; sleep 0.1; done
curl -sf "$SERVER/readyz" >/dev/null || { cat "$DIR/server.log" >&2; exit 1; }

export TMD_SERVER="$SERVER" TMD_ADMIN_TOKEN="$ADMIN_TOKEN"
say "campaign: $FUNCTION $FORMAT on [$FROM, $TO), at least $MIN_BITS identical bits"
CAMPAIGN=$("$BIN/tmd-server" campaign create --function "$FUNCTION" --format "$FORMAT" \
  --min-bits "$MIN_BITS" --from "$FROM" --to "$TO" --unit-bits "$UNIT_BITS" --name local-demo \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
TOKEN=$("$BIN/tmd-server" token create --trusted --note local-demo \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')

say "starting a worker (log: $DIR/worker.log)"
rm -rf "$DIR/worker-state"
"$BIN/tmd-worker" run --server "$SERVER" --token "$TOKEN" --state-dir "$DIR/worker-state" \
  --name "$(hostname 2>/dev/null || echo local)" --exit-when-idle > "$DIR/worker.log" 2>&1 &
WORKER_PID=$!

. scripts/follow-campaign.sh
follow_campaign "$SERVER" "$ADMIN_TOKEN" "$CAMPAIGN" "$WORKER_PID" "$DIR/worker.log" || exit 1
wait "$WORKER_PID" || true
WORKER_PID=

say "HR-cases of campaign $CAMPAIGN (hardest first)"
curl -sf -H "Authorization: Bearer $ADMIN_TOKEN" "$SERVER/api/v1/campaigns/$CAMPAIGN/hr-cases?format=csv" \
  | python3 -c 'import csv,sys
rows=list(csv.DictReader(sys.stdin))
rows.sort(key=lambda r: -float(r["neg_log2_d"]))
print("%-26s %5s %10s %4s  %s" % ("x", "bits", "-log2 d", "kind", "rounded"))
for r in rows: print("%-26s %5s %10.4f %4s  %s" % (r["x"], r["bits"], float(r["neg_log2_d"]), r["kind"], r["rounded"]))
print("%d HR-cases" % len(rows))'

cat >&2 <<EOF

Query them over REST (admin token: $ADMIN_TOKEN):
  curl -H 'Authorization: Bearer $ADMIN_TOKEN' $SERVER/api/v1/campaigns/$CAMPAIGN/progress
  curl -H 'Authorization: Bearer $ADMIN_TOKEN' '$SERVER/api/v1/campaigns/$CAMPAIGN/hr-cases?format=json'
  curl -H 'Authorization: Bearer $ADMIN_TOKEN' '$SERVER/api/v1/campaigns/$CAMPAIGN/hr-cases?format=wc'
EOF
if [ "${KEEP:-0}" = 1 ]; then
  echo "The coordinator keeps running (pid $SERVER_PID); stop it with: kill $SERVER_PID" >&2
  echo "Dashboard: $SERVER/?campaign=$CAMPAIGN#token=$ADMIN_TOKEN" >&2
else
  echo "Run with KEEP=1 to keep the coordinator running and open its dashboard at $SERVER/" >&2
fi
