#!/usr/bin/env bash
# Print a fresh Slurm JWT for the test cluster.
#   token.sh [lifespan_seconds] [user]     defaults: 86400, obleth
# e.g. `token.sh 3` for a token that expires in 3 seconds.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

lifespan="${1:-$TOKEN_LIFESPAN}"
user="${2:-$TEST_USER}"
case "$lifespan" in '' | *[!0-9]*) die "lifespan must be a positive integer of seconds, got '$lifespan'" ;; esac
[ "$lifespan" -gt 0 ] || die "lifespan must be > 0"
# Minting a token for another user needs root (or SlurmUser).
ROOT_REASON="only root or SlurmUser may mint a token for another user"
require_root "$@"
enter_root "$@"
[ -r "$SLURM_CONF" ] || die "no cluster config at $SLURM_CONF; run spec/cluster/up.sh first"
mint_token "$lifespan" "$user"
