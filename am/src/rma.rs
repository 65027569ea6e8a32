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
use splitrt_runtime::fabric::{Fabric, LoadStore, RemoteMemory, SegmentRef};
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

impl<'a> Rma<'a> {
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

    /// The load/store capability: peers' segments mapped in this process
    /// (the shm fabric, and the hybrid's shm side), through which the
    /// layer above loads and stores directly. `None`: the fabric maps no
    /// peer's segment (UDP, RDMA); use messages or
    /// [`one_sided`](Self::one_sided).
    pub fn load_store(&self) -> Option<Mapped<'a>> {
        let fabric = self.inner.fabric_ref().load_store()?;
        Some(Mapped {
            inner: self.inner,
            fabric,
        })
    }

    /// The one-sided capability: checked RDMA writes and reads into every
    /// peer's segment. `None`: the fabric has none (shared memory, UDP);
    /// use [`load_store`](Self::load_store) or messages.
    #[inline]
    pub fn one_sided(&self) -> Option<OneSided<'a>> {
        let fabric = self.inner.fabric_ref().remote_memory()?;
        Some(OneSided {
            inner: self.inner,
            fabric,
        })
    }

    /// `peer`'s segment when this process maps it (a rank of this host on
    /// the shm fabric), with its owner's doorbell; as raw as
    /// [`local_segment`](Self::local_segment). Shorthand for
    /// [`load_store`](Self::load_store) and [`Mapped::peer_segment`].
    pub fn peer_segment(&self, peer: usize) -> Option<SegmentRef> {
        self.load_store()?.peer_segment(peer)
    }

    /// Copy `peer`'s segment at `off` into `dst` one-sidedly (RDMA read),
    /// complete on return. `None`: the fabric has no one-sided path to
    /// `peer`. An error if the range is outside `peer`'s segment.
    /// Shorthand for [`one_sided`](Self::one_sided) and [`OneSided::get`].
    #[inline]
    pub fn get_direct(&self, peer: usize, off: u64, dst: &mut [u8]) -> Option<Result<()>> {
        Some(self.one_sided()?.get(peer, off, dst))
    }

    /// Copy `src` into `peer`'s segment at `off` one-sidedly (RDMA write),
    /// complete at the peer on return. `None`: no one-sided path. An error
    /// as for [`OneSided::put`], of which this is a shorthand.
    #[inline]
    pub fn put_direct(&self, peer: usize, off: u64, src: &[u8]) -> Option<Result<()>> {
        Some(self.one_sided()?.put(peer, off, src))
    }

    /// [`put_direct`](Self::put_direct) that returns once `src` is copied
    /// out; complete at the peer by the next [`quiet`](Self::quiet).
    /// `None`: no such path for this peer or size. Shorthand for
    /// [`OneSided::put_nb`].
    #[inline]
    pub fn put_direct_nb(&self, peer: usize, off: u64, src: &[u8]) -> Option<Result<()>> {
        match self.one_sided()?.put_nb(peer, off, src) {
            Ok(true) => Some(Ok(())),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Wait until every non-blocking one-sided put
    /// ([`OneSided::put_nb`]) is complete at its peer (nothing to wait
    /// for without the one-sided capability).
    pub fn quiet(&self) -> Result<()> {
        self.one_sided().map_or(Ok(()), |o| o.quiet())
    }

    /// [`quiet`](Self::quiet) for the puts to `peer` only.
    pub fn quiet_peer(&self, peer: usize) -> Result<()> {
        self.one_sided().map_or(Ok(()), |o| o.quiet_peer(peer))
    }
}

/// The load/store capability of an endpoint's fabric (see
/// [`Rma::load_store`]): peers' segments mapped in this process.
#[derive(Clone, Copy)]
pub struct Mapped<'a> {
    inner: &'a Inner,
    fabric: &'a dyn LoadStore,
}

impl Mapped<'_> {
    /// `peer`'s segment if it is mapped here (`None`: a rank of another
    /// host, or not a rank of the job), with its owner's doorbell (a
    /// direct write wakes the owner through
    /// [`SegmentRef::wake_owner`]). A raw range, as
    /// [`Rma::local_segment`].
    pub fn peer_segment(&self, peer: usize) -> Option<SegmentRef> {
        if peer >= self.inner.size {
            return None;
        }
        self.fabric.peer_segment(peer)
    }
}

