#!/usr/bin/env bash
# Stop the local Slurm test cluster started by up.sh: only processes this
# harness started, found by their pid files and verified by the
# OBLETH_CLUSTER_DAEMON marker in their environment (SIGTERM, wait, SIGKILL).
# Idempotent. Keeps build/cluster (logs, accounting DB) unless --purge.
#
# Jobs still queued or running are cancelled first: the state dir is kept, and
# leftover jobs would otherwise come back (or pend forever) on the next up.sh.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

purge=0
for a in "$@"; do
  case "$a" in
    --purge) purge=1 ;;
    -h | --help) echo "usage: $0 [--purge]"; exit 0 ;;
    *) die "unknown argument '$a' (usage: $0 [--purge])" ;;
  esac
done
ROOT_REASON="it signals daemons running as root, slurm, mysql and munge"
require_root "$@"
enter_root "$@"
take_lock ""

cancel_jobs() {
  pid_is_ours "$(read_pid "$SLURMCTLD_PID")" || return 0
  [ -r "$SLURM_CONF" ] || return 0
  local ids i
  ids="$(timeout 10 squeue -h -o '%i' 2>/dev/null | tr '\n' ' ')" || return 0
  [ -n "${ids// /}" ] || return 0
  log "cancelling jobs: $ids"
  # shellcheck disable=SC2086
  timeout 10 scancel $ids 2>/dev/null || true
  for ((i = 0; i < 20; i++)); do
    [ -z "$(timeout 5 squeue -h -o '%i' 2>/dev/null)" ] && return 0
    sleep 0.5
  done
}

stop_node_procs() { # slurmds, their slurmstepds and the jobs' processes
  local n pids=() stepds
  for n in "${NODES[@]}"; do
    local pid
    pid="$(read_pid "$(slurmd_pid_file "$n")")"
    if [ -n "$pid" ] && pid_is_ours "$pid"; then pids+=("$pid"); fi
  done
  mapfile -t stepds < <(marked_pids "" | while read -r p; do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "slurmstepd" ] && echo "$p"; done)
  if [ "${#pids[@]}" -gt 0 ] || [ "${#stepds[@]}" -gt 0 ]; then
    local jobs=()
    if [ "${#stepds[@]}" -gt 0 ]; then mapfile -t jobs < <(descendants "${stepds[@]}"); fi
    log "stopping slurmd (${pids[*]:-none}), slurmstepd (${stepds[*]:-none}), job processes (${jobs[*]:-none})"
    terminate_pids 10 "${pids[@]}" "${stepds[@]}" "${jobs[@]}"
  fi
  for n in "${NODES[@]}"; do rm -f "$(slurmd_pid_file "$n")"; done
}

if [ -d "$STATE" ]; then
  cancel_jobs
  stop_by_pidfile "$SLURMRESTD_PID" slurmrestd 10
  stop_node_procs
  stop_by_pidfile "$SLURMCTLD_PID" slurmctld 20
  stop_by_pidfile "$SLURMDBD_PID" slurmdbd 20
  stop_by_pidfile "$MYSQLD_PID" mariadbd 60
  stop_by_pidfile "$MUNGED_PID" munged 10

  # Anything of ours whose pid file was lost (crashed run, deleted run dir).
  mapfile -t left < <(marked_pids "")
  if [ "${#left[@]}" -gt 0 ]; then
    mapfile -t kids < <(descendants "${left[@]}")
    log "stopping leftover harness processes: ${left[*]} ${kids[*]:-}"
    terminate_pids 10 "${left[@]}" "${kids[@]}"
  fi
  wait_reaped
  [ -z "$(marked_pids "")" ] || die "harness processes still running: $(marked_pids "" | tr '\n' ' ')"
fi

# The env file describes a running cluster (URL, token): remove it.
rm -f "$ENV_FILE"

if [ "$purge" -eq 1 ] && [ -d "$STATE" ]; then
  case "$STATE" in */build/cluster) ;; *) die "refusing to purge unexpected path $STATE" ;; esac
  log "purging $STATE"
  rm -rf "$STATE"
fi
log "cluster down"
