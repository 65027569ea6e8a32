#!/bin/bash
# The AM Short rows of `splitrt-bench gasnet-worker` (testam's), per build
# and per shared-memory queue, in rounds that alternate every job so that
# load and the host's placement hit all columns alike (docs/scale.md).
#
# usage: shmq-rounds.sh OUTDIR ROUNDS NAME=TARGET_DIR[:RING_LEN_FOR_SHARED] ...
#   TARGET_DIR holds a release build (release/splitrt-run and
#   release/splitrt-bench); RING_LEN_FOR_SHARED, if given, is exported as
#   SPLITRT_RING_LEN for that build's `shared` jobs only.
# MAXSZ (default 8: the Short rows and 0-8 B Mediums) is testam's largest
# Medium / Long size, e.g. MAXSZ=16384 for the large Mediums.
# Summarise with shmq-summary.py OUTDIR (the Short rows).
set -u
out=$1; rounds=$2; shift 2
mkdir -p "$out"
for i in $(seq 1 "$rounds"); do
  for nt in "$@"; do
    v=${nt%%=*}; rest=${nt#*=}; T=${rest%%:*}; rl=""
    [ "$rest" != "$T" ] && rl=${rest#*:}
    for q in pairs shared; do
      f=$out/$v-$q-$i.txt
      echo "=== $v $q round $i $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" > "$f"
      if [ -n "$rl" ] && [ $q = shared ]; then export SPLITRT_RING_LEN=$rl; else unset SPLITRT_RING_LEN; fi
      SPLITRT_SPIN_ONLY=1 SPLITRT_SHM_QUEUE=$q SPLITRT_THREADS=single \
        SPLITRT_BENCH_TESTAM_ITERS=1000 SPLITRT_BENCH_TESTAM_MAXSZ=${MAXSZ:-8} \
        timeout 120 chrt -f 10 taskset -c 0,1 "$T/release/splitrt-run" -n 2 \
        "$T/release/splitrt-bench" gasnet-worker --reps 1 --result "$f.res" >> "$f" 2>&1
      echo "rc $?" >> "$f"
    done
  done
done
