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

# start_time PID: the process's start time in clock ticks since boot (field 22 of
# /proc/PID/stat, read after the parenthesised name, which may hold spaces); empty when no
# process has that pid, or only a zombie (as tests/test_slurm.py's _start_time reads it). A
# pid names a process only with its start time: pids are reused within minutes here
# (pid_max 32768 against the workflow's many short processes).
start_time() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  # shellcheck disable=SC2086  # split the fields on purpose
  set -- $stat
  [ "$1" = Z ] && return 0
  echo "${20}"
}

# stop NAME PIDFILE: SIGTERM the pid, wait up to 20 s for that process (the pid with the
# start time it had) to end, then SIGKILL it, never a later process given the same pid.
stop() {
  local name=$1 pidfile=$2 pid started
  [ -s "$pidfile" ] || return 0
  pid=$(tr -dc 0-9 <"$pidfile")
  [ -n "$pid" ] || return 0
  started=$(start_time "$pid")
  if [ -z "$started" ]; then
    rm -f "$pidfile"
    return 0
  fi
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 40); do
    [ "$(start_time "$pid")" = "$started" ] || { rm -f "$pidfile"; return 0; }
    sleep 0.5
  done
  if [ "$(start_time "$pid")" = "$started" ]; then
    log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null
    sleep 0.5
  fi
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
