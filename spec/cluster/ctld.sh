#!/usr/bin/env bash
# Stop or restart only the controller of the local test cluster, for outage specs: slurmd,
# slurmrestd and slurmdbd keep running, and jobs keep running on their nodes.
#   ctld.sh stop     SIGTERM slurmctld (it saves its state), wait until it is gone
#   ctld.sh start    start slurmctld on the same state dir (the jobs it knew come back), wait
#                    until `scontrol ping` answers
#   ctld.sh status   "up" or "down"
# While slurmctld is down, slurmrestd still answers, with errors (HTTP 500 after about
# MessageTimeout), and a job that ends on a node is reported by its slurmstepd when the
# controller is back (slurmstepd retries the completion every 15 s).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

usage() { echo "usage: $0 stop | start | status" >&2; exit 2; }
[ "$#" -eq 1 ] || usage
ROOT_REASON="slurmctld runs as SlurmUser and reads root-owned state"
require_root "$@"
enter_root "$@"
take_lock ""
[ -r "$SLURM_CONF" ] || die "no cluster config at $SLURM_CONF; run spec/cluster/up.sh first"

ctld_up() { pid_is_ours "$(read_pid "$SLURMCTLD_PID")"; }

case "$1" in
  stop)
    if ctld_up; then
      stop_by_pidfile "$SLURMCTLD_PID" slurmctld 20
      wait_reaped
    else
      log "slurmctld was not running"
    fi
    ;;
  start)
    if ctld_up; then
      log "slurmctld already running (pid $(read_pid "$SLURMCTLD_PID"))"
    else
      log "starting slurmctld (127.0.0.1:$CTLD_PORT)"
      launch_slurmctld || { tail_logs "$LOG/slurmctld.out" "$LOG/slurmctld.log"; die "slurmctld failed to start"; }
    fi
    start=$SECONDS
    until scontrol ping >/dev/null 2>&1; do
      if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then
        tail_logs "$LOG/slurmctld.log"
        die "slurmctld does not answer ping after ${TIMEOUT}s"
      fi
      sleep 0.2
    done
    log "slurmctld is up"
    ;;
  status)
    if ctld_up; then echo up; else echo down; fi
    ;;
  *) usage ;;
esac
