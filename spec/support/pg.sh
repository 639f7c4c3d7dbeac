#!/usr/bin/env bash
# A throwaway PostgreSQL from Debian's package (postgresql-15), for the store specs and make check.
#   spec/support/pg.sh start DIR [PORT]  initdb into DIR (as the postgres user when run as root:
#                                        PostgreSQL refuses to run as root), start it listening on a
#                                        unix socket in DIR (and on 127.0.0.1:PORT when PORT is given;
#                                        else PORT only names the socket), wait until it accepts
#                                        connections, and print its URL (database postgres, superuser
#                                        obleth, trust authentication: loopback and the socket only)
#   spec/support/pg.sh restart DIR       stop it (fast shutdown: every connection is cut) and start it again
#   spec/support/pg.sh down DIR          stop it (fast shutdown), keep DIR;  up DIR: start it again
#   spec/support/pg.sh stop DIR          stop it (fast shutdown) and remove DIR
# OBLETH_PG_BIN overrides /usr/lib/postgresql/15/bin; OBLETH_PG_FSYNC=on keeps fsync (default off).
set -euo pipefail
bin=${OBLETH_PG_BIN:-/usr/lib/postgresql/15/bin}
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start DIR [PORT] | restart DIR | down DIR | up DIR | stop DIR" >&2; exit 2; }

as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "$cmd" in
  start)
    [ -x "$bin/initdb" ] || { echo "pg.sh: $bin/initdb is missing (Debian package postgresql-15; scripts/deps.sh all)" >&2; exit 1; }
    port=${3:-}
    fsync=${OBLETH_PG_FSYNC:-off} # off for the specs (what they test is not the disk); on for benchmarks
    mkdir -p "$dir"
    [ "$(id -u)" -ne 0 ] || chown postgres: "$dir"
    as_pg "$bin/initdb" -D "$dir/data" -U obleth -A trust -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    listen="''"
    [ -z "$port" ] || listen=127.0.0.1
    opts="-c listen_addresses=$listen -p ${port:-5440} -k $dir -c fsync=$fsync -c synchronous_commit=$fsync -c full_page_writes=$fsync -c max_connections=200"
    echo "$opts" >"$dir/opts"
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -s -o "$opts" start \
      || { cat "$dir/server.log" >&2; exit 1; }
    if [ -n "$port" ]; then
      echo "postgresql://obleth@127.0.0.1:$port/postgres"
    else
      echo "postgresql://obleth@/postgres?host=$dir&port=5440"
    fi
    ;;
  restart)
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 -s restart >/dev/null \
      || { cat "$dir/server.log" >&2; exit 1; }
    ;;
  down)
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 -s stop >/dev/null
    ;;
  up)
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -s -o "$(cat "$dir/opts")" start \
      || { cat "$dir/server.log" >&2; exit 1; }
    ;;
  stop)
    [ -d "$dir/data" ] && as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w -s stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
  *) echo "usage: $0 start DIR [PORT] | restart DIR | down DIR | up DIR | stop DIR" >&2; exit 2 ;;
esac