/// The one-sided capability of an endpoint's fabric (see
/// [`Rma::one_sided`]): RDMA writes and reads, writes checked against
/// the ranges splitrt reserved and the frozen ones.
#[derive(Clone, Copy)]
pub struct OneSided<'a> {
    inner: &'a Inner,
    fabric: &'a dyn RemoteMemory,
}

impl OneSided<'_> {
    /// Copy `peer`'s segment at `off` into `dst`, complete on return. An
    /// error if the range is outside `peer`'s segment.
    #[inline]
    pub fn get(&self, peer: usize, off: u64, dst: &mut [u8]) -> Result<()> {
        self.fabric.get(peer, off, dst)
    }

    /// Copy `src` into `peer`'s segment at `off`, complete at the peer on
    /// return. An error if the range is outside `peer`'s segment, touches
    /// a range splitrt reserved for itself, or touches a frozen range
    /// (every rank freezes the same ones; the peer may hold references
    /// over them).
    #[inline]
    pub fn put(&self, peer: usize, off: u64, src: &[u8]) -> Result<()> {
        // SAFETY: the guard lives in this frame and drops before it returns.
        let _writing = unsafe { crate::writers::writing() };
        check_write(self.inner, peer, off, src.len())?;
        self.fabric.put(peer, off, src)
    }

    /// [`put`](Self::put) that returns once `src` is copied out
    /// (`Ok(true)`), complete at the peer by the next
    /// [`quiet`](Self::quiet); `Ok(false)`, having done nothing: not for
    /// this size (use `put`). Errors as for `put`.
    #[inline]
    pub fn put_nb(&self, peer: usize, off: u64, src: &[u8]) -> Result<bool> {
        // SAFETY: the guard lives in this frame and drops before it returns.
        let _writing = unsafe { crate::writers::writing() };
        check_write(self.inner, peer, off, src.len())?;
        self.fabric.put_nb(peer, off, src)
    }

    /// Wait until every [`put_nb`](Self::put_nb) is complete at its peer.
    pub fn quiet(&self) -> Result<()> {
        self.fabric.quiet()
    }

    /// Wait until every [`put_nb`](Self::put_nb) to `peer` is complete
    /// there (those to other peers may still be in flight).
    pub fn quiet_peer(&self, peer: usize) -> Result<()> {
        self.fabric.quiet_peer(peer)
    }

    /// Write the packed `src` into `peer`'s segment as `runs` ((segment
    /// offset, length) each, in order, lengths summing to `src.len()`):
    /// a strided or indexed put as RDMA writes, one per run, posted back
    /// to back. Returns once `src` is copied out; complete at the peer by
    /// the next [`quiet`](Self::quiet). Every run is checked first, as
    /// [`put`](Self::put) checks its range; on an error nothing is
    /// written.
    pub fn put_runs_nb(&self, peer: usize, runs: &[(u64, u64)], src: &[u8]) -> Result<()> {
        // SAFETY: the guard lives in this frame and drops before it returns.
        let _writing = unsafe { crate::writers::writing() };
        for &(off, len) in runs {
            let n = usize::try_from(len).map_err(|_| Error::usage("a run longer than memory"))?;
            check_write(self.inner, peer, off, n)?;
        }
        self.fabric.put_runs_nb(peer, runs, src)
    }

    /// Read `runs` ((segment offset, length), in order) of `peer`'s
    /// segment into the packed `dst` (lengths summing to `dst.len()`):
    /// a strided or indexed get as RDMA reads, one per run, complete on
    /// return. An error if a run is outside `peer`'s segment.
    pub fn get_runs(&self, peer: usize, runs: &[(u64, u64)], dst: &mut [u8]) -> Result<()> {
        self.fabric.get_runs(peer, runs, dst)
    }
}

/// Neither reserved nor frozen (one load while nothing is frozen).
#[inline]
fn check_write(inner: &Inner, peer: usize, off: u64, len: usize) -> Result<()> {
    let at = |e: Error| e.at_rank(inner.rank).with_peer(peer);
    inner.check_user_deposit(off, len as u64).map_err(at)?;
    match inner.frozen().find(off, len as u64) {
        None => Ok(()),
        Some(r) => Err(at(frozen_put(peer, off, len, r))),
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
