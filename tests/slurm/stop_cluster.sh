#!/usr/bin/env bash
# Stop what start_cluster.sh started, by the PIDs in STATE_DIR/pids, in reverse order:
# cancel any job left, then slurmd, slurmctld, slurmdbd, mariadbd, munged. Each gets SIGTERM,
# then SIGKILL after 20 s. Safe to run twice, or after a partial start.
#
#   tests/slurm/stop_cluster.sh STATE_DIR
set -uo pipefail

STATE=$(realpath -m "${1:?usage: stop_cluster.sh STATE_DIR}")
[ -d "$STATE/pids" ] || exit 0
export SLURM_CONF="$STATE/etc/slurm.conf"

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
pid_of() { [ -s "$STATE/pids/$1" ] && tr -dc '0-9' <"$STATE/pids/$1"; }

stop() {  # stop PIDFILE NAME: TERM, wait, KILL
    local pid
    pid=$(pid_of "$1") || return 0
    alive "$pid" || { rm -f "$STATE/pids/$1"; return 0; }
    # a stale pid file of ours must not make us kill an unrelated process
    if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$2"; then
        echo "stop_cluster: pid $pid is not $2; left alone" >&2
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 200); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then echo "stop_cluster: $2 ($pid) ignored SIGTERM; SIGKILL" >&2; kill -KILL "$pid" 2>/dev/null; fi
    rm -f "$STATE/pids/$1"
    echo "stopped $2 ($pid)"
}

# jobs first, so that no slurmstepd outlives its slurmd
if alive "$(pid_of slurmctld.pid)" && command -v squeue >/dev/null; then
    if [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
        scancel --full $(squeue -h -o %i) 2>/dev/null
        for _ in $(seq 150); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
    fi
fi
stop slurmd.pid slurmd
stop slurmctld.pid slurmctld
stop slurmdbd.pid slurmdbd
stop mariadb.pid mariadbd
stop mariadb.launch.pid mariadbd  # if mariadbd died before writing its pid file
stop munged.pid munged
# the /etc/slurm/slurm.conf link that start_cluster.sh made, if it still points here
if [ -s "$STATE/default_conf_link" ]; then
    link=$(cat "$STATE/default_conf_link")
    [ "$(readlink "$link" 2>/dev/null)" = "$SLURM_CONF" ] && rm -f "$link"
    rm -f "$STATE/default_conf_link"
fi
exit 0
