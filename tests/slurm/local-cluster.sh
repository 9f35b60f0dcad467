#!/usr/bin/env bash
# A real SLURM cluster on this machine (munge, MariaDB, slurmdbd, slurmctld, slurmd) for the profile
# tests. Debian 12, root, no systemd. Usage: local-cluster.sh start [--nodes N] | stop | status
#
# start        one compute node, `localhost`, beside the controller: partition `debug`.
# start --nodes N (N >= 2)  `localhost` (partition `debug`, the default) and N more compute nodes
#        node1..nodeN (partition `nodes`): a heterogeneous cluster, and two partitions on which
#        the tests run at once. Each of node1..nodeN is its own network namespace
#        (mpinet-nodeI) with its own address on a bridge ($BRIDGE, $SUBNET.0/24, the controller at
#        $SUBNET.1), its own hostname (UTS namespace) and its own slurmd: separate hosts as far as
#        SLURM and MPI can tell, on one kernel. Node names resolve through lines marked "$MARK" in
#        /etc/hosts. Traffic stays on the bridge and the namespaces this script creates.
#        Either form installs missing Debian packages, writes the configs (before any SLURM command
#        runs), starts only what is not running, waits until the nodes are idle; idempotent. Starting
#        with another node count tears the old compute nodes down first.
# stop   cancels jobs, ends exactly the daemons this script started (pid files in $STATE), removes the
#        namespaces, the bridge, the hosts lines and the SLURM configs it wrote: a client configured
#        for a controller that no longer runs makes every `scontrol` wait ~10 s, and the SLURM
#        executor plugin calls it whenever snakemake starts.
# Every node declares CPUs whatever the machine has (SlurmdParameters=config_overrides: slurmd reports
# the configured CPUs and memory instead of the detected ones, and no node is drained for having less
# hardware than declared): localhost declares at least $MIN_CPUS CPUs so the default config's 3-rank
# experiments fit on a 2-core machine; node1..nodeN declare $NODE_CPUS CPUs each; all share the real
# memory (declared twice over: localhost all of it, node1..N a share each) and cores: oversubscribed,
# as a local `make run` is.
set -euo pipefail

STATE=/run/mpinet-slurm
CONF=/etc/slurm
LOGS=/var/log/slurm
ACCOUNT=ci
MIN_CPUS=4
NODE_CPUS=2
PACKAGES=(munge slurm-wlm slurmdbd mariadb-server libpmix-dev iproute2 util-linux)
BRIDGE=mpinet-br0
SUBNET=10.213.7
MARK="# mpinet local-cluster"
# Each node's own temporary directory (TmpFS; a tmpfs mounted only in the node's mount namespace):
# srun --mpi=pmix makes per-step directories there, which collide when nodes share /tmp.
NODE_TMP=/var/tmp/mpinet-node-tmp
# Tasks on several nodes use MPICH's OFI netmod (libfabric's tcp provider) instead of the PyPI
# wheel's default UCX: UCX business cards are ~9 KB, MPICH sends them through PMI-1 "put" requests,
# and SLURM 22.05's pmi2 plugin here now and then reads such a request in two pieces ("mpi/pmi2: value
# not properly terminated in client request"), so MPI_Init fails in about half of the jobs whose
# srun runs on a compute node. OFI's addresses are a few bytes. README: "Across nodes".
TASK_PROLOG='#!/bin/sh
echo export MPIR_CVAR_CH4_NETMOD=ofi
echo export FI_PROVIDER=tcp'
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
    grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" || missing+=("$p")
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
  mount_cgroup
  mkdir -p "$STATE" /var/spool/slurmctld /var/spool/slurmd "$LOGS"
}

mount_cgroup() { # cgroup v1 hierarchies for slurmd: a named one it needs anyway, and cpuset (task/cgroup)
  if ! mountpoint -q /sys/fs/cgroup; then
    mount -t tmpfs -o mode=755 cgroup_root /sys/fs/cgroup
    mkdir -p /sys/fs/cgroup/systemd
    mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
  fi
  if ! mountpoint -q /sys/fs/cgroup/cpuset; then
    mkdir -p /sys/fs/cgroup/cpuset
    mount -t cgroup -o cpuset cgroup /sys/fs/cgroup/cpuset
  fi
}

node_names() { # every compute node of a cluster started with --nodes $1
  echo localhost
  namespaced_nodes "$1"
}

