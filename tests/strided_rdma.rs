//! Strided / indexed transfers and `put_signal` as RDMA over the verbs
//! model (issue 25; ranks as threads, `test-doubles`): on the native RMA
//! path a strided or indexed put is RDMA writes and a get RDMA reads, so
//! they complete while the target does not poll at all (an AM transfer
//! waits for the target's handler); `put_signal`'s data is an RDMA write
//! followed by the signal message, so a waiter that sees the signal sees
//! the data (small data through a send buffer, large data by a blocking
//! write), on both RMA paths.

mod common;

use splitrt::pgas::{Cmp, Pgas, RmaPath, Shape, SignalOp};
use splitrt::Error;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long the target stays away from its endpoint (longer than any
/// RDMA transfer here needs; an AM transfer cannot finish meanwhile).
const AWAY: Duration = Duration::from_secs(10);

fn fail(msg: String) -> Error {
    Error::usage(msg)
}

/// A flag the ranks (threads) share outside the job: rank 0 raises it
/// once its transfers completed; rank 1 waits for it without polling.
#[derive(Clone, Default)]
struct Flag(Arc<(Mutex<bool>, Condvar)>);

impl Flag {
    fn raise(&self) {
        *self.0 .0.lock().unwrap() = true;
        self.0 .1.notify_all();
    }

    /// Whether it was raised within `limit`.
    fn wait(&self, limit: Duration) -> bool {
        let g = self.0 .0.lock().unwrap();
        let (g, _) = self.0 .1.wait_timeout_while(g, limit, |up| !*up).unwrap();
        *g
    }
}

/// Rank 0 puts 1000 runs of 64 B (more work requests than the send queue
/// holds), an indexed list with a run longer than a send buffer and runs
/// that straddle buffers, and reads both back strided / indexed, while
/// rank 1 is away from its endpoint.
fn no_target_progress(pg: Pgas, flag: Flag) -> splitrt::Result<()> {
    let w = 8; // u64 per run
    let a = pg.alloc_sym::<u64>(16 * 1000 + 4096)?;
    pg.barrier()?;
    if pg.rank() == 0 {
        let src: Vec<u64> = (0..8000u64).map(|x| x * 3 + 1).collect();
        let shape = Shape::new(w, &[1000])?;
        pg.put_strided(a.ptr(1), &[2 * w], &src, &[w], &shape)?;
        pg.sync()?;
        let mut back = vec![0u64; 8000];
        pg.get_strided(a.ptr(1), &[2 * w], &mut back, &[w], &shape)?;
        if back != src {
            return Err(fail("strided put / get over RDMA: the data differs".into()));
        }
        // indexed: 1500 elements (12 000 B, longer than an 8 KiB send
        // buffer) then three short runs, into the tail of the block
        let base = 16 * 1000;
        let runs = [
            (base, 1500),
            (base + 2000, 7),
            (base + 3000, 1),
            (base + 1600, 300),
        ];
        let isrc: Vec<u64> = (0..1808u64).map(|x| x ^ 0x5a5a).collect();
        pg.put_indexed(a.ptr(1), &runs, &isrc, &[(0, 1808)])?;
        pg.sync()?;
        let mut iback = vec![0u64; 1808];
        pg.get_indexed(a.ptr(1), &runs, &mut iback, &[(0, 1808)])?;
        if iback != isrc {
            return Err(fail("indexed put / get over RDMA: the data differs".into()));
        }
        flag.raise();
    } else if !flag.wait(AWAY) {
        // let rank 0 finish (its transfers need this rank's handlers),
        // then report
        pg.barrier()?;
        return Err(fail(format!(
            "rank 0's strided / indexed transfers did not complete within {AWAY:?} while \
             this rank did not poll: they travel as messages, not RDMA"
        )));
    }
    pg.barrier()
}

#[test]
fn strided_rdma_completes_without_the_target_polling() {
    let flag = Flag::default();
    common::verbs_model::pgas_on_threads("strided-rdma", 2, RmaPath::Native, 4 << 20, 71, {
        move |pg| no_target_progress(pg, flag.clone())
    });
}

/// Every rank `put_signal`s a block (`len` u64) and a signal into its
/// right neighbour, alternately Add and Set; the neighbour waits for the
/// signal and then finds the whole block.
fn put_signal_order(pg: Pgas, len: usize) -> splitrt::Result<()> {
    let (me, n) = (pg.rank(), pg.size());
    let right = (me + 1) % n;
    let data = pg.alloc_sym::<u64>(len)?;
    let sig = pg.alloc_signals(2)?;
    pg.barrier()?;
    for round in 1..=4u64 {
        let block: Vec<u64> = (0..len as u64)
            .map(|x| x + round * 1000 + me as u64)
            .collect();
        let (op, i, want) = if round % 2 == 1 {
            (SignalOp::Add, 0, round.div_ceil(2))
        } else {
            (SignalOp::Set, 1, round)
        };
        pg.put_signal(
            data.ptr(right),
            &block,
            sig.at(right, i),
            op,
            if op == SignalOp::Add { 1 } else { round },
        )?;
        sig.wait_until(i, Cmp::Ge, want)?;
        let left = (me + n - 1) % n;
        let mut got = vec![0u64; len];
        pg.read_slice(data.ptr(me), &mut got)?;
        let expect: Vec<u64> = (0..len as u64)
            .map(|x| x + round * 1000 + left as u64)
            .collect();
        if got != expect {
            return Err(fail(format!(
                "round {round}: the signal arrived before its data ({len} u64)"
            )));
        }
        pg.sync()?;
        pg.barrier()?;
    }
    Ok(())
}

macro_rules! put_signal_jobs {
    ($($name:ident: $n:expr, $rma:expr, $len:expr;)*) => {$(
        #[test]
        fn $name() {
            common::verbs_model::pgas_on_threads("put-signal-rdma", $n, $rma, 4 << 20, 72 + $n as u64, |pg| {
                put_signal_order(pg, $len)
            });
        }
    )*};
}

put_signal_jobs! {
    // 512 B: through a send buffer; 80 000 B: a blocking RDMA write
    strided_rdma_put_signal_small_native_3_ranks: 3, RmaPath::Native, 64;
    strided_rdma_put_signal_large_native_3_ranks: 3, RmaPath::Native, 10_000;
    strided_rdma_put_signal_small_am_3_ranks: 3, RmaPath::Am, 64;
    strided_rdma_put_signal_large_am_2_ranks: 2, RmaPath::Am, 10_000;
}

#[path = "progs/quiet.rs"]
mod quiet_prog;

/// `quiet_peer` covers strided puts and `put_signal` over the verbs model
/// too, both RMA paths (RDMA writes are completed by the fabric's
/// per-peer quiet; `tests/quiet.rs` runs the same modes over shm and UDP):
/// rank 1 finds the data (and the signal) right after rank 0's
/// `quiet_peer(1)`.
#[test]
fn strided_rdma_quiet_peer_covers_strided_and_put_signal() {
    use common::verbs_model::{config, job, on_threads, unique};
    use splitrt::runtime::config::Config;
    for mode in ["strided", "put_signal"] {
        for (rma, seed) in [(RmaPath::Native, 81), (RmaPath::Am, 82)] {
            let id = unique("strided-quiet");
            let dir = std::env::temp_dir();
            on_threads(2, seed, Duration::from_secs(60), move |r, dev| {
                let j = job(&id, r, 2);
                let cfg = Config {
                    rma,
                    ..config(8 << 20, 16)
                };
                quiet_prog::run_on(mode, &dir, move |b| {
                    Pgas::attach_over_verbs_model(b, j, cfg, dev)
                })
            });
        }
    }
}
