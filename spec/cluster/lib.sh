# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts
# Shared helpers for the local Slurm test cluster harness (spec/cluster/*.sh).
# Sourced, never executed. Callers set `set -euo pipefail` themselves.
#
# Everything lives under $REPO/build/cluster (REPO derived from this file's
# location, so a fresh clone anywhere works). Nothing here touches the system
# Slurm/munge/MariaDB configuration: every daemon gets SLURM_CONF (or its own
# config/socket flags) pointing into the state dir.

CLUSTER_SPEC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO="$(cd "$CLUSTER_SPEC_DIR/../.." && pwd -P)"

log() { printf '[cluster] %s\n' "$*" >&2 2>/dev/null || true; } # never fails: a caller's dead pipe (make demo | tee, Ctrl-C) must not stop a cleanup
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }

# Which Slurm release: OBLETH_CLUSTER_RELEASE (make cluster-up SLURM=...), else the release of the
# cluster whose env file the caller sourced (OBLETH_CLUSTER_DIR), else 22.05.
#   22.05  Debian 12's packages on this machine, state in build/cluster
#   24.11  Debian 13 (trixie)'s packages in a debootstrap root, state in build/cluster-24.11
#   26.05  Debian sid's packages in a debootstrap root, state in build/cluster-26.05
# 24.11 and 26.05 run every daemon and client chrooted in $STATE/root (spec/cluster/root.sh makes it),
# where this repository is bind-mounted at its own path: the state dir, build/obleth and lua/ are at
# the same paths inside and out. Each script re-runs itself inside the root (enter_root).
RELEASE="${OBLETH_CLUSTER_RELEASE:-}"
if [ -z "$RELEASE" ] && [ -n "${OBLETH_CLUSTER_DIR:-}" ]; then
  case "$OBLETH_CLUSTER_DIR" in
    "$REPO/build/cluster") RELEASE=22.05 ;;
    "$REPO/build/cluster-"*) RELEASE="${OBLETH_CLUSTER_DIR##*/cluster-}" ;;
  esac
fi
RELEASE="${RELEASE:-22.05}"
# Ports: one base for all releases (OBLETH_CLUSTER_PORT_BASE, default 6820), each release at its
# own offset from it, so clusters of several releases (and of several checkouts with different
# bases) never collide. Within a release: slurmrestd +0, slurmctld +1, slurmdbd +2, MariaDB +3,
# slurmd n0..n3 +10..+13.
case "$RELEASE" in
  22.05) STATE="$REPO/build/cluster"; PORT_OFFSET=0; ROOTED=0 ;;
  24.11) STATE="$REPO/build/cluster-24.11"; PORT_OFFSET=20; ROOTED=1 ;;
  26.05) STATE="$REPO/build/cluster-26.05"; PORT_OFFSET=40; ROOTED=1 ;;
  *) die "unknown Slurm release '$RELEASE' (the harness has 22.05, 24.11 and 26.05)" ;;
esac
ROOTFS="$STATE/root"
IN_ROOT="${OBLETH_CLUSTER_IN_ROOT:-0}"

ETC="$STATE/etc"
RUN="$STATE/run"
LOG="$STATE/log"
SPOOL="$STATE/spool"
MYSQL="$STATE/mysql"
MUNGE="$STATE/munge"
DEVDIR="$STATE/dev"
ENV_FILE="$STATE/env"

export SLURM_CONF="$ETC/slurm.conf"

NODES=(n0 n1 n2 n3)
TEST_USER="obleth"
# A second job user, in account research only: the contract specs submit as it (token.sh 60
# obleth-other) to see how each release answers a cancel of someone else's job.
OTHER_USER="obleth-other"
# slurmrestd refuses root and SlurmUser (and their groups); it only needs to
# read slurm.conf and talk to slurmctld/slurmdbd with the callers' JWTs.
# 26.05 also refuses nobody: the rooted releases give it a system user of its own.
if [ "$ROOTED" = 1 ]; then
  REST_USER="slurmrestd"
  REST_GROUP="slurmrestd"
