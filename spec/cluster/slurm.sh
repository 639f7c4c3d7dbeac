#!/usr/bin/env bash
# Run one Slurm client command against the harness cluster, as root or as another user:
#   spec/cluster/slurm.sh [--as USER] COMMAND ARGS...
# COMMAND is one of Slurm's clients (scontrol, sinfo, squeue, sacct, sacctmgr, scancel, sbatch,
# sprio, sshare, sdiag). For 24.11 and 26.05 it runs inside the release's root (this machine's
# Slurm 22.05 clients cannot talk to them); which cluster: OBLETH_CLUSTER_RELEASE, else the one whose
# env file was sourced (OBLETH_CLUSTER_DIR), else 22.05.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
ROOT_REASON="the clients read the harness's slurm.conf as root"
require_root "$@"
enter_root "$@"
as=""
if [ "${1:-}" = --as ]; then as="${2:?--as needs a user}"; shift 2; fi
case "${1:-}" in
  scontrol | sinfo | squeue | sacct | sacctmgr | scancel | sbatch | sprio | sshare | sdiag) ;;
  *) die "usage: $0 [--as USER] scontrol|sinfo|squeue|sacct|sacctmgr|scancel|sbatch|sprio|sshare|sdiag ARGS..." ;;
esac
[ -r "$SLURM_CONF" ] || die "no cluster config at $SLURM_CONF; run spec/cluster/up.sh first"
if [ -n "$as" ]; then
  id "$as" >/dev/null 2>&1 || die "no user $as on the Slurm $RELEASE cluster"
  cd /
  exec setpriv --reuid="$as" --regid="$(id -g "$as")" --init-groups env SLURM_CONF="$SLURM_CONF" "$@"
fi
exec env SLURM_CONF="$SLURM_CONF" "$@"
