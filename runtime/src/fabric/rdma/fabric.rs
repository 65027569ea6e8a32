//! The ibverbs fabric over any [`Verbs`]: one RC queue pair per peer
//! (itself included), Active Messages by send/receive, Long payloads and
//! get/put by RDMA write and read.
//!
//! * **Receive side.** Each queue pair has `2 × buffers` receive buffers
//!   posted, `buffers` per channel ([`Credits`]); a receive completion
//!   names its buffer, whose header says the channel; the buffer waits in
//!   that channel's arrival queue until [`Fabric::poll`] of the channel
//!   feeds its frames to the peer's [`Reassembler`] (the UDP fabric's),
//!   delivers, posts the buffer again and counts the credit.
//! * **Send side.** A message is cut into frames that fill send buffers
//!   ([`frames::append`]); each buffer takes a credit of its channel and a
//!   send-queue slot, and goes inline when it is small enough (its buffer
//!   free again at once). A Long payload is written into the peer's
//!   segment by RDMA write (from the local segment where it lies there,
//!   else through send buffers), followed on the same queue pair by a
//!   header-only frame: RC ordering places the data before the frame
//!   arrives.
//! * **Credits** come back piggy-backed on every buffer going the other
//!   way, or by an 8-byte RDMA write into the sender's mailbox.
//! * **get/put** are RDMA read/write against the peer's registered
//!   segment, waited for by completion.
//!
//! Every completion in error stops the fabric with an error naming the
//! peer and the verb's status.

use super::credits::Credits;
use super::on_demand::{ConnectMsg, PeerLink, PeerStateStats, SideChannel};
use super::reg_cache::{RegCache, RegCacheStats};
use super::verbs::{
    Access, Completion, Op, QpCaps, QpEndpoint, QpId, Region, SendWr, Verbs, WcKind, WcStatus,
};
use super::wire::{BufHeader, Card, HEADER};
use crate::fabric::frames::{self, OutMsg, Reassembler, SegmentSink};
use crate::fabric::{Channel, Delivery, Fabric, Packet, RemoteMemory, SegmentRef, MAX_WORDS};
use crate::frozen::FrozenRanges;
use crate::{Error, ErrorKind, Result};
use memmap2::{MmapMut, MmapRaw};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

mod runs;

/// Tunables of the ibverbs fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaConfig {
    /// Receive buffers per peer and channel (the credits).
    pub buffers: u32,
    /// Bytes per buffer (header included).
    pub buffer_size: usize,
    /// Largest Medium payload.
    pub max_medium: usize,
    /// Inline bytes asked of the device (it may grant fewer).
    pub max_inline: u32,
    /// Bytes the registration cache may pin for user buffers of large
    /// get/put outside the segment (0, the default: off, because of the
    /// stale-page hazard [`super::reg_cache`] describes; opt in with
    /// `SPLITRT_IBV_REG_CACHE`).
    pub reg_cache: usize,
    /// How long a wait for a peer to answer a connection request (made on
    /// first contact, [`super::on_demand`]) goes before it fails or is
    /// reported (see `connect_abort`); a job sets it to the hang report's
    /// time (`SPLITRT_HANG_REPORT`; `Duration::MAX` when reports are off),
    /// so a peer that never answers is named within the bound a hang would
    /// be reported in.
    pub connect_timeout: Duration,
    /// Whether a connection unanswered after `connect_timeout` fails (the
    /// default, for a fabric on its own); else it is reported once on
    /// stderr and the wait goes on. A job sets it from
    /// `SPLITRT_HANG_ABORT`, like every hang report.
    pub connect_abort: bool,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            buffers: 16,
            buffer_size: 8192,
            max_medium: 65536,
            max_inline: 128,
            reg_cache: 0,
            connect_timeout: Duration::from_secs(30),
            connect_abort: true,
        }
    }
}

impl RdmaConfig {
    /// Check the values (a message naming the bad one).
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(2..=1024).contains(&self.buffers) {
            return Err(format!(
                "ibverbs buffers per peer and channel {} out of range 2..=1024",
                self.buffers
            ));
        }
        let least = HEADER + frames::FRAME_HEADER + MAX_WORDS * 8 + 64;
        if self.buffer_size < least || self.buffer_size > (1 << 24) {
            return Err(format!(
                "ibverbs buffer size {} B out of range {least}..=16 MiB",
                self.buffer_size
            ));
        }
        Ok(())
    }

    /// Bytes of registered (pinned) memory the fabric needs besides the
    /// segment, for `size` ranks once it talked to all of them (a pool per
    /// contacted peer, made on first contact, and the credit mailbox).
    pub fn pinned_bytes(&self, size: usize) -> u64 {
        size as u64 * (self.pool_bytes() as u64 + 16) + 4096
    }

    /// Bytes of one peer's registered buffer pool: `2 × buffers` receive
    /// and as many send buffers, and its two credit slots.
    pub fn pool_bytes(&self) -> usize {
        4 * self.buffers as usize * self.buffer_size + 2 * 8
    }
}

/// Most regions the registration cache keeps.
const REG_CACHE_ENTRIES: usize = 256;

/// wr_id kinds (top two bits).
const K_RECV: u64 = 0;
const K_SEND: u64 = 1;
const K_CREDIT: u64 = 2;
const K_RMA: u64 = 3;

/// Longest wait for the device in a non-blocking put or a quiet (its
/// own retries give up within seconds).
const WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The index of a blocking get/put's work request (a non-blocking put's
/// is its bounce buffer's).
const RMA_BLOCKING: u32 = u32::MAX;

fn wr_id(kind: u64, peer: usize, index: u32) -> u64 {
    (kind << 62) | ((peer as u64) << 32) | index as u64
}

fn wr_parts(id: u64) -> (u64, usize, u32) {
    (id >> 62, ((id >> 32) & 0x3fff_ffff) as usize, id as u32)
}

/// A received buffer waiting for its channel's poll.
#[derive(Clone, Copy, Debug)]
struct Arrival {
    peer: usize,
    index: u32,
    len: usize,
}

/// What a peer published (from its card).
#[derive(Clone, Copy, Debug)]
struct Remote {
    seg_addr: u64,
    seg_len: u64,
    seg_rkey: u32,
    mail_addr: u64,
    mail_rkey: u32,
}

/// Everything behind the device lock.
struct Dev<V: Verbs> {
    verbs: V,
    /// Per peer: the connection, once contacted (8 B per peer before).
    links: Vec<Option<Box<PeerLink>>>,
    /// The capabilities every queue pair is created with.
    caps: QpCaps,
    /// How connection messages travel (none: eager, every peer connected
    /// by [`PendingRdma::connect`]).
    side: Option<Arc<dyn SideChannel>>,
    /// Connection messages refused.
    refused: u64,
    mail: Region,
    seg: Region,
    remote: Vec<Remote>,
    credits: Vec<Credits>,
    free_send: Vec<Vec<u32>>,
    /// Send-queue entries outstanding per peer.
    outstanding: Vec<u32>,
    send_depth: u32,
    inline: u32,
    /// Blocking RDMA get/put requests outstanding (all peers).
    rma_pending: u64,
    /// Non-blocking puts outstanding (all peers): each holds a send
    /// buffer until its write completes.
    /// Per peer: non-blocking puts posted, and completed (RC completes a
    /// queue pair's writes in order, so completed >= a count posted
    /// earlier means all of those are done).
    nb_posted: Vec<u64>,
    nb_done: Vec<u64>,
    /// Strided writes posted per peer whose completion leaves their send
    /// buffer in use (`runs::SHARED`) and has not come: a completion with
    /// the flag is taken only while one is out (else it is forged).
    shared_out: Vec<u32>,
    /// Per peer: send buffers of strided transfers that failed after some
    /// of a buffer's writes were posted (`runs::orphan`), each freed when
    /// `nb_done` reaches the count beside it (at most one per buffer).
    orphaned: Vec<Vec<(u64, u32)>>,
    /// `quiet`'s snapshot of `nb_posted` (kept to reuse its allocation).
    nb_want: Vec<u64>,
    /// Why the fabric stopped (every later call fails with it).
    failed: Option<String>,
    scratch: Vec<Completion>,
    /// Registrations of user buffers (large out-of-segment get/put).
    cache: RegCache,
}

impl<V: Verbs> Dev<V> {
    /// This rank's queue pair toward `peer` (a number no device knows if
    /// there is none: a post on it fails).
    fn qp(&self, peer: usize) -> QpId {
        self.links[peer].as_ref().map_or(QpId(u32::MAX), |l| l.qp)
    }
}

