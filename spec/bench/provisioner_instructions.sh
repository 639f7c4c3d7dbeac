#!/usr/bin/env bash
# Instructions per steady provisioner pass (callgrind), repeatable on a busy machine where CPU seconds
# move with the load: spec/bench/provisioner_pass.lua's steady passes (no check due, STEADY_ONLY=1)
# run under valgrind --tool=callgrind; each measured pass ends with obleth.provisioner.tidy, whose
# sys.trim_memory (host/sys.c l_trim_memory) ends a dump, so each dump after the first holds one pass
# (the pass, its tidy, the bench's count request). Prints the median of those per pass and per 1,000
# replicas. Only this process is counted: obleth serve and the stand-in slurmrestd run natively.
# About 1 minute per 1,000 replicas under callgrind. Skipped (exit 0, saying so) without valgrind.
#   spec/bench/provisioner_instructions.sh [models ...]   (M models x 2 replicas; default 500)
set -euo pipefail
cd "$(dirname "$0")/../.."
export OBLETH_SHARED=${OBLETH_SHARED:-$(pwd)/../shared}
command -v valgrind >/dev/null || { echo "provisioner instructions: skipped (no valgrind: apt-get install valgrind)"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in "${@:-500}"; do
  STEADY_ONLY=1 valgrind --tool=callgrind --dump-before=l_trim_memory --callgrind-out-file="$tmp/cg.$m" \
    build/obleth lua spec/bench/provisioner_pass.lua "$m" >"$tmp/out.$m" 2>"$tmp/err.$m" || {
    tail -20 "$tmp/err.$m" >&2; echo "provisioner instructions: the run under callgrind failed" >&2; exit 1; }
  # the dumps in order: cg.M.1 (start-up, warm-up, the first pass), cg.M.2 .. (one pass each), cg.M (the rest)
  per=$(for f in "$tmp/cg.$m".[0-9]*; do
          n=${f##*.}; [ "$n" -ge 2 ] || continue
          awk '/^(summary|totals):/ { print $2; exit }' "$f"
        done | sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }')
  [ -n "$per" ] || { echo "provisioner instructions: no per-pass dump (l_trim_memory never ran?)" >&2; exit 1; }
  awk -v m="$m" -v i="$per" 'BEGIN { printf "provisioner instructions per steady pass at %d replicas: %.1f M (%.1f M per 1,000 replicas; callgrind, this process only)\n", 2 * m, i / 1e6, i / 1e6 / (2 * m / 1000) }'
done
