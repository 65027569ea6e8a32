//! The thin verbs layer: the handful of RDMA verbs the fabric uses, as a
//! trait. Two implementations exist: [`super::device`] over a real RDMA
//! device (cargo feature `ibverbs`), and `model` (cargo feature
//! `test-doubles`), an in-process test double of RC queue pairs that lets
//! the protocol above run in `cargo test` on machines without RDMA hardware. Nothing else in the
//! fabric touches verbs, so a switch to another binding replaces one file.
//!
//! The shapes follow libibverbs: memory regions with local and remote
//! keys, reliable-connected queue pairs connected by exchanging
//! [`QpEndpoint`]s, work requests posted to a send or receive queue, and
//! one completion queue per device polled by the progress engine.

use crate::Result;

/// A registered memory region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// First byte's address in this process.
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// Key for local access (scatter/gather entries).
    pub lkey: u32,
    /// Key a peer uses for RDMA read and write (0 when not remote).
    pub rkey: u32,
}

impl Region {
    /// Whether `[addr, addr + len)` lies inside this region.
    pub fn covers(&self, addr: u64, len: usize) -> bool {
        addr >= self.addr
            && addr
                .checked_add(len as u64)
                .is_some_and(|e| e <= self.addr + self.len as u64)
    }

    /// A scatter/gather entry for `len` bytes at `addr` of this region.
    pub fn sge(&self, addr: u64, len: usize) -> Sge {
        debug_assert!(self.covers(addr, len));
        Sge {
            addr,
            len: len as u32,
            lkey: self.lkey,
        }
    }
}

/// A scatter/gather entry: local memory a work request reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// First byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Key of the region holding it.
    pub lkey: u32,
}

/// A queue pair of this device (an index the implementation chose).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpId(pub u32);

/// What a peer needs to connect its queue pair to one of ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QpEndpoint {
    /// Local identifier of our port (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Queue pair number.
    pub qpn: u32,
    /// First packet sequence number our side will send.
    pub psn: u32,
    /// Global identifier of our port (RoCE, or InfiniBand across subnets).
    pub gid: [u8; 16],
}

impl QpEndpoint {
    /// Bytes of [`encode`](Self::encode).
    pub const LEN: usize = 26;

    /// Fixed little-endian encoding (for the bootstrap).
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..2].copy_from_slice(&self.lid.to_le_bytes());
        b[2..6].copy_from_slice(&self.qpn.to_le_bytes());
        b[6..10].copy_from_slice(&self.psn.to_le_bytes());
        b[10..26].copy_from_slice(&self.gid);
        b
    }

    /// Inverse of [`encode`](Self::encode); `None` if `b` is not
    /// [`LEN`](Self::LEN) bytes.
    pub fn decode(b: &[u8]) -> Option<QpEndpoint> {
        if b.len() != Self::LEN {
            return None;
        }
        Some(QpEndpoint {
            lid: u16::from_le_bytes([b[0], b[1]]),
            qpn: u32::from_le_bytes(b[2..6].try_into().ok()?),
            psn: u32::from_le_bytes(b[6..10].try_into().ok()?),
            gid: b[10..26].try_into().ok()?,
        })
    }
}

/// What a send-queue work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Two-sided send: consumes a receive the peer posted.
    Send,
    /// Write the local bytes to `raddr` in the peer's region `rkey`.
    Write {
        /// Remote address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// Read the peer's bytes at `raddr` (region `rkey`) into the local ones.
    Read {
        /// Remote address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
    },
}

/// A send-queue work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: Op,
    /// Local memory (source of a send or write, destination of a read).
    pub sge: Sge,
    /// The bytes are copied at post time (small sends and writes): the
    /// local buffer may be reused at once and needs no key.
    pub inline: bool,
    /// Start only after the queue pair's earlier RDMA reads completed
    /// (`IBV_SEND_FENCE`): how a reader orders the reads of a seqlock.
    pub fence: bool,
}

/// Which work request a completion ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcKind {
    /// A send left (the peer received it).
    Send,
    /// A receive was filled.
    Recv,
    /// An RDMA write completed.
    Write,
    /// An RDMA read completed (the bytes are here).
    Read,
}

/// How a work request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// It succeeded.
    Success,
    /// A local key or address was wrong.
    LocalProtection,
    /// The peer refused the remote key, address or length.
    RemoteAccess,
    /// The peer had no receive posted (and retries ran out).
    ReceiverNotReady,
    /// The queue pair was in error: the request was not executed.
    Flushed,
    /// The peer did not answer (retries ran out): link or peer down.
    Transport,
    /// Another status (the device's own code).
    Other(u32),
}

