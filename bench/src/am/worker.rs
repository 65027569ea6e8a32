//! One rank of the benchmark job. Rank r pins itself to CPU r. Rank 0
//! drives every measurement and writes the results; rank 1 answers: it plays
//! side B of the raw ping-pong, then serves Active Messages until rank 0
//! says the repetition is over.
//!
//! Each repetition runs, in order: raw line ping-pong, AM Short RTT (back to
//! back with the raw one), Medium RTT, Long RTT, Medium and Long one-way
//! throughput, Short flood rate.

use super::handlers::{self, Handlers, Shared};
use super::latency::{round_trips, Rounds};
use super::measure::Bench;
use super::pingpong::Line;
use super::plan::{Plan, LONG_OFFSET, LONG_STREAM_AREA};
use super::throughput::stream;
use crate::harness::results::{Results, Value};
use crate::harness::stats::p50_p99;
use crate::harness::worker;
use crate::Common;
use splitrt::{Endpoint, EndpointBuilder, Error, Payload, Result};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// The rank that answers.
const PEER: usize = 1;

/// Run this rank; rank 0 writes its measurements to `result`.
pub fn run(common: Common, result: &Path) -> Result<()> {
    let plan = Plan::new(&common);
    worker::pin();
    let shared = Arc::new(Shared::default());
    let mut b = EndpointBuilder::new();
    let h = handlers::register(&mut b, &shared, plan.ack_every as u64)?;
    let ep = b.attach()?;
    worker::two_ranks(ep.size())?;
    let line = Line::of(&ep)?;
    if ep.rank() == 0 {
        let mut bench = Bencher::new(&ep, &plan, &shared, h, &line)?;
        for rep in 0..plan.reps {
            let t = Instant::now();
            ep.barrier()?;
            bench.repetition(rep)?;
            ep.request(PEER, h.done, &[rep as u64 + 1], Payload::None)?;
            worker::rep_done(&common, "", rep, t);
        }
        worker::write_result(result, 0, &bench.into_results().to_csv())?;
    } else {
        for rep in 0..plan.reps {
            ep.barrier()?;
            line.side_b(rep as u64 * plan.raw_round_trips(), plan.raw_round_trips());
            ep.wait_until(|| shared.done.load(Ordering::Acquire) > rep as u64)?;
        }
    }
    ep.finish()
}

/// Rank 0's side of the measurements.
struct Bencher<'a> {
    ep: &'a Endpoint,
    plan: &'a Plan,
    shared: &'a Shared,
    h: Handlers,
    line: &'a Line<'a>,
    /// Last ping sequence number used.
    seq: u64,
    /// Payload source for Medium and Long messages.
    buf: Vec<u8>,
    medium_sizes: Vec<usize>,
    long_sizes: Vec<usize>,
    /// Bytes from [`LONG_OFFSET`] to the end of the smaller segment.
    long_room: usize,
    out: Results<Bench>,
}

impl<'a> Bencher<'a> {
    fn new(
        ep: &'a Endpoint,
        plan: &'a Plan,
        shared: &'a Shared,
        h: Handlers,
        line: &'a Line<'a>,
    ) -> Result<Self> {
        let max_medium = ep.max_medium(PEER)?;
        // Long payloads land at LONG_OFFSET in both segments.
        let room = ep
            .max_long(PEER)?
            .min(ep.segment_len())
            .saturating_sub(LONG_OFFSET as usize);
        if room < 8 {
            return Err(Error::usage(format!(
                "segments of {} B leave no room for Long payloads at offset {LONG_OFFSET}",
                ep.segment_len()
            )));
        }
        let medium_sizes = plan.medium_sizes(max_medium);
        let long_sizes = plan.long_sizes(max_medium, room);
        let largest = medium_sizes
            .iter()
            .chain(&long_sizes)
            .copied()
            .max()
            .unwrap_or(8);
        let mut config = crate::host::job_config(ep, max_medium);
        config.extend([
            ("window", plan.window.to_string()),
            ("ack_every", plan.ack_every.to_string()),
            ("batch", plan.batch.to_string()),
            ("batches", plan.batches.to_string()),
            ("raw_batches", plan.raw_batches.to_string()),
            ("reps", plan.reps.to_string()),
            ("quick", plan.quick.to_string()),
        ]);
        Ok(Bencher {
            ep,
            plan,
            shared,
            h,
            line,
            seq: 0,
            buf: (0..largest).map(|i| i as u8).collect(),
            medium_sizes,
            long_sizes,
            long_room: room,
            out: Results::with_config(config),
        })
    }

    fn into_results(self) -> Results<Bench> {
        self.out
    }

    fn record(&mut self, bench: Bench, size: usize, rep: usize, value: Value) {
        self.out.push(bench, size, rep, value);
    }