/// A peer's registered buffer pool (made on first contact): receive
/// buffers, then send buffers, then the two credit slots.
struct PeerPool {
    /// Raw (not `MmapMut`): every pointer into the pool, the device's
    /// registration included, is a copy of the mapping's own pointer, never
    /// one derived from a `&[u8]` (writing through that would be undefined
    /// behaviour, as Miri found in `an_orphan_is_freed_by_a_plain_put_completion`).
    map: MmapRaw,
    region: Region,
}

/// A rank's ibverbs fabric before it is connected: its segment and mailbox
/// are registered, its card is ready to publish. Queue pairs and buffer
/// pools come per peer on first contact ([`connect_lazy`](Self::connect_lazy)),
/// or all at once for [`card`](Self::card) and [`connect`](Self::connect).
pub struct PendingRdma<V: Verbs> {
    inner: RdmaFabric<V>,
}

/// The ibverbs fabric (see the module documentation).
pub struct RdmaFabric<V: Verbs> {
    rank: usize,
    size: usize,
    cfg: RdmaConfig,
    seg: SegmentRef,
    /// Per peer: its buffer pool once contacted (set once under the device
    /// lock, read without it).
    mem: Vec<OnceLock<Box<PeerPool>>>,
    /// Per peer: the connection is ready (the fast path's one load).
    ready: Vec<AtomicBool>,
    mailbox: MmapMut,
    dev: Mutex<Dev<V>>,
    arrived: [Mutex<VecDeque<Arrival>>; 2],
    rx: [Mutex<Vec<Reassembler>>; 2],
    tx: Vec<Mutex<()>>,
    /// Each peer's segment length (from its card).
    seg_lens: Vec<u64>,
    /// The segment's memory when the fabric made it (unmapped after the
    /// fabric deregistered it).
    own_seg: Option<MmapMut>,
    /// The frozen ranges deposits may not write (the World's set, see
    /// [`share_frozen`](Self::share_frozen)).
    frozen: Arc<FrozenRanges>,
    closed: bool,
}

fn status_error(rank: usize, peer: usize, what: &str, s: WcStatus) -> Error {
    Error::new(ErrorKind::PeerFailed(format!(
        "ibverbs {what} to rank {peer} failed: {}",
        s.describe()
    )))
    .at_rank(rank)
    .with_peer(peer)
}

impl<V: Verbs> PendingRdma<V> {
    /// Open the fabric of `rank` in a job of `size` ranks on `verbs`, with
    /// `seg` as this rank's segment (registered for remote access).
    ///
    /// # Safety
    /// `seg` must satisfy [`SegmentRef::new`]'s contract for as long as the
    /// returned fabric lives: the device and the peers (RDMA writes, Long
    /// payloads) write into it at any time.
    pub unsafe fn new(
        verbs: V,
        rank: usize,
        size: usize,
        seg: SegmentRef,
        cfg: RdmaConfig,
    ) -> Result<PendingRdma<V>> {
        // SAFETY: this function's contract, passed on.
        let p = unsafe { Self::new_lazy(verbs, rank, size, seg, cfg) }?;
        {
            let f = &p.inner;
            let mut d = f.dev.lock();
            for peer in 0..size {
                f.open_peer(&mut d, peer)?;
            }
        }
        Ok(p)
    }

    /// [`new`](Self::new) with nothing made per peer: a peer's queue pair
    /// and buffer pool come on first contact, once connected by
    /// [`connect_lazy`](Self::connect_lazy) (how a job starts).
    ///
    /// # Safety
    /// As for [`new`](Self::new).
    pub unsafe fn new_lazy(
        mut verbs: V,
        rank: usize,
        size: usize,
        seg: SegmentRef,
        cfg: RdmaConfig,
    ) -> Result<PendingRdma<V>> {
        cfg.validate().map_err(Error::config)?;
        let nb = 2 * cfg.buffers as usize;
        let mut mailbox = MmapMut::map_anon(size * 2 * 8)
            .map_err(|e| Error::io("mapping the ibverbs mailbox", e))?;
        let at = |e: Error| e.at_rank(rank);
        // The two registrations made at start: the mailbox is this fabric's
        // own mapping, moved into it below and unmapped only after Drop
        // deregistered it; the segment is alive as long as the fabric (this
        // function's contract). Both are accessed only through raw pointers
        // and atomics, never Rust references the device's writes could
        // invalidate. (Each peer's buffer pool is registered on first
        // contact, `open_peer`.)
        // SAFETY: `register`'s contract, for the mailbox (as said above).
        let mail_r =
            unsafe { verbs.register(mailbox.as_mut_ptr(), mailbox.len(), Access::RemoteReadWrite) }
                .map_err(at)?;
        // SAFETY: `register`'s contract, for the segment (as said above).
        let seg_r = unsafe { verbs.register(seg.base(), seg.len(), Access::RemoteReadWrite) }
            .map_err(at)?;
        let send_depth = nb as u32 + 16;
        let caps = QpCaps {
            send_depth,
            recv_depth: nb as u32,
            max_inline: cfg.max_inline,
            // peers write Long payloads and puts, read gets, credit reports
            remote: Access::RemoteReadWrite,
        };
        let dev = Dev {
            verbs,
            links: (0..size).map(|_| None).collect(),
            caps,
            side: None,
            refused: 0,
            mail: mail_r,
            seg: seg_r,
            remote: Vec::new(),
            credits: (0..size).map(|_| Credits::new(cfg.buffers)).collect(),
            free_send: (0..size).map(|_| Vec::new()).collect(),
            outstanding: vec![0; size],
            send_depth,
            inline: 0,
            rma_pending: 0,
            nb_posted: vec![0; size],
            nb_done: vec![0; size],
            shared_out: vec![0; size],
            orphaned: vec![Vec::new(); size],
            nb_want: Vec::with_capacity(size),
            failed: None,
            scratch: Vec::new(),
            cache: RegCache::new(cfg.reg_cache, REG_CACHE_ENTRIES),
        };
        let f = RdmaFabric {
            rank,
            size,
            cfg,
            seg,
            mem: (0..size).map(|_| OnceLock::new()).collect(),
            ready: (0..size).map(|_| AtomicBool::new(false)).collect(),
            mailbox,
            dev: Mutex::new(dev),
            arrived: Default::default(),
            rx: [
                Mutex::new((0..size).map(|_| Reassembler::default()).collect()),
                Mutex::new((0..size).map(|_| Reassembler::default()).collect()),
            ],
            tx: (0..2 * size).map(|_| Mutex::new(())).collect(),
            seg_lens: Vec::new(),
            own_seg: None,
            frozen: Arc::default(),
            closed: false,
        };
        Ok(PendingRdma { inner: f })
    }

    /// [`new`](Self::new) with a private segment of `seg_len` bytes (the
    /// fabric maps and owns it).
    pub fn with_own_segment(
        verbs: V,
        rank: usize,
        size: usize,
        seg_len: usize,
        cfg: RdmaConfig,
    ) -> Result<PendingRdma<V>> {
        Self::own_segment(verbs, rank, size, seg_len, cfg, true)
    }

    /// [`new_lazy`](Self::new_lazy) with a private segment of `seg_len`
    /// bytes (the fabric maps and owns it).
    pub fn with_own_segment_lazy(
        verbs: V,
        rank: usize,
        size: usize,
        seg_len: usize,
        cfg: RdmaConfig,
    ) -> Result<PendingRdma<V>> {
        Self::own_segment(verbs, rank, size, seg_len, cfg, false)
    }

    fn own_segment(
        verbs: V,
        rank: usize,
        size: usize,
        seg_len: usize,
        cfg: RdmaConfig,
        eager: bool,
    ) -> Result<PendingRdma<V>> {
        let mut m = MmapMut::map_anon(seg_len.max(1))
            .map_err(|e| Error::io(format!("mapping a {seg_len} B segment"), e).at_rank(rank))?;
        // SAFETY: `m` is the fabric's own mapping of `seg_len` bytes (at
        // least), kept in `own_seg` as long as the fabric.
        let seg = unsafe { SegmentRef::new(m.as_mut_ptr(), seg_len) };
        let mut p = if eager {
            // SAFETY: `seg` covers `m`, kept in `own_seg` as long as the fabric.
            unsafe { Self::new(verbs, rank, size, seg, cfg) }?
        } else {
            // SAFETY: as for `new` just above.
            unsafe { Self::new_lazy(verbs, rank, size, seg, cfg) }?
        };
        p.inner.own_seg = Some(m);
        Ok(p)
    }