else
  REST_USER="nobody"
  REST_GROUP="nogroup"
fi

# Ports (all bound to 127.0.0.1). Deliberately not Slurm's defaults (6817/
# 6818/6819) for the internal daemons, so a system Slurm on the same machine
# does not collide. Each can be overridden from the environment.
# The per-port variables override the base, for whichever release is started.
PORT_BASE="${OBLETH_CLUSTER_PORT_BASE:-6820}"
case "$PORT_BASE" in '' | *[!0-9]*) die "OBLETH_CLUSTER_PORT_BASE must be a port number, got '$PORT_BASE'" ;; esac
REST_PORT="${OBLETH_CLUSTER_REST_PORT:-$((PORT_BASE + PORT_OFFSET))}"
CTLD_PORT="${OBLETH_CLUSTER_CTLD_PORT:-$((PORT_BASE + PORT_OFFSET + 1))}"
DBD_PORT="${OBLETH_CLUSTER_DBD_PORT:-$((PORT_BASE + PORT_OFFSET + 2))}"
DB_PORT="${OBLETH_CLUSTER_DB_PORT:-$((PORT_BASE + PORT_OFFSET + 3))}"
SLURMD_PORT_BASE="${OBLETH_CLUSTER_SLURMD_PORT_BASE:-$((PORT_BASE + PORT_OFFSET + 10))}" # n0=base, n1=base+1, ...
# The scripts talk to the cluster on the ports it was started with (up.sh records them); up.sh
# itself keeps them unless a port variable asks for others (a spec that runs up.sh again, or
# scripts/demo.sh, never moves a cluster started on another base).
PORTS_FILE="$STATE/ports"
if [ -r "$PORTS_FILE" ]; then
  if [ "$(basename "$0")" != up.sh ] || [ -z "${OBLETH_CLUSTER_PORT_BASE:-}${OBLETH_CLUSTER_REST_PORT:-}${OBLETH_CLUSTER_CTLD_PORT:-}${OBLETH_CLUSTER_DBD_PORT:-}${OBLETH_CLUSTER_DB_PORT:-}${OBLETH_CLUSTER_SLURMD_PORT_BASE:-}" ]; then
    # shellcheck source=/dev/null
    . "$PORTS_FILE"
  fi
fi

TOKEN_LIFESPAN="${OBLETH_CLUSTER_TOKEN_LIFESPAN:-86400}"
TIMEOUT="${OBLETH_CLUSTER_TIMEOUT:-120}"

# Marker put into the (clean) environment of every daemon we start. Slurm's
# slurmstepd inherits slurmd's environment, so step daemons of a node can be
# found too. Used to verify a pid really belongs to this harness before
# signalling it and to sweep leftovers whose pid file was lost.
# (Deliberately not OBLETH_CLUSTER_DIR, which the env file exports to callers.)
MARKER="OBLETH_CLUSTER_DAEMON=$STATE"

# pid files (written by the daemons themselves, except slurmrestd's which the
# launcher records).
MUNGED_PID="$MUNGE/munged.pid"
MYSQLD_PID="$MYSQL/run/mariadbd.pid"
SLURMDBD_PID="$RUN/slurmdbd.pid"
SLURMCTLD_PID="$RUN/slurmctld.pid"
SLURMRESTD_PID="$RUN/slurmrestd.pid"
slurmd_pid_file() { printf '%s/slurmd-%s.pid\n' "$RUN" "$1"; }

MUNGE_SOCKET="$MUNGE/munge.socket.2"
MYSQL_SOCKET="$MYSQL/run/mariadbd.sock"

