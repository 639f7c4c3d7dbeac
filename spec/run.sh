#!/usr/bin/env bash
# Runs every test tier and ends with one line "N passed, N failed".
#   1. pure-Lua unit specs under Debian's lua5.4 (spec/unit)
#   2. unit + host specs inside the obleth runtime (spec/unit, spec/host)
#   3. the same again under the AddressSanitizer + UBSan build
#   4. integration specs against the harness Slurm cluster (spec/integration)
#   5. a short chaos run: the provisioner SIGKILLed at 10 points, obleth serve during writes
#      (spec/chaos; make chaos does 100); each of its checks counts as one case
#   6. the dashboard: node --test specs of web/src/lib and browser tests in headless
#      Chromium against obleth serve + provisioner + the harness cluster (spec/web)
#   7. a short fuzz run of every parser (spec/fuzz, libFuzzer + ASan/UBSan)
#   8. luacheck over lua/ and spec/
# Compiler warnings already fail the build (-Werror). Exit status is non-zero
# on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
counts=$(mktemp)
export OBLETH_SPEC_COUNTS=$counts
export OBLETH_SHARED=${OBLETH_SHARED:-$root/../shared}
out="-o $root/spec/support/obleth_output.lua"
lpath="--lpath=$root/lua/?.lua;$root/lua/?/init.lua;$root/?.lua"
busted=/usr/bin/busted
tier_fail=0

tier() { echo; echo "== $1"; }
missing_tier() { # a tier that could not run counts as one failure, with the reason
  echo "  FAIL  $1"; echo "0 1 0" >>"$counts"; tier_fail=1
}

tier "unit specs (lua5.4)"
lua5.4 $busted $out "$lpath" spec/unit || tier_fail=1

tier "unit + host specs (obleth runtime)"
build/obleth lua $busted $out "$lpath" spec/unit spec/host || tier_fail=1

tier "unit + host specs (ASan + UBSan)"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  build/asan/obleth lua $busted $out "$lpath" spec/unit spec/host || tier_fail=1

tier "integration specs (harness Slurm cluster)"
# was the cluster already running (a developer's, left up on purpose)?
cluster_was_up=0
if [ -f build/cluster/env ] && spec/cluster/node.sh status >/dev/null 2>&1; then cluster_was_up=1; fi
if [ "${OBLETH_SKIP_CLUSTER:-}" = 1 ]; then
  missing_tier "integration tier skipped by OBLETH_SKIP_CLUSTER=1"
elif spec/cluster/up.sh >build/cluster-up.log 2>&1; then
  set -a; . build/cluster/env; set +a
  build/obleth lua $busted $out "$lpath" spec/integration || tier_fail=1
else
  tail -30 build/cluster-up.log
  missing_tier "the harness cluster did not start (build/cluster-up.log)"
fi

tier "chaos, short run (spec/chaos; make chaos kills 100 times)"
if [ "${OBLETH_SKIP_CLUSTER:-}" = 1 ]; then
  missing_tier "chaos run skipped by OBLETH_SKIP_CLUSTER=1"
elif [ -f build/cluster/env ]; then
  # the run writes one line per check to $OBLETH_SPEC_COUNTS; its table is printed here, the rest
  # (every kill, any violation) stays in build/chaos-short.log
  CHAOS_KILLS=${OBLETH_CHAOS_SHORT_KILLS:-10} CHAOS_SERVE_KILLS=3 build/obleth lua spec/chaos/run.lua \
    >build/chaos-short.log 2>&1
  chaos_rc=$?
  sed -n '/^chaos: seed/,$p' build/chaos-short.log | sed 's/^/  /'
  if [ "$chaos_rc" -ne 0 ]; then
    grep -E 'VIOLATION|ERROR' build/chaos-short.log | head -20
    grep -q '^chaos: seed' build/chaos-short.log || { tail -20 build/chaos-short.log; missing_tier "the chaos run ended early"; }
    tier_fail=1
  fi
else
  missing_tier "chaos: the harness cluster is not up (build/cluster/env)"
fi

tier "dashboard (node --test, headless Chromium against the harness cluster)"
if [ "${OBLETH_SKIP_CLUSTER:-}" = 1 ]; then
  missing_tier "dashboard browser tests skipped by OBLETH_SKIP_CLUSTER=1"
elif [ -f build/cluster/env ]; then
  spec/web/run.sh || tier_fail=1
else
  missing_tier "dashboard: the harness cluster is not up (build/cluster/env)"
fi

tier "cluster lifecycle"
if [ "$cluster_was_up" = 1 ] || [ "${OBLETH_SKIP_CLUSTER:-}" = 1 ]; then
  echo "  (the cluster was running before this run: left up)"
else
  # up.sh again is a no-op on a healthy cluster; down.sh leaves no harness daemon
  t0=$(date +%s)
  if spec/cluster/up.sh >>build/cluster-up.log 2>&1 && [ $(( $(date +%s) - t0 )) -le 5 ]; then
    echo "  ok    cluster up.sh twice: the second run is a quick no-op"; echo "1 0 0" >>"$counts"
  else
    echo "  FAIL  cluster up.sh twice: the second run failed or restarted daemons"; echo "0 1 0" >>"$counts"
  fi
  pids=$(cat build/cluster/run/*.pid 2>/dev/null | tr '\n' ' ')
  spec/cluster/down.sh >build/cluster-down.log 2>&1
  alive=""
  for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
  if [ -z "$alive" ] && [ -n "$pids" ]; then
    echo "  ok    cluster down.sh leaves no harness daemon running"; echo "1 0 0" >>"$counts"
  else
    echo "  FAIL  cluster down.sh left daemons running:${alive:- (no pid files were found)}"; echo "0 1 0" >>"$counts"
  fi
fi

tier "fuzz, short run (spec/fuzz; make fuzz runs 10^6 inputs per target)"
if make -s fuzz-build >build/fuzz-build.log 2>&1; then
  spec/fuzz/run.sh "${OBLETH_FUZZ_SHORT_RUNS:-3000}" || tier_fail=1
else
  tail -5 build/fuzz-build.log
  missing_tier "the fuzz harness did not build (clang with libFuzzer: Debian's clang, libclang-rt-14-dev)"
fi

tier "luacheck"
if luacheck --codes --no-color lua spec scripts >build/luacheck.log 2>&1; then
  echo "  ok    luacheck lua spec scripts"; echo "1 0 0" >>"$counts"
else
  cat build/luacheck.log; echo "  FAIL  luacheck lua spec scripts"; echo "0 1 0" >>"$counts"
fi

read -r passed failed skipped < <(awk '{p+=$1; f+=$2; s+=$3} END {print p+0, f+0, s+0}' "$counts")
rm -f "$counts"
echo
echo "skipped: $skipped"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$tier_fail" -eq 0 ]
