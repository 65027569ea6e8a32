//! Per-peer completion: `Pgas::quiet_peer(rank)` waits only for the puts
//! to one rank (OpenSHMEM's `shmem_quiet` on a context that talks to one
//! PE, UPC++'s per-target futures), where `sync` waits for everything.
//!
//! Local vs remote completion of a put, on every path:
//!
//! * `put` returns once its source is **reusable** (local completion):
//!   the bytes were stored into a mapped segment (shm, the hybrid's host:
//!   then they are also visible), handed to the fabric (a Long over UDP,
//!   copied into datagrams), or copied out to a bounce buffer (a small
//!   RDMA write).
//! * `quiet_peer(rank)` / `sync` return once they are **visible** at the
//!   target (remote completion): acknowledged by the target's handler on
//!   the AM path, the RDMA write complete on the native path over
//!   ibverbs, and at once (after a fence) for mapped segments.
//! * `write` / `write_slice` are both at once: they return when visible.

use crate::context::Pgas;
use splitrt_am::{Error, Result};

impl Pgas {
    /// Wait until every put this rank issued to `rank` is visible there
    /// (plain, strided and indexed puts, `put_signal`, signals and
    /// non-fetching atomics), serving traffic meanwhile; puts to other
    /// ranks are not waited for (gets are completed by their own handles
    /// and [`sync`](Self::sync)). Reports failures peers sent back, as
    /// `sync` does. An error if `rank` is not a rank of the job.
    ///
    /// `put` returns once its source may be reused (local completion);
    /// this gives remote completion for one target:
    ///
    /// ```no_run
    /// # fn f(pg: &splitrt_pgas::Pgas, a: &splitrt_pgas::SymArray<u64>) -> splitrt_am::Result<()> {
    /// let right = (pg.rank() + 1) % pg.size();
    /// let mut row = vec![1u64; 64];
    /// pg.put(a.at(right, 0), &row)?; // `row` may be reused now...
    /// row.fill(2);
    /// pg.quiet_peer(right)?; // ...and the first row is visible at `right`
    /// # Ok(()) }
    /// ```
    pub fn quiet_peer(&self, rank: usize) -> Result<()> {
        let i = &self.inner;
        if rank >= i.size {
            return Err(Error::usage(format!(
                "Pgas::quiet_peer: rank {rank} does not exist in a job of {} ranks",
                i.size
            ))
            .at_rank(i.rank));
        }
        if i.direct_puts.load(std::sync::atomic::Ordering::Relaxed) {
            i.ep.rma().quiet_peer(rank).map_err(|e| e.at_rank(i.rank))?;
        }
        if let Some(books) = i.st.peer_puts.get() {
            let want = books.issued(rank);
            let done = || books.done(rank) >= want;
            if !done() {
                let what = || {
                    format!(
                        "in Pgas::quiet_peer({rank}) for {} put(s) still unacknowledged",
                        want.saturating_sub(books.done(rank))
                    )
                };
                i.wait_through(&what, done)?;
            }
        }
        crate::full_fence::full_fence();
        i.take_errors()
    }
}
