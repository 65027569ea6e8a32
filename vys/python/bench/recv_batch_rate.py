"""Delivered rate of Python's recv_batch beside the Rust consumer's, same
run, alternating: one producer process (examples/vys_producer, flat out,
8 KiB spectra by default) and either the Rust consumer
(examples/vys_consumer, its per-second `spectra/s`) or this process's
Consumer.recv_batch loop (spectra per second). The median of each run's
middle seconds; the ratio Python / Rust per pair of runs.

    cargo build --release -p splitrt-vys --examples
    python3 -m pip install ./vys/python
    python3 vys/python/bench/recv_batch_rate.py --reps 3

Prints one line per run and the ratios, of the delivered rates and of the
spectra delivered per CPU second of the consumer's process (its worker
thread included; what a core would sustain, less sensitive to the
machine's other load). Not a test: rates depend on the
machine and its load.
"""

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import time

# numpy's OpenBLAS starts a thread per core that spins after each call;
# nothing here uses BLAS, and on a small machine those threads take CPU
# from the consumer (seen in a profile: 1.5 % of all samples).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import splitrt_vys as vys  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def producer(a, env, group):
    exe = os.path.join(a.target, "release", "examples", "vys_producer")
    return subprocess.Popen(
        [exe, "--group", group, "--antennas", str(a.antennas), "--spectral-windows", "2",
         "--stokes", "2", "--channels", str(a.bytes // 8), "--integration-ms", "0",
         "--slots", str(a.slots), "--digest", a.digest, "--duration-s", str(a.seconds)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def middle(rates):
    """Median of the per-second rates without the first and last seconds."""
    inner = rates[1:-1] if len(rates) > 3 else rates
    return statistics.median(inner) if inner else 0.0


def rust_run(a, env, group):
    exe = os.path.join(a.target, "release", "examples", "vys_consumer")
    c = subprocess.Popen(
        [exe, "--group", group, "--duration-s", str(a.seconds + 1), "--stats-s", "1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    time.sleep(0.3)  # the consumer joins the group (its own start)
    p = producer(a, env, group)
    out = c.stdout.read()
    _, _, ru = os.wait4(c.pid, 0)
    c.returncode = 0
    cpu = ru.ru_utime + ru.ru_stime
    p.wait(timeout=30)
    total = sum(int(f.split("=")[1]) for l in out.splitlines() if l.startswith("vys_consumer:")
                for f in l.split() if f.startswith("valid="))
    rates = [float(l.split("spectra/s=")[1].split()[0]) for l in out.splitlines() if l.startswith("stats:")]
    rates = [r for r in rates if r > 0]
    summary = " ".join(
        f for l in out.splitlines() if l.startswith("vys_consumer:") for f in l.split()
        if f.split("=")[0] in ("starved", "verification_failures", "queue_dropped")
    )
    return middle(rates), rates, summary, total / cpu if cpu else 0.0


def python_run(a, env, group):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    c = vys.Consumer(key=env["SPLITRT_VYS_KEY"], group=group, data_buffers=4096)
    p = producer(a, env, group)
    total = 0
    rates = []
    n = 0
    tick = time.monotonic()
    end = tick + a.seconds + 1
    while time.monotonic() < end:
        meta, data = c.recv_batch(a.batch, timeout=0.05)
        n += len(meta)
        total += len(meta)
        now = time.monotonic()
        if now - tick >= 1.0:
            rates.append(n / (now - tick))
            n = 0
            tick = now
    p.wait(timeout=30)
    stats = c.close()
    del c
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    rates = [r for r in rates if r > 0]
    return middle(rates), rates, stats, total / cpu if cpu else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=int, default=8192)
    ap.add_argument("--antennas", type=int, default=4)
    ap.add_argument("--slots", type=int, default=65536)
    ap.add_argument("--digest", default="crc32c")
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--target", default=os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")))
    a = ap.parse_args()
    env = dict(os.environ)
    env.setdefault("SPLITRT_VYS_KEY", os.urandom(32).hex())
    ratios, cpu_ratios = [], []
    for r in range(a.reps):
        group = f"239.255.42.{random.randint(1, 254)}:{random.randint(20000, 60000)}"
        rust, rr, summary, rust_cpu = rust_run(a, env, group)
        print(f"rep {r}: rust   consumer {rust:12.0f} spectra/s  ({rust * a.bytes / 1e9:.2f} GB/s) per second: {[round(x) for x in rr]} ({summary}); {rust_cpu:.0f} spectra per CPU second")
        group = f"239.255.42.{random.randint(1, 254)}:{random.randint(20000, 60000)}"
        py, pr, st, py_cpu = python_run(a, env, group)
        print(f"rep {r}: python recv_batch {py:8.0f} spectra/s  ({py * a.bytes / 1e9:.2f} GB/s) per second: {[round(x) for x in pr]}"
              f" (starved={st['starved']} queue_dropped={st['queue_dropped']} verification_failures={st['verification_failures']});"
              f" {py_cpu:.0f} spectra per CPU second")
        if rust_cpu > 0:
            cpu_ratios.append(py_cpu / rust_cpu)
        if rust > 0:
            ratios.append(py / rust)
            print(f"rep {r}: python / rust = {py / rust:.3f}")
        sys.stdout.flush()
    if ratios:
        print(f"python / rust, delivered rate: median {statistics.median(ratios):.3f}, each {[round(x, 3) for x in ratios]} (target >= 0.8)")
    if cpu_ratios:
        print(f"python / rust, spectra per CPU second of the consumer process: median {statistics.median(cpu_ratios):.3f}, each {[round(x, 3) for x in cpu_ratios]}")


if __name__ == "__main__":
    main()
