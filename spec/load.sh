#!/usr/bin/env bash
# The suite under CPU load: holds every CPU with a busy loop (nice 0, like any other work on the
# machine) and runs `make check` N times in a row (default 3); stops at the first failing run.
#   spec/load.sh [N]
# Each run's output is in build/load/run-K.log; the last line says how many runs passed.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
mkdir -p build/load
loops=()
stop_loops() { [ ${#loops[@]} -eq 0 ] || kill "${loops[@]}" 2>/dev/null; }
trap stop_loops EXIT
for _ in $(seq 1 "$(nproc)"); do
  sh -c 'while :; do :; done' &
  loops+=($!)
done
echo "load: ${#loops[@]} busy loops hold the CPUs (pids ${loops[*]})"
passed=0
for k in $(seq 1 "$runs"); do
  t0=$(date +%s)
  if make check >"build/load/run-$k.log" 2>&1; then
    passed=$((passed + 1))
    echo "load: run $k passed in $(( $(date +%s) - t0 ))s: $(tail -1 "build/load/run-$k.log")"
  else
    echo "load: run $k FAILED in $(( $(date +%s) - t0 ))s: $(tail -1 "build/load/run-$k.log") (build/load/run-$k.log)"
    grep -E '^(Failure|Error)|FAIL ' "build/load/run-$k.log" | head -20
    break
  fi
done
echo "load: $passed of $runs runs of make check passed under load"
[ "$passed" -eq "$runs" ]