namespaced_nodes() { # the compute nodes in network namespaces (partition `nodes`): none for 1
  [ "$1" = 1 ] || seq -f 'node%g' 1 "$1"
}

node_address() { # node_address NAME
  case "$1" in localhost) echo 127.0.0.1 ;; node*) echo "$SUBNET.$((10 + ${1#node}))" ;; esac
}

recorded_nodes() { # the node count the running cluster was started with (0: none)
  cat "$STATE/nodes" 2>/dev/null || echo 0
}

write_configs() { # write_configs NODES
  local nodes=$1 cpus mem_mb node_mb ctld node_lines="" name partitions
  mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  cpus=$(nproc)
  [ "$cpus" -ge "$MIN_CPUS" ] || cpus=$MIN_CPUS
  partitions="PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=500"
  if [ "$nodes" = 1 ]; then
    ctld="localhost(127.0.0.1)"
  else
    # declared, not enforced: localhost keeps the whole memory (as alone), node1..N share it
    node_mb=$((mem_mb / nodes))
    ctld="$(hostname)($SUBNET.1)" # slurmctld insists on its own hostname; the address is the bridge's
    partitions+=$'\n'"PartitionName=nodes Nodes=node[1-$nodes] MaxTime=INFINITE State=UP DefMemPerCPU=500"
  fi
  local task_prolog=""
  if [ "$nodes" -gt 1 ]; then
    # This cluster's site setting for MPI across nodes (see TASK_PROLOG): a task prolog's
    # "export" lines reach every task, whatever environment the job was submitted with.
    printf '%s\n' "$TASK_PROLOG" >"$CONF/mpinet-task-prolog.sh"
    chmod 755 "$CONF/mpinet-task-prolog.sh"
    task_prolog="TaskProlog=$CONF/mpinet-task-prolog.sh"$'\n'"TmpFS=$NODE_TMP"
    mkdir -p "$NODE_TMP"
  else
    rm -f "$CONF/mpinet-task-prolog.sh"
  fi
  for name in $(namespaced_nodes "$nodes"); do
    node_lines+="NodeName=$name NodeAddr=$(node_address "$name") CPUs=$NODE_CPUS RealMemory=$node_mb State=UNKNOWN"$'\n'
  done
  # localhost last: while slurmctld reads the node lines, a lone node named localhost answers to every
  # name (22.05's _find_node_record), so node1 after it would be a "Duplicated NodeHostName"
  node_lines+="NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN"$'\n'

  [ -s "$DB_PASS_FILE" ] || (umask 077 && head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$DB_PASS_FILE")
  mkdir -p "$CONF"
  cat >"$CONF/slurm.conf.new" <<CONFEOF
# Written by mpinet's tests/slurm/local-cluster.sh: localhost ($cpus CPUs) and $((nodes > 1 ? nodes : 0)) namespaced node(s) ($NODE_CPUS CPUs each), this machine's memory.
ClusterName=localcluster
SlurmctldHost=$ctld
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
# Tasks bound as on real sites: task/affinity pins each task to its CPUs (srun --cpus-per-task), task/cgroup
# confines each step to its cpuset (cgroup.conf). The kernel binds within the real cores: a node that
# declares 4 CPUs on 2 cores gives 2 tasks of 2 CPUs one core each.
TaskPlugin=task/affinity,task/cgroup
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
# memory and CPU sampled every second (SLURM's default: 30 s), so the tests' short steps get a MaxRSS
JobAcctGatherFrequency=task=1
JobCompType=jobcomp/none
AccountingStoreFlags=job_comment
${task_prolog}
${node_lines}${partitions}
CONFEOF
  if cmp -s "$CONF/slurm.conf.new" "$CONF/slurm.conf"; then
    rm "$CONF/slurm.conf.new"
  else
    mv "$CONF/slurm.conf.new" "$CONF/slurm.conf"
    touch "$STATE/restart" # until the daemons have read it, even if this start fails later
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
  cat >"$CONF/cgroup.conf" <<CGEOF
# Written by mpinet's tests/slurm/local-cluster.sh: cgroup v1 (what this kernel mounts), cores only.
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=yes
CGEOF
  touch "$STATE/wrote-slurm.conf" "$STATE/wrote-slurmdbd.conf" "$STATE/wrote-cgroup.conf"
}

make_network() { # make_network NODES: the bridge, one namespace per node, hosts lines; idempotent
  local nodes=$1 name ns addr
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  # grep reads a here-string, not a pipe: under pipefail `ip ... | grep -q` fails when grep exits at its
  # first match before ip has written everything (SIGPIPE), and the address was then added twice
  grep -q "inet $SUBNET.1/" <<<"$(ip addr show dev "$BRIDGE")" || ip addr add "$SUBNET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for name in $(namespaced_nodes "$nodes"); do
    ns=mpinet-$name addr=$(node_address "$name")
    grep -qw "^$ns" <<<"$(ip netns list)" || ip netns add "$ns"
    # each step only when missing: a start that stopped half-way is finished, not repeated
    ip -n "$ns" link show eth0 >/dev/null 2>&1 || ip link add "veth-$name" type veth peer name eth0 netns "$ns"
    ip link set "veth-$name" master "$BRIDGE" up
    grep -q "inet $addr/" <<<"$(ip -n "$ns" addr show dev eth0)" || ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    grep -q "^$addr $name $MARK\$" /etc/hosts || echo "$addr $name $MARK" >>/etc/hosts
  done
}

remove_network() { # namespaces (and the processes still in them), links, bridge, hosts lines
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^mpinet-node/ {print $1}'); do
    ip netns pids "$ns" | xargs -r kill -KILL 2>/dev/null || true
    wait_for 10 "the processes in $ns to end" bash -c "[ -z \"\$(ip netns pids $ns)\" ]"
    ip netns delete "$ns" # its end of the veth pair goes with it, and so the pair
    log "removed network namespace $ns"
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '$2 ~ /^veth-node/ {sub(/@.*/, "", $2); print $2}'); do
    ip link delete "$link" 2>/dev/null || true # the kernel may just be removing it with its namespace
  done
  wait_for 10 "the nodes' links to go" bash -c '! grep -q veth-node <<<"$(ip -o link show)"'
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link delete "$BRIDGE" && log "removed bridge $BRIDGE"; fi
  if grep -q "$MARK" /etc/hosts; then # in place: /etc/hosts may be a bind mount
    local kept
    kept=$(grep -v "$MARK" /etc/hosts)
    printf '%s\n' "$kept" >/etc/hosts
  fi
}

