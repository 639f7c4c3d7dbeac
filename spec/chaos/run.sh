#!/usr/bin/env bash
# make chaos [SLURM=22.05|24.11|26.05]: start the harness cluster of that release (spec/cluster/up.sh;
# a no-op when it is up; OBLETH_CLUSTER_RELEASE, default 22.05) and run
# spec/chaos/run.lua with CHAOS_KILLS provisioner kills (default 100). CHAOS_SERVE_KILLS and
# CHAOS_SEED pass through; the seed is printed so a run can be repeated.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CHAOS_KILLS=${1:-${CHAOS_KILLS:-100}}
mkdir -p build
release=${OBLETH_CLUSTER_RELEASE:-22.05}
export OBLETH_CLUSTER_RELEASE=$release
if [ "$release" = 22.05 ]; then envf=build/cluster/env; else envf="build/cluster-$release/env"; fi
if ! spec/cluster/up.sh >build/cluster-up.log 2>&1; then
  tail -20 build/cluster-up.log
  echo "chaos: the harness cluster did not start (build/cluster-up.log)" >&2
  exit 1
fi
set -a
# shellcheck source=/dev/null
. "$envf"
set +a
exec build/obleth lua spec/chaos/run.lua
