#!/usr/bin/env bash
# Install the Debian packages the local Slurm test cluster needs. Idempotent:
# exits at once when everything is installed (checked with dpkg-query), runs
# `apt-get update` only when the package lists are missing/stale or a package
# has no install candidate.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

PKGS=(slurmctld slurmd slurmdbd slurmrestd slurm-client munge mariadb-server curl)

missing=()
for p in "${PKGS[@]}"; do
  if [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != "installed" ]; then
    missing+=("$p")
  fi
done
[ "${#missing[@]}" -gt 0 ] || exit 0

ROOT_REASON="it installs packages"
require_root "$@"
command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install by hand: ${missing[*]}"
log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive

need_update=0
if ! compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null; then
  need_update=1
elif [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin +1440 -print -quit)" ]; then
  need_update=1
else
  for p in "${missing[@]}"; do
    if apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: (none)' ||
      [ -z "$(apt-cache policy "$p" 2>/dev/null)" ]; then
      need_update=1
      break
    fi
  done
fi
if [ "$need_update" -eq 1 ]; then
  apt-get update || die "apt-get update failed"
fi

# Keep the packages' maintainer scripts from starting the *system* munged,
# MariaDB and Slurm daemons (no systemd here; they would start via init.d and
# fight over ports/sockets). Only if no policy is in place already.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# temporary, from obleth spec/cluster/deps.sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  created_policy=1
fi
cleanup() { if [ "$created_policy" -eq 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

apt-get install -y "${PKGS[@]}" || die "apt-get install failed for: ${PKGS[*]}"
