#!/usr/bin/env bash
# A one-machine Slurm cluster for drover's tests and demo: Debian's packages, no
# systemd, no cgroups, two slurmd nodes (n1, n2) in one partition (main).
#
# Idempotent: installs what is missing, writes /etc/slurm/slurm.conf unless an
# operator's own file is there (then it stops: it never overwrites a real
# cluster's configuration), starts munged, slurmctld and the two slurmd that
# are not running, resumes nodes left down by an earlier run, and waits until
# both nodes accept jobs. Exits non-zero, saying why, when the cluster cannot
# start. Needs root. Run it as `make slurm-up`.
set -euo pipefail

MARK="# Written by drover's scripts/slurm-up.sh; delete this line to keep your own edits."
CONF=/etc/slurm/slurm.conf
NODES=(n1 n2)
PORTS=(17001 17002)
# Per node: CPUs and MiB offered to Slurm. Deliberately the same on any machine,
# so the tests know what fits; slurmd is told to trust this (config_overrides).
NODE_CPUS=2
NODE_MEM=2048
# Per node: GPUs Slurm counts, so that drover's handling of a GRES slot is
# tested on the real thing. Slurm counts a gpu by its device file; two files
# that exist everywhere stand in (jobs are only placed, nothing opens them).
NODE_GPUS=2
GPU_FILES=/dev/null,/dev/zero
GRES_CONF=/etc/slurm/gres.conf
LOG_DIR=/var/log/slurm
WAIT_SECONDS=${SLURM_UP_WAIT:-60}

say() { echo "slurm-up: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (it installs packages and starts daemons)"

# -- packages ------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
    || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    say "installing slurmctld slurmd slurm-client munge"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null
fi

# -- configuration ---------------------------------------------------------------
host=$(hostname -s)
if [ -f "$CONF" ] && ! head -n 1 "$CONF" | grep -qF "$MARK"; then
    die "$CONF exists and was not written by this script: not touching a real cluster"
fi
mkdir -p /etc/slurm "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd
nodes_line=""
for i in "${!NODES[@]}"; do
    nodes_line+="NodeName=${NODES[$i]} NodeHostname=$host NodeAddr=127.0.0.1 Port=${PORTS[$i]} "
    nodes_line+="CPUs=$NODE_CPUS RealMemory=$NODE_MEM Gres=gpu:$NODE_GPUS State=UNKNOWN"$'\n'
done
wanted=$(cat <<EOF
$MARK
ClusterName=drover
# 127.0.0.1 everywhere: no DNS lookups.
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
# No systemd and no cgroups on these machines.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# No slurmdbd: the completion file is the record of jobs that left the controller.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.log
# Cores and memory are what jobs ask for; without a default a job with no
# --mem would take the whole node.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
# Finished jobs stay visible to squeue/scontrol for an hour.
MinJobAge=3600
# Refuse requests no node can ever hold instead of queueing them forever.
EnforcePartLimits=ALL
# Schedule at submission instead of seconds later.
SchedulerParameters=batch_sched_delay=0
SchedulerType=sched/backfill
KillWait=5
ReturnToService=2
# Both nodes are this machine: trust the configured CPUs and memory.
SlurmdParameters=config_overrides
MpiDefault=none
SwitchType=switch/none
GresTypes=gpu
${nodes_line}PartitionName=main Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP
EOF
)
gres_wanted=$(cat <<EOF
$MARK
Name=gpu File=$GPU_FILES
EOF
)
changed=0
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$wanted" ]; then
    say "writing $CONF"
    printf '%s\n' "$wanted" >"$CONF"
    changed=1
fi
if [ ! -f "$GRES_CONF" ] || [ "$(cat "$GRES_CONF")" != "$gres_wanted" ]; then
    say "writing $GRES_CONF"
    printf '%s\n' "$gres_wanted" >"$GRES_CONF"
    changed=1
fi

running() { pgrep -x "$1" >/dev/null 2>&1; }
node_running() { pgrep -f "^slurmd -N $1\$" >/dev/null 2>&1; }

# -- munge ------------------------------------------------------------------------
# Without systemd nothing creates munged's socket directory.
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
chmod 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    say "creating /etc/munge/munge.key"
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
if ! running munged; then
    say "starting munged"
    if id munge >/dev/null 2>&1; then
        runuser -u munge -- /usr/sbin/munged
    else
        /usr/sbin/munged --force
    fi
fi

# -- daemons ---------------------------------------------------------------------
if [ "$changed" = 1 ] && { running slurmctld || running slurmd; }; then
    # Nodes' resources are read when the daemons start: restart them all.
    say "configuration changed: restarting slurmctld and slurmd"
    pkill -x slurmd || true
    pkill -x slurmctld || true
    for _ in $(seq 50); do
        if running slurmd || running slurmctld; then sleep 0.2; else break; fi
    done
fi
if ! running slurmctld; then
    say "starting slurmctld"
    slurmctld
fi
for node in "${NODES[@]}"; do
    if ! node_running "$node"; then
        say "starting slurmd -N $node"
        mkdir -p "/var/spool/slurmd/$node"
        slurmd -N "$node"
    fi
done

# -- wait until both nodes take jobs -----------------------------------------------
deadline=$((SECONDS + WAIT_SECONDS))
resumed=0
while :; do
    states=$(sinfo -h -N -p main -o '%N %T' 2>/dev/null | sort -u || true)
    ready=0
    for node in "${NODES[@]}"; do
        state=$(awk -v n="$node" '$1 == n {print $2}' <<<"$states")
        case "$state" in
            idle | mixed | allocated | completing) ready=$((ready + 1)) ;;
            down* | drain* | fail*)
                # Left down by an earlier run (a killed slurmd): give it back.
                if [ "$resumed" = 0 ]; then
                    scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true
                fi
                ;;
        esac
    done
    [ "$ready" = "${#NODES[@]}" ] && break
    resumed=1
    if [ "$SECONDS" -ge "$deadline" ]; then
        say "nodes not ready after ${WAIT_SECONDS}s:"
        echo "$states" >&2
        tail -n 20 "$LOG_DIR/slurmctld.log" >&2 || true
        die "the cluster did not start"
    fi
    sleep 0.5
done
say "up: partition main, nodes ${NODES[*]} ($(sinfo -h -N -p main -o '%N=%T' | sort -u | tr '\n' ' '))"