impl WcStatus {
    /// A short description for error messages.
    pub fn describe(&self) -> String {
        match self {
            WcStatus::Success => "success".into(),
            WcStatus::LocalProtection => "local protection error (bad local key or address)".into(),
            WcStatus::RemoteAccess => {
                "remote access error (the peer refused key, address or length)".into()
            }
            WcStatus::ReceiverNotReady => "receiver not ready (no receive posted)".into(),
            WcStatus::Flushed => "flushed (the queue pair is in error)".into(),
            WcStatus::Transport => "transport retry exceeded (peer or link down)".into(),
            WcStatus::Other(c) => format!("completion status {c}"),
        }
    }
}

/// A completion-queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The work request's id.
    pub wr_id: u64,
    /// Its queue pair.
    pub qp: QpId,
    /// What ended.
    pub kind: WcKind,
    /// How it ended.
    pub status: WcStatus,
    /// Bytes received (receives only).
    pub len: u32,
}

/// What remote peers may do to a memory region, or through a queue pair
/// to this side's regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// Nothing remote: a region only this side's requests use (the
    /// device may still write it, as the target of an RDMA read).
    Local,
    /// RDMA reads (a vys producer's ring).
    RemoteRead,
    /// RDMA reads and writes (a rank's segment, a credit mailbox).
    RemoteReadWrite,
}

/// Queue depths and remote access of a queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send work requests outstanding at most.
    pub send_depth: u32,
    /// Receive work requests posted at most.
    pub recv_depth: u32,
    /// Largest inline send or write.
    pub max_inline: u32,
    /// What the peer's requests may do through this queue pair (and
    /// only to regions that allow it too).
    pub remote: Access,
}

/// The verbs the fabric uses. Implementations are used from one thread at
/// a time (the fabric holds them under a lock).
///
/// The methods that hand the device memory by address
/// ([`register`](Self::register), [`post_recv`](Self::post_recv),
/// [`post_send`](Self::post_send)) are `unsafe`: a device (or the verbs
/// model) reads and writes that memory later, outside the borrow checker's
/// view, so the caller vouches for it. Everything else is safe: a device
/// checks keys and bounds of every access (a request outside the regions
/// completes in error), and deregistering or destroying only takes access
/// away.
///
/// Safe code cannot hand a device an address of its choosing:
///
/// ```compile_fail,E0133
/// use splitrt_runtime::fabric::rdma::verbs::{Access, Verbs};
/// fn anywhere(v: &mut impl Verbs) {
///     let _ = v.register(0x1000 as *mut u8, 4096, Access::RemoteReadWrite);
/// }
/// ```
///
/// # Safety
///
/// The trait is `unsafe` to implement: the fabric trusts what a device
/// reports about the memory it was handed, so an implementation promises
/// to behave as RC verbs do:
///
/// * it reads and writes only memory it was handed: registered regions
///   (within their bounds, with the access they were registered with) and
///   the scatter-gather entries of work requests posted on it, only while
///   those requests are outstanding (an inline send's bytes only during
///   [`post_send`](Self::post_send));
/// * [`poll`](Self::poll) reports each posted work request at most once,
///   with the `wr_id` it was posted with, and reports none that was not
///   posted; a receive's `len` is at most its entry's length and the bytes
///   it reports were written by then; a completion (success, error or
///   flush) means the device is done with the request's memory;
/// * after [`destroy_qp`](Self::destroy_qp) or
///   [`deregister`](Self::deregister) returns, it no longer touches the
///   queue pair's posted memory or the region.
///
/// The fabric still checks what it can (a completion naming an unknown
/// rank or buffer is a protocol error naming the peer), but a device that
/// breaks these promises can make it write where it must not.
///
/// Safe code cannot implement a device:
///
/// ```compile_fail,E0200
/// use splitrt_runtime::fabric::rdma::verbs::*;
/// use splitrt_runtime::Result;
/// struct Fake;
/// impl Verbs for Fake {
///     fn describe(&self) -> String { "fake".into() }
///     unsafe fn register(&mut self, _: *mut u8, _: usize, _: Access) -> Result<Region> { todo!() }
///     fn deregister(&mut self, _: &Region) -> Result<()> { Ok(()) }
///     fn create_qp(&mut self, _: QpCaps) -> Result<QpId> { todo!() }
///     fn max_inline(&self, _: QpId) -> u32 { 0 }
///     fn endpoint(&self, _: QpId) -> QpEndpoint { todo!() }
///     fn connect(&mut self, _: QpId, _: &QpEndpoint) -> Result<()> { Ok(()) }
///     unsafe fn post_recv(&mut self, _: QpId, _: u64, _: Sge) -> Result<()> { Ok(()) }
///     unsafe fn post_send(&mut self, _: QpId, _: &SendWr) -> Result<()> { Ok(()) }
///     fn poll(&mut self, _: &mut [Completion]) -> Result<usize> { Ok(0) }
///     fn destroy_qp(&mut self, _: QpId) -> Result<()> { Ok(()) }
/// }
/// ```
pub unsafe trait Verbs: Send {
    /// What this device is (for messages): e.g. `mlx5_0 port 1`.
    fn describe(&self) -> String;
    /// Register `len` bytes at `addr`, with what remote peers may do to
    /// them (local writes by the device are always allowed).
    ///
    /// # Safety
    /// `addr..addr + len` must be valid for reads and writes whenever the
    /// device may access it: while a work request posted on it is
    /// outstanding, and, when `access` lets peers in (above
    /// [`Access::Local`]), until [`deregister`](Self::deregister), since a
    /// peer holding the key reads (and, read-write, writes) it at any time.
    /// Meanwhile the program holds no `&mut` (and, where the device or a
    /// peer may write, no `&`) reference over bytes the device may touch:
    /// it accesses them only through raw pointers or atomics.
    unsafe fn register(&mut self, addr: *mut u8, len: usize, access: Access) -> Result<Region>;
    /// Undo [`register`](Self::register).
    fn deregister(&mut self, region: &Region) -> Result<()>;
    /// Create a reliable-connected queue pair.
    fn create_qp(&mut self, caps: QpCaps) -> Result<QpId>;
    /// Largest inline payload `qp` accepts (may be less than asked).
    fn max_inline(&self, qp: QpId) -> u32;
    /// What a peer needs to connect to `qp`.
    fn endpoint(&self, qp: QpId) -> QpEndpoint;
    /// Connect `qp` to the peer's queue pair `remote` (ready to send).
    fn connect(&mut self, qp: QpId, remote: &QpEndpoint) -> Result<()>;
    /// Post a receive of at most `sge.len` bytes.
    ///
    /// # Safety
    /// `sge` must lie in a region this device registered (a device refuses
    /// one that does not, by key and bounds), and its bytes must stay valid
    /// for writes and untouched by the program until the receive completes
    /// (successfully, in error, or flushed): the device writes them then.
    unsafe fn post_recv(&mut self, qp: QpId, wr_id: u64, sge: Sge) -> Result<()>;
    /// Post a send, RDMA write or RDMA read.
    ///
    /// # Safety
    /// An inline request (`wr.inline`): `wr.sge` must be valid for reads of
    /// `sge.len` bytes during this call (the bytes are copied now, with no
    /// key check). Otherwise `wr.sge` must lie in a region this device
    /// registered, and until the request completes (or is flushed) its
    /// bytes must stay valid and must not be written by the program (a
    /// send or RDMA write reads them), or, for an RDMA read, must not be
    /// read or written by it (the device writes them). The remote side
    /// (`raddr`, `rkey`) is checked by the peer's device.
    unsafe fn post_send(&mut self, qp: QpId, wr: &SendWr) -> Result<()>;
    /// Take up to `out.len()` completions; returns how many.
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize>;
    /// Destroy `qp` (posted work is flushed).
    fn destroy_qp(&mut self, qp: QpId) -> Result<()>;
}

