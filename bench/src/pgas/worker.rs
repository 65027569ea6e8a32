//! One rank of a PGAS benchmark job (`SPLITRT_RMA` chooses the path). Rank
//! r pins itself to CPU r. Rank 0 drives every measurement and writes the
//! results; rank 1 is the target: it waits in barriers (serving AM-path
//! requests from there) and plays its part of the peer-written-line reads,
//! the put ping-pong and the stores.
//!
//! Each repetition runs, in order: rank-0-alone latencies and sync costs,
//! peer-written-line reads, put and put_signal ping-pongs, the team
//! collectives beside their references, then per size memcpy, put and get
//! bandwidth, then store throughput, then strided vs separate puts.

use super::bandwidth::{self, Buffers};
use super::collective;
use super::latency::{self, WORDS};
use super::measure::Bench;
use super::plan::{Plan, DIRTY_STRIDE};
use super::signal;
use super::store;
use crate::harness::results::Results;
use crate::harness::worker;
use crate::Common;
use splitrt::pgas::Pgas;
use splitrt::Result;
use std::path::Path;

/// Run this rank; rank 0 writes its measurements to `result`.
pub fn run(common: Common, result: &Path) -> Result<()> {
    let plan = Plan::new(&common);
    worker::pin();
    let pg = Pgas::attach()?;
    worker::two_ranks(pg.size())?;
    let words = pg.alloc_sym::<u64>(WORDS)?;
    let mut lines = pg.alloc_sym::<u64>(plan.dirty_lines * DIRTY_STRIDE / 8)?;
    let mut area = pg.alloc_sym::<u8>(plan.area)?;
    let strided_area = pg.alloc_sym::<u64>(super::strided::TARGET_WORDS)?;
    let sigs = pg.alloc_signals(signal::WORDS)?;
    let hand = pg.alloc_sym::<u64>(collective::HAND_WORDS)?;
    let mut bufs = Buffers::new(&plan, pg.rank());
    let mut out: Results<Bench> = Results::with_config(config(&pg, &plan));
    bandwidth::prefault(&pg, &mut area, &mut bufs)?;
    let label = format!("{:?} path: ", pg.rma_path());
    worker::repetitions(&common, (pg.rank() == 0).then_some(&*label), |rep| {
        latency::solo(&pg, &plan, &words, rep, &mut out)?;
        latency::peer_written_reads(&pg, &plan, &mut lines, rep, &mut out)?;
        latency::ping_pong(&pg, &plan, &words, rep, &mut out)?;
        signal::ping_pong(&pg, &plan, &words, &sigs, rep, &mut out)?;
        collective::run(&pg, &plan, &hand, rep, &mut out)?;
        bandwidth::run(&pg, &plan, &mut area, &mut bufs, rep, &mut out)?;
        store::run(&pg, &plan, &area, &bufs.src, rep, &mut out)?;
        if pg.rank() == 0 {
            let (batches, batch) = if plan.quick { (3, 2) } else { (10, 10) };
            let dst = strided_area.ptr(1);
            let (a, b) = super::strided::measure(&pg, dst, batches, batch)?;
            out.push_latency(Bench::StridedPut, 0, rep, &a);
            out.push_latency(Bench::SeparatePuts, 0, rep, &b);
        }
        pg.barrier()
    })?;
    if pg.rank() == 0 {
        worker::write_result(result, 0, &out.to_csv())?;
    }
    pg.finish()
}

/// The settings rank 0 reports with its measurements.
fn config(pg: &Pgas, plan: &Plan) -> Vec<(&'static str, String)> {
    let ep = pg.endpoint();
    let path = match pg.rma_path() {
        splitrt::pgas::RmaPath::Native => "native",
        splitrt::pgas::RmaPath::Am => "am",
    };
    let mut config = crate::host::job_config(ep, ep.max_medium(1 - pg.rank()).unwrap_or(0));
    config.extend([
        ("rma", path.to_string()),
        ("area", plan.area.to_string()),
        ("window", plan.window.to_string()),
        ("batch", plan.batch.to_string()),
        ("batches", plan.batches.to_string()),
        ("dirty_lines", plan.dirty_lines.to_string()),
        ("reps", plan.reps.to_string()),
        ("quick", plan.quick.to_string()),
    ]);
    config
}
