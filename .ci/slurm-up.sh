#!/usr/bin/env bash
# Start a one-node Slurm cluster on this machine (munge, slurmctld, slurmd)
# for the srun tests. Idempotent enough for CI: stops earlier daemons first.
# Prints the node state when ready; exits non-zero if Slurm does not come up.
set -euo pipefail
host=$(hostname -s)
cpus=$(nproc)
conf=/etc/slurm/slurm.conf
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
"$(dirname "$0")/slurm-down.sh" >/dev/null 2>&1 || true

# munge: key + daemon (root is fine for a throw-away CI machine)
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 400 /etc/munge/munge.key
runuser -u munge -- /usr/sbin/munged --force

cat > "$conf" <<CONF
ClusterName=splitrt-ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
KillWait=5
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
# no cgroup.conf: Slurm 22.05 has no "disabled" cgroup plugin, and with
# proctrack/linuxproc + task/none nothing needs one
rm -f /etc/slurm/cgroup.conf

/usr/sbin/slurmctld
/usr/sbin/slurmd
for _ in $(seq 1 60); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    sinfo
    exit 0
  fi
  sleep 0.5
done
echo "slurm did not come up; logs:" >&2
tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
sinfo >&2 || true
exit 1