start_slurmd() { # start_slurmd NAME: the node's slurmd, in its namespace unless it is localhost
  local name=$1
  alive "slurmd-$name" slurmd && return 0
  mkdir -p "/var/spool/slurmd/$name"
  if [ "$name" = localhost ]; then
    slurmd -N localhost
  else
    # `ip netns exec` gives the node its own mount namespace and remounts /sys there, so the cgroup
    # hierarchy is mounted again; /dev/shm and TmpFS become the node's own, as on a real node
    ip netns exec "mpinet-$name" unshare --uts bash -c \
      "hostname $name; $(declare -f mount_cgroup); mount_cgroup;
       mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm;
       mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs $NODE_TMP; exec slurmd -N $name"
  fi
}

stop_compute_nodes() { # every slurmd this script started, then the namespaces
  local f
  for f in "$STATE"/slurmd-*.pid; do
    [ -e "$f" ] || continue
    f=$(basename "$f" .pid)
    if alive "$f" slurmd; then stop_daemon "$f"; else rm -f "$STATE/$f.pid"; fi
  done
  remove_network
  rm -f "$STATE/nodes"
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

start_slurm() { # start_slurm NODES
  local nodes=$1 names name state
  names=$(node_names "$nodes")
  if [ -e "$STATE/restart" ]; then # restart our own daemons so they read the new config
    for name in $names; do
      if alive "slurmd-$name" slurmd; then stop_daemon "slurmd-$name"; fi
    done
    if alive slurmctld slurmctld; then stop_daemon slurmctld; fi
    rm "$STATE/restart"
  fi
  if ! alive slurmctld slurmctld; then
    slurmctld
    wait_for 30 "slurmctld" scontrol ping
  fi
  for name in $names; do start_slurmd "$name"; done
  echo "$nodes" >"$STATE/nodes"
  wait_for 30 "the cluster in the accounting database" bash -c \
    'grep -qx localcluster <<<"$(sacctmgr -n -P list cluster format=cluster)"'
  sacctmgr -i -Q add account "$ACCOUNT" >/dev/null 2>&1 || true
  sacctmgr -i -Q add user root account="$ACCOUNT" >/dev/null 2>&1 || true
  for name in $names; do
    state=$(sinfo -h -n "$name" -o %T 2>/dev/null || true)
    case "$state" in down* | drain* | fail*) scontrol update NodeName="$name" State=RESUME ;; esac
    wait_for 60 "node $name to be idle" bash -c "grep -Eq '^(idle|mixed|allocated)' <<<\"\$(sinfo -h -n $name -o %T)\""
  done
}