    fn record_latency(&mut self, bench: Bench, size: usize, rep: usize, batch_means: &[f64]) {
        let (p50_ns, p99_ns) = p50_p99(batch_means);
        self.record(bench, size, rep, Value::Latency { p50_ns, p99_ns });
    }

    fn repetition(&mut self, rep: usize) -> Result<()> {
        let p = self.plan;
        // The baseline and AM Short RTT run back to back.
        let raw = self
            .line
            .side_a(rep as u64 * p.raw_round_trips(), p.raw_warm, p.raw_batches);
        self.record_latency(Bench::RawLineRtt, 64, rep, &raw);
        let short = self.rtt(0, |ep, h, seq, _| {
            ep.request(PEER, h.ping_short, &[seq], Payload::None)
        })?;
        self.record_latency(Bench::ShortRtt, 0, rep, &short);

        for size in self.medium_sizes.clone() {
            let m = self.rtt(size, |ep, h, seq, data| {
                ep.request(PEER, h.ping_medium, &[seq], Payload::Medium(data))
            })?;
            self.record_latency(Bench::MediumRtt, size, rep, &m);
        }
        for size in self.long_sizes.clone() {
            let m = self.rtt(size, |ep, h, seq, data| {
                ep.request(PEER, h.ping_long, &[seq], long(data))
            })?;
            self.record_latency(Bench::LongRtt, size, rep, &m);
        }

        for size in self.medium_sizes.clone() {
            let mbs = self.bandwidth(size, |ep, h, n, data, _| {
                ep.request(PEER, h.sink_medium, &[n], Payload::Medium(data))
            })?;
            self.record(Bench::MediumBw, size, rep, Value::Rate(mbs));
        }
        for size in self.long_sizes.clone() {
            let mbs = self.bandwidth(size, |ep, h, n, data, offset| {
                ep.request(PEER, h.sink_long, &[n], Payload::Long { data, offset })
            })?;
            self.record(Bench::LongBw, size, rep, Value::Rate(mbs));
        }

        let (ep, h, msgs) = (self.ep, self.h, p.rate_msgs);
        let flood = |_, n| ep.request(PEER, h.sink_short, &[n], Payload::None);
        stream(ep, &self.shared.acked, (msgs / 10).max(1), p.window, flood)?;
        let t = stream(ep, &self.shared.acked, msgs, p.window, flood)?;
        self.record(
            Bench::ShortRate,
            0,
            rep,
            Value::Rate(msgs as f64 / t.as_secs_f64()),
        );
        Ok(())
    }

    /// Round trips of `size`-byte pings (`send(ep, handlers, seq, payload)`);
    /// returns per-batch means (ns).
    fn rtt(
        &mut self,
        size: usize,
        send: impl Fn(&Endpoint, &Handlers, u64, &[u8]) -> Result<()>,
    ) -> Result<Vec<f64>> {
        let rounds = Rounds {
            warm: self.plan.warm_for(size),
            batch: self.plan.batch_for(size),
            batches: self.plan.batches,
        };
        let (ep, h, data) = (self.ep, &self.h, &self.buf[..size]);
        round_trips(ep, &self.shared.pong, &mut self.seq, rounds, |seq| {
            send(ep, h, seq, data)
        })
    }

    /// One-way stream of `size`-byte messages (`send(ep, handlers,
    /// stream_len, payload, long_offset)`), after a warm-up stream; returns
    /// MB/s. Long messages land in a ring of slots starting at
    /// [`LONG_OFFSET`], one per message in flight (up to
    /// [`LONG_STREAM_AREA`] bytes), so no deposit overwrites a payload the
    /// receiver has not read yet and consecutive messages do not fight over
    /// the same cache lines.
    fn bandwidth(
        &mut self,
        size: usize,
        send: impl Fn(&Endpoint, &Handlers, u64, &[u8], u64) -> Result<()>,
    ) -> Result<f64> {
        let msgs = self.plan.stream_msgs(size);
        let stride = size.div_ceil(64) * 64;
        let slots =
            (self.long_room.min(LONG_STREAM_AREA) / stride).clamp(1, self.plan.window) as u64;
        let (ep, h, data, acked) = (self.ep, &self.h, &self.buf[..size], &self.shared.acked);
        let mut one =
            |i: u64, n: u64| send(ep, h, n, data, LONG_OFFSET + (i % slots) * stride as u64);
        stream(ep, acked, (msgs / 10).max(1), self.plan.window, &mut one)?;
        let t = stream(ep, acked, msgs, self.plan.window, &mut one)?;
        Ok((msgs * size) as f64 / t.as_secs_f64() / 1e6)
    }
}

/// A Long payload landing at [`LONG_OFFSET`].
fn long(data: &[u8]) -> Payload<'_> {
    Payload::Long {
        data,
        offset: LONG_OFFSET,
    }
}
