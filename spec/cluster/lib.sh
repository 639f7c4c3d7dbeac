# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts
# Shared helpers for the local Slurm test cluster harness (spec/cluster/*.sh).
# Sourced, never executed. Callers set `set -euo pipefail` themselves.
#
# Everything lives under $REPO/build/cluster (REPO derived from this file's
# location, so a fresh clone anywhere works). Nothing here touches the system
# Slurm/munge/MariaDB configuration: every daemon gets SLURM_CONF (or its own
# config/socket flags) pointing into the state dir.

CLUSTER_SPEC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$CLUSTER_SPEC_DIR/../.." && pwd)"
STATE="$REPO/build/cluster"

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
# slurmrestd refuses root and SlurmUser (and their groups); it only needs to
# read slurm.conf and talk to slurmctld/slurmdbd with the callers' JWTs.
REST_USER="nobody"
REST_GROUP="nogroup"

# Ports (all bound to 127.0.0.1). Deliberately not Slurm's defaults (6817/
# 6818/6819) for the internal daemons, so a system Slurm on the same machine
# does not collide. Each can be overridden from the environment.
REST_PORT="${OBLETH_CLUSTER_REST_PORT:-6820}"
CTLD_PORT="${OBLETH_CLUSTER_CTLD_PORT:-6821}"
DBD_PORT="${OBLETH_CLUSTER_DBD_PORT:-6822}"
DB_PORT="${OBLETH_CLUSTER_DB_PORT:-6823}"
SLURMD_PORT_BASE="${OBLETH_CLUSTER_SLURMD_PORT_BASE:-6830}" # n0=base, n1=base+1, ...

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

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }

# Re-exec the calling script as root via non-interactive sudo when needed.
# Root is required: creating users, mknod for the fake GPU devices, chown of
# daemon dirs, and slurmd itself must run as root to start jobs as `obleth`.
require_root() {
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      exec sudo -n --preserve-env=OBLETH_CLUSTER_REST_PORT,OBLETH_CLUSTER_CTLD_PORT,OBLETH_CLUSTER_DBD_PORT,OBLETH_CLUSTER_DB_PORT,OBLETH_CLUSTER_SLURMD_PORT_BASE,OBLETH_CLUSTER_TOKEN_LIFESPAN,OBLETH_CLUSTER_TIMEOUT \
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

API_VERSIONS=(v0.0.44 v0.0.43 v0.0.42 v0.0.41 v0.0.40 v0.0.39 v0.0.38 v0.0.37 v0.0.36)

# Print the newest API version whose ping answers with token $1; fail if none.
rest_api_version() {
  local v
  for v in "${API_VERSIONS[@]}"; do
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