    /// This rank's card, for every peer (through the bootstrap): its
    /// segment and mailbox, and a queue pair for every peer if the fabric
    /// was made eager ([`new`](Self::new)), none if lazy
    /// ([`new_lazy`](Self::new_lazy): 40 bytes whatever the job's size).
    pub fn card(&self) -> Card {
        let d = self.inner.dev.lock();
        let qps = if d.links.iter().all(Option::is_some) {
            d.links
                .iter()
                .flatten()
                .map(|l| d.verbs.endpoint(l.qp))
                .collect()
        } else {
            Vec::new()
        };
        Card {
            qps,
            ..Self::fixed_card(&d)
        }
    }

    fn fixed_card(d: &Dev<V>) -> Card {
        Card {
            seg_addr: d.seg.addr,
            seg_len: d.seg.len as u64,
            seg_rkey: d.seg.rkey,
            mail_addr: d.mail.addr,
            mail_rkey: d.mail.rkey,
            qps: Vec::new(),
        }
    }

    /// Connect to every peer from their cards (indexed by rank, each from
    /// [`card`](Self::card)).
    pub fn connect(self, cards: &[Card]) -> Result<RdmaFabric<V>> {
        let mut f = self.inner;
        f.learn(cards)?;
        {
            let mut d = f.dev.lock();
            for (p, c) in cards.iter().enumerate() {
                if c.qps.len() != f.size {
                    return Err(Error::protocol(format!(
                        "rank {p}'s ibverbs card lists {} queue pairs for {} ranks",
                        c.qps.len(),
                        f.size
                    ))
                    .at_rank(f.rank));
                }
                let q = f.open_peer(&mut d, p)?;
                d.verbs
                    .connect(q, &c.qps[f.rank])
                    .map_err(|e| e.at_rank(f.rank).with_peer(p))?;
                if let Some(l) = d.links[p].as_mut() {
                    l.remote = Some(c.qps[f.rank]);
                    l.ready = true;
                }
                f.ready[p].store(true, Ordering::Release);
            }
        }
        Ok(f)
    }

    /// Learn every peer's segment and mailbox from their cards (indexed by
    /// rank; queue pairs in them are ignored) and connect to each on first
    /// contact through `side` ([`super::on_demand`]): nothing per peer is
    /// made now.
    /// (`None`: a job of one rank, which talks only to itself).
    pub fn connect_lazy(
        self,
        cards: &[Card],
        side: Option<Box<dyn SideChannel>>,
    ) -> Result<RdmaFabric<V>> {
        let mut f = self.inner;
        f.learn(cards)?;
        f.dev.get_mut().side = side.map(Arc::from);
        Ok(f)
    }
}

impl<V: Verbs> RdmaFabric<V> {
    /// Each peer's segment and mailbox, from the cards (indexed by rank).
    fn learn(&mut self, cards: &[Card]) -> Result<()> {
        if cards.len() != self.size {
            return Err(Error::protocol(format!(
                "{} ibverbs cards for {} ranks",
                cards.len(),
                self.size
            ))
            .at_rank(self.rank));
        }
        self.dev.get_mut().remote = cards
            .iter()
            .map(|c| Remote {
                seg_addr: c.seg_addr,
                seg_len: c.seg_len,
                seg_rkey: c.seg_rkey,
                mail_addr: c.mail_addr,
                mail_rkey: c.mail_rkey,
            })
            .collect();
        self.seg_lens = cards.iter().map(|c| c.seg_len).collect();
        Ok(())
    }

    /// This rank's queue pair toward `peer`, made now with its buffer pool
    /// (registered, every receive posted) if it has none yet.
    fn open_peer(&self, d: &mut Dev<V>, peer: usize) -> Result<QpId> {
        if let Some(l) = &d.links[peer] {
            return Ok(l.qp);
        }
        let at = |e: Error| e.at_rank(self.rank).with_peer(peer);
        let len = self.cfg.pool_bytes();
        let map = MmapRaw::from(
            MmapMut::map_anon(len)
                .map_err(|e| at(Error::io("mapping an ibverbs buffer pool", e)))?,
        );
        // SAFETY: `register`'s contract: the pool is this fabric's own
        // mapping, kept in `mem` as long as the fabric and unmapped only
        // after Drop deregistered it; it is accessed only through raw
        // pointers, never references the device's writes could invalidate.
        let region =
            unsafe { d.verbs.register(map.as_mut_ptr(), len, Access::Local) }.map_err(at)?;
        let qp = match d.verbs.create_qp(d.caps) {
            Ok(q) => q,
            Err(e) => {
                let _ = d.verbs.deregister(&region);
                return Err(at(e));
            }
        };
        if self.mem[peer]
            .set(Box::new(PeerPool { map, region }))
            .is_err()
        {
            // set only here, under the device lock, right before `links`
            let _ = d.verbs.destroy_qp(qp);
            let _ = d.verbs.deregister(&region);
            return Err(at(Error::protocol("an ibverbs buffer pool made twice")));
        }
        d.inline = d.verbs.max_inline(qp);
        let nb = self.nb() as u32;
        d.free_send[peer] = (0..nb).rev().collect();
        d.links[peer] = Some(Box::new(PeerLink {
            qp,
            remote: None,
            asked: None,
            ready: false,
        }));
        // every receive is posted before the peer can learn of this queue pair
        for i in 0..nb {
            self.post_recv(d, peer, i).map_err(at)?;
        }
        Ok(qp)
    }

    /// Make sure `peer` is connected (the one load of the fast path), else
    /// connect now ([`super::on_demand`]), calling `stall` (if given)
    /// while waiting for the peer's answer.
    #[inline]
    fn ensure(&self, peer: usize, stall: Option<&mut dyn FnMut(u32) -> Result<()>>) -> Result<()> {
        if self.ready[peer].load(Ordering::Acquire) {
            return Ok(());
        }
        self.connect_peer(peer, stall)
    }

    #[cold]
    fn connect_peer(
        &self,
        peer: usize,
        mut stall: Option<&mut dyn FnMut(u32) -> Result<()>>,
    ) -> Result<()> {
        let since = Instant::now();
        let mut waits = 0u32;
        let mut reported = false;
        loop {
            let mut out = Vec::new();
            let (ready, side) = {
                let mut d = self.dev.lock();
                self.reap(&mut d)?;
                self.serve_side(&mut d, &mut out);
                (
                    self.step_connect(&mut d, peer, since, &mut out)?,
                    d.side.clone(),
                )
            };
            // the relays go out after the device lock is dropped
            self.send_side(side.as_deref(), out)?;
            if ready {
                return Ok(());
            }
            if !reported && since.elapsed() >= self.cfg.connect_timeout {
                let dropped = self.dev.lock().side.as_ref().map_or(0, |s| s.dropped());
                let why = format!(
                    "ibverbs: rank {peer} did not answer this rank's connection request \
                     within {:.1} s (the hang report's bound, SPLITRT_HANG_REPORT): is it \
                     still running, and does it make progress (poll, wait, barrier)? \
                     ({dropped} connection messages to this rank dropped by a full inbox)",
                    self.cfg.connect_timeout.as_secs_f64()
                );
                if self.cfg.connect_abort {
                    return Err(Error::new(ErrorKind::Timeout(why))
                        .at_rank(self.rank)
                        .with_peer(peer));
                }
                // a hang report: once, and the wait goes on
                eprintln!(
                    "splitrt: rank {}: {why}; still waiting (SPLITRT_HANG_REPORT=off \
                     silences this, SPLITRT_HANG_ABORT=1 ends the job instead)",
                    self.rank
                );
                reported = true;
            }
            match stall.as_mut() {
                Some(s) => s(waits).map_err(|e| e.at_rank(self.rank))?,
                None if waits < 64 => std::thread::yield_now(),
                None => std::thread::sleep(Duration::from_micros(50)),
            }
            waits = waits.saturating_add(1);
        }
    }

