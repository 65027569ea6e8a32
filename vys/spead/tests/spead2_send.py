"""A MeerKAT X-engine style SPEAD sender (spead2, the real peer) for
vys/spead/tests/spead_bridge.rs: one heap per integration with a
`timestamp` and a `frequency` immediate and an `xeng_raw` int32 item of
shape [channels, baselines, 2]; descriptors with the first heap, the
stream stop at the end. Writes what it sent to --expected: per heap the
timestamp (u64, little-endian) and the xeng_raw bytes."""

import argparse
import os
import sys

import numpy as np
import spead2
import spead2.send

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--heaps", type=int, default=20)
ap.add_argument("--channels", type=int, default=64)
ap.add_argument("--baselines", type=int, default=10)
ap.add_argument("--spw", type=int, default=2, help="channel block: frequency = spw * channels")
ap.add_argument("--expected", required=True)
ap.add_argument("--rate", type=float, default=5e6, help="bytes/s")
ap.add_argument("--seed", type=int, default=27)
a = ap.parse_args()

flavour = spead2.Flavour(4, 64, 48, 0)  # SPEAD-64-48, spead2's default
config = spead2.send.StreamConfig(max_packet_size=1472, rate=a.rate)
pool = spead2.ThreadPool()
stream = spead2.send.UdpStream(pool, [("127.0.0.1", a.port)], config)
ig = spead2.send.ItemGroup(flavour=flavour)
ig.add_item(0x1600, "timestamp", "ADC sample count", shape=(), format=[("u", 48)])
ig.add_item(0x4103, "frequency", "first channel of this heap", shape=(), format=[("u", 48)])
ig.add_item(0x1800, "xeng_raw", "visibilities", shape=(a.channels, a.baselines, 2), dtype=np.int32)
rng = np.random.default_rng(a.seed)
with open(a.expected, "wb") as f:
    for h in range(a.heaps):
        ts = 1_000_000_000 + h * 8192 * 256
        vis = rng.integers(-(2**31), 2**31, size=(a.channels, a.baselines, 2), dtype=np.int64)
        vis = vis.astype(np.int32)
        ig["timestamp"].value = ts
        ig["frequency"].value = a.spw * a.channels
        ig["xeng_raw"].value = vis
        stream.send_heap(ig.get_heap())  # descriptors with the first heap
        f.write(ts.to_bytes(8, "little"))
        f.write(vis.tobytes())
stream.send_heap(ig.get_end())
print("sent", a.heaps, flush=True)
# spead2's send stream can deadlock at interpreter exit when its thread
# pool is stopped first (spead2 issue 251; seen here once in about 20
# runs): `send_heap` returned once the heap was sent; free the stream
# while the pool runs, and leave at once.
del stream
sys.stdout.flush()
os._exit(0)
