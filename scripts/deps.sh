#!/usr/bin/env bash
# Install obleth's dependencies from Debian's packages, then check that the files the build and the
# harness load are really there. The one list of obleth's Debian packages: spec/cluster/deps.sh and
# .ci/run call this script. A no-op (a second or so) when everything is present.
#   scripts/deps.sh build     what `make` needs (C toolchain, Lua 5.4, libraries, Node.js for the dashboard)
#   scripts/deps.sh cluster   the harness Slurm cluster (spec/cluster/): Slurm 22.05 with its JWT and
#                             MySQL plugins, slurmrestd, munge, MariaDB
#   scripts/deps.sh deploy    docker.io, docker-compose and unzip, for make deploy-check and make helm-check
#   scripts/deps.sh all       build + cluster + what `make check` and `make demo` need (busted, luacheck,
#                             tmux, Chromium for the dashboard's browser tests)
# Exit status: 0 when everything is installed and checked; 1 with a message naming the missing file
# and the package that provides it.
set -euo pipefail

build_pkgs=(build-essential pkg-config liblua5.4-dev lua5.4 libcurl4-openssl-dev lua-cjson libyaml-dev
  libevent-dev libsqlite3-dev libpq-dev libreadline-dev libsystemd-dev libssl-dev libldap-dev ca-certificates)
# slurm-wlm-jwt-plugin: auth/jwt for slurmctld, slurmdbd and slurmrestd (AuthAltTypes=auth/jwt). It is only
# a Recommends of the Slurm packages, so installs without recommends (ours, and many images') miss it.
cluster_pkgs=(slurmctld slurmd slurmdbd slurmrestd slurm-client slurm-wlm-basic-plugins
  slurm-wlm-jwt-plugin slurm-wlm-mysql-plugin munge mariadb-server curl procps util-linux)
# clang + libclang-rt-14-dev: libFuzzer with ASan/UBSan (make fuzz, and its short run in make check); bc: spec/fuzz/run.sh
# lmod: the engine specs put the stand-in engines (spec/engines) on PATH through a real module system,
# initialised by the job script the way a site's batch jobs do (spec/integration/engines_spec.lua);
# iproute2: ss, which the job script's port check uses
# postgresql-15: the store specs run on PostgreSQL too, a server each run starts from Debian's binaries
# (spec/support/pg.sh: initdb into a temp dir, pg_ctl; the package's own cluster is not used)
# haproxy: make chaos-ha puts Debian's HAProxy in front of three obleth serve on loopback, health-checking them
# (spec/chaos/ha.lua; its own config, the package's service not used)
# nginx: the trusted-proxy specs put Debian's nginx in front of obleth serve on loopback, naming the user
# in a header (spec/host/access_nginx_spec.lua; its own config and prefix, the package's service not used)
# slapd, ldap-utils: the LDAP sign-in specs start Debian's slapd on loopback with a small directory of
# their own (spec/host/access_ldap_spec.lua: slapadd into a temp dir, slapd -f; the package's service not used);
# openssl: the LDAP-over-TLS spec makes its own CA and slapd's certificate (spec/host/access_ldap_tls_spec.lua)
test_pkgs=(lua-busted lua-check tmux curl procps python3 chromium fonts-dejavu-core clang libclang-rt-14-dev bc
  lmod iproute2 postgresql-15 nginx slapd ldap-utils haproxy openssl)

# make deploy-check (Docker Compose end to end, its own dockerd) and make helm-check (Helm from npm, unzipped)
deploy_pkgs=(docker.io docker-compose unzip)

group=${1:-build}
case "$group" in
  build) want=("${build_pkgs[@]}") ;;
  cluster) want=("${cluster_pkgs[@]}") ;;
  deploy) want=("${deploy_pkgs[@]}") ;;
  all) want=("${build_pkgs[@]}" "${cluster_pkgs[@]}" "${test_pkgs[@]}") ;;
  *) echo "usage: $0 build|cluster|deploy|all" >&2; exit 2 ;;
esac

say() { printf 'deps: %s\n' "$*" >&2; }

# Node.js builds the dashboard (esbuild) and runs its tests. A Node.js that is already there (for
# example NodeSource's) is used as it is: Debian's nodejs/npm packages would conflict with it.
need_node=0
if [ "$group" != cluster ] && [ "$group" != deploy ] && ! { command -v node >/dev/null && command -v npm >/dev/null; }; then
  need_node=1
  want+=(nodejs npm)
fi

installed() { [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = installed ]; }

missing=()
for p in "${want[@]}"; do installed "$p" || missing+=("$p"); done

