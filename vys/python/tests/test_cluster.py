"""Two hosts of the namespace cluster (../shared/tools/netns-cluster.sh;
.ci/run starts one and sets SPLITRT_TEST_CLUSTER to its directory): a
Python producer on node1, a Python consumer on node2 reading through the
producer's read server, content checked byte for byte. Skipped without a
cluster."""

import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

CLUSTER = os.environ.get("SPLITRT_TEST_CLUSTER")

pytestmark = pytest.mark.skipif(
    not CLUSTER, reason="SPLITRT_TEST_CLUSTER is not set (.ci/run starts the cluster)"
)


def node_ip(i):
    net = "10.231.7"
    try:
        with open(os.path.join(CLUSTER, "env")) as f:
            for line in f:
                if line.startswith("NET="):
                    net = line.strip()[4:].strip("'\"")
    except OSError:
        pass
    return f"{net}.{10 + i}"


def on(node, code, env):
    return subprocess.Popen(
        [os.path.join(CLUSTER, "bin", "nsc-on"), node, "timeout", "60", sys.executable, "-c", code],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


PRODUCER = textwrap.dedent(
    """
    import os, sys, splitrt_vys as vys
    p = vys.Producer(8192, key=os.environ["K"], group=os.environ["G"], interface=os.environ["IP"],
                     channels=1024, spectra_per_signal=4, slots=4096, id=0xC1)
    # Start when told (the consumer has joined the group).
    sys.stdin.readline()
    for t in range(100):
        for a, b in [(0, 1), (0, 2), (1, 2)]:
            for spw in (0, 1):
                p.write_checkable((a, b), spw, 0, 1000 + t)
    p.flush()
    # Serve reads until the consumer is done (stdin closed).
    sys.stdin.read()
    print("served", p.stats())
    """
)

CONSUMER = textwrap.dedent(
    """
    import json, os, splitrt_vys as vys
    c = vys.Consumer(key=os.environ["K"], group=os.environ["G"], interface=os.environ["IP"],
                     spectral_windows=[1], baselines=[(0, 1), (1, 2)])
    print("ready", flush=True)
    got, bad = [], 0
    while len(got) < 200:
        meta, data = c.recv_batch(200 - len(got), timeout=10.0)
        if len(meta) == 0:
            break
        for m, row in zip(meta, data):
            want = vys.checkable((int(m["station0"]), int(m["station1"])), int(m["spectral_window"]),
                                 int(m["stokes"]), int(m["timestamp"]), 8192)
            bad += row.tobytes() != want
            got.append([int(m["station0"]), int(m["station1"]), int(m["spectral_window"]), int(m["timestamp"])])
    stats = c.close()
    print(json.dumps({"got": got, "bad": bad, "stats": stats}))
    """
)


def test_two_hosts():
    env = dict(os.environ)
    env["K"] = os.urandom(32).hex()
    env["G"] = f"239.255.81.{random.randint(1, 254)}:{random.randint(20000, 60000)}"
    c = on("node2", CONSUMER, dict(env, IP=node_ip(2)))
    p = on("node1", PRODUCER, dict(env, IP=node_ip(1)))
    try:
        assert c.stdout.readline().strip() == "ready", c.stderr.read()
        p.stdin.write("go\n")
        p.stdin.flush()
        cout, cerr = c.communicate(timeout=90)
        pout, perr = p.communicate(timeout=90)  # closes its stdin: it ends
    finally:
        for x in (c, p):
            if x.poll() is None:
                x.kill()
                x.wait()
    assert c.returncode == 0, cerr
    assert p.returncode == 0, perr
    r = json.loads(cout.strip().splitlines()[-1])
    assert r["bad"] == 0
    want = sorted([a, b, 1, 1000 + t] for t in range(100) for a, b in [(0, 1), (1, 2)])
    assert sorted(r["got"]) == want
    s = r["stats"]
    assert s["remote_reads"] == 200 and s["local_reads"] == 0
    assert s["verification_failures"] == 0 and s["read_failures"] == 0 and s["starved"] == 0