    /// One step toward `peer`'s connection (waited for since `since`):
    /// make the queue pair, ask (again while not ready); `true` once ready.
    /// Messages to send go to `out` (sent once the device lock is dropped).
    fn step_connect(
        &self,
        d: &mut Dev<V>,
        peer: usize,
        since: Instant,
        out: &mut Vec<(usize, ConnectMsg)>,
    ) -> Result<bool> {
        let qp = self.open_peer(d, peer)?;
        let l = **d.links[peer].as_ref().expect("opened just above");
        if l.ready {
            self.ready[peer].store(true, Ordering::Release);
            return Ok(true);
        }
        let me = d.verbs.endpoint(qp);
        if peer == self.rank {
            // talking to itself: its queue pair connects to itself
            d.verbs.connect(qp, &me).map_err(|e| e.at_rank(self.rank))?;
            self.set_link(d, peer, Some(me), true);
            return Ok(true);
        }
        // ask; and ask again every so often while not ready: a REQUEST, or
        // the ANSWER / READY it led to, may have been lost on the side
        // channel (a full relay inbox drops), and asking is idempotent (a
        // peer connected to this queue pair answers again, and an answer
        // to an asking rank brings READY again)
        // (the side that answered first waits that long for READY before
        // it asks itself). The gaps double (each at least as long as this
        // wait so far), so a peer that does not poll for a long while
        // gets a few copies, not enough to fill its bounded relay inbox.
        let after = |t: Instant| t.elapsed() >= self.resend_interval();
        let ask = match (l.asked, l.remote) {
            (Some(t), _) => after(t) && t.elapsed() >= t.saturating_duration_since(since),
            (None, None) => true,
            (None, Some(_)) => after(since),
        };
        if ask {
            if d.side.is_none() {
                return Err(Error::usage(format!(
                    "ibverbs: no connection to rank {peer} and no side channel to make one \
                     (an eager fabric is connected by PendingRdma::connect)"
                ))
                .at_rank(self.rank)
                .with_peer(peer));
            }
            out.push((peer, ConnectMsg::Request(me)));
            if let Some(l) = d.links[peer].as_mut() {
                l.asked = Some(Instant::now());
            }
        }
        Ok(false)
    }

    /// How long a connection waits for its peer before asking again: an
    /// eighth of the bound, between 5 ms and 500 ms.
    fn resend_interval(&self) -> Duration {
        (self.cfg.connect_timeout / 8).clamp(Duration::from_millis(5), Duration::from_millis(500))
    }

    fn set_link(&self, d: &mut Dev<V>, peer: usize, remote: Option<QpEndpoint>, ready: bool) {
        if let Some(l) = d.links[peer].as_mut() {
            l.remote = remote;
            l.ready |= ready;
        }
        if ready {
            self.ready[peer].store(true, Ordering::Release);
        }
    }

    /// Answer the connection messages waiting on the side channel (a
    /// bounded number a call); the answers go to `out`, to be sent once
    /// the device lock is dropped ([`send_side`](Self::send_side)).
    fn serve_side(&self, d: &mut Dev<V>, out: &mut Vec<(usize, ConnectMsg)>) {
        if !d.side.as_ref().is_some_and(|s| s.pending()) {
            return;
        }
        for _ in 0..256 {
            let Some((from, msg)) = d.side.as_ref().and_then(|s| s.take()) else {
                break;
            };
            if let Some(a) = self.on_connect_msg(d, from, &msg) {
                out.push((from, a));
            }
        }
    }

    /// Send the connection messages in `out` (called without the device
    /// lock: a relay is a blocking write to the bootstrap socket).
    fn send_side(
        &self,
        side: Option<&dyn SideChannel>,
        out: Vec<(usize, ConnectMsg)>,
    ) -> Result<()> {
        let Some(side) = side else {
            return Ok(());
        };
        for (to, m) in out {
            side.send(to, &m.encode())
                .map_err(|e| e.at_rank(self.rank).with_peer(to))?;
        }
        Ok(())
    }

    /// One connection message from rank `from` ([`super::on_demand`]):
    /// the answer to send back, if any. Anything malformed or out of turn
    /// is refused (counted, dropped), and so is a REQUEST this rank cannot
    /// make a queue pair for (logged): one peer's request is never an
    /// error of this rank's poll.
    fn on_connect_msg(&self, d: &mut Dev<V>, from: usize, msg: &[u8]) -> Option<ConnectMsg> {
        if from >= self.size || from == self.rank {
            d.refused += 1;
            return None;
        }
        let Ok(m) = ConnectMsg::decode(msg) else {
            d.refused += 1;
            return None;
        };
        let link = d.links[from].as_deref().copied();
        // the queue pair a message names must be the one connected, if any
        let named = match m {
            ConnectMsg::Request(e) | ConnectMsg::Answer(e) => Some(e),
            ConnectMsg::Ready => None,
        };
        if let (Some(e), Some(r)) = (named, link.and_then(|l| l.remote)) {
            if e != r {
                d.refused += 1;
                return None;
            }
        }
        match m {
            ConnectMsg::Request(e) => {
                let qp = match self.open_peer(d, from) {
                    Ok(qp) => qp,
                    Err(err) => {
                        // memlock or queue-pair limits: the peer asks again
                        d.refused += 1;
                        eprintln!(
                            "splitrt: rank {}: refused rank {from}'s ibverbs connection \
                             request: {err}",
                            self.rank
                        );
                        return None;
                    }
                };
                if link.and_then(|l| l.remote).is_none() {
                    if d.verbs.connect(qp, &e).is_err() {
                        d.refused += 1;
                        return None;
                    }
                    self.set_link(d, from, Some(e), false);
                }
                Some(ConnectMsg::Answer(d.verbs.endpoint(qp)))
            }
            ConnectMsg::Answer(e) => {
                let Some(l) = link.filter(|l| l.asked.is_some()) else {
                    // an answer this rank never asked for
                    d.refused += 1;
                    return None;
                };
                if l.remote.is_none() && d.verbs.connect(l.qp, &e).is_err() {
                    d.refused += 1;
                    return None;
                }
                self.set_link(d, from, Some(e), true);
                Some(ConnectMsg::Ready)
            }
            ConnectMsg::Ready => {
                let Some(l) = link.filter(|l| l.remote.is_some()) else {
                    d.refused += 1;
                    return None;
                };
                self.set_link(d, from, l.remote, true);
                None
            }
        }
    }

    /// What this rank holds toward its peers now: queue pairs, pools and
    /// pinned bytes (see [`super::on_demand`]).
    pub fn peer_state(&self) -> PeerStateStats {
        let d = self.dev.lock();
        let pools = self.mem.iter().filter(|m| m.get().is_some()).count();
        PeerStateStats {
            queue_pairs: d.links.iter().flatten().count(),
            pools,
            pinned_bytes: pools as u64 * self.cfg.pool_bytes() as u64 + self.mailbox.len() as u64,
            refused: d.refused,
        }
    }

    /// Feed connection message `msg` as if rank `from` had sent it over the
    /// side channel (a test's way to play a broken or hostile peer).
    #[cfg(feature = "test-doubles")]
    pub fn inject_connect_msg(&self, from: usize, msg: &[u8]) -> Result<()> {
        let (answer, side) = {
            let mut d = self.dev.lock();
            (self.on_connect_msg(&mut d, from, msg), d.side.clone())
        };
        self.send_side(
            side.as_deref(),
            answer.map(|a| (from, a)).into_iter().collect(),
        )
    }

    /// Whether arrivals wait (or a message is half fed) for a poll.
    pub fn arrivals_waiting(&self) -> bool {
        self.arrived.iter().any(|a| !a.lock().is_empty())
            || self
                .rx
                .iter()
                .any(|r| r.lock().iter().any(Reassembler::in_progress))
    }

    /// Refuse two-sided deposits into the ranges of `frozen` (the set the
    /// layer above freezes ranges in; the World hands its own over at
    /// start). Placed payloads and one-sided writes are the device's, done
    /// by the sender's `rma_quiet`.
    pub fn share_frozen(&mut self, frozen: Arc<FrozenRanges>) {
        self.frozen = frozen;
    }

    fn nb(&self) -> usize {
        2 * self.cfg.buffers as usize
    }

    /// `peer`'s buffer pool. Everything that touches one runs after the
    /// pool was made: sends, puts and gets after [`ensure`](Self::ensure),
    /// completions after `reap_into` checked the peer has one.
    fn pool(&self, peer: usize) -> &PeerPool {
        self.mem[peer]
            .get()
            .expect("a peer's pool is made before anything touches it")
    }

    fn recv_addr(&self, peer: usize, index: u32) -> *mut u8 {
        let off = index as usize * self.cfg.buffer_size;
        // SAFETY: index < nb, so off is inside the pool's receive half.
        unsafe { self.pool(peer).map.as_mut_ptr().add(off) }
    }

    fn send_addr(&self, peer: usize, index: u32) -> *mut u8 {
        let off = (self.nb() + index as usize) * self.cfg.buffer_size;
        // SAFETY: as for recv_addr, in the send half of the pool.
        unsafe { self.pool(peer).map.as_mut_ptr().add(off) }
    }

    fn credit_slot(&self, peer: usize, ch: usize) -> *mut u64 {
        let off = 2 * self.nb() * self.cfg.buffer_size + ch * 8;
        // SAFETY: the pool's tail holds 2 u64 slots, 8-aligned: the mapping
        // is page-aligned and off = 4 x buffers (>= 2) x buffer_size + 8 ch.
        unsafe { self.pool(peer).map.as_mut_ptr().add(off) as *mut u64 }
    }

