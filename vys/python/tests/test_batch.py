"""recv_batch, read_window and the asyncio forms."""

import asyncio
import threading
import time

import numpy as np
import pytest

import splitrt_vys as vys

BYTES = 8192
CHANNELS = 1024


def producer(stream, **kw):
    kw.setdefault("channels", CHANNELS)
    kw.setdefault("spectra_per_signal", 8)
    return vys.Producer(BYTES, **stream.kw(), **kw)


def expected_row(m):
    return np.frombuffer(
        vys.checkable((int(m["station0"]), int(m["station1"])), int(m["spectral_window"]), int(m["stokes"]), int(m["timestamp"]), BYTES),
        dtype=np.complex64,
    )


def test_recv_batch_shapes_and_content(stream):
    c = vys.Consumer(**stream.kw())
    p = producer(stream, config=5)
    for t in range(100):
        p.write_checkable((t % 7, 7), t % 3, t % 2, 10_000 + t)
    p.flush()
    metas, rows = [], []
    deadline = time.monotonic() + 10
    while sum(len(m) for m in metas) < 100 and time.monotonic() < deadline:
        meta, data = c.recv_batch(32, timeout=2.0)
        assert meta.dtype == vys.META_DTYPE
        assert data.dtype == np.complex64 and data.ndim == 2
        assert len(meta) == data.shape[0] <= 32
        if len(meta):
            assert data.shape[1] == CHANNELS
        metas.append(meta)
        rows.append(data)
    meta = np.concatenate(metas)
    data = np.concatenate(rows)
    assert len(meta) == 100
    assert sorted(meta["timestamp"]) == list(range(10_000, 10_100))
    assert (meta["producer"] == p.id).all() and (meta["instance"] == p.instance).all()
    assert (meta["config"] == 5).all() and (meta["channels"] == CHANNELS).all()
    assert (meta["spectrum_bytes"] == BYTES).all()
    for m, row in zip(meta, data):
        t = int(m["timestamp"]) - 10_000
        assert (m["station0"], m["station1"], m["spectral_window"], m["stokes"]) == (t % 7, 7, t % 3, t % 2)
        assert row.tobytes() == expected_row(m).tobytes()
    # Nothing more: an empty batch after the timeout, well shaped.
    t0 = time.monotonic()
    meta, data = c.recv_batch(16, timeout=0.3)
    assert len(meta) == 0 and data.shape[0] == 0
    assert 0.25 <= time.monotonic() - t0 < 3
    c.close()


def test_recv_batch_raw_and_mixed_sizes(stream):
    """A batch holds spectra of one size; one of another size waits for the
    next batch."""
    c = vys.Consumer(**stream.kw(), dtype="raw")
    small = vys.Producer(512, **stream.kw(), channels=64, spectra_per_signal=1)
    big = vys.Producer(BYTES, **stream.kw(), channels=CHANNELS, spectra_per_signal=1)
    small.write_checkable((0, 1), 0, 0, 1)
    got = {}
    meta, data = c.recv_batch(4, timeout=1.0)  # 1 of 4 came: the whole timeout
    assert data.dtype == np.uint8 and data.shape == (1, 512)
    got[1] = data[0].tobytes()
    big.write_checkable((0, 1), 0, 0, 2)
    small.write_checkable((0, 1), 0, 0, 3)
    seen = 0
    deadline = time.monotonic() + 10
    while seen < 2 and time.monotonic() < deadline:
        meta, data = c.recv_batch(2 - seen, timeout=2.0)
        for m, row in zip(meta, data):
            assert data.shape[1] == m["spectrum_bytes"]
            got[int(m["timestamp"])] = row.tobytes()
            seen += 1
    assert got[1] == vys.checkable((0, 1), 0, 0, 1, 512)
    assert got[2] == vys.checkable((0, 1), 0, 0, 2, BYTES)
    assert got[3] == vys.checkable((0, 1), 0, 0, 3, 512)
    c.close()


