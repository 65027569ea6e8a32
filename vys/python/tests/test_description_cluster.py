"""Stream descriptions across two hosts of the namespace cluster (as
test_cluster.py): a Python producer on node1 sets a description before
any consumer exists; a Python consumer on node2 joins late and learns it
(from the idle producer's heartbeat), then sees a change mid-stream
before the spectra of the new epoch, read through the producer's read
server. Skipped without a cluster."""

import json
import os
import random
import sys
import textwrap

import pytest

from test_cluster import CLUSTER, node_ip, on

pytestmark = pytest.mark.skipif(
    not CLUSTER, reason="SPLITRT_TEST_CLUSTER is not set (.ci/run starts the cluster)"
)

PRODUCER = textwrap.dedent(
    """
    import os, sys, splitrt_vys as vys
    p = vys.Producer(8192, key=os.environ["K"], group=os.environ["G"], interface=os.environ["IP"],
                     channels=1024, spectra_per_signal=4, id=0xD5, heartbeat=0.2)
    d = {"channels": 1024, "first_hz": 1.0e9, "width_hz": 125e3, "polarizations": ["XX", "YY"],
         "config_name": "first", "integration_ns": 10_000_000}
    assert p.set_description(d) == 1
    print("described", flush=True)
    sys.stdin.readline()  # the consumer has the first description
    d.update(config_name="second", first_hz=2.0e9)
    assert p.set_description(d) == 2
    for t in range(20):
        p.write_checkable((0, 1), 0, 0, 1000 + t)
    p.flush()
    sys.stdin.read()  # serve reads until the consumer is done
    """
)

CONSUMER = textwrap.dedent(
    """
    import json, os, sys, time, splitrt_vys as vys
    c = vys.Consumer(key=os.environ["K"], group=os.environ["G"], interface=os.environ["IP"])
    out = {"changes": [], "valid": []}
    end = time.monotonic() + 30
    while time.monotonic() < end and len(out["valid"]) < 20:
        m = c.recv(0.5)
        if m is None:
            continue
        if m.kind == "description_changed":
            d = m.description
            out["changes"].append([d["epoch"], d["config_name"], d["first_hz"], len(out["valid"])])
            if d["epoch"] == 1:
                print("have", flush=True)
        elif m.kind == "valid":
            ok = m.data.tobytes() == vys.checkable(m.stations, m.spectral_window, m.stokes, m.timestamp, 8192)
            out["valid"].append([m.description_epoch, ok])
            m.release()
    out["latest"] = c.description(0xD5)["config_name"]
    out["stats"] = c.close()
    print(json.dumps(out), flush=True)
    """
)


def test_two_hosts_description():
    env = dict(os.environ)
    env["K"] = os.urandom(32).hex()
    env["G"] = f"239.255.82.{random.randint(1, 254)}:{random.randint(20000, 60000)}"
    p = on("node1", PRODUCER, dict(env, IP=node_ip(1)))
    c = None
    try:
        assert p.stdout.readline().strip() == "described", p.stderr.read()
        c = on("node2", CONSUMER, dict(env, IP=node_ip(2)))  # joins late
        assert c.stdout.readline().strip() == "have", c.stderr.read()
        p.stdin.write("go\n")
        p.stdin.flush()
        cout, cerr = c.communicate(timeout=90)
        pout, perr = p.communicate(timeout=90)
    finally:
        for x in (c, p):
            if x is not None and x.poll() is None:
                x.kill()
                x.wait()
    assert c.returncode == 0, cerr
    assert p.returncode == 0, perr
    r = json.loads(cout.strip().splitlines()[-1])
    assert r["changes"] == [[1, "first", 1.0e9, 0], [2, "second", 2.0e9, 0]]
    assert r["valid"] == [[2, True]] * 20
    assert r["latest"] == "second"
    s = r["stats"]
    assert s["remote_reads"] == 20 and s["descriptions_changed"] == 2
