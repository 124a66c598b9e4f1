#!/usr/bin/env bash
# Start a single-node Slurm cluster with accounting and fake GPUs, for the tests.
#
#   tests/slurm/start_cluster.sh STATE_DIR [CPU_PARTITION GPU_PARTITION]
#
# Installs Debian's packages if missing (munge, MariaDB, slurmdbd, slurmctld, slurmd, client),
# then starts, each by hand and with every file under STATE_DIR: munged (own socket), mariadbd
# (127.0.0.1, a free port), slurmdbd, slurmctld and slurmd (free ports), and waits until the
# node is idle. The node has two fake GPUs (character devices, copies of /dev/null) and is in
# both partitions; the account `arrepro` is root's default. Needs root, works without systemd.
# Writes STATE_DIR/env (source it: SLURM_CONF) and one pid file per daemon under
# STATE_DIR/pids; stop_cluster.sh stops them. Outside STATE_DIR it touches only the Debian
# packages and, while the cluster runs, a link /etc/slurm/slurm.conf (see below).
# Exit status 77: the Debian packages could not be installed (the caller skips).
set -euo pipefail

STATE=$(realpath -m "${1:?usage: start_cluster.sh STATE_DIR [CPU_PARTITION GPU_PARTITION]}")
CPU_PART=${2:-cpu}
GPU_PART=${3:-gpu}
HERE=$(cd "$(dirname "$0")" && pwd)
SECONDS=0
say() { printf '[cluster %3ss] %s\n' "$SECONDS" "$*"; }
die() { echo "start_cluster: $*" >&2; for f in "$STATE"/log/*.log; do [ -s "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done; exit 1; }

[ "$(id -u)" = 0 ] || { echo "start_cluster: needs root" >&2; exit 77; }

# ---------------------------------------------------------------- packages
PKGS="munge slurmctld slurmd slurm-client slurmdbd mariadb-server mariadb-client"
have_all() { for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || return 1; done; }
if ! have_all; then
    command -v apt-get >/dev/null || { echo "start_cluster: no apt-get" >&2; exit 77; }
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    if ! apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends $PKGS >"${TMPDIR:-/tmp}/start_cluster.apt.log" 2>&1; then
        apt-get -o DPkg::Lock::Timeout=900 update -q >>"${TMPDIR:-/tmp}/start_cluster.apt.log" 2>&1 || true
        # shellcheck disable=SC2086
        apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends $PKGS >>"${TMPDIR:-/tmp}/start_cluster.apt.log" 2>&1 || {
            tail -n 20 "${TMPDIR:-/tmp}/start_cluster.apt.log" >&2; echo "start_cluster: apt-get install failed" >&2; exit 77; }
    fi
fi
say "packages ready"

mkdir -p "$STATE"/{etc,log,ctld,d,run,dev,pids,mysql}
chmod 755 "$STATE" "$STATE"/*
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
CTLD_PORT=$(free_port); SLURMD_PORT=$(free_port); DBD_PORT=$(free_port); DB_PORT=$(free_port)
NODE=$(hostname -s)
# what slurmd sees; every CPU is declared as a core so that 1-CPU jobs pack
read -r CPUS MEM < <(slurmd -C | awk '{for(i=1;i<=NF;i++){split($i,a,"="); if(a[1]=="CPUs")c=a[2]; if(a[1]=="RealMemory")m=a[2]}} END{print c, int(m*0.9)}')
# Declared: 4 times as many (at least 8; SlurmdParameters=config_overrides lets slurmd accept it).
# The tests' jobs mostly start a Snakemake and wait; with the real count, the tiny grid's data,
# table and figure jobs queued for minutes behind the cells of the runs beside it (the time-limit
# cell, the shared pack, the failing job). Slurm still runs what each job asks for; the cores are
# shared by the kernel instead of queued by Slurm.
SLOTS=$(( CPUS * 4 > 8 ? CPUS * 4 : 8 ))

# ---------------------------------------------------------------- munge
MUNGE_SOCKET="$STATE/run/munge.socket"
mungekey -c -k "$STATE/etc/munge.key" 2>/dev/null || dd if=/dev/urandom of="$STATE/etc/munge.key" bs=1 count=1024 status=none
chmod 400 "$STATE/etc/munge.key"
# As root, like every daemon and client here; --force: STATE_DIR may sit in a private (0700)
# directory, which munged would otherwise refuse for a socket that other users cannot reach.
munged --force --socket="$MUNGE_SOCKET" --key-file="$STATE/etc/munge.key" \
    --pid-file="$STATE/pids/munged.pid" --log-file="$STATE/log/munged.log" --seed-file="$STATE/run/munge.seed" \
    || die "munged did not start"
for _ in $(seq 100); do [ -S "$MUNGE_SOCKET" ] && break; sleep 0.1; done
munge -S "$MUNGE_SOCKET" -n </dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null || die "munge does not work"
say "munged up"

# ---------------------------------------------------------------- MariaDB (accounting storage)
DB_SOCKET="$STATE/run/mysqld.sock"
mariadb-install-db --user=root --datadir="$STATE/mysql" --auth-root-authentication-method=socket \
    --skip-test-db >"$STATE/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed"
setsid mariadbd --no-defaults --user=root --datadir="$STATE/mysql" --socket="$DB_SOCKET" \
    --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$STATE/pids/mariadb.pid" \
    --log-error="$STATE/log/mariadb.log" --innodb-buffer-pool-size=64M --skip-log-bin \
    </dev/null >/dev/null 2>&1 &
echo $! >"$STATE/pids/mariadb.launch.pid"
for _ in $(seq 300); do mariadb --no-defaults -S "$DB_SOCKET" -uroot -e 'select 1' >/dev/null 2>&1 && break; sleep 0.1; done
mariadb --no-defaults -S "$DB_SOCKET" -uroot -e "select 1" >/dev/null || die "mariadbd did not start"
DB_PASS=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
mariadb --no-defaults -S "$DB_SOCKET" -uroot -e "
    CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
    CREATE USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" || die "could not create the database user"
say "mariadbd up (port $DB_PORT)"

# ---------------------------------------------------------------- configuration
for i in 0 1; do mknod "$STATE/dev/nvidia$i" c 1 3; done
cat >"$STATE/etc/slurm.conf" <<EOF
ClusterName=arreprotest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/pids/slurmctld.pid
SlurmdPidFile=$STATE/pids/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=500
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
MinJobAge=300
# Slurm's default: SIGTERM at the time limit, SIGKILL 30 s later. A cell's first step (its kernels
# compiled or loaded) can outlast a shorter wait on a loaded machine, and then no checkpoint is written
KillWait=30
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
# the munge socket for talking to slurmdbd (AuthInfo covers the rest)
AccountingStoragePass=$MUNGE_SOCKET
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$SLOTS RealMemory=$MEM Gres=gpu:2 State=UNKNOWN
PartitionName=$CPU_PART Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=$GPU_PART Nodes=$NODE MaxTime=INFINITE State=UP
EOF
echo "NodeName=$NODE Name=gpu File=$STATE/dev/nvidia[0-1]" >"$STATE/etc/gres.conf"
cat >"$STATE/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/pids/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$DB_PASS
EOF
chmod 600 "$STATE/etc/slurmdbd.conf"
export SLURM_CONF="$STATE/etc/slurm.conf"
# Inside a job, the Slurm plugin's jobstep runs `srun` with every SLURM_* variable removed,
# SLURM_CONF included, so that srun reads the default /etc/slurm/slurm.conf. Point it at this
# cluster while it runs (stop_cluster.sh removes the link); never replace a real one.
DEFAULT_CONF=/etc/slurm/slurm.conf
if [ -L "$DEFAULT_CONF" ]; then  # left by an earlier test cluster?
    OLD_STATE=$(dirname "$(dirname "$(readlink "$DEFAULT_CONF")")")
    if [ -f "$OLD_STATE/default_conf_link" ] && [ -s "$OLD_STATE/pids/slurmctld.pid" ] \
            && kill -0 "$(cat "$OLD_STATE/pids/slurmctld.pid")" 2>/dev/null; then
        die "another test cluster is running; stop it: tests/slurm/stop_cluster.sh $OLD_STATE"
    fi
    [ -f "$OLD_STATE/default_conf_link" ] || [ ! -e "$DEFAULT_CONF" ] && rm -f "$DEFAULT_CONF"
fi
if [ -e "$DEFAULT_CONF" ] || [ -L "$DEFAULT_CONF" ]; then
    die "$DEFAULT_CONF exists (another Slurm cluster on this machine?); not touching it"
fi
mkdir -p /etc/slurm
ln -s "$SLURM_CONF" "$DEFAULT_CONF"
echo "$DEFAULT_CONF" >"$STATE/default_conf_link"
cat >"$STATE/env" <<EOF
export SLURM_CONF=$SLURM_CONF
export ARREPRO_TEST_CLUSTER=$STATE
EOF

# ---------------------------------------------------------------- Slurm daemons
slurmdbd || die "slurmdbd did not start"
for _ in $(seq 100); do timeout 5 sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
timeout 10 sacctmgr -n list cluster >/dev/null 2>&1 || die "slurmdbd does not answer"
timeout 20 sacctmgr -i add cluster arreprotest >/dev/null
timeout 20 sacctmgr -i add account arrepro Cluster=arreprotest Description=tests Organization=tests >/dev/null
timeout 20 sacctmgr -i add user root Account=arrepro DefaultAccount=arrepro >/dev/null
say "slurmdbd up"
slurmctld -i || die "slurmctld did not start"
slurmd || die "slurmd did not start"
for _ in $(seq 600); do
    case "$(timeout 5 sinfo -h -N -o %t 2>/dev/null | head -n1)" in idle) break ;; esac
    sleep 0.1
done
[ "$(timeout 10 sinfo -h -N -o %t | head -n1)" = idle ] || { sinfo >&2 || true; die "the node did not become idle"; }
say "slurmctld + slurmd up: node $NODE idle, $SLOTS CPUs declared ($CPUS real), ${MEM} MB, 2 fake GPUs, partitions $CPU_PART $GPU_PART"
