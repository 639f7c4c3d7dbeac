#!/usr/bin/env bash
# The dashboard's tests: node --test specs of its pure logic (web/src/lib) and the
# browser tests (spec/web/*.test.mjs: headless Debian Chromium via playwright-core
# against the real obleth serve + provisioner + the harness cluster, which must be
# up: spec/cluster/up.sh). Screenshots go to build/web-screens/.
# Prints the TAP output and appends "passed failed skipped" to $OBLETH_SPEC_COUNTS
# when set. Extra arguments are test files (default: all of spec/web).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
if [ ! -x /usr/bin/chromium ] && [ -z "${OBLETH_CHROMIUM:-}" ]; then
  echo "  FAIL  no /usr/bin/chromium (apt-get install chromium)"; [ -n "${OBLETH_SPEC_COUNTS:-}" ] && echo "0 1 0" >>"$OBLETH_SPEC_COUNTS"; exit 1
fi
if [ ! -d web/node_modules ] || [ ! -f build/web/index.html ]; then
  echo "  FAIL  the dashboard is not built (make)"; [ -n "${OBLETH_SPEC_COUNTS:-}" ] && echo "0 1 0" >>"$OBLETH_SPEC_COUNTS"; exit 1
fi
out=$(mktemp)
rm -rf build/web-screens
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(spec/web/*.test.mjs)
status=0
node --test --test-reporter=tap web/src/lib/ 2>&1 | tee -a "$out" | grep -E '^(not )?ok |^# (pass|fail|skipped)' || true
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
node --test --test-reporter=tap --test-concurrency=1 --test-timeout=600000 "${files[@]}" 2>&1 | tee -a "$out" \
  | grep -vE '^\s+at ' || true
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
read -r p f s < <(awk '/^# pass /{p+=$3} /^# fail /{f+=$3} /^# skipped /{s+=$3} /^# cancelled /{f+=$3} END{print p+0, f+0, s+0}' "$out")
rm -f "$out"
echo "dashboard: $p passed, $f failed, $s skipped (screenshots: build/web-screens/)"
[ -n "${OBLETH_SPEC_COUNTS:-}" ] && echo "$p $f $s" >>"$OBLETH_SPEC_COUNTS"
[ "$f" -eq 0 ] && [ "$status" -eq 0 ]
