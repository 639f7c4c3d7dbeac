#!/usr/bin/env bash
# Install obleth's dependencies from Debian's packages; a no-op when all are present.
#   scripts/deps.sh build   what `make` needs
#   scripts/deps.sh all     also what `make check` and `make demo` need (Slurm, MariaDB, munge, ...)
set -euo pipefail
build_pkgs=(build-essential pkg-config liblua5.4-dev lua5.4 libcurl4-openssl-dev lua-cjson libyaml-dev
  libevent-dev libsqlite3-dev libreadline-dev libsystemd-dev libssl-dev)
test_pkgs=(lua-busted lua-check tmux curl procps python3)
cluster_pkgs=(slurmctld slurmd slurmdbd slurmrestd slurm-client munge mariadb-server)
want=("${build_pkgs[@]}")
if [ "${1:-build}" = all ]; then want+=("${test_pkgs[@]}" "${cluster_pkgs[@]}"); fi
missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: need root to install packages: sudo $0 ${1:-build}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# the package lists may be stale or absent on a fresh machine
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
