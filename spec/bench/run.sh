#!/usr/bin/env bash
# Runs every benchmark under spec/bench/ with the built obleth.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OBLETH_SHARED=${OBLETH_SHARED:-$(pwd)/../shared}
for b in spec/bench/*.lua; do
  echo "== $b"
  build/obleth lua "$b"
done
for b in spec/bench/*.sh; do
  [ "$b" = spec/bench/run.sh ] && continue
  echo "== $b"
  bash "$b"
done
