//! Store throughput: rank 0 stores N messages of S bytes from consecutive
//! slots of its private source buffer into consecutive addresses of rank
//! 1's landing area (`pg.store`, no acknowledgement);
//! rank 1 waits with `pg.store_sync(N * S)`, reads 1 byte per 64 B line of
//! everything that arrived, then enters a barrier. Rank 0's clock runs from
//! just before its first store until it leaves that barrier, which it does
//! as soon as rank 1's arrival reaches it: one one-way message after rank
//! 1 has read the data. One untimed round first.

use super::measure::Bench;
use super::plan::Plan;
use crate::harness::results::{Results, Value};
use crate::touch::touch_view;
use splitrt::pgas::{Pgas, SymArray};
use splitrt::Result;
use std::time::Instant;

/// Every store size. Both ranks call it.
pub fn run(
    pg: &Pgas,
    plan: &Plan,
    area: &SymArray<u8>,
    src: &[u8],
    rep: usize,
    out: &mut Results<Bench>,
) -> Result<()> {
    for &size in &plan.store_sizes {
        let n = plan.store_msgs(size);
        let bytes = n * size;
        for round in 0..2 {
            pg.barrier()?;
            if pg.rank() == 0 {
                let dst = area.ptr(1);
                let t = Instant::now();
                for j in 0..n {
                    pg.store(dst.add(j * size), &src[j * size..(j + 1) * size])?;
                }
                pg.barrier()?;
                let mbs = bytes as f64 / t.elapsed().as_secs_f64() / 1e6;
                if round > 0 {
                    out.push(Bench::StoreBw, size, rep, Value::Rate(mbs));
                }
            } else {
                pg.store_sync(bytes as u64)?;
                touch_view(area.local().slice(..bytes));
                pg.barrier()?;
            }
        }
    }
    Ok(())
}
