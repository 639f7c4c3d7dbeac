#!/usr/bin/env bash
# make deploy-check: the Docker Compose deployment (deploy/docker) end to end, against the harness
# Slurm cluster, with no container registry at all.
#   1. installs Debian's docker.io and docker-compose (1.29) when missing (scripts/deps.sh deploy)
#   2. starts the harness cluster (spec/cluster/up.sh; a no-op when it is up)
#   3. starts a dockerd of its own (state under build/docker, its socket there, no iptables and no
#      bridge: the containers use the host's network) and stops it on exit
#   4. imports the Debian 12 root of scripts/debian-rootfs.sh as debian:bookworm, the base the
#      Dockerfile names, so nothing is pulled
#   5. runs spec/deploy/compose_spec.lua (build, up without and with the profile "slurm", down)
# Needs root. Test traffic stays on 127.0.0.1 (host networking, obleth listening on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
die() { printf 'deploy-check: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (packages, dockerd)"
t_start=$(date +%s)

scripts/deps.sh deploy   # docker.io, docker-compose (the one package list: scripts/deps.sh)
# Debian's binaries, whatever else is on PATH
docker=/usr/bin/docker
[ -x "$docker" ] && [ -x /usr/sbin/dockerd ] && command -v docker-compose >/dev/null || die "docker.io / docker-compose missing"

make -s all >/dev/null
cluster_was_up=0
if [ -f build/cluster/env ] && spec/cluster/node.sh status >/dev/null 2>&1; then cluster_was_up=1; fi
# a cluster this check started is stopped when it ends (one that was up is left up)
stop_cluster() { [ "$cluster_was_up" = 1 ] || spec/cluster/down.sh >/dev/null 2>&1 || true; }
trap stop_cluster EXIT
spec/cluster/up.sh >build/cluster-up.log 2>&1 || { tail -20 build/cluster-up.log; die "the harness cluster did not start"; }
set -a; . build/cluster/env; set +a

dir="$root/build/docker"
mkdir -p "$dir"
sock="$dir/docker.sock"
exec_root="/run/obleth-docker-$(printf '%s' "$root" | sha256sum | cut -c1-8)"
export DOCKER_HOST="unix://$sock"
if [ -f "$dir/dockerd.pid" ] && kill -0 "$(cat "$dir/dockerd.pid")" 2>/dev/null; then
  die "a dockerd of this worktree is already running (pid $(cat "$dir/dockerd.pid")); stop it first"
fi
echo "deploy-check: starting dockerd (log: build/docker/dockerd.log)" >&2
/usr/sbin/dockerd --data-root "$dir/data" --exec-root "$exec_root" --pidfile "$dir/dockerd.pid" \
  -H "$DOCKER_HOST" --iptables=false --ip6tables=false --bridge=none --ip-masq=false \
  >"$dir/dockerd.log" 2>&1 &
dockerd_pid=$!
stop_dockerd() {
  kill -TERM "$dockerd_pid" 2>/dev/null || return 0
  for _ in $(seq 1 60); do kill -0 "$dockerd_pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -KILL "$dockerd_pid" 2>/dev/null || true
}
trap 'stop_dockerd; stop_cluster' EXIT
for _ in $(seq 1 60); do "$docker" info >/dev/null 2>&1 && break; sleep 0.5; done
"$docker" info >/dev/null 2>&1 || { tail -20 "$dir/dockerd.log"; die "dockerd did not come up"; }

if ! "$docker" image inspect debian:bookworm >/dev/null 2>&1; then
  tarball=$(scripts/debian-rootfs.sh tar)
  echo "deploy-check: docker import $tarball as debian:bookworm" >&2
  "$docker" import -c 'CMD ["/bin/bash"]' "$tarball" debian:bookworm >/dev/null
fi

status=0
build/obleth lua /usr/bin/busted -o spec/support/obleth_output.lua --lpath="$root/lua/?.lua;$root/lua/?/init.lua;$root/?.lua" \
  spec/deploy/compose_spec.lua || status=$?
echo "deploy-check: $(( $(date +%s) - t_start )) s in all" >&2
exit $status
