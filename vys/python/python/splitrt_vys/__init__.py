"""vys visibility streams for Python (splitrt).

Producers write spectra into a ring and announce them by signed multicast
signals; consumers choose spectra with a declarative selection (compiled
into the Rust filter: no Python runs per signal) and read them, validated,
into numpy arrays. See docs/vys-python.md in the splitrt repository.

    import splitrt_vys as vys
    with vys.Consumer(key=KEY, spectral_windows=[0], stokes=[0, 1]) as c:
        meta, data = c.recv_batch(1024, timeout=1.0)   # [n] records, [n, nchan]
"""

import asyncio
import threading

import numpy as np

from . import _native
from ._native import Message, Producer, SpectrumBuffer, checkable

__all__ = [
    "Consumer",
    "Message",
    "Producer",
    "SpectrumBuffer",
    "checkable",
    "META_DTYPE",
]

#: One record of ``Consumer.recv_batch``'s metadata (little-endian).
META_DTYPE = np.dtype(
    {
        "names": [
            "producer", "instance", "timestamp", "seq", "config",
            "station0", "station1", "spectral_window", "stokes",
            "channels", "spectrum_bytes",
        ],
        "formats": ["<u8", "<u8", "<u8", "<u8", "<u8",
                    "<u2", "<u2", "<u2", "<u2", "<u4", "<u4"],
        "offsets": [0, 8, 16, 24, 32, 40, 42, 44, 46, 48, 52],
        "itemsize": _native.META_BYTES,
    }
)

_SELECTION = {
    "producers", "stations", "baselines", "spectral_windows", "stokes",
    "configs", "autocorrelations", "crosscorrelations", "time_min",
    "time_max", "every",
}


