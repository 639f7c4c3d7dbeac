#!/usr/bin/env bash
# A minimal Debian root file system (bookworm by default), from Debian's packages only.
#   scripts/debian-rootfs.sh [--suite SUITE] tar       print the path of a cached tarball of it (made if missing)
#   scripts/debian-rootfs.sh [--suite SUITE] dir DIR   unpack a fresh copy into DIR (which must not exist)
# SUITE is bookworm (Debian 12, the default), trixie (Debian 13) or sid (unstable). The tarball is
# $OBLETH_CACHE_DIR/SUITE-minbase.tar (default build/cache); it is made once with
# `debootstrap --variant=minbase SUITE` from the mirror this machine's apt uses, with the suite's
# security and updates suites configured (sid has none), so `apt-get update` inside it sees what a
# fresh machine of that release sees. sid's Release file may be past its Valid-Until for the
# machine's clock: the sid root's apt does not check it. Used by the fresh-machine check
# (scripts/fresh-check.sh), as the base image of deploy/docker (docker import), and as the base of
# the harness's Slurm 24.11 / 26.05 roots (spec/cluster/root.sh). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
suite=bookworm
if [ "${1:-}" = --suite ]; then
  suite=${2:?usage: $0 [--suite SUITE] tar | dir DIR}
  shift 2
fi
case "$suite" in bookworm | trixie | sid) ;; *) printf 'debian-rootfs: unknown suite %s (bookworm, trixie, sid)\n' "$suite" >&2; exit 2 ;; esac
cache="${OBLETH_CACHE_DIR:-$root/build/cache}"
case "$cache" in /*) ;; *) cache="$root/$cache" ;; esac
tarball="$cache/$suite-minbase.tar"

die() { printf 'debian-rootfs: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap and chroot)"

mirror() { # the Debian mirror this machine's apt already uses, else Debian's own
  local m
  m=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources \
    /etc/apt/sources.list 2>/dev/null | grep -v security | head -1 | awk '{print $2}') || true
  printf '%s\n' "${m:-http://deb.debian.org/debian}"
}

make_tarball() {
  command -v debootstrap >/dev/null || {
    apt-get install -y -q --no-install-recommends debootstrap >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends debootstrap; }
  }
  local m work
  m=$(mirror)
  m=${m%/}
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$work"' RETURN
  echo "debian-rootfs: debootstrap --variant=minbase $suite from $m" >&2
  debootstrap --variant=minbase "$suite" "$work/root" "$m" >"$cache/debootstrap-$suite.log" 2>&1 ||
    { tail -20 "$cache/debootstrap-$suite.log" >&2; die "debootstrap failed (log: $cache/debootstrap-$suite.log)"; }
  local sec=${m%/debian}/debian-security
  if [ "$suite" = sid ]; then
    echo "deb $m sid main" >"$work/root/etc/apt/sources.list"
    echo 'Acquire::Check-Valid-Until "false";' >"$work/root/etc/apt/apt.conf.d/99obleth-no-valid-until"
  else
    cat >"$work/root/etc/apt/sources.list" <<EOF
deb $m $suite main
deb $m $suite-updates main
deb $sec $suite-security main
EOF
  fi
  rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
  tar -C "$work/root" --numeric-owner -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
}

case "${1:-}" in
  tar)
    [ -s "$tarball" ] || make_tarball
    printf '%s\n' "$tarball" ;;
  dir)
    dest=${2:?usage: $0 [--suite SUITE] dir DIR}
    [ ! -e "$dest" ] || die "$dest exists"
    [ -s "$tarball" ] || make_tarball
    mkdir -p "$dest"
    tar -C "$dest" --numeric-owner -xf "$tarball" ;;
  *) die "usage: $0 [--suite SUITE] tar | dir DIR" ;;
esac
