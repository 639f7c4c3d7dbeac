#!/usr/bin/env bash
# Fail or restore one node of the local test cluster.
#   node.sh stop nX [reason]  kill nX's slurmd, its slurmstepds and their job
#                             processes (SIGKILL: a crash, not a shutdown) and
#                             mark it DOWN, so jobs on it end as NODE_FAIL
#   node.sh start nX          restart nX's slurmd, resume it, wait until idle
#   node.sh status [nX]       print node state(s)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

usage() { echo "usage: $0 stop <n0|n1|n2|n3> [reason] | start <n0|n1|n2|n3> | status [node]" >&2; exit 2; }
[ "$#" -ge 1 ] || usage
cmd="$1"
node="${2:-}"
ROOT_REASON="slurmd runs as root"
require_root "$@"
enter_root "$@"
take_lock ""
[ -r "$SLURM_CONF" ] || die "no cluster config at $SLURM_CONF; run spec/cluster/up.sh first"
pid_is_ours "$(read_pid "$SLURMCTLD_PID")" || die "slurmctld is not running; run spec/cluster/up.sh first"

case "$cmd" in
  stop)
    valid_node "$node" || usage
    reason="${3:-node.sh stop (simulated node failure)}"
    pidf="$(slurmd_pid_file "$node")"
    pid="$(read_pid "$pidf")"
    victims=()
    if [ -n "$pid" ] && pid_is_ours "$pid"; then victims+=("$pid"); fi
    mapfile -t stepds < <(marked_pids "OBLETH_CLUSTER_NODE=$node" | while read -r p; do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "slurmstepd" ] && echo "$p"; done)
    if [ "${#stepds[@]}" -gt 0 ]; then
      mapfile -t jobs < <(descendants "${stepds[@]}")
      victims+=("${stepds[@]}" "${jobs[@]}")
    fi
    if [ "${#victims[@]}" -gt 0 ]; then
      log "killing $node: slurmd ${pid:-none}, slurmstepd/job pids ${victims[*]:1}"
      kill -KILL "${victims[@]}" 2>/dev/null || true
    else
      log "slurmd of $node was not running"
    fi
    rm -f "$pidf"
    scontrol update nodename="$node" state=down reason="$reason" ||
      die "scontrol update nodename=$node state=down failed"
    log "$node is $(node_state "$node")"
    ;;
  start)
    valid_node "$node" || usage
    pid="$(read_pid "$(slurmd_pid_file "$node")")"
    if [ -n "$pid" ] && pid_is_ours "$pid"; then
      log "slurmd of $node already running (pid $pid)"
    else
      log "starting slurmd -N $node"
      start_slurmd "$node"
    fi
    # With ReturnToService=2 the node usually returns by itself on
    # registration; resume anyway (an error just means it is not down).
    scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
    if ! wait_node_idle "$node" "$TIMEOUT"; then
      tail_logs "$LOG/slurmd-$node.log" "$LOG/slurmctld.log"
      die "$node not idle after ${TIMEOUT}s (state: $(node_state "$node"))"
    fi
    log "$node is idle"
    ;;
  status)
    if [ -n "$node" ]; then node_state "$node"; else sinfo -N -o '%N %P %T %E'; fi
    ;;
  *) usage ;;
esac
