//! The RDMA path of `put_signal`: on a fabric with the one-sided
//! capability (ibverbs, the verbs model) and the native RMA path, the
//! data is an RDMA write (non-blocking through a send buffer when it fits
//! one, else a blocking write from the source) and the signal the
//! ordinary `splitrt.signal` Short request posted after it on the same
//! reliable-connected queue pair: RC places the write's bytes before the
//! later send arrives, so the handler's update (with release ordering)
//! follows the data, as a Long's header frame follows its payload. The
//! verbs (and the model) have no remote atomics or write-with-immediate,
//! so the update itself stays a message; `SignalOp::Add` and `Set` both
//! work this way.

use crate::context::Inner;
use crate::ptr::GlobalPtr;
use crate::signal_word::SignalOp;
use splitrt_am::Result;
use splitrt_runtime::config::RmaPath;
use std::sync::atomic::Ordering;

impl Inner {
    /// `put_signal` of the checked `bytes` at (`rank`, `off`) and the
    /// checked signal `sig` by RDMA write then the signal message;
    /// `None`: no such path.
    pub(crate) fn put_signal_direct(
        &self,
        rank: usize,
        off: u64,
        bytes: &[u8],
        sig: GlobalPtr<u64>,
        op: SignalOp,
        value: u64,
    ) -> Option<Result<()>> {
        if self.path != RmaPath::Native {
            return None;
        }
        let one = self.ep.rma().one_sided()?;
        let r = (|| {
            if one.put_nb(rank, off, bytes)? {
                self.direct_puts.store(true, Ordering::Relaxed);
            } else {
                one.put(rank, off, bytes)?;
            }
            self.signal(sig, op, value)
        })();
        Some(r.map_err(|e| e.at_rank(self.rank)))
    }
}
