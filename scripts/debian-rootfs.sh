#!/usr/bin/env bash
# A minimal Debian 12 (bookworm) root file system, from Debian's packages only.
#   scripts/debian-rootfs.sh tar            print the path of a cached tarball of it (made if missing)
#   scripts/debian-rootfs.sh dir DIR        unpack a fresh copy into DIR (which must not exist)
# The tarball is build/cache/bookworm-minbase.tar; it is made once with
# `debootstrap --variant=minbase bookworm` from the mirror this machine's apt uses, with the
# security and updates suites configured, so `apt-get update` inside it sees what a fresh
# Debian 12 machine sees. Used by the fresh-machine check (scripts/fresh-check.sh) and as the
# base image of deploy/docker (docker import). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
cache="$root/build/cache"
tarball="$cache/bookworm-minbase.tar"

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
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$work"' RETURN
  echo "debian-rootfs: debootstrap --variant=minbase bookworm from $m" >&2
  debootstrap --variant=minbase bookworm "$work/root" "$m" >"$cache/debootstrap.log" 2>&1 ||
    { tail -20 "$cache/debootstrap.log" >&2; die "debootstrap failed (log: $cache/debootstrap.log)"; }
  local sec=${m%/debian}/debian-security
  cat >"$work/root/etc/apt/sources.list" <<EOF
deb $m bookworm main
deb $m bookworm-updates main
deb $sec bookworm-security main
EOF
  rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
  tar -C "$work/root" --numeric-owner -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
}

case "${1:-}" in
  tar)
    [ -s "$tarball" ] || make_tarball
    printf '%s\n' "$tarball" ;;
  dir)
    dest=${2:?usage: $0 dir DIR}
    [ ! -e "$dest" ] || die "$dest exists"
    [ -s "$tarball" ] || make_tarball
    mkdir -p "$dest"
    tar -C "$dest" --numeric-owner -xf "$tarball" ;;
  *) die "usage: $0 tar | dir DIR" ;;
esac
