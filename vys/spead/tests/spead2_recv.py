"""A spead2 receiver (the real peer) for vys/spead/tests/spead_bridge.rs:
`spead2.recv.Stream` with an `ItemGroup`, as an astronomer's script
would. Prints `ready`, then one line per heap carrying the data item:
`heap TIMESTAMP STATION0 STATION1 SPW STOKES PRODUCER DTYPE SHAPE HEX`,
and `end` at the stream's stop (or after --timeout seconds)."""

import argparse
import os
import sys
import threading

import spead2
import spead2.recv

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--timeout", type=float, default=20.0)
ap.add_argument("--data-name", default="vis")
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
for heap in stream:
    updated = ig.update(heap)
    if a.data_name in updated:
        v = ig[a.data_name].value
        fields = [int(ig[n].value) for n in ("timestamp", "station0", "station1", "spectral_window", "stokes", "producer")]
        print(
            "heap",
            *fields,
            v.dtype.str,
            "x".join(str(d) for d in v.shape),
            v.tobytes().hex(),
            flush=True,
        )
timer.cancel()
stream.stop()
print("end", flush=True)
# leave without waiting on spead2's threads at interpreter exit (spead2
# issue 251 is the send side's; the same care here)
sys.stdout.flush()
os._exit(0)
