#!/usr/bin/env bash
# Stop the single-node SLURM started by slurm_up.sh BASE: cancel its jobs, then stop each
# daemon by the pid it wrote under BASE (never by name), waiting until it is gone
# (SIGKILL after 20 s). Restores the /etc/slurm files slurm_up.sh replaced. Safe to run
# twice or after a partial start.
set -uo pipefail

BASE=${1:?usage: slurm_down.sh BASE}
[ -d "$BASE" ] || exit 0
BASE=$(cd "$BASE" && pwd)

log() { echo "[slurm_down $(date +%T)] $*"; }

# stop NAME PIDFILE: SIGTERM the pid, wait up to 20 s, then SIGKILL.
stop() {
  local name=$1 pidfile=$2 pid
  [ -s "$pidfile" ] || return 0
  pid=$(tr -dc 0-9 <"$pidfile")
  [ -n "$pid" ] || return 0
  if ! kill -0 "$pid" 2>/dev/null; then
    rm -f "$pidfile"
    return 0
  fi
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 40); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
    sleep 0.5
  done
  log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null
  sleep 0.5
  rm -f "$pidfile"
}

# Jobs first, while slurmctld still runs: their slurmstepd processes end with them.
if [ -s "$BASE/slurmctld.pid" ] && kill -0 "$(cat "$BASE/slurmctld.pid")" 2>/dev/null; then
  if [ -n "$(timeout 10 squeue -h -o %i 2>/dev/null)" ]; then
    log "cancelling remaining jobs"
    timeout 10 scancel --full --user=root 2>/dev/null
    for _ in $(seq 40); do
      [ -z "$(timeout 10 squeue -h -t running,completing,pending -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
fi

stop slurmd "$BASE/slurmd.pid"
stop slurmctld "$BASE/slurmctld.pid"
stop slurmdbd "$BASE/slurmdbd.pid"
# mariadbd writes its own pid file; the launcher's $! is the fallback.
stop mariadbd "$BASE/db/run/mysqld.pid"
stop mariadbd "$BASE/mariadbd.pid"
stop munged "$BASE/munged.pid"

for f in slurm.conf gres.conf slurmdbd.conf; do
  if [ -e "$BASE/etc-backup/$f" ]; then
    cp -p "$BASE/etc-backup/$f" "/etc/slurm/$f"
  elif grep -qs "$BASE" "/etc/slurm/$f"; then
    rm -f "/etc/slurm/$f"
  fi
done
log "down"
