//! The consumer side of a measurement (rank 1): each consumer takes every
//! spectrum of every producer, and an application thread per consumer
//! takes its messages off the queue, checks every valid spectrum's data
//! against the producer's checkable pattern and counts outcomes inside a
//! window: it opens `warmup` after the consumer's first message and lasts
//! `window`. Then the consumer is shut down and drained to its `End`.

use super::plan::{Reads, Row};
use super::record::Counts;
use super::stream::Stream;
use splitrt::vys::checkable;
use splitrt::vys::consumer::{
    Consumer, ConsumerConfig, ConsumerStats, Message, Spectrum, Verification,
};
use splitrt::vys::ring::slot_bytes;
use std::io;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

/// Longest wait for a consumer's first message before its window opens
/// anyway (and counts nothing).
const FIRST_MESSAGE: Duration = Duration::from_secs(10);
/// Bytes of data buffers a consumer may hold at most (its pool).
const POOL_BYTES: usize = 256 << 20;
/// Mismatches printed per consumer at most (all are counted).
const PRINTED: u64 = 5;

/// The settings of the row's consumers: buffers for 256 MiB of spectra
/// (64 to 4096 of them), and as many reads outstanding per producer as
/// the get baseline keeps gets in flight (8 MiB worth, 4 to 256).
fn config(row: &Row, stream: &Stream, group: SocketAddrV4) -> ConsumerConfig {
    let mut c = ConsumerConfig::new(stream.key, group, stream.interface);
    c.max_spectrum_bytes = row.size;
    c.data_buffers = (POOL_BYTES / slot_bytes(row.size)).clamp(64, c.data_buffers);
    c.max_outstanding_reads = super::baseline::in_flight(row.size);
    c.local_reads = row.setup.reads == Reads::Local;
    c
}

/// Start the row's consumers (each joined to the group when this
/// returns).
pub fn start(row: &Row, stream: &Stream, group: SocketAddrV4) -> io::Result<Vec<Consumer>> {
    (0..row.setup.consumers)
        .map(|_| {
            let mut c = config(row, stream, group);
            c.apply_settings(|k| std::env::var(k).ok())?;
            Consumer::start(c, |_, _, pass| pass.fill(true))
        })
        .collect()
}

/// What one consumer's application thread found.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    /// Outcomes inside the window.
    pub window: Counts,
    /// Valid spectra over the whole run (every one checked).
    pub checked: u64,
    /// Valid spectra whose data is not the producer's.
    pub mismatched: u64,
    /// The consumer's own counters at its end.
    pub stats: ConsumerStats,
}

/// Whether a valid spectrum holds exactly the data its producer wrote
/// for its identity and timestamp.
fn content_ok(s: &Spectrum, size: usize) -> bool {
    let p = &s.product;
    p.spectrum_bytes as usize == size
        && s.data().len() == size
        && checkable::matches(
            (p.stations, p.spectral_window, p.stokes),
            s.info.timestamp,
            s.data(),
        )
}

impl Tally {
    /// Count one message (inside the window or not); `false` at `End`.
    fn take(&mut self, m: Message, size: usize, inside: bool) -> bool {
        let mut c = Counts::default();
        match m {
            Message::Valid(s) => {
                self.checked += 1;
                if !content_ok(&s, size) {
                    self.mismatched += 1;
                    if self.mismatched <= PRINTED {
                        eprintln!(
                            "vys bench: MISMATCH: spectrum seq {} of producer {:016x} \
                             (stations {:?}, spw {}, stokes {}, timestamp {}, {} B) was \
                             delivered as valid but its data is not the producer's",
                            s.info.seq,
                            s.product.producer,
                            s.product.stations,
                            s.product.spectral_window,
                            s.product.stokes,
                            s.info.timestamp,
                            s.data().len()
                        );
                    }
                } else {
                    c.valid = 1;
                    c.bytes = size as u64;
                }
            }
            Message::VerificationFailure { cause, .. } => match cause {
                Verification::Overwritten => c.overwritten = 1,
                Verification::DigestMismatch => c.digest_mismatch = 1,
            },
            Message::ReadFailure { error, .. } => {
                if self.window.read_failures == 0 && inside {
                    eprintln!("vys bench: read failure: {error}");
                }
                c.read_failures = 1;
            }
            Message::DataBufferStarvation { spectra } => c.starved = spectra,
            Message::SignalBufferStarvation { signals } => c.signals_lost = signals,
            Message::QueueAlert { dropped, .. } => c.queue_dropped = dropped,
            Message::SignalReceiveFailure { .. }
            | Message::VersionMismatch { .. }
            | Message::ProducerGone { .. }
            | Message::MappedBytesLimit { .. }
            | Message::DescriptionChanged { .. } => c.other = 1,
            Message::End { stats, .. } => {
                self.stats = stats;
                return false;
            }
        }
        if inside {
            self.window.add(&c);
        }
        true
    }
}

/// Take `c`'s messages: count them inside the window, then shut it down
/// and drain it to `End`.
pub fn count(c: Consumer, size: usize, warmup: Duration, window: Duration) -> Tally {
    let mut t = Tally::default();
    let started = Instant::now();
    let mut win: Option<(Instant, Instant)> = None;
    loop {
        let m = c.recv(Duration::from_millis(10));
        let now = Instant::now();
        if win.is_none() && (m.is_some() || now - started > FIRST_MESSAGE) {
            let open = now + warmup;
            win = Some((open, open + window));
        }
        let (open, close) = win.unwrap_or((now + warmup, now + warmup));
        if now >= close {
            if let Some(m) = m {
                t.take(m, size, false);
            }
            break;
        }
        if let Some(m) = m {
            t.take(m, size, now >= open);
        }
    }
    c.shutdown();
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        match c.recv(Duration::from_millis(100)) {
            Some(m) => {
                if !t.take(m, size, false) {
                    break;
                }
            }
            None => continue,
        }
    }
    t
}
