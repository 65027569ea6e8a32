//! One rank of the benchmark job. Rank r pins itself to CPU r. Rank 0
//! drives every measurement and writes the results; rank 1 answers: it plays
//! side B of the raw ping-pong, then serves Active Messages until rank 0
//! says the repetition is over.
//!
//! Each repetition runs, in order: raw line ping-pong, AM Short RTT (back to
//! back with the raw one), typed RPC RTT (8 B each way), Medium RTT, Long
//! RTT, Medium and Long one-way throughput, Short flood rate, aggregated
//! 8 B RPC rate, and the AM Short RTT again with rank 1's handlers run
//! only by its progress thread (`Progress::ThreadOnly`), so its cost
//! stands beside the polling peer's of the same repetition. `--rows`
//! ([`Rows`], passed in [`super::rows::ENV`]) leaves out the groups not named.

use super::handlers::{self, Handlers, Shared};
use super::measure::Bench;
use super::pinger::{Pinger, PEER};
use super::pingpong::Line;
use super::plan::{Plan, LONG_OFFSET};
use super::rows::{Group, Rows};
use super::throughput::stream;
use crate::harness::results::{Results, Value};
use crate::harness::worker;
use crate::Common;
use splitrt::am::Progress;
use splitrt::rpc::{Rpc, RpcFn};
use splitrt::{Endpoint, EndpointBuilder, Error, Kind, Payload, Result};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Run this rank; rank 0 writes its measurements to `result`.
pub fn run(common: Common, result: &Path) -> Result<()> {
    let plan = Plan::new(&common);
    let rows = Rows::from_env().map_err(Error::usage)?;
    worker::pin();
    let shared = Arc::new(Shared::default());
    let mut b = EndpointBuilder::new();
    let h = handlers::register(&mut b, &shared, plan.ack_every as u64)?;
    let rpc = Rpc::new(&mut b)?;
    let inc = rpc.register(&mut b, "bench_inc", |_src, x: u64| x.wrapping_add(1))?;
    let ep = b.attach()?;
    worker::two_ranks(ep.size())?;
    let line = Line::of(&ep)?;
    if ep.rank() == 0 {
        let mut bench = Bencher::new(&ep, &plan, rows, &shared, h, &line, inc)?;
        worker::repetitions(&common, Some(""), |rep| {
            ep.barrier()?;
            bench.repetition(rep)?;
            ep.request(PEER, h.done, &[rep as u64 + 1], Payload::None)
        })?;
        worker::write_result(result, 0, &bench.into_results().to_csv())?;
    } else {
        let mut applied = 0;
        for rep in 0..plan.reps {
            ep.barrier()?;
            if rows.has(Group::Rtt) {
                line.side_b(rep as u64 * plan.raw_round_trips(), plan.raw_round_trips());
            }
            loop {
                ep.wait_until(|| {
                    shared.done.load(Ordering::Acquire) > rep as u64
                        || shared.progress_req.load(Ordering::Acquire) != applied
                })?;
                let want = shared.progress_req.load(Ordering::Acquire);
                if want == applied {
                    break;
                }
                applied = want;
                let mode = if want & 1 == 1 {
                    Progress::ThreadOnly
                } else {
                    Progress::Polling
                };
                ep.set_progress(mode)?;
                ep.request(0, h.progress_ack, &[want], Payload::None)?;
            }
        }
    }
    ep.finish()
}

/// Rank 0's side of the measurements.
struct Bencher<'a> {
    am: Pinger<'a>,
    plan: &'a Plan,
    /// The groups of rows measured.
    rows: Rows,
    line: &'a Line<'a>,
    /// Payload source for Medium and Long messages.
    buf: Vec<u8>,
    medium_sizes: Vec<usize>,
    long_sizes: Vec<usize>,
    /// The RPC measured: `x -> x + 1` on `u64`.
    inc: RpcFn<u64, u64>,
    out: Results<Bench>,
    /// Progress-mode requests sent to rank 1.
    progress_seq: u64,
}

/// Calls outstanding in the aggregated RPC rate.
pub(crate) const RPC_WINDOW: usize = 4096;

impl<'a> Bencher<'a> {
    fn new(
        ep: &'a Endpoint,
        plan: &'a Plan,
        rows: Rows,
        shared: &'a Shared,
        h: Handlers,
        line: &'a Line<'a>,
        inc: RpcFn<u64, u64>,
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
        config.extend(plan.config());
        Ok(Bencher {
            am: Pinger::new(ep, shared, h, room),
            plan,
            rows,
            line,
            buf: (0..largest).map(|i| i as u8).collect(),
            medium_sizes,
            long_sizes,
            inc,
            out: Results::with_config(config),
            progress_seq: 0,
        })
    }

    fn into_results(self) -> Results<Bench> {
        self.out
    }

