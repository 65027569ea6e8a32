#!/usr/bin/env python3
"""Summarise shmq-rounds.sh OUTDIR: per build and queue, the fastest (and
the median) of the four AM Short rows over the rounds in which every job
ran on the host's fast placement (its raw cache-line round trip under
0.1 us), then over all rounds; each as a ratio to the build named `old`
with `pairs` (or to the first column if there is none)."""
import collections
import glob
import re
import statistics
import sys

ROWS = ["ping-pong roundtrip ReqRep", "ping-pong roundtrip ReqReq",
        "flood     one-way   Req", "flood     roundtrip ReqRep"]


def main(out):
    data = collections.defaultdict(dict)  # (build, queue) -> round -> (raw, [4])
    for f in glob.glob(out + "/*.txt.res"):
        m = re.match(r".*/(\w+)-(pairs|shared)-(\d+)\.txt\.res$", f)
        if not m:
            continue
        b, q, r = m.group(1), m.group(2), int(m.group(3))
        raw, vals = None, {}
        for line in open(f):
            if line.startswith("raw cache-line"):
                raw = float(line.split("\t")[1])
            for i, name in enumerate(ROWS):
                if "AMShort" in line and name in line:
                    vals[i] = float(line.split("\t")[1])
        if raw is not None and len(vals) == 4:
            data[(b, q)][r] = (raw, [vals[i] for i in range(4)])
    keys = sorted(data)
    if not keys:
        print("no complete results")
        return
    rounds = set.intersection(*(set(data[k]) for k in keys))
    fast = sorted(r for r in rounds if all(data[k][r][0] < 0.1 for k in keys))
    print(f"rounds complete {len(rounds)}, all jobs fast {len(fast)}")
    for sel, name in [(fast, "fast"), (sorted(rounds), "all")]:
        if not sel:
            continue
        print(f"-- {name} rounds ({len(sel)}): fastest (ratio) [median]")
        rk = ("old", "pairs") if ("old", "pairs") in data else keys[0]
        ref = [min(c) for c in zip(*[data[rk][r][1] for r in sel])]
        for k in keys:
            cols = list(zip(*[data[k][r][1] for r in sel]))
            mins = [min(c) for c in cols]
            meds = [statistics.median(c) for c in cols]
            print(f"{k[0]:>4} {k[1]:>6}: " + " | ".join(
                f"{m:.3f} ({m / ref[i]:.2f}x) [{d:.3f}]"
                for i, (m, d) in enumerate(zip(mins, meds))))


if __name__ == "__main__":
    main(sys.argv[1])