cmd_start() {
  need_root
  local nodes=1 t0=$SECONDS
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) nodes=${2:-} && shift 2 ;;
      --nodes=*) nodes=${1#--nodes=} && shift ;;
      *) die "start: unknown option '$1' (expected --nodes N)" ;;
    esac
  done
  [[ "$nodes" =~ ^[1-9][0-9]?$ ]] || die "start --nodes: expected a node count from 1 to 99, got '$nodes'"
  install_packages
  host_prerequisites
  if [ "$(recorded_nodes)" != "$nodes" ] && [ "$(recorded_nodes)" != 0 ]; then
    log "switching from $(recorded_nodes) to $nodes node(s)"
    alive slurmctld slurmctld && { squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null || true; }
    stop_compute_nodes
  fi
  [ -e "$STATE/slurmd.pid" ] && alive slurmd slurmd && stop_daemon slurmd # left by an older version of this script
  write_configs "$nodes"
  [ "$nodes" = 1 ] || make_network "$nodes"
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurm "$nodes"
  [ "$(timeout 60 srun -N1 -n 2 --mpi=none hostname | wc -l)" = 2 ] || die "smoke test: srun -n 2 did not start 2 tasks"
  if [ "$nodes" -gt 1 ]; then
    local seen
    seen=$(timeout 60 srun -p nodes -N "$nodes" -n "$nodes" --mpi=none hostname | sort -u | tr '\n' ' ')
    [ "$seen" = "$(namespaced_nodes "$nodes" | tr '\n' ' ')" ] || die "smoke test: srun -N $nodes ran on '$seen'"
  fi
  log "cluster up in $((SECONDS - t0))s: $(sinfo -h -o '%P %N %C' | awk '{split($3, c, "/"); printf "partition %s: %s, %s CPUs; ", $1, $2, c[4]}')declared on $(nproc) cores, account $ACCOUNT, MpiDefault=pmi2"
}

cmd_stop() {
  need_root
  if alive slurmctld slurmctld; then
    squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null || true
  fi
  stop_compute_nodes
  for name in slurmd slurmctld slurmdbd mariadbd munged; do
    if alive "$name" "${name%d}"; then stop_daemon "$name"; else rm -f "$STATE/$name.pid"; fi
  done
  for f in slurm.conf slurmdbd.conf cgroup.conf; do
    if grep -qs "mpinet" "$CONF/$f" || [ -e "$STATE/wrote-$f" ]; then rm -f "$CONF/$f" "$STATE/wrote-$f"; fi
  done
  rm -f "$CONF/mpinet-task-prolog.sh" "$STATE/restart"
  if [ -d "$NODE_TMP" ]; then rmdir "$NODE_TMP" || log "warning: $NODE_TMP not removed"; fi
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
  local ok=0 nodes name
  nodes=$(recorded_nodes)
  for name in munged mariadbd slurmdbd slurmctld; do
    if alive "$name" "${name%d}"; then echo "$name: running ($(cat "$STATE/$name.pid"))"; else echo "$name: stopped"; ok=1; fi
  done
  if [ "$nodes" = 0 ]; then
    echo "slurmd: stopped (no compute nodes)"
    ok=1
  fi
  for name in $( [ "$nodes" = 0 ] || node_names "$nodes"); do
    if alive "slurmd-$name" slurmd; then
      echo "slurmd on $name: running ($(cat "$STATE/slurmd-$name.pid"))$([ "$name" = localhost ] || echo ", namespace mpinet-$name, $(node_address "$name")")"
    else
      echo "slurmd on $name: stopped"
      ok=1
    fi
  done
  [ $ok = 0 ] && sinfo -h -o "partition %P: %D node(s) %T" 2>/dev/null
  return $ok
}

case "${1:-}" in
  start) shift && cmd_start "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 start [--nodes N] | stop | status" >&2; exit 2 ;;
esac
