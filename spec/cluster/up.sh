#!/usr/bin/env bash
# Start the local Slurm test cluster (munge, MariaDB, slurmdbd, slurmctld, four
# slurmd n0-n3, slurmrestd with JWT) from Debian's packages, all state under
# $REPO/build/cluster (22.05) or $REPO/build/cluster-RELEASE (24.11, 26.05: in a
# debootstrap root of trixie / sid, see lib.sh and root.sh). Idempotent: when the
# cluster is already up and healthy only the env file is rewritten with a fresh token.
#
# Env: OBLETH_CLUSTER_RELEASE (22.05, 24.11 or 26.05; default 22.05),
# OBLETH_CLUSTER_PORT_BASE (6820: 22.05 at base+0.., 24.11 at base+20.., 26.05 at
# base+40..), overrides of single ports: OBLETH_CLUSTER_REST_PORT (+0),
# OBLETH_CLUSTER_CTLD_PORT (+1), OBLETH_CLUSTER_DBD_PORT (+2), OBLETH_CLUSTER_DB_PORT
# (+3), OBLETH_CLUSTER_SLURMD_PORT_BASE (+10: n0..n3 = base..base+3),
# OBLETH_CLUSTER_TOKEN_LIFESPAN (86400 s), OBLETH_CLUSTER_TIMEOUT (120 s per
# wait), OBLETH_CACHE_DIR (build/cache: the rooted releases' root tarballs).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
ROOT_REASON="it creates users and device nodes and starts slurmd, which must be root to run jobs as $TEST_USER"
require_root "$@"
enter_root "$@"
take_lock create

T0=$SECONDS

check_paths() {
  case "$STATE" in *[[:space:]]*) die "state dir '$STATE' contains whitespace; Slurm config cannot express that" ;; esac
  # Unix socket paths are limited to 108 bytes (slurmd's step sockets add ~20).
  if [ "${#MUNGE_SOCKET}" -ge 90 ] || [ "${#SPOOL}" -ge 80 ]; then
    die "state dir '$STATE' is too long for unix socket paths; clone the repo to a shorter path"
  fi
}

# ---------------------------------------------------------------- health ----
daemon_pids_alive() {
  local f n
  for f in "$MUNGED_PID" "$MYSQLD_PID" "$SLURMDBD_PID" "$SLURMCTLD_PID" "$SLURMRESTD_PID"; do
    pid_is_ours "$(read_pid "$f")" || return 1
  done
  for n in "${NODES[@]}"; do
    pid_is_ours "$(read_pid "$(slurmd_pid_file "$n")")" || return 1
  done
}

any_harness_process() { [ -n "$(marked_pids "")" ]; }

