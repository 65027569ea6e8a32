"""Self-describing spectra from Python: a Producer sets a description, a
Consumer gets it (description_changed, Consumer.description, each
spectrum's description_epoch), a change mid-stream, a late joiner, and
bad descriptions refused where they are set."""

import time

import pytest

import splitrt_vys as vys

BYTES = 8192
CHANNELS = 1024


def desc(name, first_hz=1.0e9, **kw):
    d = {
        "data_type": "complex64",
        "channels": CHANNELS,
        "first_hz": first_hz,
        "width_hz": 125e3,
        "polarizations": ["RR", "LL"],
        "baseband": 1,
        "subband": 3,
        "config_name": name,
        "time_epoch": "unix",
        "time_unit": "ns",
        "integration_ns": 10_000_000,
    }
    d.update(kw)
    return d


def until(c, pred, timeout=5.0):
    """Messages until pred(m) is true for one (returned), at most timeout s."""
    seen = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        m = c.recv(0.05)
        if m is None:
            continue
        seen.append(m)
        if pred(m):
            return m, seen
    raise AssertionError(f"not seen in {timeout} s: {[m.kind for m in seen]}")


def test_description_start_change_late(stream):
    c = vys.Consumer(**stream.kw())
    p = vys.Producer(BYTES, channels=CHANNELS, spectra_per_signal=4, **stream.kw())
    assert p.set_description(desc("first")) == 1
    for t in range(8):
        p.write_checkable((1, 2), 0, 0, 100 + t)
    p.flush()
    m, seen = until(c, lambda m: m.kind == "description_changed")
    assert [x.kind for x in seen if x.kind == "valid"] == []
    d = m.description
    assert d["epoch"] == 1 and d["instance"] == p.instance
    assert d["config_name"] == "first" and d["channels"] == CHANNELS
    assert d["first_hz"] == 1.0e9 and d["width_hz"] == 125e3 and d["frequencies_hz"] is None
    assert d["polarizations"] == ["RR", "LL"]
    assert (d["data_type"], d["time_epoch"], d["time_unit"]) == ("complex64", "unix", "ns")
    assert m.description_epoch == 1
    v, _ = until(c, lambda m: m.kind == "valid")
    assert v.description_epoch == 1
    assert v.description == d  # each spectrum carries its epoch's description
    v.release()
    assert c.description(p.id) == d

    # a change: listed frequencies, a new epoch
    listed = [1.0e9 + 1e6 * i for i in range(100)]
    assert p.set_description(desc("second", first_hz=None, width_hz=None, channels=100,
                                  frequencies_hz=listed)) == 2
    for t in range(8):
        p.write_checkable((1, 2), 0, 0, 200 + t)
    p.flush()
    m, seen = until(c, lambda m: m.kind == "description_changed")
    assert all(x.description_epoch == 1 for x in seen if x.kind == "valid")
    assert m.description["epoch"] == 2
    assert m.description["frequencies_hz"] == listed and m.description["first_hz"] is None
    v, _ = until(c, lambda m: m.kind == "valid" and m.timestamp >= 200)
    assert v.description_epoch == 2
    assert v.description["config_name"] == "second"
    v.release()
    assert c.description(p.id)["config_name"] == "second"

    # a late joiner learns it (the idle producer's heartbeat carries it)
    late = vys.Consumer(**stream.kw())
    m, _ = until(late, lambda m: m.kind == "description_changed")
    assert m.description["epoch"] == 2
    assert late.description(p.id)["frequencies_hz"] == listed
    assert late.description(p.id + 1) is None
    assert p.stats()["descriptions"] >= 2
    assert c.stats()["descriptions_changed"] == 2
    late.close()
    c.close()


def test_bad_descriptions_refused(stream):
    p = vys.Producer(BYTES, channels=CHANNELS, **stream.kw())
    with pytest.raises(ValueError, match="unknown description key"):
        p.set_description(desc("x", chanels=4))
    with pytest.raises(ValueError, match="needs 'channels'"):
        d = desc("x")
        del d["channels"]
        p.set_description(d)
    with pytest.raises(ValueError, match="Polarization"):
        p.set_description(desc("x", polarizations=["QQ"]))
    with pytest.raises(ValueError, match="configuration name"):
        p.set_description(desc("x" * 65))
    with pytest.raises(ValueError, match="listed frequencies"):
        p.set_description(desc("x", first_hz=None, width_hz=None, channels=200,
                               frequencies_hz=[1.0] * 200))
    with pytest.raises(ValueError, match="not both"):
        p.set_description(desc("x", frequencies_hz=[1.0] * CHANNELS))
    with pytest.raises(TypeError):
        p.set_description(desc("x", baseband="one"))
    assert p.set_description(desc("fine")) == 1
    p.close()
