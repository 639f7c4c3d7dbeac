#!/usr/bin/env bash
# Runs every benchmark under spec/bench/ with the built obleth.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OBLETH_SHARED=${OBLETH_SHARED:-$(pwd)/../shared}
for b in spec/bench/*.lua; do
  if [ "$b" = spec/bench/provisioner_pass.lua ]; then
    # 1,000, 5,000 and 10,000 replicas (models x 2); PASS_MODELS to choose
    for m in ${PASS_MODELS:-500 2500 5000}; do
      echo "== $b $m"
      build/obleth lua "$b" "$m"
    done
    continue
  fi
  echo "== $b"
  build/obleth lua "$b"
  if [ "$b" = spec/bench/serve_pass.lua ] && [ -x /usr/lib/postgresql/15/bin/initdb ]; then
    echo "== $b (PostgreSQL)"
    OBLETH_PG_FSYNC=on BENCH_BACKEND=postgresql build/obleth lua "$b"
  fi
done
for b in spec/bench/*.sh; do
  [ "$b" = spec/bench/run.sh ] && continue
  echo "== $b"
  bash "$b"
done
