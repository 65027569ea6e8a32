//! The references measured in the same job as the streams: memcpy of one
//! spectrum at a time from a ring-sized area into one buffer (what a
//! consumer's read must do at the least, on the consumer's host), and the
//! UDP fabric's own get between the two ranks, pipelined (many gets in
//! flight, as a consumer keeps many reads outstanding): alone, and while a
//! thread of rank 0 writes memory flat out as a producer does (on a
//! machine with few CPUs that thread takes one of them, as the producer
//! does while its read server serves). And the same host's ceiling for
//! a stream: a pipeline of three plain threads doing what a producer, a
//! consumer and its application do, with no vys in between.

use splitrt::pgas::{Pgas, SymArray};
use splitrt::vys::ring::slot_bytes;
use splitrt::Result;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// GB/s through a pipeline of three plain threads on this host, the
/// work of one stream without vys: a writer stores `size`-byte chunks
/// flat out into an area of `slots` slots (a producer), a copier copies
/// one chunk at a time out of it into one of 256 buffers (a consumer's
/// read), a checker reads every copied buffer once and hands it back (an
/// application checking each spectrum). Buffers travel by bounded
/// channels; the rate is bytes checked per second over about `time`. On a
/// machine with fewer CPUs than busy threads this, not one thread's
/// memcpy, is what a stream can deliver at most. The copier takes the
/// newest chunk (cache-hot: the ceiling), or with `lagged` the chunk half
/// the area behind the writer (as cold as what a consumer that fell
/// behind reads).
pub fn pipeline(size: usize, slots: usize, time: Duration, lagged: bool) -> f64 {
    let lag = if lagged { (slots as u64 / 2).max(1) } else { 1 };
    let words = size.div_ceil(8);
    let stride = slot_bytes(size) / 8;
    let area: Arc<Vec<AtomicU64>> =
        Arc::new((0..slots * stride).map(|_| AtomicU64::new(0)).collect());
    let written = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (area, written, stop) = (area.clone(), written.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let base = (n as usize % slots) * stride;
                for (i, w) in area[base..base + words].iter().enumerate() {
                    w.store(n ^ i as u64, Ordering::Relaxed);
                }
                n += 1;
                written.store(n, Ordering::Release);
            }
        })
    };
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Vec<u64>>(256);
    let (free_tx, free_rx) = std::sync::mpsc::channel::<Vec<u64>>();
    for _ in 0..256 {
        let _ = free_tx.send(vec![0u64; words]);
    }
    let checker = std::thread::spawn(move || {
        let mut checked = 0usize;
        let mut sum = 0u64;
        while let Ok(b) = full_rx.recv() {
            for &w in &b {
                sum = sum.wrapping_add(w);
            }
            checked += b.len() * 8;
            if free_tx.send(b).is_err() {
                break;
            }
        }
        black_box(sum);
        checked
    });
    let t = Instant::now();
    while t.elapsed() < time {
        let Ok(mut b) = free_rx.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        let n = written.load(Ordering::Acquire);
        let base = (n.saturating_sub(lag) as usize % slots) * stride;
        for (o, w) in b.iter_mut().zip(&area[base..base + words]) {
            *o = w.load(Ordering::Relaxed);
        }
        if full_tx.send(b).is_err() {
            break;
        }
    }
    drop(full_tx);
    let checked = checker.join().unwrap_or(0);
    let e = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = writer.join();
    checked as f64 / e.as_secs_f64() / 1e9
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
