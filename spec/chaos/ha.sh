#!/usr/bin/env bash
# make chaos-ha [SLURM=22.05|24.11|26.05]: start the harness cluster of that release (spec/cluster/up.sh;
# a no-op when it is up; OBLETH_CLUSTER_RELEASE, default 22.05) and run spec/chaos/ha.lua: three obleth
# serve on one PostgreSQL behind HAProxy, SIGKILLed in turn, PostgreSQL restarted once. CHAOS_HA_SECONDS
# (default 90) and the other CHAOS_HA_* variables pass through. Whatever happens (failure, Ctrl-C), the
# trap stops every process the run started (their pids are in CHAOS_HA_DIR/pids) and PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v haproxy >/dev/null || { echo "chaos-ha: haproxy is missing (scripts/deps.sh all)" >&2; exit 1; }
export CHAOS_HA_DIR=${CHAOS_HA_DIR:-$PWD/build/chaos-ha}
release=${OBLETH_CLUSTER_RELEASE:-22.05}
export OBLETH_CLUSTER_RELEASE=$release
if [ "$release" = 22.05 ]; then envf=build/cluster/env; else envf="build/cluster-$release/env"; fi
mkdir -p build
if ! spec/cluster/up.sh >build/cluster-up.log 2>&1; then
  tail -20 build/cluster-up.log
  echo "chaos-ha: the harness cluster did not start (build/cluster-up.log)" >&2
  exit 1
fi
set -a
# shellcheck source=/dev/null
. "$envf"
set +a
cleanup() {
  if [ -f "$CHAOS_HA_DIR/pids" ]; then
    while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$CHAOS_HA_DIR/pids"
  fi
  spec/support/pg.sh stop "$CHAOS_HA_DIR/pg" || true
}
spec/support/pg.sh stop "$CHAOS_HA_DIR/pg" || true   # a run killed before its trap ran
rm -rf "$CHAOS_HA_DIR"
mkdir -p "$CHAOS_HA_DIR"
trap cleanup EXIT
trap 'exit 130' INT TERM
build/obleth lua spec/chaos/ha.lua
