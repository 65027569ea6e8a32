//! The references measured in the same job as the streams: memcpy of one
//! spectrum at a time from a ring-sized area into one buffer (what a
//! consumer's read must do at the least, on the consumer's host), and the
//! UDP fabric's own get between the two ranks, pipelined (many gets in
//! flight, as a consumer keeps many reads outstanding): alone, and while a
//! thread of rank 0 writes memory flat out as a producer does (on a
//! machine with few CPUs that thread takes one of them, as the producer
//! does while its read server serves).

use splitrt::pgas::vys::ring::slot_bytes;
use splitrt::pgas::{Pgas, SymArray};
use splitrt::Result;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes of rank 0's area the gets read from.
pub const GET_AREA: usize = 16 << 20;
/// Bytes in flight per batch of gets (at most 256 gets); a remote
/// consumer keeps as many bytes of reads outstanding.
pub const IN_FLIGHT_BYTES: usize = 8 << 20;

/// Operations in flight of `size` bytes each: [`IN_FLIGHT_BYTES`] worth,
/// 4 to 256 of them (gets in a batch, a consumer's outstanding reads).
pub fn in_flight(size: usize) -> usize {
    (IN_FLIGHT_BYTES / size).clamp(4, 256)
}

/// GB/s of copying `size`-byte spectra, one after the other, out of an
/// area of `slots` slots (the ring's layout: a slot's stride is
/// `slot_bytes(size)`) into one buffer, for about `time`.
pub fn memcpy(size: usize, slots: usize, time: Duration) -> f64 {
    let stride = slot_bytes(size);
    let area = vec![0x5au8; slots * stride];
    let mut buf = vec![0u8; size];
    let mut copied = 0usize;
    let mut slot = 0usize;
    let t = Instant::now();
    loop {
        for _ in 0..16 {
            let at = slot * stride + 16;
            buf.copy_from_slice(black_box(&area[at..at + size]));
            black_box(&mut buf);
            slot = if slot + 1 == slots { 0 } else { slot + 1 };
        }
        copied += 16 * size;
        let e = t.elapsed();
        if e >= time {
            return copied as f64 / e.as_secs_f64() / 1e9;
        }
    }
}

/// GB/s of `size`-byte gets from `area` on rank 0 into this rank, in
/// batches of [`in_flight`] gets, for about `time` (rank 0 must be
/// polling meanwhile, e.g. in a barrier).
pub fn get(pg: &Pgas, area: &SymArray<u8>, size: usize, time: Duration) -> Result<f64> {
    let k = in_flight(size);
    let mut bufs: Vec<Vec<u8>> = (0..k).map(|_| vec![0u8; size]).collect();
    let per_area = (GET_AREA / size).max(1);
    let mut next = 0usize;
    let mut bytes = 0usize;
    let t = Instant::now();
    loop {
        pg.scope(|s| {
            for b in bufs.iter_mut() {
                s.get(area.ptr(0).add((next % per_area) * size), b)?;
                next += 1;
            }
            Ok(())
        })?;
        bytes += k * size;
        let e = t.elapsed();
        if e >= time {
            return Ok(bytes as f64 / e.as_secs_f64() / 1e9);
        }
    }
}

/// A thread writing `size`-byte chunks flat out into a ring-sized area,
/// as a producer does, until stopped.
pub struct Writer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Start writing `size`-byte chunks into an area of `slots` slots.
    pub fn start(size: usize, slots: usize) -> std::io::Result<Writer> {
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name("vys-bench-writer".into())
            .spawn(move || {
                let stride = slot_bytes(size);
                let mut area = vec![0u8; slots * stride];
                let src = vec![0xa5u8; size];
                let mut slot = 0usize;
                while !st.load(Ordering::Relaxed) {
                    for _ in 0..16 {
                        let at = slot * stride + 16;
                        area[at..at + size].copy_from_slice(black_box(&src));
                        slot = if slot + 1 == slots { 0 } else { slot + 1 };
                    }
                    black_box(&mut area);
                }
            })?;
        Ok(Writer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