def test_recv_batch_releases_the_gil(stream):
    """While one thread waits in recv_batch, another runs Python."""
    c = vys.Consumer(**stream.kw())
    counted = []

    def count():
        n = 0
        t_end = time.monotonic() + 0.5
        while time.monotonic() < t_end:
            n += 1
        counted.append(n)

    t = threading.Thread(target=count)
    t.start()
    meta, _ = c.recv_batch(8, timeout=0.7)
    t.join()
    assert len(meta) == 0
    # Held GIL would leave the counter the switch interval's share only.
    assert counted[0] > 10_000
    c.close()


def test_events_keep_other_messages(stream):
    c = vys.Consumer(**stream.kw(), data_buffers=1)
    p = producer(stream, spectra_per_signal=2)
    p.write_checkable((0, 1), 0, 0, 1)
    p.write_checkable((0, 1), 0, 0, 2)  # no buffer for this one
    meta, data = c.recv_batch(2, timeout=1.0)
    assert len(meta) >= 1
    kinds = [e.kind for e in c.events()]
    if len(meta) == 1:
        assert "data_buffer_starvation" in kinds
    c.close()


def test_read_window(stream):
    """[time, baseline, channel, pol] plus flags, as vysmaw's reader fills
    them: spectral windows along channels, stokes along pol, a reversed
    baseline conjugated, missing cells flagged."""
    nch = 16
    nbytes = 8 * nch
    integration = 10
    c = vys.Consumer(**stream.kw(), spectral_windows=[0, 1])
    p = vys.Producer(nbytes, **stream.kw(), channels=nch, spectra_per_signal=4)
    baselines = [(0, 1), (0, 2), (1, 2)]
    t0 = 1_000

    def spectrum(a, b, w, s, t):
        return np.arange(nch, dtype=np.float32) * (1 + 1j) + (a * 1000 + b * 100 + w * 10 + s + t * 1j)

    # Times 0..3 (4 integrations); (1, 2) written as (2, 1); the cell
    # t=2, (0, 2), spw 1, stokes 1 is never written; one spectrum before
    # t0 and two after the window.
    for ti in range(4):
        t = t0 + ti * integration
        for a, b in baselines:
            for w in range(2):
                for s in range(2):
                    if (ti, (a, b), w, s) == (2, (0, 2), 1, 1):
                        continue
                    if (a, b) == (1, 2):
                        d = np.conj(spectrum(a, b, w, s, t)).astype(np.complex64)
                        p.write((2, 1), w, s, d, t)
                    else:
                        p.write((a, b), w, s, spectrum(a, b, w, s, t).astype(np.complex64), t)
    p.write((0, 1), 0, 0, spectrum(0, 1, 0, 0, 0).astype(np.complex64), t0 - integration)
    p.write((0, 1), 0, 0, spectrum(0, 1, 0, 0, 9).astype(np.complex64), t0 + 4 * integration)
    p.write((0, 1), 0, 1, spectrum(0, 1, 0, 1, 9).astype(np.complex64), t0 + 5 * integration)
    p.flush()

    data, flags, filled = c.read_window(
        t0, t0 + 4 * integration, integration, baselines, [0, 1], [0, 1], nch, timeout=1.5
    )
    assert data.shape == (4, 3, 2 * nch, 2) and data.dtype == np.complex64
    assert flags.shape == data.shape and flags.dtype == np.bool_
    assert filled == 4 * 3 * 2 * 2 - 1
    for ti in range(4):
        t = t0 + ti * integration
        for bi, (a, b) in enumerate(baselines):
            for w in range(2):
                for s in range(2):
                    cell = data[ti, bi, w * nch:(w + 1) * nch, s]
                    fl = flags[ti, bi, w * nch:(w + 1) * nch, s]
                    if (ti, (a, b), w, s) == (2, (0, 2), 1, 1):
                        assert fl.all() and (cell == 0).all()
                    else:
                        assert not fl.any()
                        np.testing.assert_array_equal(cell, spectrum(a, b, w, s, t).astype(np.complex64))
    # The spectra after the window wait for the next one.
    data, flags, filled = c.read_window(
        t0 + 4 * integration, t0 + 6 * integration, integration, [(0, 1)], [0], [0, 1], nch, timeout=1.0
    )
    assert filled == 2
    np.testing.assert_array_equal(data[0, 0, :, 0], spectrum(0, 1, 0, 0, 9).astype(np.complex64))
    np.testing.assert_array_equal(data[1, 0, :, 1], spectrum(0, 1, 0, 1, 9).astype(np.complex64))
    assert flags[0, 0, :, 1].all() and flags[1, 0, :, 0].all()
    with pytest.raises(ValueError):
        c.read_window(5, 5, 1, [(0, 1)], [0], [0], nch)
    c.close()