/// A boxed device is a device (so code can hold `Box<dyn Verbs>` where the
/// choice of device is made at run time).
// SAFETY: every call goes to the boxed device, which keeps the contract.
unsafe impl<T: Verbs + ?Sized> Verbs for Box<T> {
    fn describe(&self) -> String {
        (**self).describe()
    }
    unsafe fn register(&mut self, addr: *mut u8, len: usize, access: Access) -> Result<Region> {
        // SAFETY: the same contract, passed on to the boxed device.
        unsafe { (**self).register(addr, len, access) }
    }
    fn deregister(&mut self, region: &Region) -> Result<()> {
        (**self).deregister(region)
    }
    fn create_qp(&mut self, caps: QpCaps) -> Result<QpId> {
        (**self).create_qp(caps)
    }
    fn max_inline(&self, qp: QpId) -> u32 {
        (**self).max_inline(qp)
    }
    fn endpoint(&self, qp: QpId) -> QpEndpoint {
        (**self).endpoint(qp)
    }
    fn connect(&mut self, qp: QpId, remote: &QpEndpoint) -> Result<()> {
        (**self).connect(qp, remote)
    }
    unsafe fn post_recv(&mut self, qp: QpId, wr_id: u64, sge: Sge) -> Result<()> {
        // SAFETY: the same contract, passed on to the boxed device.
        unsafe { (**self).post_recv(qp, wr_id, sge) }
    }
    unsafe fn post_send(&mut self, qp: QpId, wr: &SendWr) -> Result<()> {
        // SAFETY: the same contract, passed on to the boxed device.
        unsafe { (**self).post_send(qp, wr) }
    }
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        (**self).poll(out)
    }
    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        (**self).destroy_qp(qp)
    }
}
