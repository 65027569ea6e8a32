//! Rank 0's side of the AM measurements every AM benchmark makes (`am`,
//! the sweeps, `breakdown`): round trips of Short / Medium / Long pings and
//! one-way Medium / Long streams to rank 1, through the benchmark's
//! [`handlers`](super::handlers).

use super::handlers::{Handlers, Shared};
use super::latency::{round_trips, Rounds};
use super::plan::{LONG_OFFSET, LONG_STREAM_AREA};
use super::throughput::stream;
use splitrt::{Endpoint, Kind, Payload, Result};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The rank that answers.
pub const PEER: usize = 1;

/// Rank 0's sender of pings and streams.
pub struct Pinger<'a> {
    /// Rank 0's endpoint.
    pub ep: &'a Endpoint,
    /// The counters the handlers publish.
    pub shared: &'a Shared,
    /// The registered handlers.
    pub h: Handlers,
    /// Last ping sequence number used.
    seq: u64,
    /// Bytes from [`LONG_OFFSET`] Long payloads may land in.
    long_room: usize,
}

impl<'a> Pinger<'a> {
    /// A sender whose Long payloads land within `long_room` bytes from
    /// [`LONG_OFFSET`].
    pub fn new(ep: &'a Endpoint, shared: &'a Shared, h: Handlers, long_room: usize) -> Self {
        Pinger {
            ep,
            shared,
            h,
            seq: 0,
            long_room,
        }
    }

    /// Round trips of pings of `kind` carrying `data` (none for Short; a
    /// Long lands at [`LONG_OFFSET`]); returns per-batch means (ns).
    pub fn rtt(&mut self, kind: Kind, data: &[u8], rounds: Rounds) -> Result<Vec<f64>> {
        let (ep, h, pong) = (self.ep, self.h, &self.shared.pong);
        let seq = &mut self.seq;
        match kind {
            Kind::Short => round_trips(ep, pong, seq, rounds, |s| {
                ep.request(PEER, h.ping_short, &[s], Payload::None)
            }),
            Kind::Medium => round_trips(ep, pong, seq, rounds, |s| {
                ep.request(PEER, h.ping_medium, &[s], Payload::Medium(data))
            }),
            Kind::Long => round_trips(ep, pong, seq, rounds, |s| {
                let p = Payload::Long {
                    data,
                    offset: LONG_OFFSET,
                };
                ep.request(PEER, h.ping_long, &[s], p)
            }),
        }
    }

    /// A one-way stream of `msgs` Medium or Long messages carrying `data`
    /// (at most `window` unacknowledged), after a warm-up stream of a tenth
    /// of it; returns MB/s. Long messages land in a ring of slots starting
    /// at [`LONG_OFFSET`], one per message in flight (up to
    /// [`LONG_STREAM_AREA`] bytes), so no deposit overwrites a payload the
    /// receiver has not read yet and consecutive messages do not fight over
    /// the same cache lines.
    pub fn stream_mbs(&self, kind: Kind, data: &[u8], msgs: usize, window: usize) -> Result<f64> {
        let size = data.len();
        let stride = size.div_ceil(64) * 64;
        let slots = (self.long_room.min(LONG_STREAM_AREA) / stride).clamp(1, window) as u64;
        let (ep, h, acked) = (self.ep, self.h, &self.shared.acked);
        let t = match kind {
            Kind::Long => warm_and_time(ep, acked, msgs, window, |i, n| {
                let offset = LONG_OFFSET + (i % slots) * stride as u64;
                ep.request(PEER, h.sink_long, &[n], Payload::Long { data, offset })
            })?,
            _ => warm_and_time(ep, acked, msgs, window, |_, n| {
                ep.request(PEER, h.sink_medium, &[n], Payload::Medium(data))
            })?,
        };
        Ok((msgs * size) as f64 / t.as_secs_f64() / 1e6)
    }
}

/// A warm-up stream of a tenth of `msgs`, then the timed one.
fn warm_and_time(
    ep: &Endpoint,
    acked: &AtomicU64,
    msgs: usize,
    window: usize,
    mut one: impl FnMut(u64, u64) -> Result<()>,
) -> Result<Duration> {
    stream(ep, acked, (msgs / 10).max(1), window, &mut one)?;
    stream(ep, acked, msgs, window, &mut one)
}
