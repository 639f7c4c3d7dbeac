#!/usr/bin/env bash
# The Debian root a harness Slurm release runs in (Slurm 24.11 from trixie, 26.05 from sid): a
# minimal root of that suite (scripts/debian-rootfs.sh) with Debian's Slurm, munge and MariaDB
# packages installed inside, the runtime libraries build/obleth links to (so a job that runs
# `obleth smoke-engine` inside the root works), lua-cjson, and for sid the real llama.cpp server.
#   spec/cluster/root.sh tar RELEASE       print the path of the cached tarball (made if missing)
#   spec/cluster/root.sh dir RELEASE DIR   unpack a fresh copy into DIR (which must not exist)
# The tarball is $OBLETH_CACHE_DIR/slurm-RELEASE-SUITE-HASH.tar (default build/cache), HASH naming the
# package list, so a change to the list makes a new root; older ones of the release are removed.
# Needs root (debootstrap, chroot, mount) and Debian's mirror.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
die() { printf '[cluster root] ERROR: %s\n' "$*" >&2; exit 1; }
say() { printf '[cluster root] %s\n' "$*" >&2; }
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mount)"

cmd=${1:-}
release=${2:-}
case "$release" in
  24.11) suite=trixie ;;
  26.05) suite=sid ;;
  *) die "usage: $0 tar|dir RELEASE [DIR]; RELEASE is 24.11 (Debian 13 trixie) or 26.05 (Debian sid)" ;;
esac

# Slurm's daemons, clients and plugins (the plugin packages keep their names in every suite), munge,
# MariaDB; procps/curl/util-linux for the harness scripts, which run inside the root.
pkgs=(slurmctld slurmd slurmdbd slurmrestd slurm-client slurm-wlm-basic-plugins slurm-wlm-jwt-plugin
  slurm-wlm-mysql-plugin munge mariadb-server mariadb-client curl procps util-linux passwd)
# What build/obleth links to (`ldd build/obleth`: the packages of its NEEDED libraries on Debian 12;
# newer suites provide the same sonames, some under t64 package names, which apt picks) and lua-cjson.
pkgs+=(liblua5.4-0 libevent-2.1-7 libcurl4 libyaml-0-2 libsystemd0 libsqlite3-0 libpq5 libssl3 libreadline8 lua-cjson)
# OpenLDAP changed its soname after Debian 12 (libldap-2.5.so.0 there, libldap.so.2 in trixie and sid), so no
# package of the newer suites has the one build/obleth links to: the root gets the packages of what OpenLDAP 2.5
# itself needs (SASL, GnuTLS, whose sonames did not change) and the host's own libldap-2.5 / liblber-2.5
# files beside it (host_libs, copied after the packages; their checksums are part of the root's name).
pkgs+=(libsasl2-2 libgnutls30)
host_libs=()
for so in libldap-2.5.so.0 liblber-2.5.so.0; do
  f=$(ldconfig -p | awk -v n="$so" '$1 == n && /x86-64/ && !f {print $NF; f = 1}')
  [ -z "$f" ] || host_libs+=("$(readlink -f "$f")")
done
# sid: the real llama.cpp server (llama-server) and the GGUF writer, for the engine specs' jobs
if [ "$suite" = sid ]; then pkgs+=(llama.cpp-tools python3-gguf python3-numpy); fi

cache="${OBLETH_CACHE_DIR:-$repo/build/cache}"
case "$cache" in /*) ;; *) cache="$repo/$cache" ;; esac
hash=$( { printf '%s\n' "$suite" "${pkgs[@]}"; [ ${#host_libs[@]} -eq 0 ] || sha256sum "${host_libs[@]}"; } | sha256sum | cut -c1-10)
tarball="$cache/slurm-$release-$suite-$hash.tar"

mounts=()
work=""
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[$i]}" 2>/dev/null || true; done
  [ -z "$work" ] || rm -rf --one-file-system "$work"
}
trap cleanup EXIT

make_tarball() {
  local t0=$SECONDS r
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/slurmroot.XXXXXX")
  r="$work/root"
  say "making the Slurm $release root ($suite): debootstrap, then ${#pkgs[@]} packages"
  OBLETH_CACHE_DIR="$cache" "$repo/scripts/debian-rootfs.sh" --suite "$suite" dir "$r"
  mount -t proc proc "$r/proc" && mounts+=("$r/proc")
  mount --bind /dev "$r/dev" && mounts+=("$r/dev")
  cp /etc/resolv.conf "$r/etc/resolv.conf"
  # no maintainer script may start a daemon (the harness starts its own, on its own ports)
  printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
  chmod 755 "$r/usr/sbin/policy-rc.d"
  local logf="$cache/slurm-$release-install.log"
  chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
    /bin/sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends ${pkgs[*]}" >"$logf" 2>&1 ||
    { tail -n 30 "$logf" >&2; die "installing Slurm $release's packages in the $suite root failed (log: $logf)"; }
  local v
  v=$(chroot "$r" /usr/sbin/slurmctld -V 2>/dev/null | awk '{print $2}')
  case "$v" in
    "$release".*) say "Slurm $v installed" ;;
    *) die "the $suite root has Slurm '${v:-none}', not $release: spec/cluster/root.sh's release map needs updating" ;;
  esac
  local so
  for so in "${host_libs[@]}"; do cp -a "$so" "$r/usr/lib/x86_64-linux-gnu/"; done
  [ ${#host_libs[@]} -eq 0 ] || chroot "$r" /sbin/ldconfig
  # the daemons are started by the harness, with their own config: no system state or units needed
  rm -f "$r/usr/sbin/policy-rc.d"
  rm -rf "$r/var/cache/apt/archives/"*.deb "$r/var/lib/apt/lists/"*
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount "${mounts[$i]}" || umount -l "${mounts[$i]}"; done
  mounts=()
  tar -C "$r" --numeric-owner -cf "$tarball.part" .
  mv -f "$tarball.part" "$tarball"
  # older roots of this release (another package list)
  find "$cache" -maxdepth 1 -name "slurm-$release-*.tar" ! -name "${tarball##*/}" -delete
  say "root cached as $tarball ($((SECONDS - t0))s)"
}

case "$cmd" in
  tar)
    [ -s "$tarball" ] || make_tarball
    printf '%s\n' "$tarball" ;;
  dir)
    dest=${3:?usage: $0 dir RELEASE DIR}
    [ ! -e "$dest" ] || die "$dest exists"
    [ -s "$tarball" ] || (make_tarball) || exit 1
    mkdir -p "$dest"
    tar -C "$dest" --numeric-owner -xf "$tarball" ;;
  *) die "usage: $0 tar|dir RELEASE [DIR]" ;;
esac
