#!/usr/bin/env bash
# make chaos: start the harness cluster (spec/cluster/up.sh; a no-op when it is up) and run
# spec/chaos/run.lua with CHAOS_KILLS provisioner kills (default 100). CHAOS_SERVE_KILLS and
# CHAOS_SEED pass through; the seed is printed so a run can be repeated.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CHAOS_KILLS=${1:-${CHAOS_KILLS:-100}}
mkdir -p build
if ! spec/cluster/up.sh >build/cluster-up.log 2>&1; then
  tail -20 build/cluster-up.log
  echo "chaos: the harness cluster did not start (build/cluster-up.log)" >&2
  exit 1
fi
set -a; . build/cluster/env; set +a
exec build/obleth lua spec/chaos/run.lua