CLEAN_PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Re-exec the calling script as root via non-interactive sudo when needed.
# Root is required: creating users, mknod for the fake GPU devices, chown of
# daemon dirs, and slurmd itself must run as root to start jobs as `obleth`.
require_root() {
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      exec sudo -n --preserve-env=OBLETH_CLUSTER_RELEASE,OBLETH_CLUSTER_DIR,OBLETH_CLUSTER_PORT_BASE,OBLETH_CACHE_DIR,OBLETH_CLUSTER_REST_PORT,OBLETH_CLUSTER_CTLD_PORT,OBLETH_CLUSTER_DBD_PORT,OBLETH_CLUSTER_DB_PORT,OBLETH_CLUSTER_SLURMD_PORT_BASE,OBLETH_CLUSTER_TOKEN_LIFESPAN,OBLETH_CLUSTER_TIMEOUT \
        bash "$0" "$@"
    fi
    die "$(basename "$0") must run as root (or with passwordless sudo)${ROOT_REASON:+: $ROOT_REASON}"
  fi
}

# Close every inherited fd above 2 in the current (sub)shell: daemons must not
# keep the caller's pipes open (`make cluster-up | tee` would never end).
_close_inherited_fds() {
  local fd
  for fd in /proc/"$BASHPID"/fd/*; do
    fd="${fd##*/}"
    if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
  done
}

# Run a daemon that forks into the background by itself, with a clean
# environment (no caller secrets leak into daemons or jobs) plus SLURM_CONF and
# the ownership marker. Returns when the daemon has detached.
daemon_env() {
  (
    cd /
    _close_inherited_fds
    exec env -i PATH="$CLEAN_PATH" LANG=C.UTF-8 SLURM_CONF="$SLURM_CONF" "$MARKER" "$@"
  )
}

# Start a foreground-only program (mariadbd, slurmrestd) detached in its own
# session, output appended to $1; same clean environment as daemon_env. No
# shell stays behind waiting for it. Sets SPAWNED_PID.
spawn() {
  local logf="$1"
  shift
  (
    cd /
    _close_inherited_fds
    exec setsid env -i PATH="$CLEAN_PATH" LANG=C.UTF-8 SLURM_CONF="$SLURM_CONF" "$MARKER" "$@"
  ) </dev/null >>"$logf" 2>&1 &
  SPAWNED_PID=$!
}

proc_state() { # pid -> one-letter state (R, S, Z, ...), nothing if gone
  local s
  s="$(cat "/proc/$1/stat" 2>/dev/null)" || return 0
  s="${s##*) }"
  printf '%s\n' "${s%% *}"
}

read_pid() { # file -> pid on stdout, or nothing
  local f="$1" p
  [ -r "$f" ] || return 0
  p="$(tr -dc '0-9' <"$f" 2>/dev/null || true)"
  [ -n "$p" ] && printf '%s\n' "$p"
  return 0
}

# True if pid is alive AND carries this harness's marker (so a stale pid file
# never makes us signal an unrelated process that reused the pid).
pid_is_ours() {
  local pid="$1"
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  [ "$(proc_state "$pid")" != "Z" ] || return 1
  tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qxF "$MARKER"
}

# pids of all live processes carrying our marker (optionally also VAR=value).
marked_pids() {
  local extra="${1:-}" d pid env self=" " p=$$
  # Never match ourselves or our ancestors, whatever their environment.
  while [ -n "$p" ] && [ "$p" -gt 1 ]; do
    self+="$p "
    p="$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')"
  done
  self+="$BASHPID "
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    case "$self" in *" $pid "*) continue ;; esac
    env="$(tr '\0' '\n' 2>/dev/null <"$d/environ")" || continue
    grep -qxF "$MARKER" <<<"$env" || continue
    if [ -n "$extra" ]; then grep -qxF "$extra" <<<"$env" || continue; fi
    [ "$(proc_state "$pid")" = "Z" ] && continue
    printf '%s\n' "$pid"
  done
}

