#!/usr/bin/env bash
# Install the Debian packages the local Slurm test cluster needs and check the files it loads
# (the auth/jwt and MySQL accounting plugins, slurmrestd's plugins). The package list has one
# owner, scripts/deps.sh; this is its `cluster` group. Fast no-op when everything is present.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
if ! "$REPO/scripts/deps.sh" cluster; then
  ROOT_REASON="it installs packages"
  require_root "$@"
  exit 1
fi