if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    say "need root to install packages: sudo $0 $group"
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Keep the packages' maintainer scripts from starting the system's munged, MariaDB and Slurm daemons
  # (the harness runs its own, on its own ports); only when no policy is in place already.
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary, from obleth scripts/deps.sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  # postgresql-15 would create (and start, on 5432) a "main" cluster: the specs start their own
  conf=/etc/postgresql-common/createcluster.conf
  if [[ " ${missing[*]} " == *" postgresql-15 "* ]] && ! grep -qs '^create_main_cluster' "$conf"; then
    mkdir -p "$(dirname "$conf")"
    echo "create_main_cluster = false # obleth scripts/deps.sh: the specs start their own" >>"$conf"
  fi
  # The package lists may be stale or absent on a fresh machine: update once, only when needed.
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null || { say "apt-get update failed"; exit 1; }
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
      { say "apt-get install failed for: ${missing[*]}"; exit 1; }
  fi
fi

# ---- check what the build and the harness load -------------------------------------------------
problems=()
need_cmd() { # command package
  command -v "$1" >/dev/null 2>&1 || problems+=("command $1 is missing (Debian package $2)")
}
need_file() { # path package
  [ -e "$1" ] || problems+=("$1 is missing (Debian package $2)")
}

if [ "$group" = deploy ]; then
  need_cmd docker docker.io
  need_cmd dockerd docker.io
  need_cmd docker-compose docker-compose
  need_cmd unzip unzip
fi

if [ "$group" = build ] || [ "$group" = all ]; then
  need_cmd cc build-essential
  need_cmd pkg-config pkg-config
  need_cmd lua5.4 lua5.4
  for pc in lua5.4 libevent libcurl yaml-0.1 libsystemd sqlite3 libcrypto libssl libpq ldap; do
    pkg-config --exists "$pc" 2>/dev/null || problems+=("pkg-config cannot find $pc (see scripts/deps.sh build)")
  done
  lua5.4 -e 'require "cjson"' 2>/dev/null || problems+=("Lua 5.4 cannot load cjson (Debian package lua-cjson)")
  need_cmd node nodejs
  need_cmd npm npm
  if command -v node >/dev/null; then
    major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
    if [ "$major" -lt 18 ]; then
      problems+=("Node.js $(node --version) is too old for the dashboard's build: 18 or newer is needed")
    elif [ "$major" -lt 20 ] && [ "$need_node" = 0 ] && [ "$group" = all ]; then
      say "note: Node.js $(node --version); the dashboard's tests are run on Node.js 20"
    fi
  fi
fi

if [ "$group" = cluster ] || [ "$group" = all ]; then
  plugindir=$(dirname "$(dpkg -L slurm-wlm-basic-plugins 2>/dev/null | grep -m1 '/auth_munge\.so$' || echo /usr/lib/none/x)")
  [ -d "$plugindir" ] || plugindir=/usr/lib/$(uname -m)-linux-gnu/slurm-wlm
  need_file "$plugindir/auth_jwt.so" slurm-wlm-jwt-plugin          # slurmctld, slurmdbd, slurmrestd
  need_file "$plugindir/auth_munge.so" slurm-wlm-basic-plugins
  need_file "$plugindir/accounting_storage_mysql.so" slurm-wlm-mysql-plugin   # slurmdbd
  need_file "$plugindir/rest_auth_jwt.so" slurm-wlm-basic-plugins  # slurmrestd -a rest_auth/jwt
  need_file "$plugindir/openapi_v0_0_38.so" slurm-wlm-basic-plugins
  need_file "$plugindir/openapi_dbv0_0_38.so" slurm-wlm-basic-plugins
  need_file "$plugindir/serializer_json.so" slurm-wlm-basic-plugins
  for c in slurmctld:slurmctld slurmd:slurmd slurmdbd:slurmdbd slurmrestd:slurmrestd sbatch:slurm-client \
    scontrol:slurm-client sacctmgr:slurm-client sinfo:slurm-client munged:munge mariadbd:mariadb-server \
    mariadb-install-db:mariadb-server curl:curl setpriv:util-linux flock:util-linux ps:procps; do
    need_cmd "${c%%:*}" "${c#*:}"
  done
fi

if [ "$group" = all ]; then
  need_cmd busted lua-busted
  need_cmd luacheck lua-check
  need_cmd tmux tmux
  need_file /usr/bin/chromium chromium
  need_cmd clang clang
  need_cmd bc bc
  need_file /usr/lib/postgresql/15/bin/initdb postgresql-15
  need_file /usr/sbin/slapd slapd
  need_cmd slapadd slapd
  need_cmd ldapsearch ldap-utils
  need_cmd openssl openssl
  [ -n "$(find /usr/lib/llvm-14/lib/clang -name 'libclang_rt.fuzzer-*.a' -print -quit 2>/dev/null)" ] ||
    problems+=("clang's libFuzzer runtime is missing (Debian package libclang-rt-14-dev)")
fi

if [ ${#problems[@]} -gt 0 ]; then
  for p in "${problems[@]}"; do say "$p"; done
  say "install the packages named above (as root: apt-get install <package>), or rerun $0 $group as root"
  exit 1
fi