    fn repetition(&mut self, rep: usize) -> Result<()> {
        let p = self.plan;
        if self.rows.has(Group::Rtt) {
            // The baseline and AM Short RTT run back to back.
            let raw = self
                .line
                .side_a(rep as u64 * p.raw_round_trips(), p.raw_warm, p.raw_batches);
            self.out.push_latency(Bench::RawLineRtt, 64, rep, &raw);
            let short = self.am.rtt(Kind::Short, &[], p.rounds(0))?;
            self.out.push_latency(Bench::ShortRtt, 0, rep, &short);
            let rpc = self.rpc_rtt(p)?;
            self.out.push_latency(Bench::RpcRtt, 8, rep, &rpc);
        }
        if self.rows.has(Group::Sizes) {
            for (kind, bench, sizes) in [
                (Kind::Medium, Bench::MediumRtt, self.medium_sizes.clone()),
                (Kind::Long, Bench::LongRtt, self.long_sizes.clone()),
            ] {
                for size in sizes {
                    let m = self.am.rtt(kind, &self.buf[..size], p.rounds(size))?;
                    self.out.push_latency(bench, size, rep, &m);
                }
            }
        }
        if self.rows.has(Group::Bw) {
            for (kind, bench, sizes) in [
                (Kind::Medium, Bench::MediumBw, self.medium_sizes.clone()),
                (Kind::Long, Bench::LongBw, self.long_sizes.clone()),
            ] {
                for size in sizes {
                    let data = &self.buf[..size];
                    let mbs = self
                        .am
                        .stream_mbs(kind, data, p.stream_msgs(size), p.window)?;
                    self.out.push(bench, size, rep, Value::Rate(mbs));
                }
            }
        }
        if self.rows.has(Group::Rate) {
            self.rates(rep)?;
        }
        if self.rows.has(Group::Progress) {
            // Last, so the thread does not share the cores with the rest.
            self.peer_progress(true)?;
            let short = self.am.rtt(Kind::Short, &[], p.rounds(0));
            self.peer_progress(false)?;
            self.out
                .push_latency(Bench::ShortRttProgress, 0, rep, &short?);
        }
        Ok(())
    }

    /// The AM Short flood and the aggregated RPC rate, back to back, the
    /// same number of messages (calls) each.
    fn rates(&mut self, rep: usize) -> Result<()> {
        let (ep, h, p) = (self.am.ep, self.am.h, self.plan);
        let msgs = p.rate_msgs;
        let flood = |_, n| ep.request(PEER, h.sink_short, &[n], Payload::None);
        let acked = &self.am.shared.acked;
        stream(ep, acked, (msgs / 10).max(1), p.window, flood)?;
        let t = stream(ep, acked, msgs, p.window, flood)?;
        self.out.push(
            Bench::ShortRate,
            0,
            rep,
            Value::Rate(msgs as f64 / t.as_secs_f64()),
        );
        self.rpc_rate((msgs / 10).max(1))?;
        let t = self.rpc_rate(msgs)?;
        self.out.push(
            Bench::RpcRate,
            8,
            rep,
            Value::Rate(msgs as f64 / t.as_secs_f64()),
        );
        Ok(())
    }

    /// Have rank 1 run its handlers only on its progress thread (`on`)
    /// or poll itself again, and wait until it does.
    fn peer_progress(&mut self, on: bool) -> Result<()> {
        let (ep, h, shared) = (self.am.ep, self.am.h, self.am.shared);
        self.progress_seq += 1;
        let word = self.progress_seq << 1 | u64::from(on);
        ep.request(PEER, h.progress, &[word], Payload::None)?;
        ep.wait_until(|| shared.progress_ack.load(Ordering::Acquire) == word)
    }

    /// Round trips of one RPC at a time (called, then waited for: the
    /// wait sends it alone); per-batch means (ns).
    fn rpc_rtt(&self, p: &Plan) -> Result<Vec<f64>> {
        let (ep, inc) = (self.am.ep, &self.inc);
        let r = p.rounds(8);
        let mut x = 0u64;
        crate::harness::stats::batch_means(r.warm, r.batches, r.batch, || {
            x += 1;
            check_inc(x, inc.call(ep, PEER, &x)?.wait()?)
        })
    }

    /// `msgs` calls with up to [`RPC_WINDOW`] outstanding (aggregated into
    /// Mediums as the destination's buffer fills; a wait on a call still
    /// buffered sends it), every result checked; the time until the last.
    fn rpc_rate(&self, msgs: usize) -> Result<std::time::Duration> {
        let (ep, inc) = (self.am.ep, &self.inc);
        let mut out = VecDeque::with_capacity(RPC_WINDOW);
        let t = std::time::Instant::now();
        for x in 0..msgs as u64 {
            if out.len() == RPC_WINDOW {
                let (y, f): (u64, splitrt::rpc::RpcFuture<u64>) = out.pop_front().expect("full");
                check_inc(y, f.wait()?)?;
            }
            out.push_back((x, inc.call(ep, PEER, &x)?));
        }
        for (y, f) in out {
            check_inc(y, f.wait()?)?;
        }
        Ok(t.elapsed())
    }
}

fn check_inc(x: u64, got: u64) -> Result<()> {
    if got != x.wrapping_add(1) {
        return Err(Error::usage(format!("RPC bench_inc({x}) returned {got}")));
    }
    Ok(())
}
