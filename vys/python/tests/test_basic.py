"""Producer -> consumer on one host: byte-exact content, metadata,
declarative selection, release semantics."""

import gc

import numpy as np
import pytest

import splitrt_vys as vys

BYTES = 8192
CHANNELS = 1024  # complex64: 8 bytes a channel


def producer(stream, **kw):
    kw.setdefault("channels", CHANNELS)
    kw.setdefault("spectra_per_signal", 4)
    return vys.Producer(BYTES, **stream.kw(), **kw)


def take(c, n, timeout=5.0):
    """n valid messages (others ignored), at most `timeout` s each."""
    out = []
    while len(out) < n:
        m = c.recv(timeout)
        assert m is not None, f"only {len(out)} of {n} valid spectra came"
        if m.kind == "valid":
            out.append(m)
    return out


def test_byte_exact_and_metadata(stream):
    c = vys.Consumer(**stream.kw())
    p = producer(stream, config=77)
    sent = {}
    for t in range(10):
        seq = p.write_checkable((3, 5), 1, 2, 1_000 + t)
        sent[1_000 + t] = seq
    p.flush()
    got = take(c, 10)
    for m in got:
        assert m.valid and m.kind == "valid"
        assert m.producer == p.id and m.instance == p.instance
        assert m.stations == (3, 5) and m.spectral_window == 1 and m.stokes == 2
        assert m.channels == CHANNELS and m.spectrum_bytes == BYTES and m.config == 77
        assert m.seq == sent[m.timestamp]
        d = m.data
        assert d.dtype == np.complex64 and d.shape == (CHANNELS,)
        assert not d.flags.writeable
        with pytest.raises(ValueError):
            d.setflags(write=True)  # the pool buffer is never writable from Python
        assert isinstance(d.base, vys.SpectrumBuffer)
        assert d.tobytes() == vys.checkable((3, 5), 1, 2, m.timestamp, BYTES)
        m.release()
    assert sorted(m.timestamp for m in got) == sorted(sent)
    end = c.close()
    assert end["valid"] == 10 and end["verification_failures"] == 0


def test_written_array_round_trips(stream):
    """Data given as a complex64 array comes back as the same values."""
    c = vys.Consumer(**stream.kw())
    p = producer(stream)
    rng = np.random.default_rng(1)
    arrays = [
        (rng.standard_normal(CHANNELS) + 1j * rng.standard_normal(CHANNELS)).astype(np.complex64)
        for _ in range(4)
    ]
    for t, a in enumerate(arrays):
        p.write((0, 1), 0, 0, a, t)
    p.write((0, 1), 0, 0, arrays[0].tobytes(), 4)  # bytes too
    p.flush()
    got = {m.timestamp: m for m in take(c, 5)}
    for t, a in enumerate(arrays):
        np.testing.assert_array_equal(got[t].data, a)
    np.testing.assert_array_equal(got[4].data, arrays[0])
    with pytest.raises(OSError):
        p.write((0, 1), 0, 0, np.zeros(10, np.complex64), 5)  # wrong size
    c.close()


def test_raw_dtype(stream):
    c = vys.Consumer(**stream.kw(), dtype="raw")
    p = producer(stream)
    p.write_checkable((0, 1), 0, 0, 9)
    p.flush()
    (m,) = take(c, 1)
    assert m.data.dtype == np.uint8 and m.data.shape == (BYTES,)
    assert m.data.tobytes() == vys.checkable((0, 1), 0, 0, 9, BYTES)
    c.close()


def test_auto_dtype_is_raw_when_not_complex64(stream):
    """A spectrum that is not 8 bytes a channel is handed over as bytes."""
    c = vys.Consumer(**stream.kw())
    p = vys.Producer(1000, **stream.kw(), channels=7, spectra_per_signal=1)
    p.write_checkable((0, 1), 0, 0, 1)
    (m,) = take(c, 1)
    assert m.data.dtype == np.uint8 and m.data.shape == (1000,)
    assert m.data.tobytes() == vys.checkable((0, 1), 0, 0, 1, 1000)
    c.close()


def write_grid(p, times, antennas=4, spws=2, stokes=2):
    for t in times:
        for a in range(antennas):
            for b in range(a, antennas):
                for w in range(spws):
                    for s in range(stokes):
                        p.write_checkable((a, b), w, s, t)
    p.flush()


