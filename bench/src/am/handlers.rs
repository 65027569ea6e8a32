//! The benchmark's Active Message handlers, registered identically on both
//! ranks, and the counters they share with the rank's main thread.
//!
//! * `ping_*` / `pong_*`: echo. A ping carries a sequence number and a
//!   payload; its handler replies with the same sequence number and a payload
//!   of the same size (a Medium echoes the bytes it read in place; a Long
//!   deposits them at [`LONG_OFFSET`] of the requester's segment). The pong
//!   handler publishes the sequence number.
//! * `sink_*`: one-way streams. Each message carries the stream length; the
//!   receiver counts, acknowledges every `ack_every` messages and the last
//!   one (`ack`, carrying the count), and starts over after the last.
//! * `done`: rank 0 tells rank 1 that a repetition's AM measurements ended.
//!
//! Every handler that receives a payload reads one byte of each 64-byte
//! line of it ([`touch`](crate::touch::touch)), so the bytes really move to the receiving core:
//! without that, a Long stream would only measure the sender's copy into
//! lines that stay in its own cache.

use super::plan::LONG_OFFSET;
use crate::touch::touch_incoming;
use splitrt::{EndpointBuilder, Kind, Payload, RequestHandler, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counters written by handlers and read by the rank's main thread.
#[derive(Default)]
pub struct Shared {
    /// Sequence number of the last pong received.
    pub pong: AtomicU64,
    /// Highest stream acknowledgement received.
    pub acked: AtomicU64,
    /// Messages of the current stream received so far.
    pub sunk: AtomicU64,
    /// Repetitions rank 0 has finished (rank 1 waits on it).
    pub done: AtomicU64,
    /// The last progress mode rank 0 asked rank 1 for (`seq << 1 | on`).
    pub progress_req: AtomicU64,
    /// The last such request rank 1 applied (rank 0 waits on it).
    pub progress_ack: AtomicU64,
}

/// Handles of the request handlers a rank sends.
#[derive(Clone, Copy)]
pub struct Handlers {
    /// Short echo request (1 arg: sequence number).
    pub ping_short: RequestHandler,
    /// Medium echo request (1 arg: sequence number).
    pub ping_medium: RequestHandler,
    /// Long echo request (1 arg: sequence number), deposited at
    /// [`LONG_OFFSET`].
    pub ping_long: RequestHandler,
    /// Short stream message (1 arg: stream length).
    pub sink_short: RequestHandler,
    /// Medium stream message (1 arg: stream length).
    pub sink_medium: RequestHandler,
    /// Long stream message (1 arg: stream length).
    pub sink_long: RequestHandler,
    /// End of a repetition (1 arg: repetitions done).
    pub done: RequestHandler,
    /// Rank 0 asks rank 1 to start (`arg & 1`) or stop its progress
    /// thread (1 arg: `seq << 1 | on`).
    pub progress: RequestHandler,
    /// Rank 1 applied that request (1 arg: the request's word).
    pub progress_ack: RequestHandler,
}

/// Register every handler on `b` (the same order on every rank).
pub fn register(b: &mut EndpointBuilder, shared: &Arc<Shared>, ack_every: u64) -> Result<Handlers> {
    let published = |what: fn(&Shared) -> &AtomicU64| {
        let s = shared.clone();
        move |m: &splitrt::Incoming<'_>| {
            touch_incoming(m);
            what(&s).store(m.arg(0), Ordering::Release)
        }
    };
    let pong_short = b.reply("bench_pong_short", Kind::Short, 1, published(|s| &s.pong))?;
    let pong_medium = b.reply("bench_pong_medium", Kind::Medium, 1, published(|s| &s.pong))?;
    let pong_long = b.reply("bench_pong_long", Kind::Long, 1, published(|s| &s.pong))?;
    let ack = b.reply("bench_ack", Kind::Short, 1, published(|s| &s.acked))?;

    let ping_short = b.request("bench_ping_short", Kind::Short, 1, move |tok, m| {
        tok.reply(pong_short, &[m.arg(0)], Payload::None)
            .expect("short pong");
    })?;
    let ping_medium = b.request("bench_ping_medium", Kind::Medium, 1, move |tok, m| {
        tok.reply(pong_medium, &[m.arg(0)], Payload::Medium(m.payload()))
            .expect("medium pong");
    })?;
    let ping_long = b.request("bench_ping_long", Kind::Long, 1, move |tok, m| {
        let view = m.long_payload().expect("a Long");
        // SAFETY: the ping's sender waits for this pong before it sends
        // again, and nothing else writes the ping's landing bytes, so they
        // do not change while the reply copies them out.
        let data = unsafe { view.as_slice() };
        let back = Payload::Long {
            data,
            offset: LONG_OFFSET,
        };
        tok.reply(pong_long, &[m.arg(0)], back).expect("long pong");
    })?;

    let sink = || {
        let s = shared.clone();
        move |tok: splitrt::Token<'_>, m: &splitrt::Incoming<'_>| {
            touch_incoming(m);
            let total = m.arg(0);
            let n = s.sunk.fetch_add(1, Ordering::Relaxed) + 1;
            if n == total {
                s.sunk.store(0, Ordering::Relaxed);
            }
            if n == total || n.checked_rem(ack_every) == Some(0) {
                tok.reply(ack, &[n], Payload::None).expect("stream ack");
            }
        }
    };
    let sink_short = b.request("bench_sink_short", Kind::Short, 1, sink())?;
    let sink_medium = b.request("bench_sink_medium", Kind::Medium, 1, sink())?;
    let sink_long = b.request("bench_sink_long", Kind::Long, 1, sink())?;

    let s = shared.clone();
    let done = b.request("bench_done", Kind::Short, 1, move |_tok, m| {
        s.done.store(m.arg(0), Ordering::Release);
    })?;
    let s = shared.clone();
    let progress = b.request("bench_progress", Kind::Short, 1, move |_tok, m| {
        s.progress_req.store(m.arg(0), Ordering::Release);
    })?;
    let s = shared.clone();
    let progress_ack = b.request("bench_progress_ack", Kind::Short, 1, move |_tok, m| {
        s.progress_ack.store(m.arg(0), Ordering::Release);
    })?;
    Ok(Handlers {
        ping_short,
        ping_medium,
        ping_long,
        sink_short,
        sink_medium,
        sink_long,
        done,
        progress,
        progress_ack,
    })
}
