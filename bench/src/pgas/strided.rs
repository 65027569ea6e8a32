//! Strided put vs the same runs as separate puts (issue 25's target:
//! 1000 runs of 64 B, strided >= 5x faster than 1000 puts over UDP): rank
//! 0 puts 1000 runs of 64 B, 128 B apart, into rank 1 (packed at the
//! source), as one `put_strided` + `sync`, and as 1000 `put`s + one
//! `sync`, alternating batch by batch in the same job; per-batch mean
//! times (ns per transfer of the 1000 runs). Rank 1 serves from a
//! barrier. Used by `splitrt-bench pgas` (shm, both paths) and
//! `splitrt-bench net` (udp).

use splitrt::pgas::{GlobalPtr, Pgas, Shape};
use splitrt::Result;
use std::time::Instant;

/// Runs per transfer.
pub const RUNS: usize = 1000;
/// Bytes per run.
pub const RUN_BYTES: usize = 64;
/// Elements (u64) of the target block: runs `2 * RUN_BYTES` apart.
pub const TARGET_WORDS: usize = RUNS * 2 * RUN_BYTES / 8;

/// Per-batch mean ns of (strided put + sync, 1000 puts + sync), `batches`
/// of `batch` transfers each (after `batch` untimed of each), alternating.
/// On rank 0 only; rank 1 must be in a barrier (or polling) meanwhile.
pub fn measure(
    pg: &Pgas,
    dst: GlobalPtr<u64>,
    batches: usize,
    batch: usize,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let w = RUN_BYTES / 8;
    let src: Vec<u64> = (0..(RUNS * w) as u64).collect();
    let shape = Shape::new(w, &[RUNS])?;
    let strided = || -> Result<()> {
        pg.put_strided(dst, &[2 * w], &src, &[w], &shape)?;
        pg.sync()
    };
    let separate = || -> Result<()> {
        for i in 0..RUNS {
            pg.put(dst.add(i * 2 * w), &src[i * w..(i + 1) * w])?;
        }
        pg.sync()
    };
    let time = |f: &dyn Fn() -> Result<()>| -> Result<f64> {
        let t = Instant::now();
        for _ in 0..batch {
            f()?;
        }
        Ok(t.elapsed().as_nanos() as f64 / batch as f64)
    };
    for _ in 0..batch {
        strided()?;
        separate()?;
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..batches {
        a.push(time(&strided)?);
        b.push(time(&separate)?);
    }
    // the data landed as it should (a wrong fast path is no result)
    let mut back = vec![0u64; TARGET_WORDS];
    pg.read_slice(dst, &mut back)?;
    for i in 0..RUNS {
        if back[i * 2 * w..i * 2 * w + w] != src[i * w..(i + 1) * w] {
            return Err(splitrt::Error::usage(format!(
                "strided bench: run {i} did not land"
            )));
        }
    }
    Ok((a, b))
}