class Consumer:
    """A vys consumer.

    Selection (keyword arguments, or the same keys in a ``select`` dict;
    a spectrum is read if it matches every one given): ``producers``,
    ``stations`` (both stations of the baseline in the set),
    ``baselines`` (station pairs, either order), ``spectral_windows``,
    ``stokes``, ``configs`` (an int or an iterable of ints each),
    ``autocorrelations`` / ``crosscorrelations`` (bools),
    ``time_min`` <= timestamp < ``time_max``, ``every`` (one chosen
    spectrum in N). The selection runs in Rust on the consumer's thread.

    Other keywords: ``key`` (64 hex digits or 32 bytes; default
    ``$SPLITRT_VYS_KEY``), ``group`` ("239.255.42.99:47000"),
    ``interface`` ("127.0.0.1"), ``dtype`` ("auto": complex64 where a
    spectrum is 8 bytes a channel, else uint8; "complex64"; "raw"), and
    the Rust ``ConsumerConfig``: ``max_spectrum_bytes``, ``data_buffers``,
    ``queue_len``, ``max_outstanding_reads``, ``read_timeout``,
    ``connect_timeout``, ``retry_after``, ``local_reads``,
    ``producer_silence`` (seconds), ``max_mapped_bytes``, ``multicast``.
    """

    def __init__(self, key=None, *, select=None, **kwargs):
        if select is not None:
            unknown = set(select) - _SELECTION
            if unknown:
                raise TypeError(f"select: unknown criteria {sorted(unknown)}; known: {sorted(_SELECTION)}")
            both = set(select) & set(kwargs)
            if both:
                raise TypeError(f"given twice: {sorted(both)}")
            kwargs.update(select)
        self._c = _native.Consumer(key=key, **kwargs)

    # -- one message at a time ------------------------------------------

    def recv(self, timeout=None):
        """The next :class:`Message` (``None`` on timeout or after the
        end message). The GIL is released while waiting."""
        return self._c.recv(timeout)

    def __iter__(self):
        """Every message up to and including the end message (after
        :meth:`shutdown`). Release each valid one (``with msg:`` or
        ``msg.release()``) or drop it to give its buffer back."""
        while True:
            m = self._c.recv(None)
            if m is None:
                return
            yield m
            if m.kind == "end":
                return

    # -- batches ----------------------------------------------------------

    def recv_batch(self, max, timeout=None):
        """Up to ``max`` valid spectra, read by the consumer's thread
        straight into ``data``'s rows: ``(meta, data)`` with
        ``meta`` a ``META_DTYPE`` array of ``n`` records and ``data`` an
        ``[n, nchan]`` complex64 array (``[n, nbytes]`` uint8 for raw
        spectra). Waits at most ``timeout`` seconds in all (GIL
        released); other messages go to :meth:`events`."""
        meta, data = self._c.recv_batch(max, timeout)
        return meta.view(META_DTYPE), data

    def read_window(self, t0, t1, integration, baselines, spectral_windows, stokes, channels, timeout=None):
        """Fill ``[time, baseline, channel, pol]`` complex64 data and
        boolean flags (True where no valid spectrum came) for
        ``t0 <= t < t1`` in steps of ``integration``; spectral windows one
        after the other along the channel axis (``channels`` each), stokes
        along the pol axis. Returns ``(data, flags, filled)`` when every
        cell is filled or after ``timeout`` seconds."""
        return self._c.read_window(
            t0, t1, integration, list(baselines), list(spectral_windows), list(stokes), channels, timeout
        )

    def events(self):
        """Messages other than valid spectra that batch calls took."""
        return self._c.events()

    # -- asyncio ------------------------------------------------------------

    async def recv_batch_async(self, max, timeout=None):
        """:meth:`recv_batch` awaited: it waits on a worker thread (GIL
        released), the event loop runs meanwhile."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.recv_batch, max, timeout)

    async def recv_async(self, timeout=None):
        """:meth:`recv` awaited."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._c.recv, timeout)

    async def aiter(self, max_queued=64):
        """``async for msg in consumer.aiter()``: every message up to the
        end message. A thread receives (GIL released while it waits) and
        hands each message to the loop with ``call_soon_threadsafe``; at
        most ``max_queued`` wait for the loop (then the thread waits)."""
        loop = asyncio.get_running_loop()
        queue = asyncio.Queue()
        room = threading.Semaphore(max_queued)
        stop = threading.Event()

        def pump():
            try:
                while not stop.is_set():
                    if not room.acquire(timeout=0.2):
                        continue
                    m = self._c.recv(0.2)
                    if m is None:
                        room.release()
                        if self._c.ended:
                            break
                        continue
                    loop.call_soon_threadsafe(queue.put_nowait, m)
                    if m.kind == "end":
                        return
            except BaseException as e:  # handed to the loop, raised there
                loop.call_soon_threadsafe(queue.put_nowait, e)
                return
            loop.call_soon_threadsafe(queue.put_nowait, None)

        t = threading.Thread(target=pump, name="vys-aiter", daemon=True)
        t.start()
        try:
            while True:
                m = await queue.get()
                room.release()
                if m is None:
                    return
                if isinstance(m, BaseException):
                    raise m
                yield m
                if m.kind == "end":
                    return
        finally:
            stop.set()
            await loop.run_in_executor(None, t.join)

    # -- the rest -----------------------------------------------------------

    def stats(self):
        """Every count so far (a dict)."""
        return self._c.stats()

    def description(self, producer):
        """The latest stream description of ``producer`` (its id): a dict
        (``epoch``, ``instance``, ``data_type``, ``channels``,
        ``first_hz`` / ``width_hz`` or ``frequencies_hz``,
        ``polarizations``, ``baseband``, ``subband``, ``config_name``,
        ``time_epoch``, ``time_unit``, ``integration_ns``), or ``None`` if
        none was heard yet. A spectrum's ``description_epoch`` says which
        epoch it belongs to; a ``description_changed`` message says when a
        new one came."""
        return self._c.description(producer)

    @property
    def ended(self):
        """Whether the end message was taken."""
        return self._c.ended

    def shutdown(self):
        """Stop taking signals; the end message comes last."""
        self._c.shutdown()

    def inject(self, signal):
        """Hand the consumer a signal message received by other means."""
        return self._c.inject(signal)

    def close(self, timeout=5.0):
        """Shut down and take the remaining messages up to the end one
        (their buffers go back); returns the end message's stats."""
        self._c.shutdown()
        end = None
        while not self._c.ended:
            m = self._c.recv(timeout)
            if m is None:
                break
            if m.kind == "end":
                end = m.stats
            m.release()
        for e in self._c.events():
            if e.kind == "end":
                end = e.stats
        return end

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
