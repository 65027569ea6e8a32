#!/bin/bash
# `splitrt-bench net` of two release builds alternated, with GASNet-EX's
# udp-conduit in the same runs (docs/BENCHMARKS.md).
# usage: net-old-new.sh OUTDIR GASNET_DIR OLD_TARGET_DIR NEW_TARGET_DIR [ROUNDS]
set -u
out=$1; G=$2; old=$3; new=$4; rounds=${5:-2}
mkdir -p "$out"
for i in $(seq 1 "$rounds"); do
  for v in old new; do
    T=$old; [ $v = new ] && T=$new
    echo "=== $v round $i $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    timeout 400 "$T/release/splitrt-bench" net --reps 3 --gasnet "$G" --out "$out/$v$i" > "$out/$v$i.txt" 2>&1
    grep -E 'put 1 MiB \(|get 1 MiB \(|put 1 MiB / raw|get 1 MiB / raw|raw UDP stream|1048576 byte.*Blocking|GASNet' "$out/$v$i.txt" | head -20
  done
done