# All descendants of the given pids (jobs started by slurmstepd).
descendants() {
  [ "$#" -gt 0 ] || return 0
  ps -e -o pid=,ppid= | awk -v roots="$*" '
    BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) want[r[i]] = 1 }
    { parent[$1] = $2; pids[NR] = $1 }
    END {
      changed = 1
      while (changed) {
        changed = 0
        for (i in pids) { p = pids[i]; if (!(p in want) && (parent[p] in want)) { want[p] = 1; out[p] = 1; changed = 1 } }
      }
      for (p in out) print p
    }'
}

# Send TERM to pids, wait up to $2 seconds, then KILL survivors.
terminate_pids() {
  local wait_s="$1"; shift
  local pids=() p i
  for p in "$@"; do [ -n "$p" ] && [ -d "/proc/$p" ] && pids+=("$p"); done
  [ "${#pids[@]}" -gt 0 ] || return 0
  STOPPED_PIDS+=("${pids[@]}")
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for ((i = 0; i < wait_s * 5; i++)); do
    local alive=0
    for p in "${pids[@]}"; do
      if [ -d "/proc/$p" ] && [ "$(proc_state "$p")" != "Z" ]; then alive=1; break; fi
    done
    [ "$alive" -eq 1 ] || return 0
    sleep 0.2
  done
  log "still alive after ${wait_s}s, sending SIGKILL: ${pids[*]}"
  kill -KILL "${pids[@]}" 2>/dev/null || true
  sleep 0.3
}

# Dead daemons are re-parented to PID 1, which may reap them only after a
# moment (seen: ~2 s in a VM whose init is not a real init); wait for that so
# `ps` really shows them gone.
STOPPED_PIDS=()
wait_reaped() {
  local i p left
  for ((i = 0; i < 50; i++)); do
    left=0
    for p in "${STOPPED_PIDS[@]}"; do [ -d "/proc/$p" ] && left=1 && break; done
    [ "$left" -eq 1 ] || return 0
    sleep 0.2
  done
}

# Stop the daemon whose pid file is $1 (only if the pid is ours).
stop_by_pidfile() {
  local file="$1" name="$2" wait_s="${3:-15}" pid
  pid="$(read_pid "$file")"
  if [ -n "$pid" ] && pid_is_ours "$pid"; then
    log "stopping $name (pid $pid)"
    terminate_pids "$wait_s" "$pid"
  fi
  rm -f "$file" 2>/dev/null || true
}

tail_logs() { # print the tail of the given log files to stderr
  local f
  for f in "$@"; do
    if [ -s "$f" ]; then
      printf '\n----- tail of %s -----\n' "$f" >&2
      tail -n 25 "$f" >&2 || true
    fi
  done
}

all_logs() {
  local n out=("$MUNGE/munged.log" "$MYSQL/mariadbd.err" "$LOG/slurmdbd.log" "$LOG/slurmctld.log" "$LOG/slurmrestd.log")
  for n in "${NODES[@]}"; do out+=("$LOG/slurmd-$n.log"); done
  printf '%s\n' "${out[@]}"
}

# Print "SLURM_JWT" for user $2 with lifespan $1 (root or SlurmUser only).
mint_token() {
  local lifespan="$1" user="$2" out
  out="$(scontrol token username="$user" lifespan="$lifespan" 2>&1)" ||
    die "scontrol token failed for $user: $out"
  out="${out#SLURM_JWT=}"
  [ -n "$out" ] || die "scontrol token returned nothing"
  printf '%s\n' "$out"
}

API_VERSIONS=(v0.0.46 v0.0.45 v0.0.44 v0.0.43 v0.0.42 v0.0.41 v0.0.40 v0.0.39 v0.0.38 v0.0.37 v0.0.36)

# The API versions obleth's Slurm bindings speak (lua/obleth/slurm/versions.lua's list), one a line.
obleth_api_versions() {
  grep -m1 -E '^M\.known *=' "$REPO/lua/obleth/slurm/versions.lua" 2>/dev/null | grep -oE 'v0\.0\.[0-9]+' || true
}