# What the running cluster was started from: its templates and this script (partitions, accounts,
# QoS, groups). A change to any of them restarts the cluster on the next up.sh instead of running
# the specs against the old definition.
definition_hash() {
  { cat "$CLUSTER_SPEC_DIR"/templates/* "$CLUSTER_SPEC_DIR/up.sh" "$CLUSTER_SPEC_DIR/lib.sh"
    echo "$RELEASE $REST_PORT $CTLD_PORT $DBD_PORT $DB_PORT $SLURMD_PORT_BASE"
    cat "$STATE/root.from" 2>/dev/null || true; } | sha256sum | cut -c1-16
}

healthy() {
  daemon_pids_alive || return 1
  if [ "$(cat "$STATE/definition" 2>/dev/null)" != "$(definition_hash)" ]; then
    log "the harness definition (spec/cluster/templates, up.sh) changed since the cluster started"
    return 1
  fi
  local tok
  tok="$(scontrol token username="$TEST_USER" lifespan=60 2>/dev/null)" || return 1
  rest_api_version "${tok#SLURM_JWT=}" >/dev/null
}

# ------------------------------------------------------------------ setup ----
ensure_users() {
  local u
  if [ "$ROOTED" = 1 ] && ! id "$REST_USER" >/dev/null 2>&1; then
    log "creating system user $REST_USER (slurmrestd 26.05 refuses to run as nobody)"
    useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
      --comment "slurmrestd of the obleth test cluster" "$REST_USER"
  fi
  for u in slurm munge mysql "$REST_USER"; do
    id "$u" >/dev/null 2>&1 || die "system user '$u' missing (should come with the Debian packages; run spec/cluster/deps.sh)"
  done
  if ! id "$TEST_USER" >/dev/null 2>&1; then
    log "creating system user $TEST_USER"
    useradd --system --create-home --home-dir "/home/$TEST_USER" --shell /bin/bash \
      --comment "obleth test cluster job user" "$TEST_USER"
  fi
  if ! id "$OTHER_USER" >/dev/null 2>&1; then
    log "creating system user $OTHER_USER"
    useradd --system --create-home --home-dir "/home/$OTHER_USER" --shell /bin/bash \
      --comment "obleth test cluster second job user" "$OTHER_USER"
  fi
  # AllowGroups of partition staff: a group the job user is not in
  getent group obleth-staff >/dev/null || groupadd --system obleth-staff
  local home
  for u in "$TEST_USER" "$OTHER_USER"; do
    home="$(getent passwd "$u" | cut -d: -f6)"
    [ -d "$home" ] || install -d -o "$u" -g "$(id -gn "$u")" -m 755 "$home"
  done
}

ensure_traversable() {
  # slurm, munge, mysql and obleth must be able to reach the state dir.
  local d="$STATE"
  while [ "$d" != "/" ]; do
    d="$(dirname "$d")"
    if [ -d "$d" ] && [ "$(( 0$(stat -c '%a' "$d") & 1 ))" -eq 0 ]; then
      log "chmod o+x $d (daemons and the '$TEST_USER' user must traverse it)"
      chmod o+x "$d"
    fi
  done
}

make_dirs() {
  install -d -m 755 "$REPO/build" "$STATE" "$ETC" "$SPOOL" "$DEVDIR"
  ensure_traversable
  chmod 755 "$STATE"
  install -d -m 755 -o slurm -g slurm "$RUN" "$LOG"
  install -d -m 700 -o slurm -g slurm "$SPOOL/slurmctld"
  install -d -m 755 -o munge -g munge "$MUNGE"
  install -d -m 755 -o mysql -g mysql "$MYSQL" "$MYSQL/run"
  install -d -m 700 -o mysql -g mysql "$MYSQL/data"
  local n
  for n in "${NODES[@]}"; do install -d -m 755 "$SPOOL/$n"; done
}

make_secrets() {
  if [ ! -s "$MUNGE/munge.key" ]; then
    log "creating munge key"
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile="$MUNGE/munge.key" --force
    else
      dd if=/dev/urandom of="$MUNGE/munge.key" bs=1024 count=1 status=none
    fi
  fi
  chown munge:munge "$MUNGE/munge.key"
  chmod 600 "$MUNGE/munge.key"

  if [ ! -s "$ETC/jwt_hs256.key" ]; then
    log "creating JWT HS256 key"
    dd if=/dev/urandom of="$ETC/jwt_hs256.key" bs=32 count=1 status=none
  fi
  # slurmctld and slurmdbd (both SlurmUser) read it.
  chown slurm:slurm "$ETC/jwt_hs256.key"
  chmod 600 "$ETC/jwt_hs256.key"

  if [ ! -s "$ETC/db.pass" ]; then
    (umask 077 && od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$ETC/db.pass")
  fi
  chmod 600 "$ETC/db.pass"
}

make_devices() {
  # Fake GPUs: character devices 195:N like /dev/nvidiaN (Slurm 24.x refuses
  # plain files in gres.conf File=). Falls back to plain files where mknod is
  # not permitted (fine for Slurm 22.05).
  local i f
  for i in 0 1 2 3 4 5 6 7; do
    f="$DEVDIR/nvidia$i"
    [ -c "$f" ] && continue
    rm -f "$f"
    if ! mknod -m 666 "$f" c 195 "$i" 2>/dev/null; then
      log "WARNING: mknod not permitted; using a plain file for $f"
      : >"$f"
      chmod 666 "$f"
    fi
  done
}

render() { # template out [mode owner]
  local tpl="$CLUSTER_SPEC_DIR/templates/$1" out="$2" tmp
  tmp="$out.tmp.$$"
  sed -e "s|@CTLD_HOST@|$CTLD_HOST|g" \
    -e "s|@MYSQL_EXTRA@|$MYSQL_EXTRA|g" \
    -e "s|@CTLD_PORT@|$CTLD_PORT|g" \
    -e "s|@DBD_PORT@|$DBD_PORT|g" \
    -e "s|@DB_PORT@|$DB_PORT|g" \
    -e "s|@DB_PASS@|$(cat "$ETC/db.pass")|g" \
    -e "s|@MUNGE_SOCKET@|$MUNGE_SOCKET|g" \
    -e "s|@MYSQL_SOCKET@|$MYSQL_SOCKET|g" \
    -e "s|@MYSQL@|$MYSQL|g" \
    -e "s|@ETC@|$ETC|g" \
    -e "s|@RUN@|$RUN|g" \
    -e "s|@LOG@|$LOG|g" \
    -e "s|@SPOOL@|$SPOOL|g" \
    -e "s|@DEVDIR@|$DEVDIR|g" \
    -e "s|@PORT_n0@|$SLURMD_PORT_BASE|g" \
    -e "s|@PORT_n1@|$((SLURMD_PORT_BASE + 1))|g" \
    -e "s|@PORT_n2@|$((SLURMD_PORT_BASE + 2))|g" \
    -e "s|@PORT_n3@|$((SLURMD_PORT_BASE + 3))|g" \
    "$tpl" >"$tmp"
  if grep -q '@[A-Za-z0-9_]*@' "$tmp"; then
    rm -f "$tmp"
    die "unsubstituted placeholder in $tpl"
  fi
  chmod "${3:-644}" "$tmp"
  [ -z "${4:-}" ] || chown "$4" "$tmp"
  mv -f "$tmp" "$out"
}

make_configs() {
  # slurmctld refuses to start unless SlurmctldHost names this host; the
  # address is always 127.0.0.1.
  CTLD_HOST="$(hostname -s 2>/dev/null || hostname)"
  [ -n "$CTLD_HOST" ] || die "cannot determine this host's name"
  # MariaDB 11.6 and later (trixie's and sid's 11.8) refuse slurmdbd's upgrades of its tables with
  # snapshot isolation on (its default since 11.6); older MariaDB does not know the setting.
  MYSQL_EXTRA=""
  if mariadbd --verbose --help 2>/dev/null | grep -q '^innodb-snapshot-isolation'; then
    MYSQL_EXTRA="innodb_snapshot_isolation=OFF"
  fi
  render slurm.conf.in "$ETC/slurm.conf" 644
  render gres.conf.in "$ETC/gres.conf" 644
  render slurmdbd.conf.in "$ETC/slurmdbd.conf" 600 slurm:slurm
  render my.cnf.in "$ETC/my.cnf" 644
  if [ "$ROOTED" = 1 ]; then
    # slurmd 24.11 and later load a cgroup plugin even with proctrack/linuxproc and task/none; the
    # root has no cgroup hierarchy of its own to give it
    render cgroup.conf.in "$ETC/cgroup.conf" 644
  else
    rm -f "$ETC/cgroup.conf"
  fi
}

# --------------------------------------------------------------- daemons ----
wait_for() { # description limit-seconds command...
  local what="$1" limit="$2" start=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ -n "${WATCH_WHAT:-}" ] && watched_daemon_gone; then
      # the daemon we wait for is gone: say so now, with its own words, instead of waiting out the limit
      tail_logs "${WATCH_LOGS[@]}"
      WATCH_WHAT=""
      die "$what exited during start-up (its log is above); waited $((SECONDS - start))s"
    fi
    if [ $((SECONDS - start)) -ge "$limit" ]; then
      # shellcheck disable=SC2046
      tail_logs $(all_logs)
      die "timed out after ${limit}s waiting for $what"
    fi
    sleep 0.5
  done
  WATCH_WHAT=""
}

# The next wait_for also watches a daemon and fails at once when it exits:
#   watch_daemon comm:NAME LOG...   a daemon that forks (daemon_env): a live process named NAME
#                                   that carries this harness's marker
#   watch_daemon pid:PID LOG...     a process started with spawn (its pid survives the exec)
WATCH_WHAT=""
WATCH_LOGS=()
watch_daemon() {
  WATCH_WHAT="$1"
  shift
  WATCH_LOGS=("$@")
}
watched_daemon_gone() {
  local p
  case "$WATCH_WHAT" in
    pid:*) # not pid_is_ours: the marker appears only once env has exec'd the daemon
      local pid="${WATCH_WHAT#pid:}"
      ! [ -d "/proc/$pid" ] || [ "$(proc_state "$pid")" = Z ] ;;
    comm:*)
      for p in $(pgrep -x "${WATCH_WHAT#comm:}" 2>/dev/null); do
        pid_is_ours "$p" && return 1
      done
      return 0 ;;
    *) return 1 ;;
  esac
}

munge_ok() { munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET"; }

start_munge() {
  log "starting munged"
  # Own key, socket, pid, seed and log: never touches a system munged.
  # --force: tolerate parent dirs not owned by root (fresh clones in CI).
  daemon_env setpriv --reuid=munge --regid=munge --init-groups \
    munged --force --key-file="$MUNGE/munge.key" --socket="$MUNGE_SOCKET" \
    --pid-file="$MUNGED_PID" --seed-file="$MUNGE/munged.seed" --log-file="$MUNGE/munged.log" \
    </dev/null >>"$MUNGE/munged.out" 2>&1 ||
    { tail_logs "$MUNGE/munged.out" "$MUNGE/munged.log"; die "munged failed to start"; }
  watch_daemon comm:munged "$MUNGE/munged.out" "$MUNGE/munged.log"
  wait_for "munged" "$TIMEOUT" munge_ok
}

mysql_root() { mariadb --defaults-file="$ETC/my.cnf" -uroot; }

start_mariadb() {
  if [ ! -d "$MYSQL/data/mysql" ]; then
    log "initialising MariaDB datadir"
    mariadb-install-db --defaults-file="$ETC/my.cnf" --user=mysql --datadir="$MYSQL/data" \
      --auth-root-authentication-method=socket --skip-test-db >>"$MYSQL/install.log" 2>&1 ||
      { tail_logs "$MYSQL/install.log"; die "mariadb-install-db failed"; }
  fi
  log "starting mariadbd (127.0.0.1:$DB_PORT)"
  # Started as root, switches to the mysql user (user=mysql in my.cnf).
  spawn "$MYSQL/mariadbd.out" mariadbd --defaults-file="$ETC/my.cnf"
  watch_daemon "pid:$SPAWNED_PID" "$MYSQL/mariadbd.out" "$MYSQL/mariadbd.err"
  wait_for "MariaDB" "$TIMEOUT" mariadb-admin --defaults-file="$ETC/my.cnf" -uroot ping
  local pass
  pass="$(cat "$ETC/db.pass")"
  mysql_root <<SQL || die "creating the slurm accounting database/user failed"
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL PRIVILEGES ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
}

start_slurmdbd() {
  log "starting slurmdbd (127.0.0.1:$DBD_PORT)"
  daemon_env slurmdbd </dev/null >>"$LOG/slurmdbd.out" 2>&1 ||
    { tail_logs "$LOG/slurmdbd.out" "$LOG/slurmdbd.log"; die "slurmdbd failed to start"; }
  watch_daemon comm:slurmdbd "$LOG/slurmdbd.out" "$LOG/slurmdbd.log"
  wait_for "slurmdbd" "$TIMEOUT" sacctmgr -n -P list cluster
}

sacct_has() { # list-args... ; true if `sacctmgr -n -P list ...` prints $1 as a line
  local want="$1"
  shift
  sacctmgr -n -P list "$@" 2>/dev/null | grep -qxF "$want"
}

setup_accounting() {
  log "setting up accounts, QoS and associations"
  sacct_has obleth cluster format=cluster || sacctmgr -i add cluster obleth >/dev/null
  sacct_has normal qos format=name || sacctmgr -i add qos normal >/dev/null
  sacct_has long qos format=name || sacctmgr -i add qos long >/dev/null
  sacct_has inference qos format=name || sacctmgr -i add qos inference >/dev/null
  sacct_has 2-00:00:00 qos name=long format=maxwall ||
    sacctmgr -i modify qos long set MaxWall=2-00:00:00 >/dev/null
  local a
  for a in research teaching; do
    sacct_has "$a" account name="$a" format=account ||
      sacctmgr -i add account "$a" cluster=obleth description="obleth $a" organization=obleth >/dev/null
    sacct_has "$a" assoc user="$TEST_USER" account="$a" cluster=obleth format=account ||
      sacctmgr -i add user "$TEST_USER" account="$a" cluster=obleth >/dev/null
  done
  sacct_has research assoc user="$OTHER_USER" account=research cluster=obleth format=account ||
    sacctmgr -i add user "$OTHER_USER" account=research cluster=obleth >/dev/null
  sacct_has "inference,long,normal" assoc user="$TEST_USER" account=research format=qos &&
    sacct_has "inference,long,normal" assoc user="$TEST_USER" account=teaching format=qos &&
    sacct_has "normal" assoc user="$TEST_USER" account=research format=defaultqos ||
    sacctmgr -i modify user "$TEST_USER" set qos=normal,long,inference defaultqos=normal >/dev/null || true
  sacct_has research user name="$TEST_USER" format=defaultaccount ||
    sacctmgr -i modify user "$TEST_USER" set defaultaccount=research >/dev/null || true
  # Verify instead of trusting exit codes (sacctmgr returns 1 for "nothing
  # modified").
  sacct_has research user name="$TEST_USER" format=defaultaccount || die "default account of $TEST_USER is not research"
  sacct_has research user name="$OTHER_USER" format=defaultaccount || die "default account of $OTHER_USER is not research"
  for a in research teaching; do
    sacct_has "$a|inference,long,normal|normal" assoc user="$TEST_USER" account="$a" format=account,qos,defaultqos ||
      die "association $TEST_USER/$a with QoS normal,long,inference (default normal) missing"
  done
}

start_slurmctld() {
  log "starting slurmctld (127.0.0.1:$CTLD_PORT)"
  launch_slurmctld ||
    { tail_logs "$LOG/slurmctld.out" "$LOG/slurmctld.log"; die "slurmctld failed to start"; }
  watch_daemon comm:slurmctld "$LOG/slurmctld.out" "$LOG/slurmctld.log"
  wait_for "slurmctld" "$TIMEOUT" scontrol ping
}

start_slurmds() {
  local n
  for n in "${NODES[@]}"; do
    log "starting slurmd -N $n (127.0.0.1:$((SLURMD_PORT_BASE + ${n#n})))"
    start_slurmd "$n"
  done
}

rest_ping_ok() {
  local tok
  tok="$(mint_token 60 "$TEST_USER")"
  rest_api_version "$tok"
}

start_slurmrestd() {
  log "starting slurmrestd (127.0.0.1:$REST_PORT)"
  # Not root, not SlurmUser: slurmrestd refuses both. SLURM_JWT=daemon makes
  # it use the JWT of each request. It reads slurm.conf only at start.
  spawn "$LOG/slurmrestd.log" SLURM_JWT=daemon slurmrestd -a rest_auth/jwt \
    -u "$REST_USER" -g "$REST_GROUP" "127.0.0.1:$REST_PORT"
  local pid="$SPAWNED_PID"
  echo "$pid" >"$SLURMRESTD_PID"
  watch_daemon "pid:$pid" "$LOG/slurmrestd.log"
  wait_for "slurmrestd ping on 127.0.0.1:$REST_PORT" "$TIMEOUT" rest_ping_ok
}

wait_nodes_idle() {
  local n
  for n in "${NODES[@]}"; do
    if ! wait_node_idle "$n" "$TIMEOUT"; then
      sinfo -N -o '%N %P %T %E' >&2 || true
      tail_logs "$LOG/slurmctld.log" "$LOG/slurmd-$n.log"
      die "node $n not idle after ${TIMEOUT}s"
    fi
  done
}

# ----------------------------------------------------------------- output ----
detect_api_version() {
  rest_api_version "$1" known || die "slurmrestd on port $REST_PORT answers no API version obleth knows ($(obleth_api_versions | tr '\n' ' '))"
}

write_env() {
  local tok api tmp
  tok="$(mint_token "$TOKEN_LIFESPAN" "$TEST_USER")"
  api="$(detect_api_version "$tok")"
  tmp="$ENV_FILE.tmp.$$"
  {
    echo "# Generated by spec/cluster/up.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ); token lifespan ${TOKEN_LIFESPAN}s."
    printf 'export OBLETH_SLURM_URL=%q\n' "http://127.0.0.1:$REST_PORT"
    printf 'export OBLETH_SLURM_USER=%q\n' "$TEST_USER"
    printf 'export OBLETH_SLURM_TOKEN=%q\n' "$tok"
    printf 'export OBLETH_SLURM_API_VERSION=%q\n' "$api"
    printf 'export SLURM_CONF=%q\n' "$SLURM_CONF"
    printf 'export OBLETH_CLUSTER_DIR=%q\n' "$STATE"
    printf 'export OBLETH_CLUSTER_RELEASE=%q\n' "$RELEASE"
  } >"$tmp"
  chmod 644 "$tmp"
  mv -f "$tmp" "$ENV_FILE"
  API_VERSION="$api"
}

summary() {
  echo "obleth test cluster (Slurm $(sinfo -V 2>/dev/null | awk '{print $2}')) is up ($((SECONDS - T0))s)"
  echo "  URL:        http://127.0.0.1:$REST_PORT (API $API_VERSION, user $TEST_USER)"
  echo "  env file:   $ENV_FILE"
  echo "  partitions: $(sinfo -h -o '%P(%l)' | tr '\n' ' ')"
  echo "  nodes:"
  sinfo -h -N -p gpu -o '    %N %t cpus=%c mem=%m gres=%G features=%f' | sort
}

# Inside a root, jobs run build/obleth (obleth smoke-engine): every library it links must be there.
check_obleth_runs() {
  [ "$IN_ROOT" = 1 ] && [ -x "$REPO/build/obleth" ] || return 0
  local missing
  missing="$(ldd "$REPO/build/obleth" 2>&1 | awk '/not found/ {print $1}' | tr '\n' ' ')"
  [ -z "$missing" ] || die "build/obleth needs libraries the Slurm $RELEASE root lacks: $missing(add their packages to spec/cluster/root.sh)"
}

# ------------------------------------------------------------------- main ----
main() {
  check_paths
  install -d -m 755 "$REPO/build"
  # a rooted release's packages were installed and checked when its root was made (root.sh)
  [ "$IN_ROOT" = 1 ] || "$CLUSTER_SPEC_DIR/deps.sh"
  check_obleth_runs
  if healthy; then
    log "cluster already up; refreshing $ENV_FILE"
    write_env
    summary
    return 0
  fi
  if any_harness_process; then
    log "cluster partially up or unhealthy: stopping it first"
    "$CLUSTER_SPEC_DIR/down.sh"
  fi
  ensure_users
  make_dirs
  make_secrets
  make_devices
  make_configs
  start_munge
  start_mariadb
  start_slurmdbd
  setup_accounting
  start_slurmctld
  start_slurmds
  start_slurmrestd
  wait_nodes_idle
  definition_hash >"$STATE/definition"
  printf 'REST_PORT=%s CTLD_PORT=%s DBD_PORT=%s DB_PORT=%s SLURMD_PORT_BASE=%s\n' \
    "$REST_PORT" "$CTLD_PORT" "$DBD_PORT" "$DB_PORT" "$SLURMD_PORT_BASE" >"$PORTS_FILE"
  write_env
  summary
}

main "$@"
