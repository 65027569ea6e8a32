"""A spead2 receiver for the stream description items of `vys-spead
publish` (vys/spead/tests/spead_bridge.rs): prints `ready`, then per heap
carrying the data item `desc TIMESTAMP EPOCH CONFIG N_CHANS F0 FLAST POLS
INT_TIME_NS BASEBAND SUBBAND DATA_TYPE TIME_EPOCH TIME_UNIT` (the values
the ItemGroup holds then), and `end` at the stream's stop."""

import argparse
import os
import sys
import threading

import spead2
import spead2.recv

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--timeout", type=float, default=20.0)
a = ap.parse_args()

stream = spead2.recv.Stream(
    spead2.ThreadPool(),
    spead2.recv.StreamConfig(max_heaps=8),
    spead2.recv.RingStreamConfig(heaps=64),
)
stream.add_udp_reader(a.port, bind_hostname="127.0.0.1", buffer_size=8 << 20)
timer = threading.Timer(a.timeout, stream.stop)
timer.start()
print("ready", flush=True)
ig = spead2.ItemGroup()


def s(name):
    v = ig[name].value
    return v if isinstance(v, str) else bytes(v).decode()


for heap in stream:
    if "vis" in ig.update(heap):
        f = ig["frequencies_hz"].value
        print(
            "desc",
            int(ig["timestamp"].value),
            int(ig["description_epoch"].value),
            s("config_name"),
            int(ig["n_chans"].value),
            repr(float(f[0])),
            repr(float(f[-1])),
            s("polarizations"),
            int(ig["int_time_ns"].value),
            int(ig["baseband"].value),
            int(ig["subband"].value),
            s("data_type"),
            s("time_epoch"),
            s("time_unit"),
            flush=True,
        )
timer.cancel()
stream.stop()
print("end", flush=True)
sys.stdout.flush()
os._exit(0)