# Print the newest API version whose ping answers with token $1; fail if none. With $2 = known,
# only versions obleth speaks count (the env file's OBLETH_SLURM_API_VERSION: 26.05 serves v0.0.45
# before obleth knows it).
rest_api_version() {
  local v known=""
  [ "${2:-}" != known ] || known=" $(obleth_api_versions | tr '\n' ' ') "
  for v in "${API_VERSIONS[@]}"; do
    if [ -n "$known" ] && [ "$known" != "  " ]; then case "$known" in *" $v "*) ;; *) continue ;; esac; fi
    if rest_get "/slurm/$v/ping" "$1" >/dev/null 2>&1; then
      printf '%s\n' "$v"
      return 0
    fi
  done
  return 1
}

rest_get() { # path token -> body on stdout, fails on non-2xx
  curl -fsS --max-time 5 -H "X-SLURM-USER-NAME: $TEST_USER" -H "X-SLURM-USER-TOKEN: $2" \
    "http://127.0.0.1:$REST_PORT$1"
}

node_state() { # node -> short sinfo state (idle, down*, alloc, ...)
  sinfo -h -n "$1" -N -o '%t' 2>/dev/null | head -n1
}

# Start the slurmd of node $1 (daemonizes; writes run/slurmd-$1.pid). It runs
# as root: slurmd must setuid to the job owner. OBLETH_CLUSTER_NODE lets
# node.sh find this node's slurmstepd processes (they inherit the env).
start_slurmd() {
  local n="$1"
  daemon_env OBLETH_CLUSTER_NODE="$n" slurmd -N "$n" </dev/null >>"$LOG/slurmd-$n.out" 2>&1 ||
    { tail_logs "$LOG/slurmd-$n.out" "$LOG/slurmd-$n.log"; die "slurmd -N $n failed to start"; }
}

# Start slurmctld (daemonizes; writes run/slurmctld.pid) on the state dir as it is: jobs and node
# states of its last run survive (-i: ignore unreadable state files, e.g. after a SIGKILLed run).
# Used by up.sh and by ctld.sh start.
launch_slurmctld() {
  daemon_env slurmctld -i </dev/null >>"$LOG/slurmctld.out" 2>&1
}

valid_node() { # node name -> 0 if it is one of ours
  local n
  for n in "${NODES[@]}"; do [ "$n" = "$1" ] && return 0; done
  return 1
}

# Wait (bounded) until node $1 is idle; resume it once if it is responding but
# drained/down. Returns 1 on timeout.
wait_node_idle() {
  local n="$1" limit="$2" start s resumed=0
  start=$SECONDS
  while :; do
    s="$(node_state "$n")"
    case "$s" in
      idle) return 0 ;;
      drain | drng | down | fail | failg)
        if [ "$resumed" -eq 0 ]; then
          scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
          resumed=1
        fi ;;
    esac
    [ $((SECONDS - start)) -lt "$limit" ] || return 1
    sleep 1
  done
}

# Serialise up/down/node operations on this state dir (parallel `make
# cluster-up` from several test jobs). Children (up.sh -> down.sh) inherit the
# lock; daemons never see fd 9 (closed at launch).
take_lock() { # [create]: create the state dir if missing (up.sh)
  [ -z "${OBLETH_CLUSTER_LOCK_HELD:-}" ] || return 0
  command -v flock >/dev/null 2>&1 || return 0
  if [ "${1:-}" = create ]; then install -d -m 755 "$STATE"; fi
  [ -d "$STATE" ] || return 0
  exec 9>>"$STATE/.lock"
  flock -w $((TIMEOUT * 3)) 9 || die "another harness operation holds $STATE/.lock"
  export OBLETH_CLUSTER_LOCK_HELD=1
}