def test_asyncio_forms(stream):
    async def main():
        c = vys.Consumer(**stream.kw())
        p = producer(stream)
        # The loop keeps running while recv_batch_async waits.
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        tk = asyncio.create_task(ticker())
        task = asyncio.create_task(c.recv_batch_async(16, timeout=5.0))
        await asyncio.sleep(0.2)
        for t in range(16):
            p.write_checkable((0, 1), 0, 0, t)
        p.flush()
        meta, data = await task
        got = list(zip(meta, data))
        while len(got) < 16:
            meta, data = await c.recv_batch_async(16 - len(got), timeout=5.0)
            assert len(meta), "spectra missing"
            got += list(zip(meta, data))
        assert ticks >= 5
        for m, row in got:
            assert row.tobytes() == vys.checkable((0, 1), 0, 0, int(m["timestamp"]), BYTES)
        # async for: spectra, then the end after shutdown.
        for t in range(100, 104):
            p.write_checkable((0, 1), 0, 0, t)
        p.flush()
        seen = []
        async for m in c.aiter():
            if m.kind == "valid":
                assert m.data.tobytes() == vys.checkable((0, 1), 0, 0, m.timestamp, BYTES)
                seen.append(m.timestamp)
                m.release()
                if len(seen) == 4:
                    c.shutdown()
            if m.kind == "end":
                assert m.stats["valid"] == 20
        assert sorted(seen) == [100, 101, 102, 103]
        m = await c.recv_async(0.1)
        assert m is None
        tk.cancel()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_oversized_requests_are_refused(stream):
    """A window or batch too large to allocate is a ValueError, not a crash
    or an overflow."""
    c = vys.Consumer(**stream.kw())
    with pytest.raises(ValueError):
        c.read_window(0, 2**64 - 1, 1, [(0, 1)], [0], [0], 1024, timeout=0.1)
    with pytest.raises(ValueError):
        c.read_window(0, 10, 1, [(0, 1)] * 1000, [0] * 1000, [0, 1, 2, 3], 2**20, timeout=0.1)
    p = producer(stream)
    p.write_checkable((0, 1), 0, 0, 1)
    p.flush()
    with pytest.raises(ValueError):
        c.recv_batch(2**62, timeout=5.0)
    with pytest.raises(OverflowError):
        c.recv_batch(-1, timeout=0.1)
    c.close()


def test_recv_batch_keeps_the_order_written(stream):
    """Spectra queued before a call (copied) and spectra the consumer's
    thread reads straight into the rows while the call waits come in the
    order written, each once, with their content."""
    c = vys.Consumer(**stream.kw())
    p = producer(stream, slots=4096)
    for t in range(500):  # queued before any rows are offered
        p.write_checkable((0, 1), 0, 0, t)
    p.flush()

    def more():
        for k in range(10):
            time.sleep(0.02)
            for t in range(500 + 100 * k, 600 + 100 * k):
                p.write_checkable((0, 1), 0, 0, t)
            p.flush()

    w = threading.Thread(target=more)
    w.start()
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 1500 and time.monotonic() < deadline:
        meta, data = c.recv_batch(300, timeout=1.0)
        for m, row in zip(meta, data):
            assert row.tobytes() == expected_row(m).tobytes()
        got += [int(t) for t in meta["timestamp"]]
    w.join()
    assert got == list(range(1500))
    c.close()
