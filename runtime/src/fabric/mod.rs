//! Fabrics: reliable, ordered delivery of [`Packet`]s to a peer on a numbered
//! [`Channel`], polling without syscalls where the hardware allows, and (where
//! the fabric can) direct access to a peer's registered segment.
//!
//! A packet carries an opaque 16-bit tag (the AM layer puts its handler index
//! there), up to [`MAX_WORDS`] argument words and a payload. A payload is
//! either delivered in a buffer the receiver may read in place, or deposited
//! into the receiver's segment at a given offset before delivery.
//!
//! The contract is split: [`Fabric`] is what every fabric does (send with
//! credits, poll, report), and each capability some fabrics have is a
//! trait of its own, lent through an accessor of [`Fabric`] that answers
//! `None` where the fabric lacks it: [`LoadStore`] (peers' segments
//! mapped here: shm, the hybrid's host), [`RemoteMemory`] (one-sided
//! put / get: ibverbs), [`Wakeup`] (waits that end when traffic comes:
//! shm, UDP, hybrid). The layers above ask for a capability, never for
//! the kind of fabric; [`AnyFabric`] is the one place that lists them.

pub mod frames;
pub mod hybrid;
pub mod rdma;
mod segment_bytes;
pub mod shm;
pub mod udp;

#[cfg(any(test, feature = "test-doubles"))]
pub use segment_bytes::bounce_copies;
pub use segment_bytes::{send_through_bounce, SegmentBytes};

use crate::Result;

/// Most argument words a packet carries.
pub const MAX_WORDS: usize = 16;

/// How long [`await_traffic_blind`] sleeps on a fabric that cannot tell
/// when traffic arrives (no doorbell) before it answers "maybe".
pub const AWAIT_TRAFFIC_BLIND: std::time::Duration = std::time::Duration::from_millis(1);

/// A logical channel. Requests and replies travel on separate channels so a
/// reply never waits behind requests (the basis of deadlock freedom).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Channel {
    /// Requests.
    Request = 0,
    /// Replies.
    Reply = 1,
}

/// Why a send found no room at its peer and sent nothing (back-pressure,
/// not an error: poll, and the room comes back). Each fabric says which of
/// its limits was reached; the layers above pass it on (the AM layer's
/// `try_request`) and never match on the kind of fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WouldBlock {
    /// The peer's ring for this channel has no free cell (shm: the peer
    /// has not yet taken the messages sent before).
    PeerRingFull,
    /// The peer's landing zone for large Medium payloads is full of
    /// Mediums its handlers have not finished with (shm).
    LandingZoneFull,
    /// The send window toward the peer is full of datagrams it has not
    /// acknowledged yet (UDP).
    UdpWindowFull,
    /// No send credit toward the peer (every receive buffer it posted for
    /// this rank is in use) or no free local send buffer (ibverbs).
    RdmaCreditsExhausted,
}

impl WouldBlock {
    /// A short description, e.g. for a hang report.
    ///
    /// ```
    /// use splitrt_runtime::fabric::WouldBlock;
    /// assert!(WouldBlock::UdpWindowFull.describe().contains("window"));
    /// ```
    pub fn describe(self) -> &'static str {
        match self {
            WouldBlock::PeerRingFull => "the peer's ring is full",
            WouldBlock::LandingZoneFull => "the peer's landing zone is full",
            WouldBlock::UdpWindowFull => "the UDP send window to the peer is full",
            WouldBlock::RdmaCreditsExhausted => "no RDMA send credits toward the peer",
        }
    }
}

impl std::fmt::Display for WouldBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// What a send that may meet back-pressure did: `Ok(())` sent (or, for
/// a streamed packet, its first part went and the rest followed), `Err`:
/// nothing sent, and why.
pub type Sent = std::result::Result<(), WouldBlock>;

/// A packet to send.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    /// Opaque to the fabric; the upper layer's dispatch key.
    pub tag: u16,
    /// Argument words (at most [`MAX_WORDS`]).
    pub words: &'a [u64],
    /// Payload bytes.
    pub payload: &'a [u8],
    /// `Some(offset)`: place the payload at this offset of the receiver's
    /// segment before delivery (a Long payload); `None`: deliver it inline
    /// (at most [`Fabric::max_inline`] bytes).
    pub deposit: Option<u64>,
}

