//! One rank of the vys benchmark job (2 ranks, `SPLITRT_FABRIC=udp`, on
//! one host or two). Rank 0 hosts the producers, rank 1 the consumers;
//! neither pins itself (a producer, a consumer's thread and its
//! application thread are three busy threads; the kernel places them).
//! Per repetition and spectrum size: memcpy and the three-thread pipeline
//! on rank 1 (rank 0 idle), the
//! fabric's get from rank 0 to rank 1 (alone, then while a thread of rank
//! 0 writes flat out), then every stream row; then the failure-rate scan.
//! Rank 1 writes the results.
//!
//! One row: rank 0 creates the producers and rank 1 the consumers (joined
//! to the row's own group); barrier; the producers write flat out while
//! the consumers count their windows; rank 1 says stop, rank 0 stops
//! writing and sends the producers' rates; barrier; the producers go.

use super::baseline;
use super::consume;
use super::coordination::{self, Link};
use super::plan::{Plan, Row, Selection, RING_BYTES};
use super::produce;
use super::record::{Baseline, Counts, RowResult};
use super::stream::Stream;
use crate::harness::worker;
use crate::Common;
use splitrt::pgas::{Pgas, SymArray};
use splitrt::{EndpointBuilder, Error, Result};
use std::path::Path;

/// Run this rank; rank 1 writes its measurements to `result`.
pub fn run(common: Common, result: &Path) -> Result<()> {
    let stream = Stream::from_env().map_err(Error::usage)?;
    let plan = Plan::new(stream.place, common.quick)
        .select(&Selection::from_env().map_err(Error::usage)?)
        .map_err(Error::usage)?;
    let mut b = EndpointBuilder::new();
    let handlers = coordination::register(&mut b)?;
    let pg = Pgas::attach_with(b)?;
    worker::two_ranks(pg.size())?;
    let mut link = Link::new(pg.endpoint().clone(), handlers);
    let area = pg.alloc_sym::<u8>(baseline::GET_AREA)?;
    area.local().fill(0x3c);
    let me = pg.rank();
    let mut w = Worker {
        pg: &pg,
        link: &mut link,
        stream: &stream,
        plan: &plan,
        area: &area,
        out: String::new(),
        phase: 0,
        mismatched: 0,
    };
    w.facts(me, common.quick)?;
    for rep in 0..common.reps as usize {
        for &size in &plan.sizes {
            w.baselines(me, rep, size)?;
            for row in plan.stream_rows(size) {
                w.row(me, rep, &row)?;
            }
        }
        for row in &plan.scan {
            w.row(me, rep, row)?;
        }
    }
    if me == 1 {
        worker::write_result(result, 1, &w.out)?;
    }
    pg.finish()
}

struct Worker<'a> {
    pg: &'a Pgas,
    link: &'a mut Link,
    stream: &'a Stream,
    plan: &'a Plan,
    area: &'a SymArray<u8>,
    /// Rank 1's result text.
    out: String,
    /// Rows run so far (each has its own multicast group).
    phase: usize,
    /// Valid spectra with wrong data so far.
    mismatched: u64,
}

