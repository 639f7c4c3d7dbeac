#!/usr/bin/env bash
# The deployment page's live-update lag (spec/bench/web_live.mjs): needs the harness cluster
# (spec/cluster/up.sh), Debian's Chromium and the built dashboard; says why when it skips.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x "${OBLETH_CHROMIUM:-/usr/bin/chromium}" ]; then echo "web_live: skipped: no Chromium"; exit 0; fi
if [ ! -d web/node_modules ] || [ ! -f build/web/index.html ]; then echo "web_live: skipped: the dashboard is not built (make)"; exit 0; fi
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 exec node spec/bench/web_live.mjs