/// A packet as the receiver sees it; borrowed only for the callback.
#[derive(Clone, Copy, Debug)]
pub struct Delivery<'a> {
    /// Sending rank.
    pub src: usize,
    /// The sender's tag.
    pub tag: u16,
    /// Argument words.
    pub words: &'a [u64],
    /// An inline payload, in place in the fabric's own buffer (a ring
    /// cell, a landing zone, a receive or reassembly buffer), which nobody
    /// writes while the callback runs. Empty for a deposit: a deposited
    /// payload lies in the local segment, where peers and other threads
    /// may write at any time, so no `&[u8]` to it is ever handed out.
    pub payload: &'a [u8],
    /// Where the payload was deposited in the local segment, if it was
    /// (a range inside the segment, checked by the fabric).
    pub deposit: Option<Deposit>,
}

/// A [`Delivery`] copied out of the callback, for tests: source, tag,
/// words, inline payload, deposit.
#[cfg(test)]
pub(crate) type OwnedDelivery = (usize, u16, Vec<u64>, Vec<u8>, Option<Deposit>);

#[cfg(test)]
impl Delivery<'_> {
    /// This delivery copied out of the callback (tests only).
    pub(crate) fn owned(&self) -> OwnedDelivery {
        (
            self.src,
            self.tag,
            self.words.to_vec(),
            self.payload.to_vec(),
            self.deposit,
        )
    }
}

/// A deposited payload's place in the receiver's segment: an offset and a
/// length, never the bytes (the upper layer reads them, if at all, through
/// a [`LocalView`](crate::view::LocalView)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deposit {
    /// Segment offset of the first byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: usize,
}

/// A rank's registered segment as mapped in this process: an address
/// range, like a raw pointer, and no more.
///
/// A `SegmentRef` does not keep its mapping alive and is `Copy`: one
/// obtained from a fabric ([`Fabric::local_segment`],
/// [`LoadStore::peer_segment`]) may outlive the fabric. So nothing safe
/// dereferences it: [`new`](Self::new) is `unsafe` (its caller vouches for
/// the range), [`base`](Self::base) is a raw pointer whose use is the
/// user's `unsafe` block, and [`wake_owner`](Self::wake_owner) is `unsafe`.
/// Whoever dereferences one must keep the fabric that handed it out (or
/// the memory behind [`new`](Self::new)) alive meanwhile: the PGAS layer
/// holds the endpoint, which owns the fabric, for as long as it holds the
/// references it took from it.
#[derive(Clone, Copy, Debug)]
pub struct SegmentRef {
    /// First byte.
    base: *mut u8,
    /// Length in bytes.
    len: usize,
    /// The owner's doorbell when it may sleep on one (a rank of this host
    /// on the shm fabric): whoever writes into the segment directly rings
    /// it through [`wake_owner`](Self::wake_owner). Null otherwise.
    owner_bell: *const shm::doorbell::Doorbell,
}

impl SegmentRef {
    /// A segment of `len` bytes at `base` whose owner has no doorbell.
    ///
    /// ```
    /// # use splitrt_runtime::fabric::SegmentRef;
    /// let mut bytes = vec![0u8; 64];
    /// // SAFETY: `bytes` outlives `seg`, which nothing dereferences here.
    /// let seg = unsafe { SegmentRef::new(bytes.as_mut_ptr(), bytes.len()) };
    /// assert_eq!(seg.len(), 64);
    /// ```
    ///
    /// Safe code cannot make one over memory of its choosing (which a
    /// fabric would then write into):
    ///
    /// ```compile_fail,E0133
    /// # use splitrt_runtime::fabric::SegmentRef;
    /// let seg = SegmentRef::new(0x1000 as *mut u8, 4096);
    /// ```
    ///
    /// # Safety
    /// `base..base + len` must be memory this process may read and write
    /// (a live mapping or allocation), and stay so for as long as the
    /// reference, or any copy, is handed to code that dereferences it (a
    /// fabric deposits into it, the PGAS layer loads and stores into it):
    /// the caller keeps that memory alive for that time. Other threads and
    /// processes may write it concurrently, so no `&`/`&mut` reference to
    /// these bytes may be held while it is so used.
    pub const unsafe fn new(base: *mut u8, len: usize) -> Self {
        Self {
            base,
            len,
            owner_bell: std::ptr::null(),
        }
    }

