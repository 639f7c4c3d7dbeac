#!/usr/bin/env bash
# Runs every fuzz target of spec/fuzz for RUNS inputs each (default 1000000) and prints one
# line per target: runs, seconds, and whether it found anything. Seeds: spec/fuzz/seeds/<target>/
# plus, for the JSON readers, the recorded answers in $OBLETH_SHARED/cases/slurmrestd (default
# ../shared; the normalizer target reads them itself). New inputs libFuzzer keeps go to
# build/fuzz/corpus/<target>/ (reused by the next run); a crash leaves build/fuzz/crash-<target>-*.
# Fewer than 100000 runs is a short run (make check): small seeds only, inputs up to 4 KiB, its own
# corpus under build/fuzz/corpus-short/.
# Exit status: non-zero when a target found something (or could not run).
#   spec/fuzz/run.sh [RUNS] [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
runs=${1:-1000000}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(http_frame http_target yaml jsonscan jsonelements json hostlist gres timefmt normalize)
bin=build/fuzz/obleth-fuzz
[ -x "$bin" ] || { echo "  FAIL  fuzz: $bin is not built (make fuzz-build; needs clang and libclang-rt)"; exit 1; }
shared=${OBLETH_SHARED:-$root/../shared}
status=0
for t in "${targets[@]}"; do
  corpus=build/fuzz/corpus/$t
  [ "$runs" -lt 100000 ] && corpus=build/fuzz/corpus-short/$t
  mkdir -p "$corpus"
  seeds=()
  [ -d "spec/fuzz/seeds/$t" ] && seeds+=("spec/fuzz/seeds/$t")
  # a short run (make check) starts from the small seeds only, inputs up to 4 KiB
  short=0
  [ "$runs" -lt 100000 ] && short=1
  max_len=65536
  [ $short = 1 ] && max_len=4096
  if [ $short = 0 ] && [ -d "$shared/cases/slurmrestd" ] && { [ "$t" = jsonscan ] || [ "$t" = jsonelements ] || [ "$t" = json ]; }; then
    seeds+=("$corpus.cases")
    if [ ! -d "$corpus.cases" ]; then
      mkdir -p "$corpus.cases"
      find "$shared/cases/slurmrestd" -name '*.json' -size -200k | while read -r f; do
        cp "$f" "$corpus.cases/$(echo "$f" | md5sum | cut -c1-16).json"
      done
    fi
  fi
  log=build/fuzz/$t-$runs.log
  t0=$(date +%s.%N)
  OBLETH_FUZZ_TARGET=$t ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} \
    "$bin" -runs="$runs" -max_len="$max_len" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="build/fuzz/crash-$t-" "$corpus" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  secs=$(echo "$(date +%s.%N) - $t0" | bc)
  done_runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  if [ $rc -eq 0 ]; then
    printf '  ok    fuzz %-12s %s runs in %.1f s, no finding\n' "$t" "${done_runs:-?}" "$secs"
    [ -n "${OBLETH_SPEC_COUNTS:-}" ] && echo "1 0 0" >>"$OBLETH_SPEC_COUNTS"
  else
    status=1
    [ -n "${OBLETH_SPEC_COUNTS:-}" ] && echo "0 1 0" >>"$OBLETH_SPEC_COUNTS"
    printf '  FAIL  fuzz %-12s exit %d after %s runs (see %s)\n' "$t" "$rc" "${done_runs:-?}" "$log"
    grep -E 'ERROR|raised|SUMMARY' "$log" | head -5 | sed 's/^/        /'
  fi
done
exit $status
