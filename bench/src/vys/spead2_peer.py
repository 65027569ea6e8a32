"""spead2 sender and chunk-stream receiver for `splitrt-bench vys --spead2`.

    spead2_peer.py check
    spead2_peer.py recv PORT HEAP_BYTES SECONDS PACKET
    spead2_peer.py send HOST PORT HEAP_BYTES SECONDS PACKET [RATE]

The receiver is spead2's C++ receive path: a ChunkRingStream whose heap
placement is a C function (compiled here with cc, handed to spead2 as a
PyCapsule; no Python runs per heap or per packet). Python only recycles
whole chunks. It prints one line:
    spead2-recv heaps=N bytes=B seconds=S rmem_max=R stat=V ...
counting the heaps that arrived complete in the measuring window: from
the first chunk delivered after a warm-up of a quarter of SECONDS to the
last chunk delivered before SECONDS end (so a sender that starts late or
stops early does not dilute the rate), then spead2's own stream
statistics (heaps, packets, incomplete_heaps_evicted, too_old_heaps, ...)
and the host's net.core.rmem_max, which caps the socket buffer (both
peers ask for SOCKET_BUFFER bytes, as vys's read sessions do). The sender
sends heaps of one item of HEAP_BYTES flat out, in batches of 64 (spead2's
send_heaps) one heap after another (GroupMode.SERIAL, as a correlator
emits integrations; ROUND_ROBIN would interleave the packets of 64 heaps,
more than the receiver keeps open, and it would evict them incomplete),
packets of at most PACKET bytes of UDP payload (paced at RATE bytes/s if
given), until SECONDS pass, and prints `spead2-send heaps=N seconds=S`.
"""

import ctypes
import os
import socket
import subprocess
import sys
import tempfile
import time

HEAPS_PER_CHUNK = 64
# Socket buffers both peers ask for: the size vys's read sessions ask for
# (vys/src/read_client.rs, read_server.rs); the kernel caps it at
# net.core.rmem_max / wmem_max of the host (network namespace).
SOCKET_BUFFER = 8 << 20


def rmem_max():
    try:
        with open("/proc/sys/net/core/rmem_max") as f:
            return int(f.read())
    except (OSError, ValueError):
        return -1

PLACE_C = r"""
#include <stddef.h>
#include <stdint.h>
struct place_data {
    const uint8_t *packet; size_t packet_size; const int64_t *items;
    int64_t chunk_id; size_t heap_index; size_t heap_offset;
};
void place(void *data, size_t size) {
    struct place_data *p = data;
    int64_t cnt = p->items[0], len = p->items[1];
    if (cnt < 0 || len != HEAP) { p->chunk_id = -1; return; }
    p->chunk_id = cnt / HPC;
    p->heap_index = cnt % HPC;
    p->heap_offset = p->heap_index * (size_t)HEAP;
}
"""


def place_capsule(heap):
    d = tempfile.mkdtemp(prefix="vys-spead2-")
    src, lib = os.path.join(d, "place.c"), os.path.join(d, "place.so")
    with open(src, "w") as f:
        f.write(PLACE_C)
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", f"-DHEAP={heap}", f"-DHPC={HEAPS_PER_CHUNK}",
         "-o", lib, src],
        check=True,
    )
    so = ctypes.CDLL(lib)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    ptr = ctypes.cast(so.place, ctypes.c_void_p).value
    return (new(ptr, b"void (void *, size_t)", None), so)


def recv(port, heap, seconds, packet):
    import numpy as np
    import spead2
    import spead2.recv

    chunk_bytes = heap * HEAPS_PER_CHUNK
    cfg = spead2.recv.ChunkStreamConfig(
        items=[spead2.HEAP_CNT_ID, spead2.HEAP_LENGTH_ID],
        max_chunks=4,
        place=place_capsule(heap),
    )
    data_ring = spead2.recv.ChunkRingbuffer(16)
    free_ring = spead2.recv.ChunkRingbuffer(16)
    stream = spead2.recv.ChunkRingStream(
        spead2.ThreadPool(1),
        spead2.recv.StreamConfig(max_heaps=8),
        cfg,
        data_ring,
        free_ring,
    )
    for _ in range(16):
        stream.add_free_chunk(
            spead2.recv.Chunk(
                present=np.zeros(HEAPS_PER_CHUNK, np.uint8),
                data=np.zeros(chunk_bytes, np.uint8),
            )
        )
    stream.add_udp_reader(port, max_size=packet + 64, buffer_size=SOCKET_BUFFER,
                          bind_hostname="0.0.0.0")
    print("spead2-recv ready", flush=True)
    t0 = time.monotonic()
    start = t0 + seconds / 4
    end = t0 + seconds
    heaps = 0
    first = last = None
    while True:
        now = time.monotonic()
        if now >= end:
            break
        try:
            chunk = data_ring.get_nowait()
        except spead2.Empty:
            time.sleep(0.0002)
            continue
        if now >= start:
            if first is None:
                first = now
            else:
                heaps += int(np.count_nonzero(chunk.present))
                last = now
        stream.add_free_chunk(chunk)
    stream.stop()
    st = stream.stats
    stats = " ".join(f"{c.name}={st[c.name]}" for c in st.config)
    span = (last - first) if last is not None else 0.0
    print(f"spead2-recv heaps={heaps} bytes={heaps * heap} seconds={span:.6f} "
          f"rmem_max={rmem_max()} {stats}", flush=True)


def send(host, port, heap, seconds, packet, rate=0.0):
    import numpy as np
    import spead2
    import spead2.send

    addr = socket.gethostbyname(host)
    stream = spead2.send.UdpStream(
        spead2.ThreadPool(1),
        [(addr, port)],
        spead2.send.StreamConfig(max_packet_size=packet, max_heaps=128, rate=rate),
        buffer_size=SOCKET_BUFFER,
    )
    ig = spead2.send.ItemGroup()
    ig.add_item(0x1600, "vis", "visibilities", shape=(heap,), dtype=np.uint8)
    ig["vis"].value = np.arange(heap, dtype=np.uint64).astype(np.uint8)
    h = ig.get_heap(descriptors="none", data="all")
    refs = [spead2.send.HeapReference(h) for _ in range(64)]
    t0 = time.monotonic()
    end = t0 + seconds
    sent = 0
    while time.monotonic() < end:
        stream.send_heaps(refs, spead2.send.GroupMode.SERIAL)
        sent += len(refs)
    print(f"spead2-send heaps={sent} seconds={time.monotonic() - t0:.6f}", flush=True)


def main(a):
    if a[:1] == ["check"]:
        import spead2  # noqa: F401
        import spead2.recv

        print("spead2", spead2.__version__, hasattr(spead2.recv, "ChunkRingStream"))
    elif a[:1] == ["recv"] and len(a) == 5:
        recv(int(a[1]), int(a[2]), float(a[3]), int(a[4]))
    elif a[:1] == ["send"] and len(a) in (6, 7):
        send(a[1], int(a[2]), int(a[3]), float(a[4]), int(a[5]),
             float(a[6]) if len(a) == 7 else 0.0)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