    /// A segment of no bytes (null base): no access range passes a check
    /// against it. Safe, since nothing can be read or written through it.
    ///
    /// ```
    /// # use splitrt_runtime::fabric::SegmentRef;
    /// let e = SegmentRef::empty();
    /// assert!(e.is_empty() && e.base().is_null());
    /// ```
    pub const fn empty() -> Self {
        Self {
            base: std::ptr::null_mut(),
            len: 0,
            owner_bell: std::ptr::null(),
        }
    }

    /// The same segment, whose owner sleeps on `bell` (which must stay
    /// mapped as long as the segment: the shm fabric maps both in one file).
    pub(crate) fn with_owner_bell(self, bell: *const shm::doorbell::Doorbell) -> Self {
        Self {
            owner_bell: bell,
            ..self
        }
    }

    /// First byte (null for [`empty`](Self::empty)). Dereferencing it is
    /// the caller's `unsafe`, valid while the segment's owner (the fabric,
    /// or whoever vouched in [`new`](Self::new)) keeps it mapped.
    #[inline(always)]
    pub const fn base(&self) -> *mut u8 {
        self.base
    }

    /// Length in bytes.
    #[inline(always)]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    #[inline(always)]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `len` bytes at offset `off` lie inside the segment.
    ///
    /// ```
    /// # use splitrt_runtime::fabric::SegmentRef;
    /// let mut bytes = vec![0u8; 64];
    /// // SAFETY: nothing dereferences `seg`.
    /// let seg = unsafe { SegmentRef::new(bytes.as_mut_ptr(), bytes.len()) };
    /// assert!(seg.contains(60, 4) && !seg.contains(60, 5) && !seg.contains(usize::MAX, 2));
    /// ```
    #[inline(always)]
    pub const fn contains(&self, off: usize, len: usize) -> bool {
        match off.checked_add(len) {
            Some(end) => end <= self.len,
            None => false,
        }
    }

    /// Its first `len` bytes at most (a length no longer than this one
    /// is kept; a longer one is not granted).
    ///
    /// ```
    /// # use splitrt_runtime::fabric::SegmentRef;
    /// let mut bytes = vec![0u8; 64];
    /// // SAFETY: nothing dereferences `seg`.
    /// let seg = unsafe { SegmentRef::new(bytes.as_mut_ptr(), bytes.len()) };
    /// assert_eq!(seg.shortened(16).len(), 16);
    /// assert_eq!(seg.shortened(100).len(), 64);
    /// ```
    pub fn shortened(self, len: usize) -> Self {
        Self {
            len: self.len.min(len),
            ..self
        }
    }

    /// Tell the owner that its segment changed (after a direct write it
    /// may be asleep waiting for): one load when it is awake; nothing when
    /// the owner has no doorbell.
    ///
    /// # Safety
    /// The fabric that handed out this reference must still be alive (the
    /// doorbell lives in the owner's mapped file, which the fabric unmaps
    /// when it is dropped). A reference made by [`new`](Self::new) has no
    /// doorbell, so this is then always sound.
    #[inline]
    pub unsafe fn wake_owner(&self) {
        if !self.owner_bell.is_null() {
            // SAFETY: set only by the shm fabric (with_owner_bell) to the
            // doorbell in the owner's file header, mapped as long as the
            // fabric, which the caller keeps alive (this function's
            // contract); the doorbell's words are atomics.
            unsafe { &*self.owner_bell }.ring();
        }
    }

    /// [`wake_owner`](Self::wake_owner) that also counts the ring when
    /// the owner is awake ([`Doorbell::ring_counted`](shm::doorbell::Doorbell::ring_counted)),
    /// so a future of the owner's that looked at the written word just
    /// before sees the count moved: after a signal word's write.
    ///
    /// # Safety
    /// As for [`wake_owner`](Self::wake_owner).
    #[inline]
    pub unsafe fn wake_owner_counted(&self) {
        if !self.owner_bell.is_null() {
            // SAFETY: as in `wake_owner` (this function's contract).
            unsafe { &*self.owner_bell }.ring_counted();
        }
    }
}

