#!/usr/bin/env bash
# make demo — the main job on the built-in default:
#   a local 4-node Slurm cluster (spec/cluster), `obleth serve`, `obleth-provisioner`,
#   the Slurm connection saved through the Management API, the smoke-test model
#   launched with 2 replicas, progress until both are healthy, then the endpoints.
# It runs until Ctrl-C or SIGTERM, with or without a terminal (nohup, setsid, `make demo >log &`),
# then stops what it started (jobs, daemons, and the cluster if it started it). It also stops when
# its parent (make) goes away, so SIGTERM to `make demo` stops everything too.
# OBLETH_DEMO_ONCE=1: clean up and exit once the replicas are healthy (scripts/fresh-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
state=${OBLETH_DEMO_STATE:-$root/build/demo}
mkdir -p "$state"
port=${OBLETH_DEMO_PORT:-8080}
export OBLETH_ADMIN_TOKEN=${OBLETH_ADMIN_TOKEN:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export OBLETH_ADMIN_BASE_URL=http://127.0.0.1:$port
export OBLETH_DEMO_STATE=$state
# the admin token for your own calls (owner-only file, never printed)
(umask 077; printf '%s\n' "$OBLETH_ADMIN_TOKEN" >"$state/admin-token")

# The harness cluster's env file: Slurm 22.05's (build/cluster/env), or that of the release the
# caller chose (OBLETH_CLUSTER_RELEASE) or whose env file it exported (OBLETH_CLUSTER_DIR), as
# spec/cluster/up.sh picks it
case "${OBLETH_CLUSTER_RELEASE:-}" in
  '') case "${OBLETH_CLUSTER_DIR:-}" in
      "$(pwd -P)"/build/cluster-*) cluster_env="$OBLETH_CLUSTER_DIR/env" ;;
      *) cluster_env=build/cluster/env ;;
    esac ;;
  22.05) cluster_env=build/cluster/env ;;
  *) cluster_env="build/cluster-$OBLETH_CLUSTER_RELEASE/env" ;;
esac
cluster_was_up=0
if [ -f "$cluster_env" ] && spec/cluster/node.sh status >/dev/null 2>&1; then cluster_was_up=1; fi
pids=()
child=""
# Run a step in the background, in its own process group, and wait for it: bash runs a trap only
# between commands, and `wait` returns as soon as a trapped signal arrives, so SIGTERM / SIGINT
# act at once; cleanup then stops the step's whole group.
step() {
  setsid "$@" &
  child=$!
  wait "$child"
  child=""
}
parent=$PPID
watcher=""
cleanup() {
  local code=$?
  if [ -n "$watcher" ]; then kill "$watcher" 2>/dev/null || true; fi
  trap - INT TERM EXIT
  # Ctrl-C on `make demo | tee log` also ends tee: the messages below must not kill the cleanup
  # (SIGPIPE) nor stop it (a failed echo under set -e)
  trap '' PIPE
  set +e
  if [ -n "$child" ]; then kill -TERM -- "-$child" 2>/dev/null || true; wait "$child" 2>/dev/null || true; fi
  echo
  echo "demo: stopping (cancelling the demo's jobs, then the daemons)"
  build/obleth lua scripts/demo_drive.lua stop 2>/dev/null || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # whatever the daemons could not cancel: every job of this demo's installation
  build/obleth lua scripts/demo_drive.lua sweep 2>/dev/null || true
  if [ "$cluster_was_up" = 0 ] && [ "${OBLETH_DEMO_KEEP_CLUSTER:-0}" != 1 ]; then spec/cluster/down.sh || true; fi
  echo "demo: stopped; logs are in $state"
  exit "$code"
}
trap cleanup EXIT
trap 'exit 0' INT TERM
# SIGTERM to `make demo` ends make, not this script: a watcher sends this script SIGTERM as soon as
# its parent is gone (it is then re-parented), so the cleanup above runs whatever ended make
self=$$
(
  trap - INT TERM EXIT
  while [ "$(ps -o ppid= -p "$self" 2>/dev/null | tr -d ' ')" = "$parent" ]; do sleep 1; done
  kill -TERM "$self" 2>/dev/null
) </dev/null >/dev/null 2>&1 &
watcher=$!

echo "demo: starting the local Slurm cluster (spec/cluster/up.sh)"
step bash -c "set -o pipefail; spec/cluster/up.sh | sed 's/^/  /'"
set -a
# shellcheck source=/dev/null
. "$cluster_env"
set +a

if (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
  echo "demo: port $port is taken (an earlier demo still running? its log: $state/serve.log);" \
    "set OBLETH_DEMO_PORT to another port" >&2
  exit 1
fi
rm -f "$state/obleth.db" "$state/obleth.db-wal" "$state/obleth.db-shm"
mkdir -p "$state/logs" && chmod 1777 "$state/logs"
echo "demo: obleth serve on 127.0.0.1:$port (log: $state/serve.log)"
# own sessions (setsid): a Ctrl-C at the terminal reaches this script only, which then
# cancels the demo's jobs through them before stopping them
OBLETH_LISTEN=127.0.0.1:$port OBLETH_DB=$state/obleth.db setsid build/obleth serve >"$state/serve.log" 2>&1 &
pids+=($!)
# ready when it says so; fail at once (with its log) if it exits first
until grep -q 'listening on' "$state/serve.log" 2>/dev/null; do
  if ! kill -0 "${pids[0]}" 2>/dev/null; then
    tail -20 "$state/serve.log" >&2
    echo "demo: obleth serve exited (log above)" >&2
    exit 1
  fi
  sleep 0.1
done
echo "demo: obleth-provisioner (log: $state/provisioner.log)"
OBLETH_PASS_INTERVAL=2 setsid build/obleth-provisioner >"$state/provisioner.log" 2>&1 &
pids+=($!)

step env OBLETH_DEMO_LOG_DIR="$state/logs" build/obleth lua scripts/demo_drive.lua start
echo "demo: dashboard: http://127.0.0.1:$port/ (sign in on /signin with the admin token:"
echo "  paste the contents of $state/admin-token, e.g. from: cat $state/admin-token)"

if [ "${OBLETH_DEMO_ONCE:-0}" = 1 ]; then
  echo "demo: OBLETH_DEMO_ONCE=1: the replicas are healthy; stopping"
  exit 0
fi
echo "demo: running. Press Ctrl-C (or send SIGTERM to make or to scripts/demo.sh) to stop everything the demo started."
while true; do step sleep 3600; done
