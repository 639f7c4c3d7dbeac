#!/usr/bin/env bash
# The engine tier (make engine-check; also a tier of make check): the real llama.cpp server serving a
# tiny model as a Slurm job of the 26.05 harness cluster, launched through obleth and answering
# through its router (spec/engine/llamacpp_spec.lua). Starts that cluster when it is not up and stops
# it again afterwards (a cluster that was up is left up). Ends with one line:
#   engine: llama.cpp healthy in N s, chat 200, stream N chunks
# Appends "passed failed skipped" to $OBLETH_SPEC_COUNTS when set. Exit status non-zero on a failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
export OBLETH_SHARED=${OBLETH_SHARED:-$root/../shared}
release=26.05
state="$root/build/cluster-$release"
count() { [ -n "${OBLETH_SPEC_COUNTS:-}" ] && echo "$1" >>"$OBLETH_SPEC_COUNTS"; return 0; }

was_up=0
if [ -f "$state/env" ] && OBLETH_CLUSTER_RELEASE=$release spec/cluster/node.sh status >/dev/null 2>&1; then was_up=1; fi
t0=$SECONDS
if ! OBLETH_CLUSTER_RELEASE=$release spec/cluster/up.sh >build/engine-cluster-up.log 2>&1; then
  tail -20 build/engine-cluster-up.log
  echo "  FAIL  the Slurm $release harness cluster did not start (build/engine-cluster-up.log)"
  echo "engine: llama.cpp not run (the $release cluster did not start)"
  count "0 1 0"
  exit 1
fi
up_s=$((SECONDS - t0))
report=$(mktemp)
(
  set -a
  # shellcheck disable=SC1091
  . "$state/env"
  set +a
  OBLETH_ENGINE_REPORT=$report build/obleth lua /usr/bin/busted -o "$root/spec/support/obleth_output.lua" \
    "--lpath=$root/lua/?.lua;$root/lua/?/init.lua;$root/?.lua" spec/engine
)
rc=$?
if [ "$was_up" = 0 ]; then OBLETH_CLUSTER_RELEASE=$release spec/cluster/down.sh >build/engine-cluster-down.log 2>&1; fi
line=$(/usr/bin/python3 - "$report" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    r = {}
def n(k, fmt="%d"):
    return fmt % r[k] if k in r else "?"
print("engine: llama.cpp healthy in %s s, chat %s, stream %s chunks" % (n("healthy_s", "%.1f"), n("chat_status"), n("stream_chunks")))
PY
)
rm -f "$report"
echo "  (the $release cluster: $([ "$was_up" = 1 ] && echo "already up" || echo "started in ${up_s} s and stopped"))"
echo "$line"
exit "$rc"
