//! [`Rma`]: the narrow one-sided access an endpoint lends the layer above
//! (the PGAS layer's native and RDMA paths), instead of the whole runtime
//! [`World`](splitrt_runtime::World), through which raw packets (any tag,
//! deposits anywhere in a peer's segment) could be sent.
//!
//! Everything it offers is either checked or raw: writes are bounds
//! checked by the fabric and refused where they would touch a range
//! splitrt reserved for itself (as a user Long payload is) or a frozen
//! one; reads are
//! bounds checked; segments come as [`SegmentRef`]s, address ranges that
//! only `unsafe` code can dereference.

use crate::endpoint::{Endpoint, Inner};
use splitrt_runtime::fabric::{Fabric, SegmentRef};
use splitrt_runtime::{Error, Result};

impl Endpoint {
    /// One-sided access to the job's segments for layers built on top
    /// (the PGAS layer): checked writes and reads, raw segment ranges.
    pub fn rma(&self) -> Rma<'_> {
        Rma { inner: &self.inner }
    }
}

/// One-sided access to the job's segments through an endpoint's fabric
/// (see [`Endpoint::rma`](crate::Endpoint::rma)). Borrows the endpoint,
/// which owns the fabric and so the mappings.
#[derive(Clone, Copy)]
pub struct Rma<'a> {
    pub(crate) inner: &'a Inner,
}

impl Rma<'_> {
    /// Length of `peer`'s segment (0 if `peer` is not a rank of the job).
    pub fn segment_len(&self, peer: usize) -> usize {
        if peer >= self.inner.size {
            return 0;
        }
        self.inner.fabric_ref().segment_len(peer)
    }

    /// This rank's segment as mapped in this process. A raw range: only
    /// `unsafe` code dereferences it, and only while the endpoint (which
    /// owns the mapping) lives; other ranks and threads write it
    /// concurrently.
    pub fn local_segment(&self) -> SegmentRef {
        self.inner.fabric_ref().local_segment()
    }

    /// `peer`'s segment when this process maps it (a rank of this host on
    /// the shm fabric), with its owner's doorbell; as raw as
    /// [`local_segment`](Self::local_segment).
    pub fn peer_segment(&self, peer: usize) -> Option<SegmentRef> {
        if peer >= self.inner.size {
            return None;
        }
        self.inner.fabric_ref().peer_segment(peer)
    }

    /// Copy `peer`'s segment at `off` into `dst` one-sidedly (RDMA read),
    /// complete on return. `None`: the fabric has no one-sided path to
    /// `peer`. An error if the range is outside `peer`'s segment.
    #[inline]
    pub fn get_direct(&self, peer: usize, off: u64, dst: &mut [u8]) -> Option<Result<()>> {
        self.inner.fabric_ref().get_direct(peer, off, dst)
    }

    /// Copy `src` into `peer`'s segment at `off` one-sidedly (RDMA write),
    /// complete at the peer on return. `None`: no one-sided path. An error
    /// if the range is outside `peer`'s segment, touches a range splitrt
    /// reserved for itself, or touches a frozen range (every rank freezes
    /// the same ones; the peer may hold references over them).
    #[inline]
    pub fn put_direct(&self, peer: usize, off: u64, src: &[u8]) -> Option<Result<()>> {
        // SAFETY: the guard lives in this frame and drops before it returns.
        let _writing = unsafe { crate::writers::writing() };
        if let Err(e) = self.check_write(peer, off, src.len()) {
            return Some(Err(e));
        }
        self.inner.fabric_ref().put_direct(peer, off, src)
    }

    /// [`put_direct`](Self::put_direct) that returns once `src` is copied
    /// out; complete at the peer by the next [`quiet`](Self::quiet).
    /// `None`: no such path for this peer or size.
    #[inline]
    pub fn put_direct_nb(&self, peer: usize, off: u64, src: &[u8]) -> Option<Result<()>> {
        // SAFETY: the guard lives in this frame and drops before it returns.
        let _writing = unsafe { crate::writers::writing() };
        if let Err(e) = self.check_write(peer, off, src.len()) {
            return Some(Err(e));
        }
        self.inner.fabric_ref().put_direct_nb(peer, off, src)
    }

    /// Wait until every [`put_direct_nb`](Self::put_direct_nb) is complete
    /// at its peer.
    pub fn quiet(&self) -> Result<()> {
        self.inner.fabric_ref().rma_quiet()
    }

    /// Neither reserved nor frozen (one load while nothing is frozen).
    #[inline]
    fn check_write(&self, peer: usize, off: u64, len: usize) -> Result<()> {
        let at = |e: Error| e.at_rank(self.inner.rank).with_peer(peer);
        self.inner.check_user_deposit(off, len as u64).map_err(at)?;
        match self.inner.frozen().find(off, len as u64) {
            None => Ok(()),
            Some(r) => Err(at(frozen_put(peer, off, len, r))),
        }
    }
}

/// Why a direct put into a frozen range is refused.
#[cold]
#[inline(never)]
fn frozen_put(peer: usize, off: u64, len: usize, r: std::ops::Range<u64>) -> Error {
    Error::usage(format!(
        "a direct put to rank {peer} at segment offset {off:#x} ({len} B) refused: bytes \
         {:#x}..{:#x} are frozen (a frozen array is read-only on every rank until it is thawed)",
        r.start, r.end
    ))
}