# ------------------------------------------------------- rooted releases ----
# Mounts that make the root a machine of its own release with this one's kernel and /tmp (specs and
# jobs share files there), and this repository at its own path. Nothing a careless `rm -rf build`
# could reach through them is this machine's: /dev is a tmpfs of its own with this machine's few
# device files bound in (an rm of them fails), /sys a read-only sysfs, and the repository is bound
# read-only except build/ (the state dirs, build/obleth). /tmp is this machine's /tmp: stop a rooted
# cluster (down.sh) before deleting its state dir by hand.
root_is_mounted() { mountpoint -q "$ROOTFS$REPO/build" && mountpoint -q "$ROOTFS/proc"; }

mount_root() {
  root_is_mounted && return 0
  unmount_root
  mount -t proc proc "$ROOTFS/proc"
  mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$ROOTFS/sys" 2>/dev/null ||
    { mount --rbind /sys "$ROOTFS/sys" && mount --make-rslave "$ROOTFS/sys" && mount -o remount,bind,ro "$ROOTFS/sys"; }
  mount -t tmpfs -o mode=755,nosuid tmpfs "$ROOTFS/dev"
  local d
  for d in null zero full random urandom tty; do
    touch "$ROOTFS/dev/$d"
    mount --bind "/dev/$d" "$ROOTFS/dev/$d"
  done
  ln -s /proc/self/fd "$ROOTFS/dev/fd"
  ln -s /proc/self/fd/0 "$ROOTFS/dev/stdin"
  ln -s /proc/self/fd/1 "$ROOTFS/dev/stdout"
  ln -s /proc/self/fd/2 "$ROOTFS/dev/stderr"
  install -d -m 755 "$ROOTFS/dev/pts"
  install -d -m 1777 "$ROOTFS/dev/shm"
  mount -t devpts -o newinstance,ptmxmode=0666 devpts "$ROOTFS/dev/pts" 2>/dev/null || mount --bind /dev/pts "$ROOTFS/dev/pts"
  ln -s pts/ptmx "$ROOTFS/dev/ptmx"
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$ROOTFS/dev/shm"
  mount --bind /tmp "$ROOTFS/tmp"
  install -d -m 755 "$ROOTFS$REPO"
  mount --bind "$REPO" "$ROOTFS$REPO"
  mount -o remount,bind,ro "$ROOTFS$REPO"
  mount --bind "$REPO/build" "$ROOTFS$REPO/build"
  # name resolution as on this machine (slurmctld resolves its own host name)
  cp /etc/hosts "$ROOTFS/etc/hosts" 2>/dev/null || true
  cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf" 2>/dev/null || true
}

unmount_root() { # everything mounted at or under the root, deepest first
  local m
  [ -d "$ROOTFS" ] || return 0
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done < <(awk -v r="$ROOTFS" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/mounts | sort -r)
}

root_mounted_anything() { awk -v r="$ROOTFS" '$2 == r || index($2, r "/") == 1 {f=1} END {exit !f}' /proc/mounts; }

# Unpack the release's root (spec/cluster/root.sh: cached tarball, made on first use) unless the one
# there is from the same tarball.
prepare_root() {
  local tarball
  tarball="$("$CLUSTER_SPEC_DIR/root.sh" tar "$RELEASE")" || die "could not make the Slurm $RELEASE root"
  if [ -d "$ROOTFS" ] && [ "$(cat "$STATE/root.from" 2>/dev/null)" = "${tarball##*/}" ]; then return 0; fi
  if [ -d "$ROOTFS" ]; then
    log "the Slurm $RELEASE root is from another package list: unpacking ${tarball##*/} afresh"
    [ -z "$(marked_pids "")" ] || "$CLUSTER_SPEC_DIR/down.sh"
    unmount_root
    ! root_mounted_anything || die "cannot unmount everything under $ROOTFS"
    rm -rf --one-file-system "$ROOTFS"
  fi
  install -d -m 755 "$STATE" "$ROOTFS"
  log "unpacking the Slurm $RELEASE root from ${tarball##*/}"
  tar -C "$ROOTFS" --numeric-owner -xf "$tarball" || die "unpacking $tarball into $ROOTFS failed"
  [ -x "$ROOTFS/usr/sbin/slurmctld" ] || die "the unpacked root $ROOTFS has no slurmctld"
  printf '%s\n' "${tarball##*/}" >"$STATE/root.from"
}

