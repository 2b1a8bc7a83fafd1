#!/usr/bin/env bash
# Bring up a real single-node SLURM "cluster" on this machine, as root, without systemd:
# munged, MariaDB, slurmdbd (accounting, so `sacct` works), slurmctld and slurmd, with two
# fake GPUs registered through gres.conf (File=/dev/null and /dev/zero).
#
#   tests/slurm/slurm_up.sh BASE      # BASE: an empty folder for every state file and log
#   tests/slurm/slurm_down.sh BASE    # stops exactly the daemons started here, by pid
#
# Packages (Debian 12): apt-get install -y --no-install-recommends slurmctld slurmd
#   slurm-client slurmdbd munge mariadb-server
# Every daemon writes its pid under BASE; slurm_down.sh reads them back. The node declares
# 16 CPUs, 64 GB and 2 GPUs whatever the machine has (see NCPU below). The config must be at
# /etc/slurm/slurm.conf (SLURM_CONF
# elsewhere did not work for everything); files there are saved under BASE and restored by
# slurm_down.sh. MariaDB listens on 127.0.0.1:33306 only (GRABRAG_SLURM_DB_PORT), not 3306.
set -euo pipefail

BASE=${1:?usage: slurm_up.sh BASE}
mkdir -p "$BASE"
BASE=$(cd "$BASE" && pwd)
NODE=$(hostname -s)
# The node declares more CPUs and memory than the machine has (SlurmdParameters=
# config_overrides), like a compute node bigger than the submitting host: jobs keep the
# threads and memory the profile gives them, and two GPU jobs fit side by side. Nothing
# enforces the allocation here (no cgroups), so the jobs share the real cores.
NCPU=${GRABRAG_SLURM_CPUS:-16}
MEM_MB=${GRABRAG_SLURM_MEM_MB:-65536}
DB_SOCKET="$BASE/db/run/mysqld.sock"
DB_PORT=${GRABRAG_SLURM_DB_PORT:-33306}
MUNGE_SOCKET=/run/munge/munge.socket.2

log() { echo "[slurm_up $(date +%T)] $*"; }
# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND every 0.5 s, fail after SECONDS.
wait_for() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "slurm_up: timed out after ${seconds}s waiting for $what" >&2
      return 1
    fi
    sleep 0.5
  done
}

for tool in munged munge unmunge mungekey runuser mariadbd mariadb-install-db mariadb slurmdbd slurmctld slurmd \
  sbatch squeue sacct sacctmgr sinfo scontrol; do
  command -v "$tool" >/dev/null || {
    echo "slurm_up: '$tool' not found; install: apt-get install -y --no-install-recommends" \
      "slurmctld slurmd slurm-client slurmdbd munge mariadb-server" >&2
    exit 2
  }
done
[ "$(id -u)" = 0 ] || { echo "slurm_up: must run as root" >&2; exit 2; }

if [ -e /etc/slurm/slurm.conf ] && timeout 10 scontrol ping 2>/dev/null | grep -q "is UP"; then
  echo "slurm_up: a slurmctld already answers for /etc/slurm/slurm.conf; stop it first" >&2
  exit 3
fi

mkdir -p "$BASE"/{state,spool,log,munge,db/data,db/run} /etc/slurm
chmod 755 "$BASE"
chown munge:munge "$BASE/munge"
chmod 755 "$BASE/munge"
chown -R mysql:mysql "$BASE/db"
for f in slurm.conf gres.conf slurmdbd.conf; do
  if [ -e "/etc/slurm/$f" ] && [ ! -e "$BASE/etc-backup/$f" ]; then
    mkdir -p "$BASE/etc-backup" && cp -p "/etc/slurm/$f" "$BASE/etc-backup/$f"
  fi
done