    fn mailbox(&self, peer: usize, ch: usize) -> u64 {
        let p = self.mailbox.as_ptr() as *const AtomicU64;
        // SAFETY: peer < size and ch < 2, and the mailbox holds size * 2
        // u64s: an in-bounds offset.
        let slot = unsafe { p.add(peer * 2 + ch) };
        // SAFETY: the slot is an 8-aligned u64 (page-aligned mapping) of
        // the mailbox, which lives as long as `self`; peers write it by
        // RDMA, so it is only ever read atomically, never through `&u64`.
        unsafe { (*slot).load(Ordering::Acquire) }
    }

    fn post_recv(&self, d: &mut Dev<V>, peer: usize, index: u32) -> Result<()> {
        let addr = self.recv_addr(peer, index) as u64;
        let sge = self.pool(peer).region.sge(addr, self.cfg.buffer_size);
        let q = d.qp(peer);
        // SAFETY: receive buffer `index` of `peer` lies in the registered
        // pool; the fabric reads it only after its completion (`consume`)
        // and posts it again only once done with it.
        unsafe { d.verbs.post_recv(q, wr_id(K_RECV, peer, index), sge) }
    }

    /// Take completions off the queue: arrivals to their channel, send
    /// buffers back to their free lists. Fails once the fabric has failed.
    fn reap(&self, d: &mut Dev<V>) -> Result<()> {
        if let Some(why) = &d.failed {
            return Err(Error::new(ErrorKind::PeerFailed(format!(
                "the ibverbs fabric stopped earlier: {why}"
            )))
            .at_rank(self.rank));
        }
        let mut buf = std::mem::take(&mut d.scratch);
        buf.resize(
            32,
            Completion {
                wr_id: 0,
                qp: QpId(0),
                kind: WcKind::Send,
                status: WcStatus::Success,
                len: 0,
            },
        );
        let r = self.reap_into(d, &mut buf);
        d.scratch = buf;
        if let Err(e) = &r {
            if d.failed.is_none() {
                d.failed = Some(e.to_string());
                // The fabric stops here. Its queue pairs go first, so the
                // device writes no memory of a caller that returns with
                // this error: a blocking get's buffer may still be the
                // target of a posted RDMA read (a destroyed queue pair's
                // work is flushed, never executed). Later posts fail.
                let qps: Vec<QpId> = d.links.iter().flatten().map(|l| l.qp).collect();
                for q in qps {
                    let _ = d.verbs.destroy_qp(q);
                }
            }
        }
        r
    }

    fn reap_into(&self, d: &mut Dev<V>, buf: &mut [Completion]) -> Result<()> {
        loop {
            let k = d.verbs.poll(buf).map_err(|e| e.at_rank(self.rank))?;
            for c in &buf[..k] {
                let (kind, peer, index) = wr_parts(c.wr_id);
                if peer >= self.size || self.mem[peer].get().is_none() {
                    return Err(Error::protocol(format!(
                        "ibverbs completion for rank {peer}, which has no queue pair here"
                    ))
                    .at_rank(self.rank));
                }
                if c.status != WcStatus::Success {
                    if self.closed && c.status == WcStatus::Flushed {
                        continue;
                    }
                    let what = match c.kind {
                        WcKind::Send => "send",
                        WcKind::Recv => "receive",
                        WcKind::Write => "RDMA write",
                        WcKind::Read => "RDMA read",
                    };
                    return Err(status_error(self.rank, peer, what, c.status));
                }
                match kind {
                    K_RECV => {
                        let len = c.len as usize;
                        if index as usize >= self.nb() || len > self.cfg.buffer_size {
                            return Err(Error::protocol(format!(
                                "ibverbs receive of {len} B into buffer {index}"
                            ))
                            .at_rank(self.rank)
                            .with_peer(peer));
                        }
                        // SAFETY: the device filled len <= buffer_size bytes of
                        // this buffer, ours until it is posted again.
                        let b =
                            unsafe { std::slice::from_raw_parts(self.recv_addr(peer, index), len) };
                        let h = BufHeader::decode(b).map_err(|why| {
                            Error::protocol(format!("rank {peer} sent a malformed buffer: {why}"))
                                .at_rank(self.rank)
                                .with_peer(peer)
                        })?;
                        for ch in 0..2 {
                            if !d.credits[peer].heard(ch, h.freed[ch]) {
                                return Err(Error::protocol(format!(
                                    "rank {peer} returned more credits than it was sent"
                                ))
                                .at_rank(self.rank)
                                .with_peer(peer));
                            }
                        }
                        self.arrived[h.channel]
                            .lock()
                            .push_back(Arrival { peer, index, len });
                        if !self.ready[peer].load(Ordering::Relaxed) {
                            // the peer sent over the pair, so it connected
                            // its side: this rank may send too (its READY
                            // may still be on the way through the relay)
                            let remote = d.links[peer].as_ref().and_then(|l| l.remote);
                            if remote.is_some() {
                                self.set_link(d, peer, remote, true);
                            }
                        }
                    }
                    K_SEND => {
                        d.outstanding[peer] -= 1;
                        if index != u32::MAX {
                            self.check_send_index(peer, index)?;
                            d.free_send[peer].push(index);
                        }
                    }
                    K_CREDIT => d.outstanding[peer] -= 1,
                    _ if index == RMA_BLOCKING => {
                        d.outstanding[peer] -= 1;
                        d.rma_pending -= 1;
                    }
                    _ if index & runs::SHARED != 0 && d.shared_out[peer] > 0 => {
                        // a strided write whose send buffer a later write
                        // of the same transfer still uses: counted only
                        self.check_send_index(peer, index & !runs::SHARED)?;
                        d.shared_out[peer] -= 1;
                        d.outstanding[peer] -= 1;
                        d.nb_done[peer] += 1;
                        if !d.orphaned[peer].is_empty() {
                            runs::free_orphans(d, peer);
                        }
                    }
                    _ => {
                        // a non-blocking put's write: its bounce buffer is free
                        self.check_send_index(peer, index)?;
                        d.outstanding[peer] -= 1;
                        d.nb_done[peer] += 1;
                        d.free_send[peer].push(index);
                        // an orphan's last write may have completed before
                        // this one (another thread's put, posted before the
                        // failure): its count is reached here
                        if !d.orphaned[peer].is_empty() {
                            runs::free_orphans(d, peer);
                        }
                    }
                }
            }
            if k < buf.len() {
                return Ok(());
            }
        }
    }

    /// A completion that frees send buffer `index` toward `peer` must name
    /// one of them: the index goes back to the free list, and a later send
    /// or non-blocking put copies into [`send_addr`](Self::send_addr) of it.
    fn check_send_index(&self, peer: usize, index: u32) -> Result<()> {
        if (index as usize) < self.nb() {
            return Ok(());
        }
        Err(Error::protocol(format!(
            "ibverbs send completion toward rank {peer} names send buffer {index} \
             (there are {})",
            self.nb()
        ))
        .at_rank(self.rank)
        .with_peer(peer))
    }

    /// Read credit reports from the mailbox for `peer`.
    fn read_mailbox(&self, d: &mut Dev<V>, peer: usize) -> Result<()> {
        for ch in 0..2 {
            let v = self.mailbox(peer, ch);
            if !d.credits[peer].heard(ch, v) {
                return Err(Error::protocol(format!(
                    "rank {peer} wrote more credits into the mailbox than it was sent"
                ))
                .at_rank(self.rank)
                .with_peer(peer));
            }
        }
        Ok(())
    }

    /// A send buffer and a send-queue slot toward `peer` (and a credit of
    /// `ch` if given), or `None` if one of them is short right now.
    fn try_acquire(&self, d: &mut Dev<V>, peer: usize, ch: Option<usize>) -> Result<Option<u32>> {
        self.reap(d)?;
        if d.outstanding[peer] >= d.send_depth || d.free_send[peer].is_empty() {
            return Ok(None);
        }
        if let Some(ch) = ch {
            if d.credits[peer].available(ch) == 0 {
                self.read_mailbox(d, peer)?;
            }
            if !d.credits[peer].take(ch) {
                return Ok(None);
            }
        }
        Ok(d.free_send[peer].pop())
    }