# The job users and the AllowGroups group on this machine as well as in the root: obleth serve runs
# here and reads this machine's group database for its own AllowGroups check (GroupNotAllowed), as at
# a site whose login node shares the cluster's users.
ensure_host_job_users() {
  local u
  for u in "$TEST_USER" "$OTHER_USER"; do
    id "$u" >/dev/null 2>&1 || useradd --system --create-home --home-dir "/home/$u" --shell /bin/bash \
      --comment "obleth test cluster job user" "$u"
  done
  getent group obleth-staff >/dev/null || groupadd --system obleth-staff
}

# On this machine, for a rooted release: run the calling script inside the release's root, with the
# same arguments and the harness's variables, and exit with its status. up.sh first makes and mounts
# the root; down.sh unmounts it afterwards (and purges the state dir itself: never from inside).
# A no-op for 22.05 and inside the root.
enter_root() {
  [ "$ROOTED" = 1 ] && [ "$IN_ROOT" != 1 ] || return 0
  local script self rc
  script="$(basename "$0")"
  self="$CLUSTER_SPEC_DIR/$script"
  case "$script" in
    up.sh)
      take_lock create
      ensure_host_job_users
      prepare_root
      mount_root ;;
    down.sh)
      [ -d "$ROOTFS" ] || { rm -f "$ENV_FILE"; log "no Slurm $RELEASE root: nothing to stop"; exit 0; }
      take_lock ""
      if [ -x "$ROOTFS/bin/bash" ]; then mount_root; fi ;;
    *)
      # up.sh mounts the root and down.sh unmounts it: not mounted is not up (and stays unmounted)
      root_is_mounted || die "the Slurm $RELEASE cluster is not up; run OBLETH_CLUSTER_RELEASE=$RELEASE spec/cluster/up.sh first"
      take_lock "" ;;
  esac
  local args=("$@")
  if [ "$script" = down.sh ]; then
    local a
    args=()
    for a in "$@"; do [ "$a" = --purge ] || args+=("$a"); done
  fi
  set +e
  chroot "$ROOTFS" /usr/bin/env -i PATH="$CLEAN_PATH" HOME=/root LANG=C.UTF-8 \
    OBLETH_CLUSTER_IN_ROOT=1 OBLETH_CLUSTER_RELEASE="$RELEASE" OBLETH_CLUSTER_LOCK_HELD="${OBLETH_CLUSTER_LOCK_HELD:-}" \
    OBLETH_CLUSTER_REST_PORT="$REST_PORT" OBLETH_CLUSTER_CTLD_PORT="$CTLD_PORT" OBLETH_CLUSTER_DBD_PORT="$DBD_PORT" \
    OBLETH_CLUSTER_DB_PORT="$DB_PORT" OBLETH_CLUSTER_SLURMD_PORT_BASE="$SLURMD_PORT_BASE" \
    OBLETH_CLUSTER_TOKEN_LIFESPAN="$TOKEN_LIFESPAN" OBLETH_CLUSTER_TIMEOUT="$TIMEOUT" \
    /bin/bash "$self" "${args[@]}"
  rc=$?
  set -e
  if [ "$script" = down.sh ]; then
    unmount_root
    ! root_mounted_anything || die "could not unmount everything under $ROOTFS (see /proc/mounts)"
    if [ "$rc" -eq 0 ] && printf '%s\n' "$@" | grep -qx -- --purge; then
      log "purging $STATE"
      rm -rf --one-file-system "$STATE"
    fi
  fi
  exit "$rc"
}
