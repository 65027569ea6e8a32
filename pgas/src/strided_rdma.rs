//! The RDMA path of strided and indexed transfers: on a fabric with the
//! one-sided capability (ibverbs, the verbs model) and the native RMA
//! path, a transfer's remote runs go to the fabric as one list
//! ([`OneSided::put_runs_nb`](splitrt_am::OneSided::put_runs_nb) /
//! [`get_runs`](splitrt_am::OneSided::get_runs)): one RDMA write or read
//! per run, posted back to back, no handler on the target. A put is
//! complete at the next `sync` / `quiet` (the fabric's quiet), a get on
//! return. Everything else (UDP, `SPLITRT_RMA=am`) takes the AM path
//! (`strided_am.rs`).

use crate::context::Inner;
use crate::strided_shape::RunList;
use splitrt_am::Result;
use splitrt_runtime::config::RmaPath;
use std::sync::atomic::Ordering;

impl Inner {
    /// Put the packed stream (made by `stream`, only on this path) into
    /// `remote`'s runs at `rank` by RDMA writes; `None`: no such path
    /// (send messages instead).
    pub(crate) fn put_runs_direct(
        &self,
        rank: usize,
        remote: &RunList<'_>,
        stream: impl FnOnce() -> Vec<u8>,
    ) -> Option<Result<()>> {
        if self.path != RmaPath::Native {
            return None;
        }
        let one = self.ep.rma().one_sided()?;
        let runs: Vec<(u64, u64)> = remote.iter().collect();
        let stream = stream();
        // quiet from now on: a write may be posted before an error
        self.direct_puts.store(true, Ordering::Relaxed);
        Some(
            one.put_runs_nb(rank, &runs, &stream)
                .map_err(|e| e.at_rank(self.rank)),
        )
    }

    /// Read `remote`'s runs at `rank` into the packed `staged` by RDMA
    /// reads, complete on return; `None`: no such path.
    pub(crate) fn get_runs_direct(
        &self,
        rank: usize,
        remote: &RunList<'_>,
        staged: &mut [u8],
    ) -> Option<Result<()>> {
        if self.path != RmaPath::Native {
            return None;
        }
        let one = self.ep.rma().one_sided()?;
        let runs: Vec<(u64, u64)> = remote.iter().collect();
        Some(
            one.get_runs(rank, &runs, staged)
                .map_err(|e| e.at_rank(self.rank)),
        )
    }
}