@pytest.mark.parametrize(
    "selection, want",
    [
        ({"spectral_windows": [1]}, lambda a, b, w, s: w == 1),
        ({"stokes": 0}, lambda a, b, w, s: s == 0),
        ({"baselines": [(2, 1), (0, 3)]}, lambda a, b, w, s: (a, b) in [(1, 2), (0, 3)]),
        ({"stations": [0, 1]}, lambda a, b, w, s: a in (0, 1) and b in (0, 1)),
        ({"autocorrelations": False}, lambda a, b, w, s: a != b),
        ({"crosscorrelations": False, "stokes": [1]}, lambda a, b, w, s: a == b and s == 1),
    ],
)
def test_selection(stream, selection, want):
    c = vys.Consumer(**stream.kw(), select=selection)
    p = producer(stream)
    write_grid(p, [100, 101])
    expected = sorted(
        ((a, b), w, s, t)
        for t in (100, 101)
        for a in range(4)
        for b in range(a, 4)
        for w in range(2)
        for s in range(2)
        if want(a, b, w, s)
    )
    got = []
    for m in take(c, len(expected)):
        assert m.data.tobytes() == vys.checkable(m.stations, m.spectral_window, m.stokes, m.timestamp, BYTES)
        got.append((m.stations, m.spectral_window, m.stokes, m.timestamp))
        m.release()
    assert sorted(got) == expected
    end = c.close()
    assert end["valid"] == len(expected)  # nothing else was chosen


def test_selection_producers_time_every(stream):
    p1 = producer(stream, id=11)
    p2 = producer(stream, id=22)
    c = vys.Consumer(**stream.kw(), producers=[22], time_min=10, time_max=20, every=2)
    for t in range(30):
        p1.write_checkable((0, 1), 0, 0, t)
        p2.write_checkable((0, 1), 0, 0, t)
    p1.flush()
    p2.flush()
    got = take(c, 5)
    assert all(m.producer == 22 for m in got)
    assert sorted(m.timestamp for m in got) == [10, 12, 14, 16, 18]
    end = c.close()
    assert end["valid"] == 5


def test_unknown_selection_is_refused(stream):
    with pytest.raises(TypeError):
        vys.Consumer(**stream.kw(), select={"antennas": [1]})
    with pytest.raises(TypeError):
        vys.Consumer(**stream.kw(), stokes="x")


def test_release_semantics(stream):
    """A released message's data is refused; an array taken before keeps
    its buffer (and bytes) alive; the buffer returns to the pool only when
    the last holder dies."""
    c = vys.Consumer(**stream.kw(), data_buffers=2)
    p = producer(stream, spectra_per_signal=1)
    p.write_checkable((0, 1), 0, 0, 1)
    p.write_checkable((0, 1), 0, 0, 2)
    m1, m2 = take(c, 2)
    kept = m1.data
    m1.release()
    m1.release()  # idempotent
    assert m1.released
    with pytest.raises(ValueError):
        m1.data
    # Both buffers are still held (m2, and m1's through `kept`): the next
    # spectrum starves.
    p.write_checkable((0, 1), 0, 0, 3)
    m = c.recv(5.0)
    assert m is not None and m.kind == "data_buffer_starvation", m
    assert kept.tobytes() == vys.checkable((0, 1), 0, 0, m1.timestamp, BYTES)
    # Dropping the array gives m1's buffer back; the context manager m2's.
    del kept
    gc.collect()
    with m2:
        assert m2.data.tobytes() == vys.checkable((0, 1), 0, 0, m2.timestamp, BYTES)
    assert m2.released
    p.write_checkable((0, 1), 0, 0, 4)
    p.write_checkable((0, 1), 0, 0, 5)
    got = take(c, 2)
    assert sorted(m.timestamp for m in got) == [4, 5]
    for m in got:
        assert m.data.tobytes() == vys.checkable((0, 1), 0, 0, m.timestamp, BYTES)
    # The arrays made before stay right while the pool is reused.
    del got
    c.close()


def test_iteration_ends_with_end(stream):
    c = vys.Consumer(**stream.kw())
    p = producer(stream)
    write_grid(p, [1], antennas=2, spws=1, stokes=1)  # 3 spectra
    kinds = []
    n = 0
    for m in c:
        kinds.append(m.kind)
        if m.kind == "valid":
            n += 1
            m.release()
            if n == 3:
                c.shutdown()
    assert kinds[-1] == "end" and n == 3
    assert c.recv(0.1) is None


def test_producer_gone_message(stream):
    """A producer that stops is reported gone after the consumer's
    producer_silence, with its id and instance."""
    c = vys.Consumer(**stream.kw(), producer_silence=0.5)
    p = producer(stream, heartbeat=0.1)
    pid, inst = p.id, p.instance
    p.write_checkable((0, 1), 0, 0, 1)
    p.flush()
    (m,) = take(c, 1)
    m.release()
    p.close()
    while True:
        m = c.recv(5.0)
        assert m is not None, "no producer_gone"
        if m.kind == "producer_gone":
            break
    assert m.producer == pid and m.instance == inst
    assert m.details["silent_for_ns"] >= 400_000_000
    assert "gone" in m.error
    with pytest.raises(ValueError):
        m.data  # no spectrum
    with pytest.raises(ValueError):
        p.write_checkable((0, 1), 0, 0, 2)  # closed
    end = c.close()
    assert end["producers_gone"] == 1
