#!/usr/bin/env bash
# A real one-node SLURM cluster on localhost (munge, MariaDB, slurmdbd, slurmctld, slurmd) for the
# profile tests. Debian 12, root, no systemd. Usage: local-cluster.sh start|stop|status
#
# start  installs missing Debian packages, writes the configs (before any SLURM command runs), starts
#        only the daemons that are not running, waits until the node is idle; idempotent.
# stop   cancels jobs, ends exactly the daemons this script started (pid files in $STATE) and removes
#        the SLURM configs it wrote: a client configured for a controller that no longer runs makes
#        every `scontrol` wait ~10 s, and the SLURM executor plugin calls it whenever snakemake starts.
# The node declares at least $MIN_CPUS CPUs whatever the machine has (SlurmdParameters=config_overrides),
# so the default config's 3-rank experiments fit on a 2-core machine, oversubscribed as they are
# by a local `make run`. It talks to nothing but localhost.
set -euo pipefail

STATE=/run/mpinet-slurm
CONF=/etc/slurm
LOGS=/var/log/slurm
ACCOUNT=ci
MIN_CPUS=4
PACKAGES=(munge slurm-wlm slurmdbd mariadb-server libpmix-dev)
DB_PASS_FILE=$STATE/db-password

log() { printf '[local-cluster %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts daemons)"; }

alive() { # alive NAME: the daemon recorded in $STATE/NAME.pid runs (and is still that program)
  local f=$STATE/$1.pid pid
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  [ -d "/proc/$pid" ] && grep -q "$2" "/proc/$pid/comm" 2>/dev/null
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2
  shift 2
  for _ in $(seq $((limit * 4))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  die "timed out after ${limit}s waiting for $what"
}

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  # package scripts would start services; without systemd we start them ourselves
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' RETURN
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

host_prerequisites() {
  grep -qw "$(hostname)" /etc/hosts || echo "127.0.0.1 $(hostname)" >>/etc/hosts
  if ! mountpoint -q /sys/fs/cgroup; then # slurmd 22.05 needs a cgroup hierarchy even with task/none
    mount -t tmpfs -o mode=755 cgroup_root /sys/fs/cgroup
    mkdir -p /sys/fs/cgroup/systemd
    mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
  fi
  mkdir -p "$STATE" /var/spool/slurmctld /var/spool/slurmd "$LOGS"
}

write_configs() {
  local cpus mem_mb
  cpus=$(nproc)
  [ "$cpus" -ge "$MIN_CPUS" ] || cpus=$MIN_CPUS
  mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  [ -s "$DB_PASS_FILE" ] || (umask 077 && head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$DB_PASS_FILE")
  mkdir -p "$CONF"
  cat >"$CONF/slurm.conf.new" <<CONFEOF
# Written by mpinet's tests/slurm/local-cluster.sh: one node, this machine's memory, at least $MIN_CPUS CPUs.
ClusterName=localcluster
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=pmi2
ReturnToService=2
EnforcePartLimits=ALL
MinJobAge=300
KillOnBadExit=1
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageEnforce=associations
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
AccountingStoreFlags=job_comment
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=500
CONFEOF
  if cmp -s "$CONF/slurm.conf.new" "$CONF/slurm.conf"; then
    rm "$CONF/slurm.conf.new"
  else
    mv "$CONF/slurm.conf.new" "$CONF/slurm.conf"
    CONFIG_CHANGED=1
  fi
  (
    umask 077
    cat >"$CONF/slurmdbd.conf" <<DBDEOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$(cat "$DB_PASS_FILE")
StorageLoc=slurm_acct_db
LogFile=$LOGS/slurmdbd.log
PidFile=$STATE/slurmdbd.pid
DebugLevel=info
DBDEOF
  )
  chmod 600 "$CONF/slurmdbd.conf"
  touch "$STATE/wrote-slurm.conf" "$STATE/wrote-slurmdbd.conf"
}

start_munge() {
  alive munged munged && return 0
  [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
  chown -R munge:munge /etc/munge && chmod 700 /etc/munge && chmod 400 /etc/munge/munge.key
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
  wait_for 20 "munged" bash -c 'munge -n | unmunge'
  cp /run/munge/munged.pid "$STATE/munged.pid"
}

start_mariadb() {
  alive mariadbd mariadbd && return 0
  install -d -o mysql -g mysql /run/mysqld
  [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --skip-test-db >/dev/null
  setsid -f mariadbd --user=mysql --bind-address=127.0.0.1 --pid-file=/run/mysqld/mysqld.pid \
    >>"$LOGS/mariadbd.log" 2>&1
  wait_for 60 "MariaDB" mariadb-admin ping
  cp /run/mysqld/mysqld.pid "$STATE/mariadbd.pid"
  mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$(cat "$DB_PASS_FILE")';
              ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$(cat "$DB_PASS_FILE")';
              GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
}

start_slurmdbd() {
  alive slurmdbd slurmdbd && return 0
  slurmdbd
  wait_for 30 "slurmdbd on port 6819" bash -c 'exec 3<>/dev/tcp/127.0.0.1/6819'
}

start_slurm() {
  if [ "${CONFIG_CHANGED:-0}" = 1 ]; then # restart our own daemons so they read the new config
    for name in slurmd slurmctld; do
      alive "$name" "$name" && stop_daemon "$name"
    done
  fi
  if ! alive slurmctld slurmctld; then
    slurmctld
    wait_for 30 "slurmctld" scontrol ping
  fi
  if ! alive slurmd slurmd; then
    slurmd -N localhost
  fi
  wait_for 30 "the cluster in the accounting database" bash -c \
    'sacctmgr -n -P list cluster format=cluster | grep -qx localcluster'
  sacctmgr -i -Q add account "$ACCOUNT" >/dev/null 2>&1 || true
  sacctmgr -i -Q add user root account="$ACCOUNT" >/dev/null 2>&1 || true
  local state
  state=$(sinfo -h -n localhost -o %T 2>/dev/null || true)
  case "$state" in down* | drain* | fail*) scontrol update NodeName=localhost State=RESUME ;; esac
  wait_for 60 "node localhost to be idle" bash -c 'sinfo -h -n localhost -o %T | grep -Eq "^(idle|mixed|allocated)"'
}

cmd_start() {
  need_root
  local t0=$SECONDS
  install_packages
  host_prerequisites
  write_configs
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurm
  [ "$(timeout 60 srun -N1 -n 2 --mpi=none hostname | wc -l)" = 2 ] || die "smoke test: srun -n 2 did not start 2 tasks"
  log "cluster up in $((SECONDS - t0))s: partition debug, account $ACCOUNT, $(sinfo -h -o %c) CPUs declared on $(nproc) cores, MpiDefault=pmi2"
}

cmd_stop() {
  need_root
  if alive slurmctld slurmctld; then
    squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null || true
  fi
  for name in slurmd slurmctld slurmdbd mariadbd munged; do
    if alive "$name" "${name%d}"; then stop_daemon "$name"; else rm -f "$STATE/$name.pid"; fi
  done
  for f in slurm.conf slurmdbd.conf; do
    if grep -qs "mpinet" "$CONF/$f" || [ -e "$STATE/wrote-$f" ]; then rm -f "$CONF/$f" "$STATE/wrote-$f"; fi
  done
}

stop_daemon() { # TERM the recorded pid, KILL after 10 s
  local pid
  pid=$(cat "$STATE/$1.pid")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 40); do [ -d "/proc/$pid" ] || break; sleep 0.25; done
  if [ -d "/proc/$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$STATE/$1.pid"
  log "stopped $1 ($pid)"
}

cmd_status() {
  local ok=0
  for name in munged mariadbd slurmdbd slurmctld slurmd; do
    if alive "$name" "${name%d}"; then echo "$name: running ($(cat "$STATE/$name.pid"))"; else echo "$name: stopped"; ok=1; fi
  done
  [ $ok = 0 ] && sinfo -h -o "partition %P: %D node(s) %T" 2>/dev/null
  return $ok
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
