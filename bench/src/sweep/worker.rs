//! One rank of a sweep job. Rank r pins itself to CPU r. Rank 0 drives
//! every measurement; rank 1 answers the raw ping-pong (compare mode only)
//! and otherwise waits in a barrier, serving Active Messages (and AM-path
//! one-sided requests) from there.

use super::{Bench, Mode, Plan, ENV_MODE};
use crate::am::handlers::{self, Shared};
use crate::am::pinger::{Pinger, PEER};
use crate::am::pingpong::Line;
use crate::am::plan::{LONG_OFFSET, LONG_STREAM_AREA};
use crate::harness::results::{Results, Value};
use crate::harness::worker;
use crate::touch::touch;
use crate::Common;
use splitrt::pgas::{Pgas, SymArray};
use splitrt::{EndpointBuilder, Error, Kind, Result};
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The job's mode from [`ENV_MODE`].
fn mode() -> Result<Mode> {
    let v = std::env::var(ENV_MODE).unwrap_or_default();
    Mode::parse(&v).ok_or_else(|| Error::usage(format!("{ENV_MODE}={v:?}: unknown sweep mode")))
}

/// Run this rank; rank 0 writes its measurements to `result`.
pub fn run(common: Common, result: &Path) -> Result<()> {
    let plan = Plan::new(mode()?, &common);
    worker::pin();
    let shared = Arc::new(Shared::default());
    let mut b = EndpointBuilder::new();
    let h = handlers::register(&mut b, &shared, plan.ack_every as u64)?;
    let pg = Pgas::attach_with(b)?;
    worker::two_ranks(pg.size())?;
    let ep = pg.endpoint().clone();
    // The Long landing zone of the AM handlers is [LONG_OFFSET, +16 MiB +
    // the largest payload): reserve it on the symmetric heap so nothing
    // else lands there.
    let zone_len = if plan.quick {
        4 << 20
    } else {
        LONG_STREAM_AREA
    };
    let zone = pg.alloc_sym::<u8>(LONG_OFFSET as usize + zone_len)?;
    if zone.ptr(0).offset() > LONG_OFFSET {
        return Err(Error::usage("the Long landing zone overlaps the PGAS heap"));
    }
    let line_block = pg.alloc_sym::<u8>(128)?;
    let line_off = (line_block.ptr(0).offset() as usize).div_ceil(64) * 64;
    let line = Line::at(&ep, line_off)?;
    let mut area = pg.alloc_sym::<u8>(plan.area)?;
    let max_medium = ep.max_medium(PEER)?;
    let long_room = ep.max_long(PEER)?.min(zone_len);
    let max_long = long_room.min(plan.area).min(super::MAX_SIZE);

    if pg.rank() == 0 {
        let mut config = crate::host::job_config(&ep, max_medium);
        config.extend([
            ("mode", plan.mode.name().to_string()),
            ("rma", format!("{:?}", pg.rma_path()).to_lowercase()),
        ]);
        config.extend(plan.config());
        let mut r = Rank0 {
            pg: &pg,
            plan: &plan,
            am: Pinger::new(pg.endpoint(), &shared, h, long_room),
            src: (0..plan.area).map(|i| i as u8).collect(),
            dst: vec![0x5a; plan.area],
            out: Results::with_config(config),
        };
        // Fault in rank 1's area through our mapping and both buffers.
        pg.put(area.ptr(1), &r.src)?;
        pg.sync()?;
        pg.read_slice(area.ptr(1), &mut r.dst)?;
        area.local().fill(1);
        let label = format!("{} ", plan.mode.name());
        worker::repetitions(&common, Some(&label), |rep| {
            pg.barrier()?;
            if plan.raw() {
                let base = rep as u64 * plan.raw_round_trips();
                let means = line.side_a(base, plan.raw_warm, plan.raw_batches);
                r.out.push_latency(Bench::RawLineRtt, 64, rep, &means);
            }
            r.repetition(rep, max_medium, max_long, &mut area)?;
            pg.barrier()
        })?;
        worker::write_result(result, 0, &r.out.to_csv())?;
    } else {
        for rep in 0..plan.reps {
            pg.barrier()?;
            if plan.raw() {
                line.side_b(rep as u64 * plan.raw_round_trips(), plan.raw_round_trips());
            }
            pg.barrier()?;
        }
    }
    pg.finish()
}

/// Rank 0's side.
struct Rank0<'a> {
    pg: &'a Pgas,
    plan: &'a Plan,
    am: Pinger<'a>,
    /// Source of every payload.
    src: Vec<u8>,
    /// Destination of gets.
    dst: Vec<u8>,
    out: Results<Bench>,
}