    /// [`try_acquire`](Self::try_acquire), waiting (with `stall`) unless
    /// nothing of the message has left yet (`Ok(None)`: back-pressure).
    fn acquire(
        &self,
        peer: usize,
        ch: Option<usize>,
        started: bool,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<Option<u32>> {
        let mut waits = 0u32;
        loop {
            if let Some(i) = self.try_acquire(&mut self.dev.lock(), peer, ch)? {
                return Ok(Some(i));
            }
            if !started {
                return Ok(None);
            }
            stall(waits).map_err(|e| e.at_rank(self.rank))?;
            waits = waits.saturating_add(1);
        }
    }

    /// Post send buffer `index` holding `len` bytes to `peer`.
    fn post_buffer(&self, d: &mut Dev<V>, peer: usize, index: u32, len: usize) -> Result<()> {
        let addr = self.send_addr(peer, index) as u64;
        let inline = len <= d.inline as usize;
        let wr = SendWr {
            wr_id: wr_id(K_SEND, peer, if inline { u32::MAX } else { index }),
            op: Op::Send,
            sge: self.pool(peer).region.sge(addr, len),
            inline,
            fence: false,
        };
        let q = d.qp(peer);
        // SAFETY: send buffer `index` lies in the registered pool; it was
        // taken off the free list and goes back on it only at this send's
        // completion (or at once when inline: the bytes are copied now).
        unsafe { d.verbs.post_send(q, &wr) }?;
        d.outstanding[peer] += 1;
        if inline {
            // the device copied the bytes: the buffer is free again
            d.free_send[peer].push(index);
        }
        Ok(())
    }

    /// Fill send buffer `index` with a header for channel `ch` and the
    /// frames `fill` appends; returns the bytes used.
    fn fill(
        &self,
        d: &mut Dev<V>,
        peer: usize,
        index: u32,
        ch: usize,
        fill: impl FnOnce(&mut Vec<u8>, usize),
    ) -> usize {
        let mut body = Vec::with_capacity(self.cfg.buffer_size);
        body.resize(HEADER, 0);
        BufHeader {
            channel: ch,
            freed: d.credits[peer].piggyback(),
        }
        .encode(&mut body);
        fill(&mut body, self.cfg.buffer_size - HEADER);
        let n = body.len();
        // SAFETY: send buffer `index` of `peer` is ours (taken from the free
        // list) and buffer_size >= n bytes long.
        unsafe { std::ptr::copy_nonoverlapping(body.as_ptr(), self.send_addr(peer, index), n) };
        n
    }

    fn check_send(&self, peer: usize, pkt: &Packet<'_>, remote_len: u64) -> Result<()> {
        let err = |e: Error| Err(e.at_rank(self.rank).with_peer(peer));
        if pkt.words.len() > MAX_WORDS {
            return err(Error::usage(format!(
                "{} argument words (max {MAX_WORDS})",
                pkt.words.len()
            )));
        }
        let len = pkt.payload.len();
        match pkt.deposit {
            Some(off)
                if off.checked_add(len as u64).is_none_or(|e| e > remote_len)
                    || len > u32::MAX as usize =>
            {
                err(Error::new(ErrorKind::OutOfBounds {
                    offset: off,
                    len: len as u64,
                    segment_len: remote_len,
                }))
            }
            None if len > self.cfg.max_medium => err(Error::usage(format!(
                "payload of {len} B exceeds the Medium maximum of {} B",
                self.cfg.max_medium
            ))),
            _ => Ok(()),
        }
    }

    /// RDMA write or read of `len` bytes between local `sge_addr` (in
    /// region `local`) and `peer`'s segment at `raddr`; waits for
    /// completion.
    #[allow(clippy::too_many_arguments)]
    fn rma_wait(
        &self,
        d: &mut parking_lot::MutexGuard<'_, Dev<V>>,
        peer: usize,
        write: bool,
        local: Region,
        sge_addr: u64,
        len: usize,
        raddr: u64,
    ) -> Result<()> {
        while d.outstanding[peer] >= d.send_depth {
            self.reap(d)?;
            parking_lot::MutexGuard::bump(d);
        }
        let r = d.remote[peer];
        let op = if write {
            Op::Write {
                raddr,
                rkey: r.seg_rkey,
            }
        } else {
            Op::Read {
                raddr,
                rkey: r.seg_rkey,
            }
        };
        let wr = SendWr {
            wr_id: wr_id(K_RMA, peer, RMA_BLOCKING),
            op,
            sge: local.sge(sge_addr, len),
            inline: false,
            fence: false,
        };
        let q = d.qp(peer);
        // SAFETY: `local` covers the range (the segment, a pinned cached
        // registration or a bounce buffer taken off the free list), and
        // the caller's memory stays untouched while this function waits
        // for the completion below.
        unsafe { d.verbs.post_send(q, &wr) }?;
        d.outstanding[peer] += 1;
        d.rma_pending += 1;
        while d.rma_pending > 0 {
            self.reap(d)?;
            if d.rma_pending > 0 {
                parking_lot::MutexGuard::bump(d);
            }
        }
        Ok(())
    }

    /// A registration covering `[addr, addr + len)` of user memory, pinned
    /// for the caller: from the cache, or registered now (after evicting
    /// what the caps require). `None`: no room (every cached region in use)
    /// or the device refused (e.g. the locked-memory limit): the caller
    /// copies through the bounce buffers instead.
    fn cached(
        &self,
        d: &mut parking_lot::MutexGuard<'_, Dev<V>>,
        addr: u64,
        len: usize,
    ) -> Result<Option<Region>> {
        if let Some(r) = d.cache.lookup_pin(addr, len) {
            return Ok(Some(r));
        }
        let Some((start, n)) = d.cache.span(addr, len) else {
            return Ok(None);
        };
        let Some(evicted) = d.cache.make_room(n) else {
            return Ok(None);
        };
        for r in &evicted {
            d.verbs.deregister(r)?;
        }
        // local write too: an RDMA read lands in it
        // SAFETY: a local-access region (no peer can touch it); the device
        // accesses it only through requests the fabric posts, each on a
        // caller's live slice inside it, waited for before that call ends.
        match unsafe { d.verbs.register(start as *mut u8, n, Access::Local) } {
            Ok(r) => {
                d.cache.insert_pinned(r);
                Ok(Some(r))
            }
            Err(_) => Ok(None),
        }
    }

    /// Unpin `region` after use (deregistering it if it was forgotten).
    fn release(&self, d: &mut parking_lot::MutexGuard<'_, Dev<V>>, region: &Region) -> Result<()> {
        if let Some(dead) = d.cache.unpin(region) {
            d.verbs.deregister(&dead)?;
        }
        Ok(())
    }

    /// The program is about to unmap (or reuse for something else) the
    /// memory `[addr, addr + len)`: drop cached registrations of it (see
    /// the hazard in [`super::reg_cache`]). Those in use by an operation of
    /// another thread go when it ends.
    pub fn forget(&self, addr: *const u8, len: usize) -> Result<()> {
        let mut d = self.dev.lock();
        for r in d.cache.forget(addr as u64, len) {
            d.verbs.deregister(&r)?;
        }
        Ok(())
    }

    /// The registration cache's counters.
    pub fn reg_cache_stats(&self) -> RegCacheStats {
        self.dev.lock().cache.stats()
    }

    fn remote_range(&self, d: &Dev<V>, peer: usize, off: u64, len: usize) -> Result<u64> {
        let r = d.remote.get(peer).ok_or_else(|| {
            Error::usage(format!(
                "rank {peer} does not exist in a job of {} ranks",
                self.size
            ))
            .at_rank(self.rank)
        })?;
        if off.checked_add(len as u64).is_none_or(|e| e > r.seg_len) {
            return Err(Error::new(ErrorKind::OutOfBounds {
                offset: off,
                len: len as u64,
                segment_len: r.seg_len,
            })
            .at_rank(self.rank)
            .with_peer(peer));
        }
        Ok(r.seg_addr + off)
    }

    /// Copy `src` into `peer`'s segment at `off` by RDMA write; returns
    /// once the write is complete at the peer.
    pub fn put(&self, peer: usize, off: u64, src: &[u8]) -> Result<()> {
        // the buffer is only read (the RDMA write's source)
        self.rma(peer, off, src.as_ptr() as *mut u8, src.len(), true)
    }

    /// Copy `src` (at most one message buffer, `SPLITRT_IBV_BUFFER_SIZE`
    /// bytes) into a send buffer and RDMA-write it to `peer`'s segment at
    /// `off`; returns once posted, `src` free for reuse. The write is
    /// complete at the peer by the next [`quiet`](Self::quiet). `Ok(false)`:
    /// too large for one buffer (use [`put`](Self::put)).
    pub fn put_nb(&self, peer: usize, off: u64, src: &[u8]) -> Result<bool> {
        if src.len() > self.cfg.buffer_size {
            return Ok(false);
        }
        let mut d = self.dev.lock();
        let raddr = self.remote_range(&d, peer, off, src.len())?;
        if src.is_empty() {
            return Ok(true);
        }
        if !self.ready[peer].load(Ordering::Acquire) {
            drop(d);
            self.ensure(peer, None)?;
            d = self.dev.lock();
        }
        let since = Instant::now();
        let idx = loop {
            self.reap(&mut d)?;
            if d.outstanding[peer] < d.send_depth {
                if let Some(i) = d.free_send[peer].pop() {
                    break i;
                }
            }
            self.waited_too_long(since, peer, "a send buffer for a put")?;
            parking_lot::MutexGuard::bump(&mut d);
        };
        let bounce = self.send_addr(peer, idx);
        // SAFETY: the bounce buffer is ours (taken off the free list) and
        // `buffer_size` >= `src.len()` bytes long; `src` is a live slice.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), bounce, src.len()) };
        let wr = SendWr {
            wr_id: wr_id(K_RMA, peer, idx),
            op: Op::Write {
                raddr,
                rkey: d.remote[peer].seg_rkey,
            },
            sge: self.pool(peer).region.sge(bounce as u64, src.len()),
            inline: src.len() <= d.inline as usize,
            fence: false,
        };
        let q = d.qp(peer);
        // SAFETY: the bounce buffer lies in the registered pool, ours until
        // this write completes (it goes back on the free list then).
        if let Err(e) = unsafe { d.verbs.post_send(q, &wr) } {
            d.free_send[peer].push(idx);
            return Err(e.at_rank(self.rank).with_peer(peer));
        }
        d.outstanding[peer] += 1;
        d.nb_posted[peer] += 1;
        Ok(true)
    }

    /// Send buffers toward `peer` on the free list now (a test's check
    /// that every buffer comes back exactly once; buffers held by writes
    /// or sends in flight are not counted).
    #[cfg(feature = "test-doubles")]
    pub fn free_send_buffers(&self, peer: usize) -> usize {
        self.dev.lock().free_send.get(peer).map_or(0, Vec::len)
    }

    /// Wait until every non-blocking put posted before this call (by any
    /// thread) is complete at its peer (its RDMA write acknowledged);
    /// fails if one failed. Puts posted meanwhile are not waited for.
    pub fn quiet(&self) -> Result<()> {
        self.quiet_where(None)
    }

    /// [`quiet`](Self::quiet) for the puts to `peer` only (OpenSHMEM's
    /// quiet on a context that talks to one PE): puts to other peers are
    /// not waited for.
    pub fn quiet_peer(&self, peer: usize) -> Result<()> {
        if peer >= self.size {
            return Err(Error::usage(format!(
                "rank {peer} does not exist in a job of {} ranks",
                self.size
            ))
            .at_rank(self.rank));
        }
        self.quiet_where(Some(peer))
    }

    /// Wait for the non-blocking puts posted so far, to every peer or to
    /// `only`.
    fn quiet_where(&self, only: Option<usize>) -> Result<()> {
        let mut d = self.dev.lock();
        let nothing = match only {
            None => d.nb_done == d.nb_posted,
            Some(p) => d.nb_done[p] == d.nb_posted[p],
        };
        if nothing {
            return Ok(());
        }
        let mut want = std::mem::take(&mut d.nb_want);
        want.clear();
        want.extend_from_slice(&d.nb_posted);
        if let Some(p) = only {
            // the others count as done: nothing of theirs is waited for
            for (q, w) in want.iter_mut().enumerate() {
                if q != p {
                    *w = 0;
                }
            }
        }
        let since = Instant::now();
        let r = loop {
            let Some(peer) = (0..self.size).find(|&p| d.nb_done[p] < want[p]) else {
                break Ok(());
            };
            if let Err(e) = self.reap(&mut d) {
                break Err(e);
            }
            if d.nb_done[peer] < want[peer] {
                if let Err(e) = self.waited_too_long(since, peer, "non-blocking puts to complete") {
                    break Err(e);
                }
                parking_lot::MutexGuard::bump(&mut d);
            }
        };
        d.nb_want = want;
        r
    }

    /// An error once a wait for `what` toward `peer` has lasted past
    /// [`WAIT_LIMIT`] (a device completes or fails every request long
    /// before: this is a bug or a wedged device, reported, not a hang).
    fn waited_too_long(&self, since: Instant, peer: usize, what: &str) -> Result<()> {
        if since.elapsed() < WAIT_LIMIT {
            return Ok(());
        }
        Err(Error::new(ErrorKind::PeerFailed(format!(
            "ibverbs: waited {:?} for {what} toward rank {peer}",
            WAIT_LIMIT
        )))
        .at_rank(self.rank)
        .with_peer(peer))
    }

    /// Copy `peer`'s segment at `off` into `dst` by RDMA read.
    pub fn get(&self, peer: usize, off: u64, dst: &mut [u8]) -> Result<()> {
        self.rma(peer, off, dst.as_mut_ptr(), dst.len(), false)
    }

    /// RDMA write (`write`) of `len` bytes at `buf` to `peer`'s segment at
    /// `off`, or read from it into `buf`; complete on return. From the
    /// segment directly, from a cached registration when large, else a
    /// send buffer at a time.
    fn rma(&self, peer: usize, off: u64, buf: *mut u8, len: usize, write: bool) -> Result<()> {
        let mut d = self.dev.lock();
        let raddr = self.remote_range(&d, peer, off, len)?;
        if len == 0 {
            return Ok(());
        }
        if !self.ready[peer].load(Ordering::Acquire) {
            drop(d);
            self.ensure(peer, None)?;
            d = self.dev.lock();
        }
        let a = buf as u64;
        let base = self.seg.base() as u64;
        if a >= base && a + len as u64 <= base + self.seg.len() as u64 {
            let seg = d.seg;
            return self.rma_wait(&mut d, peer, write, seg, a, len, raddr);
        }
        if d.cache.wants(len) {
            if let Some(region) = self.cached(&mut d, a, len)? {
                let r = self.rma_wait(&mut d, peer, write, region, a, len, raddr);
                return self.release(&mut d, &region).and(r);
            }
        }
        let idx = loop {
            self.reap(&mut d)?;
            if let Some(i) = d.free_send[peer].pop() {
                break i;
            }
            parking_lot::MutexGuard::bump(&mut d);
        };
        let bounce = self.send_addr(peer, idx);
        let bs = self.cfg.buffer_size;
        let mut r = Ok(());
        for at in (0..len).step_by(bs) {
            let n = bs.min(len - at);
            if write {
                // SAFETY: at < len and `buf` holds `len` bytes (a caller's
                // slice, `rma`'s callers): an in-bounds offset.
                let src = unsafe { buf.add(at) };
                // SAFETY: src..src + n lies in the caller's slice (at + n <=
                // len); the bounce buffer is this fabric's own, `bs >= n`
                // long and taken from `free_send` for this call only, so
                // the two do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(src, bounce, n) };
            }
            let pool = self.pool(peer).region;
            r = self.rma_wait(
                &mut d,
                peer,
                write,
                pool,
                bounce as u64,
                n,
                raddr + at as u64,
            );
            if r.is_err() {
                break;
            }
            if !write {
                // SAFETY: at < len, and `buf` is the caller's `&mut` slice
                // of `len` bytes: an in-bounds offset.
                let dst = unsafe { buf.add(at) };
                // SAFETY: the read completed into the bounce buffer (ours,
                // `n <= bs` bytes); dst..dst + n lies in the caller's `&mut`
                // slice, which cannot overlap the bounce buffer.
                unsafe { std::ptr::copy_nonoverlapping(bounce, dst, n) };
            }
        }
        d.free_send[peer].push(idx);
        r
    }

    /// Consume arrival `a` of channel `ch`: deliver its frames, post the
    /// buffer again, count the credit and report it if due.
    fn consume(
        &self,
        reasm: &mut Reassembler,
        ch: usize,
        a: Arrival,
        deliver: &mut dyn FnMut(&Delivery<'_>),
    ) -> Result<usize> {
        // SAFETY: the buffer holds a.len bytes the device wrote; it stays
        // ours until posted again below.
        let b = unsafe { std::slice::from_raw_parts(self.recv_addr(a.peer, a.index), a.len) };
        // SAFETY: this fabric's segment (its own mapping, or the one
        // `PendingRdma::new`'s caller vouched for), alive while the fabric is.
        let mut seg = unsafe { SegmentSink::new(self.seg, &self.frozen) };
        let fed = reasm.feed(a.peer, &b[HEADER..], self.cfg.max_medium, &mut seg, deliver);
        let mut d = self.dev.lock();
        self.post_recv(&mut d, a.peer, a.index)
            .map_err(|e| e.at_rank(self.rank))?;
        d.credits[a.peer].consumed(ch);
        if let Some(v) = d.credits[a.peer].due_report(ch) {
            self.write_credit(&mut d, a.peer, ch, v)?;
        }
        fed.map_err(|why| {
            Error::protocol(format!("rank {} sent a malformed message: {why}", a.peer))
                .at_rank(self.rank)
                .with_peer(a.peer)
        })
    }

    /// Write cumulative count `v` of `ch` into `peer`'s mailbox.
    fn write_credit(&self, d: &mut Dev<V>, peer: usize, ch: usize, v: u64) -> Result<()> {
        if d.outstanding[peer] >= d.send_depth {
            // the queue is full of work that carries piggy-backed counts
            // anyway; the next due report catches up
            return Ok(());
        }
        let slot = self.credit_slot(peer, ch);
        // SAFETY: the slot is ours; a write in flight may read either the
        // old or the new count, both valid (counts are cumulative).
        unsafe { std::ptr::write_volatile(slot, v.to_le()) };
        let r = d.remote[peer];
        let wr = SendWr {
            wr_id: wr_id(K_CREDIT, peer, ch as u32),
            op: Op::Write {
                raddr: r.mail_addr + (self.rank * 2 + ch) as u64 * 8,
                rkey: r.mail_rkey,
            },
            sge: self.pool(peer).region.sge(slot as u64, 8),
            inline: d.inline >= 8,
            fence: false,
        };
        let q = d.qp(peer);
        // SAFETY: the credit slot lies in the registered pool; the fabric
        // only writes it with volatile stores of whole counts, any of
        // which the device may send (counts are cumulative).
        unsafe { d.verbs.post_send(q, &wr) }.map_err(|e| e.at_rank(self.rank))?;
        d.outstanding[peer] += 1;
        Ok(())
    }
}

impl<V: Verbs> Fabric for RdmaFabric<V> {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn max_inline(&self, _peer: usize) -> usize {
        self.cfg.max_medium
    }

    /// One frame (its header, the words, the payload) filling a whole
    /// receive buffer less its buffer header: every message starts a
    /// buffer of its own, so a Medium of this size is one send and is
    /// delivered from the receive buffer it arrived in; a larger one is
    /// cut across buffers and reassembled (one more copy of every byte).
    fn max_inline_unsplit(&self, _peer: usize, words: usize) -> usize {
        // saturating: `words` comes from the caller (a huge count leaves
        // room for nothing)
        (self.cfg.buffer_size - HEADER)
            .saturating_sub(frames::FRAME_HEADER.saturating_add(words.saturating_mul(8)))
            .min(self.cfg.max_medium)
    }

    fn segment_len(&self, peer: usize) -> usize {
        self.seg_lens.get(peer).map_or(0, |&l| l as usize)
    }

    fn local_segment(&self) -> SegmentRef {
        self.seg
    }

    fn try_send_why(
        &self,
        peer: usize,
        ch: Channel,
        pkt: &Packet<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<crate::fabric::Sent> {
        if peer >= self.size {
            return Err(Error::usage(format!(
                "rank {peer} does not exist in a job of {} ranks",
                self.size
            ))
            .at_rank(self.rank));
        }
        let remote_len = self.segment_len(peer) as u64;
        self.check_send(peer, pkt, remote_len)?;
        self.ensure(peer, Some(&mut *stall))?;
        let c = ch as usize;
        let _one = self.tx[peer * 2 + c].lock();
        let m = OutMsg {
            tag: pkt.tag,
            words: pkt.words,
            payload: pkt.payload,
            deposit: pkt.deposit,
        };
        if let Some(off) = pkt.deposit {
            // the header frame's credit first: back-pressure before any write
            let Some(hdr) = self.acquire(peer, Some(c), false, stall)? else {
                return Ok(Err(crate::fabric::WouldBlock::RdmaCreditsExhausted));
            };
            if !pkt.payload.is_empty() {
                let r = self.put(peer, off, pkt.payload);
                if let Err(e) = r {
                    self.dev.lock().free_send[peer].push(hdr);
                    return Err(e);
                }
            }
            let mut d = self.dev.lock();
            let n = self.fill(&mut d, peer, hdr, c, |b, room| {
                frames::append_placed(b, &m, room).expect("a header frame fits a buffer");
            });
            self.post_buffer(&mut d, peer, hdr, n)
                .map_err(|e| e.at_rank(self.rank).with_peer(peer))?;
            return Ok(Ok(()));
        }
        let mut from = 0;
        loop {
            let Some(i) = self.acquire(peer, Some(c), from > 0, stall)? else {
                return Ok(Err(crate::fabric::WouldBlock::RdmaCreditsExhausted));
            };
            let mut d = self.dev.lock();
            let mut taken = 0;
            let n = self.fill(&mut d, peer, i, c, |b, room| {
                taken = frames::append(b, &m, from, room).expect("a frame fits a buffer");
            });
            self.post_buffer(&mut d, peer, i, n)
                .map_err(|e| e.at_rank(self.rank).with_peer(peer))?;
            from += taken;
            if from == m.payload.len() {
                return Ok(Ok(()));
            }
        }
    }

    fn poll(&self, ch: Channel, deliver: &mut dyn FnMut(&Delivery<'_>)) -> Result<usize> {
        let c = ch as usize;
        let Some(mut rx) = self.rx[c].try_lock() else {
            return Ok(0);
        };
        let mut out = Vec::new();
        let side = {
            let mut d = self.dev.lock();
            self.reap(&mut d)?;
            self.serve_side(&mut d, &mut out);
            // (no reference count touched on a poll that answered nothing)
            d.side.clone().filter(|_| !out.is_empty())
        };
        if !out.is_empty() {
            self.send_side(side.as_deref(), out)?;
        }
        let mut n = 0;
        loop {
            let a = self.arrived[c].lock().pop_front();
            let Some(a) = a else { break };
            n += self.consume(&mut rx[a.peer], c, a, deliver)?;
        }
        Ok(n)
    }

    fn credits(&self, peer: usize, ch: Channel) -> Option<(usize, usize)> {
        let d = self.dev.try_lock()?;
        d.credits.get(peer).map(|c| c.report(ch as usize))
    }

    fn share_frozen(&mut self, frozen: Arc<FrozenRanges>) {
        RdmaFabric::share_frozen(self, frozen)
    }

    fn arrivals_waiting(&self) -> bool {
        RdmaFabric::arrivals_waiting(self)
    }

    #[inline]
    fn remote_memory(&self) -> Option<&dyn RemoteMemory> {
        Some(self)
    }
}

/// RDMA write and read into every peer's registered segment.
impl<V: Verbs> RemoteMemory for RdmaFabric<V> {
    fn put(&self, peer: usize, off: u64, src: &[u8]) -> Result<()> {
        RdmaFabric::put(self, peer, off, src)
    }

    fn get(&self, peer: usize, off: u64, dst: &mut [u8]) -> Result<()> {
        RdmaFabric::get(self, peer, off, dst)
    }

    fn put_nb(&self, peer: usize, off: u64, src: &[u8]) -> Result<bool> {
        RdmaFabric::put_nb(self, peer, off, src)
    }

    fn quiet(&self) -> Result<()> {
        RdmaFabric::quiet(self)
    }

    fn quiet_peer(&self, peer: usize) -> Result<()> {
        RdmaFabric::quiet_peer(self, peer)
    }

    fn put_runs_nb(&self, peer: usize, runs: &[(u64, u64)], src: &[u8]) -> Result<()> {
        RdmaFabric::put_runs_nb(self, peer, runs, src)
    }

    fn get_runs(&self, peer: usize, runs: &[(u64, u64)], dst: &mut [u8]) -> Result<()> {
        RdmaFabric::get_runs(self, peer, runs, dst)
    }
}

impl<V: Verbs> Drop for RdmaFabric<V> {
    fn drop(&mut self) {
        self.closed = true;
        let d = self.dev.get_mut();
        for l in d.links.iter().flatten() {
            let _ = d.verbs.destroy_qp(l.qp);
        }
        // regions go before the memory they cover (the pools and mailbox
        // are unmapped after this, the segment by its owner)
        for r in d.cache.drain() {
            let _ = d.verbs.deregister(&r);
        }
        for p in self.mem.iter().filter_map(OnceLock::get) {
            let _ = d.verbs.deregister(&p.region);
        }
        let (mail, seg) = (d.mail, d.seg);
        let _ = d.verbs.deregister(&mail);
        let _ = d.verbs.deregister(&seg);
    }
}
