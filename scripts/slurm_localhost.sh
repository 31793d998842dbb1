#!/usr/bin/env bash
# A real single-node Slurm on this machine, for `make test-slurm` (and for trying `--executor slurm` by hand).
#
#   bash scripts/slurm_localhost.sh ensure        # install Debian's slurm-wlm + munge when missing (root)
#   bash scripts/slurm_localhost.sh start DIR     # munged, slurmctld, slurmd with every file under DIR
#   bash scripts/slurm_localhost.sh stop DIR      # stop the three daemons started for DIR
#
# Everything lives in DIR: munge key/socket/log, slurm.conf, state, spool, logs, and profile.yaml (the
# mdbench Slurm profile for this cluster). No systemd, nothing under /etc is changed. The daemons bind to
# 127.0.0.1 only (CommunicationParameters=NoInAddrAny,NoCtldInAddrAny with NodeAddr 127.0.0.1) on two free
# ports chosen at start. Use the cluster from a shell with `export SLURM_CONF=DIR/slurm.conf`.
set -euo pipefail

cmd="${1:-}"
dir="${2:-}"

die() { echo "slurm_localhost: $*" >&2; exit 1; }

ensure() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null; then
        return 0
    fi
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        die "Slurm is missing; install it as root: apt-get install -y slurm-wlm munge"
    fi
    apt-get -o DPkg::Lock::Timeout=900 install -y slurm-wlm munge >/dev/null \
        || { apt-get -o DPkg::Lock::Timeout=900 update >/dev/null && \
             apt-get -o DPkg::Lock::Timeout=900 install -y slurm-wlm munge >/dev/null; } \
        || die "apt-get install slurm-wlm munge failed"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
    [ -n "$dir" ] || die "usage: $0 start DIR"
    [ "$(id -u)" -eq 0 ] || die "the test cluster runs its daemons as root (SlurmUser=root); run as root"
    mkdir -p "$dir"/{munge,state,spool,log,jobs}
    dir="$(cd "$dir" && pwd)"
    chmod 700 "$dir/munge"
    # a key of our own: nothing of the machine's munge is touched
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge/munge.key"
    munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"

    local ctld_port slurmd_port cpus mem_mb
    ctld_port="$(free_port)"
    slurmd_port="$(free_port)"
    cpus="$(nproc)"
    mem_mb="$(awk '/MemTotal/ {print int($2 / 1024 / 2)}' /proc/meminfo)"   # half the machine
    cat > "$dir/slurm.conf" <<EOF
# single-node test cluster written by scripts/slurm_localhost.sh
ClusterName=mdbench-localhost
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=10
NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -f "$dir/slurm.conf" -i
    slurmd -f "$dir/slurm.conf" -N localhost
    local i
    for i in $(seq 1 60); do
        if sinfo -h -N -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
            break
        fi
        sleep 1
    done
    sinfo -h -N -o '%N %T %c' | grep -q idle || {
        tail -20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
        stop; die "slurmd did not register with slurmctld within 60 s (logs above)"; }
    cat > "$dir/profile.yaml" <<EOF
# mdbench Slurm profile for the single-node test cluster (see README: Slurm)
queue: debug
cores: 1
memory: 2GiB
walltime: "00:30:00"
jobs: 1
gpus_per_job: 0
interface: lo
python: ${MDBENCH_SLURM_PYTHON:-python3}
log_directory: $dir/jobs
env:
  SLURM_CONF: $dir/slurm.conf
  MDBENCH_REPRODUCIBLE: "1"
EOF
    echo "slurm_localhost: up (SLURM_CONF=$dir/slurm.conf, slurmctld :$ctld_port, slurmd :$slurmd_port)"
}

stop() {
    [ -n "$dir" ] || die "usage: $0 stop DIR"
    local pidfile pid
    if [ -f "$dir/slurm.conf" ] && [ -f "$dir/slurmctld.pid" ]; then  # end this cluster's jobs first
        SLURM_CONF="$dir/slurm.conf" scancel --full --user="$(id -un)" 2>/dev/null || true
        for _ in $(seq 1 30); do
            [ -z "$(SLURM_CONF="$dir/slurm.conf" squeue -h -o %i 2>/dev/null)" ] && break; sleep 1
        done
    fi
    for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        [ -f "$pidfile" ] || continue
        pid="$(cat "$pidfile")"
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$pidfile"
    done
    echo "slurm_localhost: stopped ($dir)"
}

case "$cmd" in
    ensure) ensure ;;
    start) start ;;
    stop) stop ;;
    *) die "usage: $0 ensure | start DIR | stop DIR" ;;
esac