impl Rank0<'_> {
    fn repetition(
        &mut self,
        rep: usize,
        max_medium: usize,
        max_long: usize,
        area: &mut SymArray<u8>,
    ) -> Result<()> {
        let plan = self.plan;
        let sizes = |b: Bench| plan.sizes(b, max_medium, max_long);
        let pg = self.pg;
        for (kind, bench) in [
            (Kind::Short, Bench::ShortRtt),
            (Kind::Medium, Bench::MediumRtt),
            (Kind::Long, Bench::LongRtt),
        ] {
            for size in sizes(bench) {
                let m = self.am.rtt(kind, &self.src[..size], plan.rounds(size))?;
                self.out.push_latency(bench, size, rep, &m);
            }
        }
        let remote = area.ptr(1);
        for size in sizes(Bench::GetRtt) {
            let m = self.timed(size, |me| pg.read_slice(remote, &mut me.dst[..size]))?;
            self.out.push_latency(Bench::GetRtt, size, rep, &m);
        }
        for size in sizes(Bench::PutRtt) {
            let m = self.timed(size, |me| {
                pg.put(remote, &me.src[..size])?;
                pg.sync()
            })?;
            self.out.push_latency(Bench::PutRtt, size, rep, &m);
        }
        for (kind, bench) in [(Kind::Medium, Bench::MediumBw), (Kind::Long, Bench::LongBw)] {
            for size in sizes(bench) {
                let data = &self.src[..size];
                let mbs = self
                    .am
                    .stream_mbs(kind, data, plan.stream_msgs(size), plan.window)?;
                self.out.push(bench, size, rep, Value::Rate(mbs));
            }
        }
        for size in sizes(Bench::PutBw) {
            let mbs = self.windows(size, |me, first, k| {
                for j in first..first + k {
                    pg.put(remote.add(j * size), &me.src[j * size..(j + 1) * size])?;
                }
                pg.sync()
            })?;
            self.out.push(Bench::PutBw, size, rep, Value::Rate(mbs));
        }
        for size in sizes(Bench::GetBw) {
            let mbs = self.windows(size, |me, first, k| {
                let region = &mut me.dst[first * size..(first + k) * size];
                pg.scope(|s| {
                    for (j, part) in region.chunks_mut(size).enumerate() {
                        s.get(remote.add((first + j) * size), part)?;
                    }
                    Ok(())
                })?;
                touch(&me.dst[first * size..(first + k) * size]);
                Ok(())
            })?;
            self.out.push(Bench::GetBw, size, rep, Value::Rate(mbs));
        }
        if plan.mode == Mode::Compare {
            for size in sizes(Bench::PutBw) {
                // SAFETY: rank 0's area is its own: rank 1 never reads or
                // writes it (every remote access targets rank 1's), and
                // this slice is the only access to it here.
                let own = unsafe { area.local().as_mut_slice() };
                let mbs = self.windows(size, |me, first, k| {
                    let r = first * size..(first + k) * size;
                    own[r.clone()].copy_from_slice(&me.src[r]);
                    black_box(own.as_mut_ptr());
                    Ok(())
                })?;
                self.out.push(Bench::Memcpy, size, rep, Value::Rate(mbs));
            }
        }
        Ok(())
    }

    /// Batches of a blocking operation; per-batch means (ns).
    fn timed(
        &mut self,
        size: usize,
        mut op: impl FnMut(&mut Self) -> Result<()>,
    ) -> Result<Vec<f64>> {
        let (batch, batches) = (self.plan.batch_for(size), self.plan.batches);
        let warm = self.plan.warm_for(size);
        crate::harness::stats::batch_means(warm, batches, batch, || op(self))
    }

    /// Rounds of `k` operations on consecutive slots of the area
    /// (`round(self, first_slot, k)`), warm-up first; MB/s.
    fn windows(
        &mut self,
        size: usize,
        mut round: impl FnMut(&mut Self, usize, usize) -> Result<()>,
    ) -> Result<f64> {
        let fit = (self.plan.area / size.max(1)).max(1);
        let k = self.plan.window.min(fit).max(1);
        let slots = fit / k * k;
        let timed = self.plan.stream_msgs(size).div_ceil(k);
        let mut slot = 0;
        let mut next = || {
            let s = slot;
            slot = (slot + k) % slots;
            s
        };
        for _ in 0..(timed / 10).max(1) {
            round(self, next(), k)?;
        }
        let t = Instant::now();
        for _ in 0..timed {
            round(self, next(), k)?;
        }
        Ok((timed * k * size) as f64 / t.elapsed().as_secs_f64() / 1e6)
    }
}
