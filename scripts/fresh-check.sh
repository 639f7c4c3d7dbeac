#!/usr/bin/env bash
# make fresh-check — prove the README's first command on a fresh Debian 12 machine.
#
#   scripts/fresh-check.sh [REF]
#
# Bootstraps a minimal Debian 12 root (debootstrap --variant=minbase bookworm, through
# scripts/debian-rootfs.sh) into build/fresh/root, copies the working tree in (or, with REF, the
# tree of that git commit: `scripts/fresh-check.sh e22fcc4` shows an older commit failing), and
# runs there, as root in a chroot, what a new user runs: `apt-get install make`, then `make demo`.
# It passes when the demo brings the smoke-test model's two replicas to healthy and stops cleanly.
# The chroot's harness cluster and server use their own ports (69xx, 8090) so a cluster already
# running on this machine is not disturbed. Output: build/fresh/run.log; the timing is printed.
# Needs root, network access to Debian's mirror and the npm registry, and ~2 GB of disk.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
ref=${1:-}
work=$root/build/fresh
chroot_dir=$work/root
log=$work/run.log
t0=$(date +%s)

say() { printf 'fresh-check: %s\n' "$*" >&2; }
die() { say "FAIL: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mounts)"

# ---- mounts, and every process whose root is the chroot, are undone on any exit ----------------
mounted=()
chroot_pids() {
  local d r
  for d in /proc/[0-9]*; do
    r=$(readlink "$d/root" 2>/dev/null) || continue
    case "$r" in "$chroot_dir" | "$chroot_dir"/*) printf '%s\n' "${d#/proc/}" ;; esac
  done
}
teardown() {
  local pids i m
  pids=$(chroot_pids)
  if [ -n "$pids" ]; then
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do pids=$(chroot_pids); [ -n "$pids" ] || break; sleep 0.2; done
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  fi
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    m=${mounted[$i]}
    umount -l "$m" 2>/dev/null || true
  done
  mounted=()
}
trap teardown EXIT
mnt() { # [mount options...] target
  mount "$@"
  mounted+=("${*: -1}")
}

# ---- a fresh root -----------------------------------------------------------------------------
if [ -d "$chroot_dir" ]; then
  # a previous run's root: nothing of it may survive (and nothing may still be mounted in it)
  while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v d="$chroot_dir" '$2 ~ "^"d {print $2}' /proc/mounts | sort -r)
  rm -rf "$chroot_dir"
fi
mkdir -p "$work"
say "bootstrapping a minimal Debian 12 root into $chroot_dir"
scripts/debian-rootfs.sh dir "$chroot_dir"

# ---- the project's tree, as a user would have it (no build/, no node_modules) -----------------
dest=$chroot_dir/root/obleth
mkdir -p "$dest"
if [ -n "$ref" ]; then
  say "copying the tree of $ref"
  git archive "$ref" | tar -C "$dest" -xf -
else
  say "copying the working tree"
  git ls-files -z --cached --others --exclude-standard | grep -zv '^build/' | grep -zv 'node_modules/' |
    tar -C "$root" --null -T - -cf - | tar -C "$dest" -xf -
fi
# ../shared beside the tree, as in a checkout of this workplace (some specs read recorded cases)
if [ -d "$root/../shared" ]; then cp -a "$root/../shared" "$chroot_dir/root/shared"; fi

# ---- what a machine has that a chroot lacks: kernel file systems, name resolution -------------
mnt -t proc proc "$chroot_dir/proc"
mnt --rbind /sys "$chroot_dir/sys"   # with /sys/fs/cgroup, which slurmd initialises
mount --make-rslave "$chroot_dir/sys"
mnt --bind /dev "$chroot_dir/dev"
mnt --bind /dev/pts "$chroot_dir/dev/pts"
mnt -t tmpfs tmpfs "$chroot_dir/dev/shm"
mnt -t tmpfs tmpfs "$chroot_dir/run"
cp /etc/resolv.conf "$chroot_dir/etc/resolv.conf"
[ -f /etc/hosts ] && cp /etc/hosts "$chroot_dir/etc/hosts"
# A site whose HTTPS goes through an inspecting proxy trusts its CA through NODE_EXTRA_CA_CERTS; a
# machine there has that setting too, so the chroot gets the same trust for npm (apt uses plain HTTP)
extra_ca=()
if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f "$NODE_EXTRA_CA_CERTS" ]; then
  cp "$NODE_EXTRA_CA_CERTS" "$chroot_dir/root/.site-ca.crt"
  extra_ca=(NODE_EXTRA_CA_CERTS=/root/.site-ca.crt)
fi

# ---- the README's first command, as root on that machine -------------------------------------
say "running: apt-get install make; make demo (log: $log)"
set +e
chroot "$chroot_dir" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive "${extra_ca[@]}" \
  OBLETH_CLUSTER_REST_PORT=6920 OBLETH_CLUSTER_CTLD_PORT=6921 OBLETH_CLUSTER_DBD_PORT=6922 \
  OBLETH_CLUSTER_DB_PORT=6923 OBLETH_CLUSTER_SLURMD_PORT_BASE=6930 OBLETH_DEMO_PORT=8090 \
  /bin/bash -c 'set -e
    cd /root/obleth
    apt-get update -q >/dev/null
    apt-get install -y -q make >/dev/null
    echo "+ OBLETH_DEMO_ONCE=1 make demo"
    OBLETH_DEMO_ONCE=1 make demo </dev/null' >"$log" 2>&1
rc=$?
set -e
t1=$(date +%s)

healthy=$(grep -c 'is active with endpoints' "$log" || true)
stopped=$(grep -c '^demo: stopped' "$log" || true)
if [ "$rc" -eq 0 ] && [ "$healthy" -ge 1 ] && [ "$stopped" -ge 1 ]; then
  say "ok: make demo on a fresh Debian 12 root brought the smoke-test replicas to healthy ($((t1 - t0))s in all)"
  exit 0
fi
tail -40 "$log" >&2
die "make demo on a fresh Debian 12 root did not bring the replicas to healthy (exit $rc, $((t1 - t0))s; log: $log)"