impl Worker<'_> {
    /// The settings and facts rank 1 records: where it ran, both hosts,
    /// ring size, windows, the machine.
    fn facts(&mut self, me: usize, quick: bool) -> Result<()> {
        if me == 0 {
            self.link
                .send_note(&format!("{} {}", self.stream.interface, hostname()))?;
        } else {
            let note = self.link.next_note()?;
            let (ip, host) = note.split_once(' ').unwrap_or((&note, "?"));
            let facts = [
                ("place", self.stream.place.id().to_string()),
                ("quick", quick.to_string()),
                ("producer_host", format!("{host} ({ip})")),
                (
                    "consumer_host",
                    format!("{} ({})", hostname(), self.stream.interface),
                ),
                ("stream_ring_bytes", RING_BYTES.to_string()),
                ("warmup_s", self.plan.warmup.as_secs_f64().to_string()),
                ("window_s", self.plan.window.as_secs_f64().to_string()),
                ("cpus", cpus().to_string()),
                ("cpu", crate::host::cpu_model()),
                ("caches", crate::host::caches()),
                ("loadavg_at_start", crate::host::loadavg()),
                ("build", crate::host::build().to_string()),
            ];
            for (k, v) in facts {
                self.out += &format!("# {k}={v}\n");
            }
        }
        self.link.barrier()
    }

    /// memcpy on rank 1, then the fabric's get from rank 0 to rank 1,
    /// alone and while a thread of rank 0 writes flat out.
    fn baselines(&mut self, me: usize, rep: usize, size: usize) -> Result<()> {
        let slots = super::plan::stream_slots(size);
        if me == 1 {
            let gbps = baseline::memcpy(size, slots, self.plan.baseline);
            self.push_base("memcpy", rep, size, gbps);
            let gbps = baseline::pipeline(size, slots, self.plan.baseline, false);
            self.push_base("pipe", rep, size, gbps);
            let gbps = baseline::pipeline(size, slots, self.plan.baseline, true);
            self.push_base("pipe_cold", rep, size, gbps);
        }
        self.link.barrier()?;
        for (what, loaded) in [("get", false), ("get_loaded", true)] {
            let writer = if loaded && me == 0 {
                Some(
                    baseline::Writer::start(size, slots)
                        .map_err(|e| Error::io("vys bench: starting the writer", e))?,
                )
            } else {
                None
            };
            self.pg.barrier()?;
            if me == 1 {
                let gbps = baseline::get(self.pg, self.area, size, self.plan.baseline)?;
                self.push_base(what, rep, size, gbps);
            }
            self.pg.barrier()?;
            drop(writer);
        }
        Ok(())
    }

    fn push_base(&mut self, what: &str, rep: usize, size: usize, gbps: f64) {
        let b = Baseline {
            what: what.into(),
            rep,
            size,
            gbps,
        };
        self.out += &b.line();
        self.out += "\n";
    }

    /// One stream or scan row.
    fn row(&mut self, me: usize, rep: usize, row: &Row) -> Result<()> {
        self.phase += 1;
        let phase = self.phase as u64;
        let group = self.stream.group(self.phase);
        let io = |what: &'static str| move |e| Error::io(format!("vys bench: {what}"), e);
        if me == 0 {
            let made =
                produce::create(row, self.stream, group).map_err(io("starting producers"))?;
            self.link.barrier()?;
            let running = made.start().map_err(io("starting producer threads"))?;
            let link = &*self.link;
            link.idle_until("the consumers to finish", || {
                link.stopped(phase).unwrap_or(true)
            })?;
            let (producers, written) = running.stop().map_err(io("writing spectra"))?;
            let rate: f64 = written
                .iter()
                .map(|w| w.spectra as f64 / w.secs.max(1e-9))
                .sum();
            let errors: u64 = written.iter().map(|w| w.signal_errors).sum();
            self.link.send_note(&format!("{rate} {errors}"))?;
            self.link.barrier()?;
            drop(producers);
            return Ok(());
        }
        let consumers =
            consume::start(row, self.stream, group).map_err(io("starting consumers"))?;
        self.link.barrier()?;
        let (warmup, window, size) = (self.plan.warmup, self.plan.window, row.size);
        let threads = consumers
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                std::thread::Builder::new()
                    .name(format!("vys-bench-app-{i}"))
                    .spawn(move || consume::count(c, size, warmup, window))
            })
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(io("starting application threads"))?;
        let tallies: Vec<consume::Tally> = threads
            .into_iter()
            .map(|t| t.join().expect("a consumer's application thread panicked"))
            .collect();
        self.link.send_stop(phase)?;
        let note = self.link.next_note()?;
        self.link.barrier()?;
        let mut f = note.split_whitespace();
        let produced_per_s = f.next().and_then(|x| x.parse().ok()).unwrap_or(f64::NAN);
        let signal_errors = f.next().and_then(|x| x.parse().ok()).unwrap_or(0);
        let mut window_counts = Counts::default();
        for t in &tallies {
            window_counts.add(&t.window);
        }
        let r = RowResult {
            key: row.key(),
            rep,
            window_s: window.as_secs_f64(),
            window: window_counts,
            produced_per_s,
            signal_errors,
            checked: tallies.iter().map(|t| t.checked).sum(),
            mismatched: tallies.iter().map(|t| t.mismatched).sum(),
            local_reads: tallies.iter().map(|t| t.stats.local_reads).sum(),
            remote_reads: tallies.iter().map(|t| t.stats.remote_reads).sum(),
        };
        self.mismatched += r.mismatched;
        eprintln!(
            "vys: rep {rep} {} {} B slots {}: produced {:.3} M/s, delivered {:.3} M/s \
             {:.3} GB/s, overwritten {}, mismatched so far {}",
            row.setup.label(),
            row.size,
            row.slots,
            produced_per_s / 1e6,
            r.delivered_per_s() / 1e6,
            r.delivered_gbps(),
            r.window.overwritten,
            self.mismatched
        );
        self.out += &r.line();
        self.out += "\n";
        Ok(())
    }
}

/// This host's name (`?` if unknown).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// CPUs this process may run on.
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}