// SAFETY: a SegmentRef is an address range, like a raw pointer; nothing
// safe dereferences it (see the type's documentation), so sending it to
// another thread is harmless.
unsafe impl Send for SegmentRef {}
// SAFETY: as above; concurrent access through it is governed by the PGAS
// memory model, in the unsafe code that dereferences it.
unsafe impl Sync for SegmentRef {}

/// The core contract: what every fabric does. Send a packet (a Short on
/// its own path, a Medium inline, a Long deposited) with credits, poll
/// deliveries, report credits and what still waits to be fed or
/// acknowledged, and say which capabilities it has
/// ([`load_store`](Self::load_store), [`remote_memory`](Self::remote_memory),
/// [`wakeup`](Self::wakeup); `None` where it has none). The layers above
/// ask for a capability and take their fallback path (messages, a timed
/// sleep) when it is absent; they never ask which fabric this is.
pub trait Fabric: Send + Sync {
    /// This rank.
    fn rank(&self) -> usize;
    /// Ranks in the job.
    fn size(&self) -> usize;
    /// Largest inline (non-deposited) payload to `peer`.
    fn max_inline(&self, peer: usize) -> usize;
    /// Largest inline payload that, sent with `words` argument words,
    /// reaches `peer` in one piece and is delivered where it arrived
    /// (no reassembly copy at the receiver). Never above
    /// [`max_inline`](Self::max_inline). The default is `max_inline`
    /// itself, exact only for a fabric that never splits a Medium; shm
    /// keeps it though its shared queue splits a Medium into cells (and
    /// its rings do too for a Medium larger than a cell when
    /// `SPLITRT_MEDIUM_SLOTS=0` leaves no landing zone), so there it
    /// reports more than arrives in one piece: a bound to size by, not a
    /// promise. The UDP fabric overrides it (one datagram body), and so
    /// does ibverbs (one receive buffer less its header). A layer that
    /// moves a large transfer as several Mediums sizes them by this
    /// (pgas's get replies, over UDP one datagram each).
    fn max_inline_unsplit(&self, peer: usize, words: usize) -> usize {
        let _ = words;
        self.max_inline(peer)
    }
    /// Length of `peer`'s registered segment.
    fn segment_len(&self, peer: usize) -> usize;
    /// This rank's registered segment (where Long payloads are deposited).
    fn local_segment(&self) -> SegmentRef;
    /// Send `pkt` to `peer` on `ch` if there is room for its first part.
    /// Returns `Ok(Err(why))`, having sent nothing, when the peer has no
    /// room (back-pressure; [`WouldBlock`] names the limit reached). A
    /// packet larger than the room left is streamed: `stall(n)` is called
    /// while waiting for the peer to drain, `n` counting the calls since
    /// room last appeared (0 = first wait for this part); it must make
    /// progress on this rank's own inbound traffic and may back off.
    /// `Err` for what waiting cannot cure, e.g. a protocol error naming
    /// the peer when its shared-memory ring's consumer word is corrupt
    /// (a tail past the head: no room would ever come).
    fn try_send_why(
        &self,
        peer: usize,
        ch: Channel,
        pkt: &Packet<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<Sent>;
    /// [`try_send_why`](Self::try_send_why) of a Medium (inline, not
    /// deposited) whose payload is `src`, a range of this rank's segment:
    /// the fabric copies it out of the segment as it frames the message,
    /// never holding a reference over those bytes (others may write them
    /// meanwhile; see [`SegmentBytes`]). The UDP fabric copies it straight
    /// into its datagrams (one copy per byte, as for a slice); the default,
    /// which the other fabrics keep, copies it into a buffer of this
    /// thread first and sends that, on every call (a caller that retries
    /// on back-pressure copies once itself when
    /// [`frames_segment_sources`](Self::frames_segment_sources) is false,
    /// as the AM layer does). A source longer than
    /// [`max_inline`](Self::max_inline) is refused (a usage error, as for
    /// a slice) before anything is copied.
    fn try_send_segment_why(
        &self,
        peer: usize,
        ch: Channel,
        tag: u16,
        words: &[u64],
        src: SegmentBytes<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<Sent> {
        let max = self.max_inline(peer);
        if src.len() > max {
            return Err(crate::Error::usage(format!(
                "payload of {} B exceeds the Medium maximum of {max} B",
                src.len()
            ))
            .at_rank(self.rank())
            .with_peer(peer));
        }
        segment_bytes::send_through_bounce(src, |payload| {
            let pkt = Packet {
                tag,
                words,
                payload,
                deposit: None,
            };
            self.try_send_why(peer, ch, &pkt, stall)
        })
    }
    /// Whether [`try_send_segment_why`](Self::try_send_segment_why) to
    /// `peer` frames the source itself (copies it straight into the
    /// fabric's own buffers, so a retry after back-pressure costs no extra
    /// copy): true over UDP. False (the default) where it copies the
    /// source into a buffer first on every call; a caller that retries
    /// then copies once itself ([`send_through_bounce`]) and retries with
    /// the copy as an ordinary Medium.
    /// Override together with
    /// [`try_send_segment_why`](Self::try_send_segment_why): this says
    /// what that method does.
    fn frames_segment_sources(&self, peer: usize) -> bool {
        let _ = peer;
        false
    }
    /// [`try_send_why`](Self::try_send_why) without the reason: `Ok(false)`
    /// on back-pressure.
    #[inline]
    fn try_send(
        &self,
        peer: usize,
        ch: Channel,
        pkt: &Packet<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<bool> {
        Ok(self.try_send_why(peer, ch, pkt, stall)?.is_ok())
    }
    /// Send a Short (argument words only, no payload) to `peer` on `ch`:
    /// [`try_send`](Self::try_send) of that packet, `Ok(false)` on
    /// back-pressure. A Short is one cell or frame on every fabric, so it
    /// never waits half-sent; a fabric may give it a path of its own (the
    /// shm fabric does: the AM layer's Short request and reply take it).
    #[inline]
    fn try_send_short(&self, peer: usize, ch: Channel, tag: u16, words: &[u64]) -> Result<bool> {
        let pkt = Packet {
            tag,
            words,
            payload: &[],
            deposit: None,
        };
        // nothing to stream, so no stall is ever asked for
        self.try_send(peer, ch, &pkt, &mut |_| Ok(()))
    }
    /// Deliver arrived packets on `ch` to `deliver`, returning how many were
    /// delivered. Returns `Ok(0)` at once if another thread is polling `ch`.
    /// A malformed packet is skipped and reported as an error naming its
    /// sender.
    fn poll(&self, ch: Channel, deliver: &mut dyn FnMut(&Delivery<'_>)) -> Result<usize>;
    /// Send credits toward `peer` on `ch` as (free, total), for hang
    /// reports; `None` if they cannot be read without waiting (another
    /// thread is sending there). Not for the fast path.
    fn credits(&self, peer: usize, ch: Channel) -> Option<(usize, usize)>;
    /// Make deposits written at poll time (UDP, ibverbs) refuse bytes of
    /// `frozen`. A fabric whose senders deposit (shared memory) checks
    /// at send time and keeps nothing. No default: every fabric that
    /// writes deposits itself must refuse frozen bytes.
    fn share_frozen(&mut self, frozen: std::sync::Arc<crate::frozen::FrozenRanges>);
    /// Whether messages that have arrived wait to be fed by a
    /// [`poll`](Self::poll) (a fabric that deposits at poll time; a poll
    /// that delivers no complete message may still leave some). A
    /// fabric whose senders deposit (shared memory) answers `false`. No
    /// default: a freeze's seal is sound only if this is true to the
    /// fabric.
    fn arrivals_waiting(&self) -> bool;
    /// Whether every peer has acknowledged what this rank sent (so
    /// nothing is owed when the process ends). A fabric that delivers
    /// before a send returns (shared memory) or whose hardware retries
    /// (RC verbs) has nothing owed: the default.
    fn quiesced(&self) -> Result<bool> {
        Ok(true)
    }
    /// The peers [`quiesced`](Self::quiesced) still waits for (for a hang
    /// report).
    fn unacked_ranks(&self) -> Vec<usize> {
        Vec::new()
    }
    /// The direct load/store capability: peers' segments mapped in this
    /// process. `None`: no peer's segment is mapped here.
    fn load_store(&self) -> Option<&dyn LoadStore> {
        None
    }
    /// The one-sided capability: put / get into peers' segments without
    /// their CPU (RDMA write / read). `None`: no such path.
    fn remote_memory(&self) -> Option<&dyn RemoteMemory> {
        None
    }
    /// The wake-up capability: waits that end when traffic arrives.
    /// `None`: the fabric cannot tell; waiters sleep a fixed time
    /// ([`idle_wait_blind`], [`await_traffic_blind`]) and poll.
    fn wakeup(&self) -> Option<&dyn Wakeup> {
        None
    }
}

/// Capability: direct loads and stores into peers' segments mapped in
/// this process (the shm fabric, and the hybrid's shm side). The PGAS
/// layer's native path: a get or put is a copy, complete at once.
pub trait LoadStore {
    /// `peer`'s segment if this process can load and store into it
    /// directly (`None`: not mapped here, e.g. a rank of another host),
    /// carrying its owner's doorbell so a direct write wakes the owner
    /// ([`SegmentRef::wake_owner`]).
    fn peer_segment(&self, peer: usize) -> Option<SegmentRef>;
}

/// Capability: one-sided access to every peer's segment (RDMA write and
/// read), checked against the segment's bounds.
///
/// Ordering: a put to a peer ([`put`](Self::put), [`put_nb`](Self::put_nb),
/// [`put_runs_nb`](Self::put_runs_nb)) is placed before any message sent
/// to that peer after it is delivered there (ibverbs: one RC queue pair
/// per peer carries both; RC delivers a send after the writes posted
/// before it). `put_signal` relies on it.
pub trait RemoteMemory {
    /// Copy `src` into `peer`'s segment at `off`, complete at the peer on
    /// return.
    fn put(&self, peer: usize, off: u64, src: &[u8]) -> Result<()>;
    /// Copy `peer`'s segment at `off` into `dst`, complete on return.
    fn get(&self, peer: usize, off: u64, dst: &mut [u8]) -> Result<()>;
    /// Like [`put`](Self::put), but returns once `src` has been copied
    /// out: the write is complete at the peer by the next
    /// [`quiet`](Self::quiet). `Ok(false)`, having done nothing: not for
    /// this size (use `put`).
    fn put_nb(&self, peer: usize, off: u64, src: &[u8]) -> Result<bool>;
    /// Wait until every [`put_nb`](Self::put_nb) is complete at its peer.
    fn quiet(&self) -> Result<()>;
    /// Wait until every [`put_nb`](Self::put_nb) to `peer` is complete
    /// there (puts to other peers may still be in flight). The default
    /// waits for all of them ([`quiet`](Self::quiet)), which is correct,
    /// only slower.
    fn quiet_peer(&self, peer: usize) -> Result<()> {
        let _ = peer;
        self.quiet()
    }
    /// Write the packed `src` into `peer`'s segment as `runs` ((segment
    /// offset, length) each, in order, lengths summing to `src.len()`),
    /// returning once `src` is copied out; complete at the peer by the
    /// next [`quiet`](Self::quiet) / [`quiet_peer`](Self::quiet_peer).
    /// Every run is checked before anything is written. The default
    /// writes run by run ([`put_nb`](Self::put_nb), else
    /// [`put`](Self::put)); the ibverbs fabric posts one RDMA write per
    /// run from its send buffers, back to back.
    fn put_runs_nb(&self, peer: usize, runs: &[(u64, u64)], src: &[u8]) -> Result<()> {
        let mut at = 0usize;
        for &(off, len) in runs {
            let end = usize::try_from(len)
                .ok()
                .and_then(|n| at.checked_add(n))
                .filter(|&e| e <= src.len())
                .ok_or_else(|| crate::Error::usage("RDMA runs longer than the local stream"))?;
            let part = &src[at..end];
            if !self.put_nb(peer, off, part)? {
                self.put(peer, off, part)?;
            }
            at = end;
        }
        Ok(())
    }
    /// Read `runs` ((segment offset, length), in order) of `peer`'s
    /// segment into the packed `dst` (lengths summing to `dst.len()`),
    /// complete on return. The default reads run by run
    /// ([`get`](Self::get)); the ibverbs fabric posts one RDMA read per
    /// run and waits for them together.
    fn get_runs(&self, peer: usize, runs: &[(u64, u64)], dst: &mut [u8]) -> Result<()> {
        let mut at = 0usize;
        for &(off, len) in runs {
            let end = usize::try_from(len)
                .ok()
                .and_then(|n| at.checked_add(n))
                .filter(|&e| e <= dst.len())
                .ok_or_else(|| crate::Error::usage("RDMA runs longer than the local stream"))?;
            self.get(peer, off, &mut dst[at..end])?;
            at = end;
        }
        Ok(())
    }
}

/// Capability: waits that end when traffic arrives (the shm doorbell, a
/// socket's `poll(2)`).
pub trait Wakeup {
    /// For a helper thread that waits on behalf of futures (never for a
    /// thread that polls: see the AM layer's doorbell bridge): block until
    /// traffic may have arrived for this rank, `stop()` holds, or about
    /// `limit` passed. Returns `false` only when the fabric knows that
    /// nothing arrived (the wait timed out and the rings are empty, or
    /// `stop()` ended it); `true` means "poll": a ring of the doorbell,
    /// work seen in the rings, or a fabric that cannot tell.
    fn await_traffic(&self, limit: std::time::Duration, stop: &dyn Fn() -> bool) -> bool;
    /// Wait a little with nothing to do: until a peer gives this rank
    /// work if the fabric can tell (the shm doorbell), else `sleep`
    /// ([`idle_wait_blind`], the default: datagrams ring no doorbell). Does
    /// not sleep if `done()`, which the shm fabric asks after announcing
    /// the sleep: a peer that makes `done()` true, fences, and then rings
    /// (as a native barrier's release does) is never missed. Returns
    /// whether a peer's ring ended the wait (the peer is active: the
    /// waiter should spin again before it sleeps).
    fn idle_wait(&self, sleep: std::time::Duration, done: &dyn Fn() -> bool) -> bool {
        idle_wait_blind(sleep, done)
    }
    /// The count of this rank's doorbell rings, where the fabric has a
    /// doorbell (`None`, the default, elsewhere): a future reads it before
    /// it looks at memory peers write directly, and the doorbell bridge
    /// wakes it once the count has moved (see `Doorbell::seq`).
    fn traffic_seq(&self) -> Option<u32> {
        None
    }
}

/// [`Wakeup::idle_wait`] without a doorbell: sleep `sleep` unless
/// `done()`; no peer ended it.
pub fn idle_wait_blind(sleep: std::time::Duration, done: &dyn Fn() -> bool) -> bool {
    if !done() {
        std::thread::sleep(sleep);
    }
    false
}

/// [`Wakeup::await_traffic`] on a fabric that cannot tell when traffic
/// arrives: sleep at most [`AWAIT_TRAFFIC_BLIND`] and answer `true`
/// ("poll"), so waiters poll that often; `false` only if `stop()`.
pub fn await_traffic_blind(limit: std::time::Duration, stop: &dyn Fn() -> bool) -> bool {
    if stop() {
        return false;
    }
    std::thread::sleep(limit.min(AWAIT_TRAFFIC_BLIND));
    true
}

/// The fabric a rank runs on (static dispatch over the implementations).
// Made once per rank and never moved: boxing the large variants would only
// add an indirection to every send.
#[allow(clippy::large_enum_variant)]
pub enum AnyFabric {
    /// Shared memory (every rank on this host).
    Shm(shm::ShmFabric),
    /// UDP to every rank.
    Udp(udp::UdpFabric),
    /// Shared memory on this host, UDP to the others.
    Hybrid(hybrid::Hybrid),
    /// RDMA to every rank (cargo feature `ibverbs`).
    Rdma(rdma::RdmaFabric<rdma::device::IbvDevice>),
    /// **Test double**: the ibverbs fabric over the verbs model, ranks as
    /// threads of one process (`World::start_over_verbs_model`; cargo
    /// feature `test-doubles`).
    #[cfg(feature = "test-doubles")]
    RdmaModel(rdma::RdmaFabric<rdma::model::ModelDevice>),
}

impl AnyFabric {
    /// The UDP part, if any.
    pub fn udp(&self) -> Option<&udp::UdpFabric> {
        match self {
            AnyFabric::Shm(_) => None,
            AnyFabric::Udp(u) => Some(u),
            AnyFabric::Hybrid(h) => Some(&h.udp),
            AnyFabric::Rdma(_) => None,
            #[cfg(feature = "test-doubles")]
            AnyFabric::RdmaModel(_) => None,
        }
    }

    /// The shared-memory part, if any.
    pub fn shm(&self) -> Option<&shm::ShmFabric> {
        match self {
            AnyFabric::Shm(s) => Some(s),
            AnyFabric::Udp(_) => None,
            AnyFabric::Hybrid(h) => Some(&h.shm),
            AnyFabric::Rdma(_) => None,
            #[cfg(feature = "test-doubles")]
            AnyFabric::RdmaModel(_) => None,
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $f:ident ( $($a:expr),* )) => {
        match $self {
            AnyFabric::Shm(x) => x.$f($($a),*),
            AnyFabric::Udp(x) => x.$f($($a),*),
            AnyFabric::Hybrid(x) => x.$f($($a),*),
            AnyFabric::Rdma(x) => x.$f($($a),*),
            #[cfg(feature = "test-doubles")]
            AnyFabric::RdmaModel(x) => x.$f($($a),*),
        }
    };
}

impl Fabric for AnyFabric {
    #[inline]
    fn rank(&self) -> usize {
        dispatch!(self, rank())
    }
    #[inline]
    fn size(&self) -> usize {
        dispatch!(self, size())
    }
    #[inline]
    fn max_inline(&self, peer: usize) -> usize {
        dispatch!(self, max_inline(peer))
    }
    #[inline]
    fn max_inline_unsplit(&self, peer: usize, words: usize) -> usize {
        dispatch!(self, max_inline_unsplit(peer, words))
    }
    #[inline]
    fn segment_len(&self, peer: usize) -> usize {
        dispatch!(self, segment_len(peer))
    }
    #[inline]
    fn local_segment(&self) -> SegmentRef {
        dispatch!(self, local_segment())
    }
    #[inline]
    fn try_send_why(
        &self,
        peer: usize,
        ch: Channel,
        pkt: &Packet<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<Sent> {
        dispatch!(self, try_send_why(peer, ch, pkt, stall))
    }
    #[inline]
    fn try_send(
        &self,
        peer: usize,
        ch: Channel,
        pkt: &Packet<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<bool> {
        dispatch!(self, try_send(peer, ch, pkt, stall))
    }
    #[inline]
    fn try_send_segment_why(
        &self,
        peer: usize,
        ch: Channel,
        tag: u16,
        words: &[u64],
        src: SegmentBytes<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<Sent> {
        dispatch!(self, try_send_segment_why(peer, ch, tag, words, src, stall))
    }
    #[inline]
    fn frames_segment_sources(&self, peer: usize) -> bool {
        dispatch!(self, frames_segment_sources(peer))
    }
    #[inline(always)]
    fn try_send_short(&self, peer: usize, ch: Channel, tag: u16, words: &[u64]) -> Result<bool> {
        dispatch!(self, try_send_short(peer, ch, tag, words))
    }
    #[inline]
    fn poll(&self, ch: Channel, deliver: &mut dyn FnMut(&Delivery<'_>)) -> Result<usize> {
        dispatch!(self, poll(ch, deliver))
    }
    fn credits(&self, peer: usize, ch: Channel) -> Option<(usize, usize)> {
        dispatch!(self, credits(peer, ch))
    }
    fn share_frozen(&mut self, frozen: std::sync::Arc<crate::frozen::FrozenRanges>) {
        dispatch!(self, share_frozen(frozen))
    }
    fn arrivals_waiting(&self) -> bool {
        dispatch!(self, arrivals_waiting())
    }
    fn quiesced(&self) -> Result<bool> {
        dispatch!(self, quiesced())
    }
    fn unacked_ranks(&self) -> Vec<usize> {
        dispatch!(self, unacked_ranks())
    }
    #[inline]
    fn load_store(&self) -> Option<&dyn LoadStore> {
        dispatch!(self, load_store())
    }
    #[inline]
    fn remote_memory(&self) -> Option<&dyn RemoteMemory> {
        dispatch!(self, remote_memory())
    }
    #[inline]
    fn wakeup(&self) -> Option<&dyn Wakeup> {
        dispatch!(self, wakeup())
    }
}