# munge on its default socket (SLURM's clients and slurmdbd connections use that one). A
# munged that is already running there (not ours) is used and left alone.
if [ ! -s /etc/munge/munge.key ]; then
  mungekey -c -f
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
fi
mkdir -p /run/munge
chown munge:munge /run/munge
chmod 755 /run/munge
if munge -n </dev/null >/dev/null 2>&1; then
  log "munged already running on $MUNGE_SOCKET: using it (it will not be stopped)"
else
  log "starting munged"
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  runuser -u munge -- munged --num-threads=10 --socket="$MUNGE_SOCKET" \
    --pid-file="$BASE/munge/munged.pid" --log-file="$BASE/munge/munged.log" \
    --seed-file="$BASE/munge/munged.seed"
  wait_for 20 munged test -s "$BASE/munge/munged.pid"
  cp "$BASE/munge/munged.pid" "$BASE/munged.pid"
  munge_works() { munge -n </dev/null | unmunge; }
  wait_for 20 "munge round trip" munge_works
fi

# MariaDB for slurmdbd, on a private socket and data folder.
log "starting mariadb"
mariadb-install-db --user=mysql --datadir="$BASE/db/data" --auth-root-authentication-method=socket \
  --skip-test-db >"$BASE/log/mariadb-install.log" 2>&1
mariadbd --user=mysql --datadir="$BASE/db/data" --socket="$DB_SOCKET" \
  --pid-file="$BASE/db/run/mysqld.pid" --bind-address=127.0.0.1 --port="$DB_PORT" \
  --skip-name-resolve >"$BASE/log/mariadb.log" 2>&1 &
echo $! >"$BASE/mariadbd.pid"
wait_for 60 mariadb mariadb -S "$DB_SOCKET" -u root -e 'select 1'
mariadb -S "$DB_SOCKET" -u root -e "CREATE USER 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
  CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"

cat >/etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
LogFile=$BASE/log/slurmdbd.log
PidFile=$BASE/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=slurmpw
CONF
chmod 600 /etc/slurm/slurmdbd.conf

cat >/etc/slurm/slurm.conf <<CONF
# Written by tests/slurm/slurm_up.sh for the grabrag cluster test; state under $BASE.
ClusterName=grabragci
SlurmctldHost=${NODE}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$BASE/slurmctld.pid
SlurmdPidFile=$BASE/slurmd.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
ReturnToService=2
MpiDefault=none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
# sacct shows the comment the executor plugin sets (rule_<name>_wildcards_...).
AccountingStoreFlags=job_comment
MinJobAge=300
SchedulerParameters=sched_interval=5
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=${NCPU} RealMemory=${MEM_MB} Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP
CONF
printf "# grabrag test cluster under %s\nNodeName=%s Name=gpu File=/dev/null\nNodeName=%s Name=gpu File=/dev/zero\n" \
    "$BASE" "$NODE" "$NODE" >/etc/slurm/gres.conf

log "starting slurmdbd"
slurmdbd
wait_for 60 slurmdbd sacctmgr -n list cluster
sacctmgr -i add cluster grabragci >/dev/null
sacctmgr -i add account grabrag Description=ci Organization=ci >/dev/null
sacctmgr -i add user root account=grabrag >/dev/null

log "starting slurmctld and slurmd"
slurmctld
slurmd
node_idle() { [ "$(sinfo -h -N -o %T)" = idle ]; }
wait_for 60 "node $NODE idle" node_idle
sinfo -N -o '%N %T %c %m %G'

# A smoke job with a GPU, checked through sacct (the executor plugin's status path).
JOB=$(sbatch --parsable --gpus=2 -c "$NCPU" -t 1 -o /dev/null --wrap true)
job_done() { sacct -n -X -j "$JOB" -o State | grep -q COMPLETED; }
wait_for 60 "smoke job $JOB in sacct" job_done
sacct -X -j "$JOB" --parsable2 -o JobIdRaw,Account,State,AllocTRES
log "up: $(sinfo -h -N -o '%N %c CPUs %m MB %G')"
