#!/usr/bin/env bash
# Stop the CI Slurm daemons started by slurm-up.sh.
for d in slurmd slurmctld munged; do
  pkill -x "$d" 2>/dev/null || true
done
for _ in $(seq 1 20); do
  pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || exit 0
  sleep 0.2
done
pkill -9 -x slurmd 2>/dev/null; pkill -9 -x slurmctld 2>/dev/null
exit 0
