#!/bin/sh
# The "postgres" profile's server (postgres.Dockerfile): the first start makes the cluster in the
# volume (role and database obleth, peer authentication on the socket only), every start runs it.
# SIGTERM (docker compose stop) is a smart shutdown: obleth's connections finish.
set -eu
bin=/usr/lib/postgresql/15/bin
data=${OBLETH_PG_DATA:-/var/lib/postgresql/data/pgdata}
sock=${OBLETH_PG_SOCKET_DIR:-/run/obleth-pg}
port=${OBLETH_PG_PORT:-5433}
if [ ! -s "$data/PG_VERSION" ]; then
  "$bin/initdb" -D "$data" -U postgres -A peer -E UTF8 --locale=C.UTF-8
  printf 'local all postgres peer\nlocal obleth obleth peer\n' >"$data/pg_hba.conf"
  printf 'CREATE ROLE obleth LOGIN;\nCREATE DATABASE obleth OWNER obleth;\n' |
    "$bin/postgres" --single -D "$data" postgres >/dev/null
fi
exec "$bin/postgres" -D "$data" -c listen_addresses= -c unix_socket_directories="$sock" -p "$port"
