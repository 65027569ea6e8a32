//! The shared-memory fabric. Every rank owns one file (see [`layout`]) with
//! its inbound rings and its segment; every rank maps every other's, so a
//! packet is written straight into the receiver's ring and a deposit (Long
//! payload) is copied once, straight into the receiver's segment.
//!
//! Per ordered pair of ranks there are two rings, one per [`Channel`].
//! Packets larger than a cell stream over consecutive cells and are
//! reassembled by the receiver (one packet in flight per ring, so one
//! reassembly buffer per ring).

mod cells;
pub mod doorbell;
pub mod layout;
#[cfg(all(test, loom))]
mod models;
mod mpq;
mod owner;
pub mod queue_choice;
mod receive;
mod ring;
mod shared_rx;
pub mod timeline;
pub mod zone;

use self::doorbell::{Doorbell, DOORBELL_OFF};
use self::layout::{
    CellMeta, FileHeader, Layout, F_DEPOSIT, F_FIRST, F_LAST, F_ZONE, MAGIC, VERSION,
};
use self::mpq::{QConsumer, QProducer};
use self::owner::{Guarded, Owner};
use self::queue_choice::{QueueKind, ShmQueue};
use self::ring::{Consumer, Producer, Ring};
use self::zone::ZoneAlloc;
use super::{
    Channel, Delivery, Fabric, LoadStore, Packet, SegmentRef, Sent, Wakeup, WouldBlock, MAX_WORDS,
};
use crate::cpus::{CpuSet, CPU_WORDS};
use crate::segment::{populate, PopulatedPrefix, Room, ShmFile};
use crate::trace::{self, Clock, Off, On, Stage};
use crate::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The shared-memory fabric's tunables (from the job's settings:
/// `Config::shm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmConfig {
    /// Registered segment size in bytes (page multiple).
    pub segment_size: usize,
    /// Ring cell size in bytes.
    pub cell_size: usize,
    /// Cells per ring.
    pub ring_len: usize,
    /// Largest Medium payload in bytes.
    pub max_medium: usize,
    /// Landing zone per sender and channel for large Mediums, in Medium
    /// maxima; `None`: as many as fit a per-rank budget
    /// ([`layout::medium_slots_for`]).
    pub medium_slots: Option<usize>,
    /// Reserve the file's space at start-up (`SPLITRT_SHM_RESERVE`).
    pub shm_reserve: bool,
    /// Only the connecting thread sends and polls (`SPLITRT_THREADS=single`).
    pub single_thread: bool,
    /// The receive queue (`SPLITRT_SHM_QUEUE`): a ring per sender, one
    /// queue per rank and channel shared by every sender of the host, or
    /// (`auto`) chosen by the number of the host's ranks when the file is
    /// made ([`ShmQueue::choose`]).
    pub queue: ShmQueue,
}

/// A rank's file, created and initialized, before the peers are known.
///
/// Only the [`World`](crate::world::World) makes one (`create` and
/// `connect` are crate-private): the fabric it gives maps the job's
/// files of this user, and its sends deposit straight into a peer's
/// segment, past every check of the endpoint that owns that segment (its
/// frozen ranges among them). Public, they let safe code that knows a
/// live job's file stem write under a `&[T]` of a frozen array of this
/// very process (the Long below lands in rank 0's segment):
///
/// ```compile_fail,E0624
/// use splitrt_runtime::fabric::{shm::PendingShm, Channel, Fabric, Packet};
/// fn write_under_a_frozen_array(stem: &str, cfg: &splitrt_runtime::config::Config, off: u64) {
///     // a made-up rank 9 beside rank 0 of the live job
///     let f = PendingShm::create(stem, 9, &[0, 9], 10, &cfg.shm())
///         .and_then(PendingShm::connect)
///         .unwrap();
///     let pkt = Packet { tag: 0, words: &[], payload: &[0xff; 64], deposit: Some(off) };
///     let _ = f.try_send(0, Channel::Request, &pkt, &mut |_| Ok(()));
/// }
/// ```
pub struct PendingShm {
    stem: String,
    /// This rank's index among `members`.
    rank: usize,
    /// Global ranks on this host, ascending (this one among them).
    members: Vec<usize>,
    job_size: usize,
    layout: Layout,
    max_medium: usize,
    own: ShmFile,
    /// `SPLITRT_THREADS=single`: the connecting thread owns the rings.
    single_thread: bool,
    /// The shared receive queue (`SPLITRT_SHM_QUEUE=shared`, or `auto` on
    /// a host of [`queue_choice::SHARED_QUEUE_FROM`] ranks or more): the
    /// file holds one queue per channel (laid out as the rings of a single
    /// sender), no landing zones.
    shared_queue: bool,
    /// Why this host's ranks use the queue they do, for the error that
    /// refuses a peer of another (`ShmQueue::why`).
    queue_why: String,
}

impl PendingShm {
    /// Create this rank's file for a job of `job_size` ranks of which
    /// `members` (ascending global ranks, `rank` among them) share this
    /// host, and write its header; `stem` (`<job>-<tag>`) names the job's
    /// files.
    pub(crate) fn create(
        stem: &str,
        rank: usize,
        members: &[usize],
        job_size: usize,
        cfg: &ShmConfig,
    ) -> Result<PendingShm> {
        let size = members.len();
        let me = members
            .iter()
            .position(|&m| m == rank)
            .ok_or_else(|| Error::usage(format!("rank {rank} is not among its host's ranks")))?;
        // Every rank of the host sees the same `members`, so with the
        // same setting they all choose the same queue; one given another
        // setting is refused in `connect` (its layout differs).
        let kind = cfg.queue.choose(size);
        let layout = if kind == QueueKind::Shared {
            // the two queues take the place of one sender's two rings
            Layout::shared(
                cfg.cell_size,
                cfg.ring_len,
                cfg.segment_size,
                cfg.max_medium,
            )?
        } else {
            Layout::new(
                size,
                cfg.cell_size,
                cfg.ring_len,
                cfg.segment_size,
                cfg.max_medium,
                cfg.medium_slots
                    .unwrap_or_else(|| layout::medium_slots_for(size, cfg.max_medium)),
            )?
        };
        let short = |free, total| {
            layout::shm_too_small(&layout, cfg.max_medium, size, cfg.shm_reserve, free, total)
        };
        let room = Room {
            need: layout::shm_needed(&layout, size, cfg.shm_reserve),
            short: &short,
        };
        crate::shm_full::name_queue(kind == QueueKind::Shared);
        let own = ShmFile::create(stem, rank, layout.total, &room, cfg.shm_reserve)
            .map_err(|e| e.at_rank(rank))?;
        if me == 0 && !cfg.shm_reserve {
            note_growth(&layout, cfg.max_medium, size);
        }
        if me == 0 {
            if let Some(note) =
                queue_choice::ignored_slots_note(cfg.queue, size, cfg.medium_slots.is_some())
            {
                eprintln!("{note}");
            }
        }
        let hdr = FileHeader::new(rank, &layout, cfg.max_medium);
        // The file is at least HEADER_BYTES long (Layout::new), freshly
        // created by `ShmFile::create` and mapped page-aligned, and not yet
        // used by any other rank: nobody reads it before `ready` is set.
        // SAFETY: the header is the file's first 48 bytes, page-aligned, and
        // nothing else reads or writes them yet.
        unsafe { std::ptr::write(own.as_ptr() as *mut FileHeader, hdr) };
        // SAFETY: CPUS_OFF < HEADER_BYTES <= the file's length: in bounds.
        let cpus_at = unsafe { own.as_ptr().add(layout::CPUS_OFF) } as *mut [u64; CPU_WORDS];
        // SAFETY: CPUS_OFF + 8 * CPU_WORDS <= HEADER_BYTES (asserted in
        // `layout`), 8-aligned (CPUS_OFF = 128 in a page-aligned mapping);
        // nothing else touches these bytes before `ready` is set.
        unsafe {
            std::ptr::write(
                cpus_at,
                CpuSet::of_this_process().map_or([0; CPU_WORDS], |c| c.words()),
            )
        };
        // SAFETY: the header was written just above and the mapping lives
        // as long as `own`; peers only load `ready` atomically (`check_peer`),
        // so a shared reference to it is sound.
        let hdr = unsafe { &*(own.as_ptr() as *const FileHeader) };
        // Release: the header and CPU mask above are complete before a peer
        // that sees `ready == 1` (acquire, in `check_peer`) reads them.
        hdr.ready.store(1, Ordering::Release);
        Ok(PendingShm {
            stem: stem.to_string(),
            rank: me,
            members: members.to_vec(),
            job_size,
            layout,
            max_medium: cfg.max_medium,
            own,
            single_thread: cfg.single_thread,
            shared_queue: kind == QueueKind::Shared,
            queue_why: cfg.queue.why(size),
        })
    }

    /// Map every peer's file (all on this host) and check that they were
    /// made with the same settings.
    pub(crate) fn connect(self) -> Result<ShmFabric> {
        let (rank, size) = (self.rank, self.members.len());
        let global = self.members[rank];
        let mut files = Vec::with_capacity(size);
        let mut own = Some(self.own);
        for (i, &peer) in self.members.iter().enumerate() {
            let f = if i == rank {
                own.take().expect("own file used once")
            } else {
                let f = ShmFile::open(&self.stem, peer).map_err(|e| e.at_rank(global))?;
                check_peer(&f, peer, &self.layout, self.max_medium, &self.queue_why)
                    .map_err(|e| e.at_rank(global).with_peer(peer))?;
                f
            };
            files.push(f);
        }
        let l = self.layout;
        let ring = |file: &ShmFile, src: usize, ch: usize| {
            // SAFETY: ring_off(src, ch) + ring_stride lies inside the file
            // (Layout::new), the offset is 64-aligned (4096 + multiples of
            // 128 + cell_size, a multiple of 64), and the file stays mapped as
            // long as the fabric.
            let base = unsafe { file.as_ptr().add(l.ring_off(src, ch)) };
            // SAFETY: `Ring::new`'s contract: `base` is 64-aligned and
            // starts RING_CTRL + ring_len * cell_stride(cell_size) =
            // ring_stride mapped bytes (above), mapped as long as the fabric
            // that holds the rings and `files`.
            unsafe { Ring::new(base, l.cell_size, l.ring_len) }
        };
        let bells: Vec<Bell> = files
            .iter()
            .map(|f| {
                // SAFETY: DOORBELL_OFF + 64 <= HEADER_BYTES <= the file's
                // length (checked by `check_peer`, ours by creation);
                // 64-aligned in a page-aligned mapping kept as long as the
                // fabric.
                Bell(unsafe { f.as_ptr().add(DOORBELL_OFF) } as *const Doorbell)
            })
            .collect();
        // The rings and landing zones this rank writes (its own in every
        // file) and reads (every sender's in its own file) get their pages
        // now when that is cheap (2 ranks: 4.5 MiB, about 2 ms here), not
        // one fault (3 us here) per 4 KiB page on their first lap. In
        // larger jobs a page comes when first used (a zone's, in one call
        // per Medium: `PopulatedPrefix`), so start-up stays short and
        // memory no rank uses is never allocated.
        let eager = l.eager() && !self.shared_queue;
        let zone_populated = if eager { l.zone_len() } else { 0 };
        if eager {
            for (i, f) in files.iter().enumerate() {
                for src in 0..size {
                    if i == rank || src == rank {
                        for ch in 0..2 {
                            let (at, len) = ring(f, src, ch).span();
                            // SAFETY: `populate`'s contract: the ring (its
                            // own `span`) lies in the file (Layout::new),
                            // one live shared mapping.
                            unsafe { populate(at, len) };
                            // SAFETY: zone_off(src, ch) lies inside the file
                            // (Layout::new): an in-bounds offset.
                            let zone = unsafe { f.as_ptr().add(l.zone_off(src, ch)) };
                            // SAFETY: zone..zone + zone_len lies in the same
                            // live mapping (Layout::new).
                            unsafe { populate(zone, l.zone_len()) };
                        }
                    }
                }
            }
        }
        let mut tx = Vec::with_capacity(size * 2);
        if self.shared_queue {
            shared_rx::populate_queues(&files, rank, &l);
        }
        for (file, &bell) in files.iter().zip(&bells) {
            if self.shared_queue {
                for ch in 0..2 {
                    tx.push(Guarded::new(Tx {
                        p: Prod::Shared(QProducer::new(shared_rx::queue(file, &l, ch), rank)),
                        bell,
                        zone: Zone {
                            base: std::ptr::null_mut(),
                            alloc: ZoneAlloc::new(0, l.ring_len),
                            populated: PopulatedPrefix::upto(0),
                        },
                    }));
                }
                continue;
            }
            for ch in 0..2 {
                tx.push(Guarded::new(Tx {
                    p: Prod::Pair(Producer::new(ring(file, rank, ch))),
                    bell,
                    zone: Zone {
                        // SAFETY: zone_off(rank, ch) + zone_len lies
                        // inside the file (Layout::new).
                        base: unsafe { file.as_ptr().add(l.zone_off(rank, ch)) },
                        alloc: ZoneAlloc::new(l.zone_len(), l.ring_len),
                        populated: PopulatedPrefix::upto(zone_populated),
                    },
                }));
            }
        }
        let shared = self.shared_queue;
        let rx = [0, 1].map(|ch| {
            Guarded::new(RxSet {
                queue: shared.then(|| {
                    shared_rx::SharedRx::new(
                        QConsumer::new(shared_rx::queue(&files[rank], &l, ch)),
                        size,
                    )
                }),
                rings: (0..if shared { 0 } else { size })
                    .map(|src| RxRing {
                        cons: Consumer::new(ring(&files[rank], src, ch)),
                        reasm: Reassembly::default(),
                        bell: bells[src],
                        // SAFETY: as for the sender's side above.
                        zone: unsafe { files[rank].as_ptr().add(l.zone_off(src, ch)) },
                        zone_populated: PopulatedPrefix::upto(zone_populated),
                    })
                    .collect(),
                next: 0,
            })
        });
        // The host's ranks' CPU masks, if every one is known.
        let cpu_masks = files
            .iter()
            .map(|f| {
                // SAFETY: CPUS_OFF < HEADER_BYTES <= the file's length
                // (check_peer, ours by creation): an in-bounds offset.
                let at = unsafe { f.as_ptr().add(layout::CPUS_OFF) } as *const [u64; CPU_WORDS];
                // SAFETY: CPUS_OFF + 8 * CPU_WORDS <= HEADER_BYTES (asserted
                // in `layout`), inside the file; 8-aligned in a page-aligned
                // mapping; written by its owner before it set `ready`, which
                // check_peer read (acquire), and never written again.
                let words = unsafe { std::ptr::read(at) };
                let set = CpuSet::from_words(words);
                (set.count() > 0).then_some(set)
            })
            .collect::<Option<Vec<CpuSet>>>();
        let mut local_of = vec![NOT_HERE; self.job_size];
        for (i, &m) in self.members.iter().enumerate() {
            local_of[m] = i as u32;
        }
        Ok(ShmFabric {
            me: rank,
            global,
            members: self.members,
            local_of,
            layout: l,
            max_medium: self.max_medium,
            own_bell: bells[rank],
            cpu_masks,
            self_pending: Default::default(),
            peeking: AtomicBool::new(false),
            room_wanted: AtomicUsize::new(0),
            owner: if self.single_thread {
                Owner::this_thread()
            } else {
                Owner::any()
            },
            bells,
            files,
            tx,
            rx,
        })
    }
}

/// Check that `f`, the file of `peer` (a rank of this host), was made by
/// this build with this rank's layout `l` and Medium maximum; `queue_why`
/// says why this rank uses the receive queue it does (named when the
/// peer's file holds the other queue).
fn check_peer(
    f: &ShmFile,
    peer: usize,
    l: &Layout,
    max_medium: usize,
    queue_why: &str,
) -> Result<()> {
    if f.len() < layout::HEADER_BYTES {
        return Err(Error::protocol(format!(
            "shared-memory file of rank {peer} is only {} B",
            f.len()
        )));
    }
    // SAFETY: the file holds at least a header (checked above), mapped and
    // 8-aligned (`ShmFile`). Its plain words (the magic and the version,
    // read below before `ready`) are written once, when the peer creates
    // the file, and never again; the peer finished writing its header
    // before it entered the Setup barrier (`world.rs`, "Every rank
    // created its file"), which this rank passed before it connects (a
    // happens-before through that barrier, not through `ready`), so those
    // reads race with no write. `ready` (atomic, loaded with acquire below) is a
    // second check of a finished header, for a file of this version.
    let h = unsafe { &*(f.as_ptr() as *const FileHeader) };
    // The magic and the version first: they begin every version's header,
    // whose other words (`ready` among them) may be elsewhere, so a peer
    // of another version is named as one, not as "not ready".
    if h.magic != MAGIC {
        return Err(Error::protocol(format!(
            "shared-memory file of rank {peer} is not a splitrt file (wrong magic number)"
        )));
    }
    if h.version != VERSION {
        return Err(Error::protocol(format!(
            "rank {peer} uses shared-memory layout v{}, this rank v{VERSION}: every rank \
             of a host must run the same splitrt build",
            h.version
        )));
    }
    if h.ready.load(Ordering::Acquire) != 1 {
        return Err(Error::protocol(format!(
            "shared-memory file of rank {peer} is not ready (its header is incomplete)"
        )));
    }
    let mine = (
        l.size,
        l.cell_size,
        l.ring_len,
        l.segment_len,
        max_medium,
        l.medium_slots,
    );
    let theirs = (
        h.size as usize,
        h.cell_size as usize,
        h.ring_len as usize,
        h.segment_len as usize,
        h.max_medium as usize,
        h.medium_slots as usize,
    );
    // A shared-queue file's header counts one sender (`Layout::shared`), a
    // rings file's every rank of the host: more than one when the host
    // has this rank and a peer (a host of one rank checks only its own
    // file, in tests).
    let kind = |shared| {
        if shared {
            QueueKind::Shared
        } else {
            QueueKind::Pairs
        }
    };
    let ours = kind(l.shared_queue);
    let their_kind = if l.shared_queue || l.size > 1 {
        kind(h.size == 1)
    } else {
        ours
    };
    if ours != their_kind {
        return Err(Error::config(format!(
            "rank {peer} was started with different settings: SPLITRT_SHM_QUEUE: rank {peer} \
             uses {} and this rank {} ({queue_why}); give every rank of a node the same \
             SPLITRT_SHM_QUEUE (or none: auto chooses alike on every rank of a node), and run \
             the same splitrt build on every rank (a build older than `auto` uses the per-pair \
             rings when nothing is set)",
            their_kind.described(),
            ours.described(),
        )));
    }
    if h.rank as usize != peer || mine != theirs || f.len() != l.total {
        return Err(Error::config(format!(
            "rank {peer} was started with different settings: (size, cell, ring, segment, max medium, medium slots) = {theirs:?}, here {mine:?}; give every rank the same SPLITRT_* values"
        )));
    }
    Ok(())
}

#[derive(Default)]
struct Reassembly {
    active: bool,
    tag: u16,
    nwords: usize,
    words: [u64; MAX_WORDS],
    total: usize,
    buf: Vec<u8>,
}

struct RxRing {
    cons: Consumer,
    reasm: Reassembly,
    /// The sender's doorbell (rung when cells were freed).
    bell: Bell,
    /// This sender's landing zone on this channel, in our file.
    zone: *const u8,
    /// How far this mapping of the zone was faulted in.
    zone_populated: PopulatedPrefix,
}

/// Said once per host (by its first rank) when the files of its `ranks`
/// ranks could outgrow `/dev/shm` if used in full: the job starts (pages
/// come at first touch, and a rank that meets a full `/dev/shm` says so),
/// but the user learns the numbers and the settings now.
fn note_growth(l: &Layout, max_medium: usize, ranks: usize) {
    let Some((free, _)) = crate::segment::shm_space() else {
        return;
    };
    let most = l.total as u64 * ranks as u64;
    if most <= free {
        return;
    }
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "splitrt: note: /dev/shm has {:.1} MiB free; the {ranks} rank(s) on this node take \
         {:.1} MiB of it at start-up, and up to {:.1} MiB if every rank used its whole file \
         ({:.1} MiB each: {}). Pages come at first touch; a rank that finds /dev/shm full \
         says so and the job ends.",
        mib(free),
        mib(layout::shm_needed(l, ranks, false)),
        mib(most),
        mib(l.total as u64),
        layout::shm_parts(l, max_medium)
    );
}

/// Sets a rank's own-ring mark again when dropped armed: a poll that did
/// not drain the ring, however it ended, leaves it marked.
struct Remark<'a>(Option<&'a AtomicBool>);

impl Drop for Remark<'_> {
    fn drop(&mut self) {
        if let Some(m) = self.0 {
            m.store(true, Ordering::Release);
        }
    }
}

/// Publish the one-cell header of a payload already placed (in the
/// segment: `F_DEPOSIT` at offset `at`; in the landing zone: `F_ZONE` at
/// zone offset `at`) and wake the receiver if it sleeps. Always inline:
/// left to the compiler it stayed out of line in the queue's copy (with
/// `QProducer::write` under it, 94 instructions a Long), inlined in the
/// ring's (docs/scale.md, Session 14, continued).
#[inline(always)]
fn announce<C: Clock, P: Sink>(
    p: &mut P,
    bell: Bell,
    pkt: &Packet<'_>,
    flag: u8,
    at: u64,
    t: C::Mark,
) {
    let meta = CellMeta {
        tag: pkt.tag,
        flags: F_FIRST | F_LAST | flag,
        nwords: pkt.words.len() as u8,
        len: 0,
        total: pkt.payload.len() as u32,
        pad: 0,
        deposit: at,
    };
    p.write(meta, pkt.words, &[]);
    let t = C::record(Stage::Copy, t);
    p.publish();
    bell.get().ring();
    C::record(Stage::Publish, t);
}

/// A doorbell in a mapped file (valid as long as the fabric's files).
#[derive(Clone, Copy)]
struct Bell(*const Doorbell);

impl Bell {
    #[inline]
    fn get(&self) -> &Doorbell {
        // SAFETY: made in `connect` from a mapping the fabric keeps for its
        // whole life; the words are atomics.
        unsafe { &*self.0 }
    }
}

/// A producer and the doorbell of the ring's owner.
struct Tx {
    p: Prod,
    bell: Bell,
    zone: Zone,
}

/// The sending side of a ring (`SPLITRT_SHM_QUEUE=pairs`) or of a peer's
/// shared queue (`shared`); the queue's `has_room` claims the cell that
/// the next write and publish fill.
enum Prod {
    Pair(Producer),
    Shared(QProducer),
}

impl Prod {
    fn free_cells(&self) -> (u64, u64) {
        match self {
            Prod::Pair(p) => p.free_cells(),
            Prod::Shared(q) => q.free_cells(),
        }
    }

    /// Whether a send would find room now (claims nothing).
    fn room_now(&self) -> bool {
        match self {
            Prod::Pair(p) => p.room_now(),
            Prod::Shared(q) => q.room_now(),
        }
    }
}

/// What the general send path needs of a producer, a ring's or a shared
/// queue's: the path is compiled once for each ([`ShmFabric::send_on`]),
/// so a send matches on the producer's kind once, not at every step.
trait Sink {
    /// Whether a cell is free (a queue claims it).
    fn has_room(&mut self) -> bool;
    /// Payload bytes a cell holds after `nwords` argument words.
    fn capacity(&self, nwords: usize) -> usize;
    /// The sequence number of the next cell (landing zones only, which a
    /// shared queue does not have).
    fn head(&self) -> u64;
    /// Whether the consumer released cell `seq` (landing zones only).
    fn released(&mut self, seq: u64) -> bool;
    /// Whether no room is because the consumer's word is forged (a ring
    /// tail past the head): the send reports a protocol error then
    /// instead of waiting for room that never comes.
    fn forged(&self) -> bool;
    /// Write the next (claimed) cell without publishing it.
    fn write(&mut self, meta: CellMeta, words: &[u64], chunk: &[u8]);
    /// Publish the cell written last.
    fn publish(&mut self);
    /// Write and publish one cell.
    fn push(&mut self, meta: CellMeta, words: &[u64], chunk: &[u8]);
}

impl Sink for Producer {
    #[inline(always)]
    fn has_room(&mut self) -> bool {
        Producer::has_room(self)
    }
    #[inline(always)]
    fn capacity(&self, nwords: usize) -> usize {
        self.ring().capacity(nwords)
    }
    #[inline(always)]
    fn head(&self) -> u64 {
        Producer::head(self)
    }
    #[inline(always)]
    fn released(&mut self, seq: u64) -> bool {
        Producer::released(self, seq)
    }
    fn forged(&self) -> bool {
        self.tail_forged()
    }
    #[inline(always)]
    fn write(&mut self, meta: CellMeta, words: &[u64], chunk: &[u8]) {
        Producer::write(self, meta, words, chunk)
    }
    #[inline(always)]
    fn publish(&mut self) {
        Producer::publish(self)
    }
    #[inline(always)]
    fn push(&mut self, meta: CellMeta, words: &[u64], chunk: &[u8]) {
        Producer::push(self, meta, words, chunk)
    }
}

impl Sink for QProducer {
    #[inline(always)]
    fn has_room(&mut self) -> bool {
        QProducer::has_room(self)
    }
    #[inline(always)]
    fn capacity(&self, nwords: usize) -> usize {
        self.queue().capacity(nwords)
    }
    #[inline(always)]
    fn head(&self) -> u64 {
        self.claimed().unwrap_or(0)
    }
    #[inline(always)]
    fn released(&mut self, _seq: u64) -> bool {
        false
    }
    fn forged(&self) -> bool {
        false
    }
    #[inline(always)]
    fn write(&mut self, meta: CellMeta, words: &[u64], chunk: &[u8]) {
        QProducer::write(self, meta, words, chunk)
    }
    #[inline(always)]
    fn publish(&mut self) {
        QProducer::publish(self)
    }
    #[inline(always)]
    fn push(&mut self, meta: CellMeta, words: &[u64], chunk: &[u8]) {
        QProducer::push(self, meta, words, chunk)
    }
}

/// The sender's side of its landing zone in a peer's file.
struct Zone {
    /// The zone's first byte (in the peer's file).
    base: *mut u8,
    /// Which of its bytes are free (length 0: no zone; large Mediums are
    /// streamed).
    alloc: ZoneAlloc,
    /// How far its pages were faulted in.
    populated: PopulatedPrefix,
}

struct RxSet {
    rings: Vec<RxRing>,
    next: usize,
    /// `SPLITRT_SHM_QUEUE=shared`: this rank's one queue on the channel
    /// (and `rings` is empty).
    queue: Option<shared_rx::SharedRx>,
}

impl RxSet {
    /// Whether a packet waits (a sleeper's last look).
    fn has_next(&self) -> bool {
        self.rings.iter().any(|r| r.cons.has_next())
            || self.queue.as_ref().is_some_and(|q| q.has_next())
    }
}

/// `local_of` entry of a rank on another host.
const NOT_HERE: u32 = u32::MAX;

/// The shared-memory fabric of one rank: the ranks of its host.
///
/// Internally ranks are indices among the host's ranks (`members`); the
/// [`Fabric`] methods take and give global ranks.
pub struct ShmFabric {
    /// This rank's index among `members`.
    me: usize,
    /// This rank.
    global: usize,
    /// Global rank of each local index.
    members: Vec<usize>,
    /// Local index of each global rank ([`NOT_HERE`] for other hosts').
    local_of: Vec<u32>,
    layout: Layout,
    max_medium: usize,
    files: Vec<ShmFile>,
    /// Producer per (peer, channel), index `peer * 2 + ch`.
    tx: Vec<Guarded<Tx>>,
    /// Consumers of every source, one set per channel.
    rx: [Guarded<RxSet>; 2],
    /// The one thread allowed in without locks (`SPLITRT_THREADS=single`),
    /// or any thread through the locks.
    owner: Owner,
    /// Every local rank's doorbell.
    bells: Vec<Bell>,
    /// This rank's doorbell.
    own_bell: Bell,
    /// The CPU masks of this host's ranks, if all are known.
    cpu_masks: Option<Vec<CpuSet>>,
    /// Per channel: this rank published into its own ring (a message to
    /// itself) since its last poll of it. An idle poll then skips that
    /// ring: half the ring checks of a 2-rank job's polling loop.
    self_pending: [AtomicBool; 2],
    /// Another thread (the doorbell bridge, in
    /// [`look`](Self::look)) holds a ring set only to look into it: a
    /// poll that finds the set held while this is set waits for it (a
    /// few loads) instead of returning 0 for nothing.
    peeking: AtomicBool,
    /// The producer (`tx` index + 1; 0: none) whose last send was refused
    /// for want of room: a sleeper's last look ([`has_work`](Self::has_work))
    /// also asks it for room, since the consumer that freed cells may have
    /// rung this rank's doorbell before the sleep was announced (that ring
    /// found no sleeper and was lost: the wait then ran to
    /// [`doorbell::WAIT_LIMIT`]).
    room_wanted: AtomicUsize,
}

// SAFETY: the raw pointers inside (rings, mappings) point into shared
// mappings owned by `files`; producers and consumers are behind locks and
// the ring protocol orders every cross-process access.
unsafe impl Send for ShmFabric {}
// SAFETY: as above.
unsafe impl Sync for ShmFabric {}

impl ShmFabric {
    /// Remove this rank's file name (after every rank has mapped it).
    pub fn unlink_own(&self) -> Result<()> {
        self.files[self.me].unlink()
    }

    /// The local index of global rank `peer`.
    #[inline]
    fn local(&self, peer: usize) -> Result<usize> {
        match self.local_of.get(peer) {
            Some(&l) if l != NOT_HERE => Ok(l as usize),
            _ => Err(self.not_local(peer)),
        }
    }

    #[cold]
    fn not_local(&self, peer: usize) -> Error {
        let why = if peer >= self.local_of.len() {
            format!(
                "rank {peer} does not exist in a job of {} ranks",
                self.local_of.len()
            )
        } else {
            format!("rank {peer} is on another host; shared memory reaches only this host's ranks")
        };
        Error::usage(why).at_rank(self.global).with_peer(peer)
    }

    /// The CPU affinity masks this host's ranks published in their file
    /// headers, if every rank's is known: what decides whether waiting
    /// ranks may spin ([`crate::cpus::oversubscribed`]).
    pub fn cpu_masks(&self) -> Option<&[CpuSet]> {
        self.cpu_masks.as_deref()
    }

    /// Global ranks on this host.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// The receive queue this host's ranks use (`SPLITRT_SHM_QUEUE`, with
    /// `auto` as chosen for this host's ranks).
    pub fn queue(&self) -> QueueKind {
        if self.layout.shared_queue {
            QueueKind::Shared
        } else {
            QueueKind::Pairs
        }
    }

    /// Whether anything waits in this rank's rings (or another thread is
    /// polling them), or the producer whose send was refused last has
    /// room now ([`room_came`](Self::room_came)): a sleeper's last look
    /// before it sleeps.
    fn has_work(&self) -> bool {
        self.room_came()
            || self.rx.iter().any(|set| {
                self.peeking.store(true, Ordering::Relaxed);
                let found = match self.owner.try_lock(set) {
                    None => true,
                    Some(set) => set.has_next(),
                };
                self.peeking.store(false, Ordering::Release);
                found
            })
    }

    /// Whether the producer whose send was refused last
    /// ([`room_wanted`](Self::room_wanted)) has room now (then forgotten:
    /// its sender is about to try again). One hint per rank: with
    /// `SPLITRT_THREADS=any` another thread's look (or a second refusal)
    /// can take it before the refused thread's own last look, which then
    /// sleeps until its doorbell or the 2 ms limit, as before the hint.
    fn room_came(&self) -> bool {
        let w = self.room_wanted.load(Ordering::Relaxed);
        let Some(tx) = w.checked_sub(1).and_then(|i| self.tx.get(i)) else {
            return false;
        };
        let room = self.owner.try_lock(tx).is_some_and(|tx| tx.p.room_now());
        if room {
            // only the hint looked at: another refusal stored since stays
            let _ = self
                .room_wanted
                .compare_exchange(w, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
        room
    }

    /// A send on producer `tx` (index into `tx`) was refused for want of
    /// room: the next sleep looks for room there too (out of line: the
    /// refusal path only).
    #[cold]
    #[inline(never)]
    fn want_room(&self, tx: usize) {
        self.room_wanted.store(tx + 1, Ordering::Relaxed);
    }

    /// What a look into this rank's rings, without waiting, finds: a
    /// message, nothing, or a set another thread holds (it may be
    /// delivering, or have passed a ring before a message came). A ring
    /// the calling thread may not look into (`SPLITRT_THREADS=single`,
    /// called off the owner thread) counts as empty.
    fn look(&self) -> Look {
        if self.owner.allows_this_thread().is_err() {
            return Look::Empty;
        }
        let mut held = false;
        for set in &self.rx {
            self.peeking.store(true, Ordering::Relaxed);
            let found = self.owner.try_lock(set).map(|set| set.has_next());
            self.peeking.store(false, Ordering::Release);
            match found {
                Some(true) => return Look::Seen,
                Some(false) => {}
                None => held = true,
            }
        }
        if held {
            Look::Held
        } else {
            Look::Empty
        }
    }

    fn segment_of(&self, rank: usize) -> SegmentRef {
        // SAFETY: segment_off + segment_len == file length (Layout::new).
        let base = unsafe { self.files[rank].as_ptr().add(self.layout.segment_off) };
        // SAFETY: the range is the segment part of `rank`'s file, mapped
        // read-write for as long as this fabric, which whoever dereferences
        // the reference keeps alive (SegmentRef's contract); the doorbell is
        // in the same file's header.
        unsafe { SegmentRef::new(base, self.layout.segment_len) }
            .with_owner_bell(self.bells[rank].0)
    }

    fn send_with<C: Clock>(
        &self,
        peer: usize,
        ch: Channel,
        pkt: &Packet<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<Sent> {
        let t0 = C::start();
        let err = |e: Error| Err(e.at_rank(self.global).with_peer(self.members[peer]));
        let nw = pkt.words.len();
        if nw > MAX_WORDS {
            return err(Error::usage(format!(
                "{nw} argument words (max {MAX_WORDS})"
            )));
        }
        let len = pkt.payload.len();
        if let Some(off) = pkt.deposit {
            let seg = self.segment_of(peer);
            if off
                .checked_add(len as u64)
                .is_none_or(|e| e > seg.len as u64)
                || len > u32::MAX as usize
            {
                return err(Error::new(ErrorKind::OutOfBounds {
                    offset: off,
                    len: len as u64,
                    segment_len: seg.len as u64,
                }));
            }
        } else if len > self.max_medium {
            return err(Error::usage(format!(
                "payload of {len} B exceeds the Medium maximum of {} B",
                self.max_medium
            )));
        }
        let mut tx = self
            .owner
            .lock(&self.tx[peer * 2 + ch as usize])
            .map_err(|e| e.at_rank(self.global))?;
        let Tx { p, bell, zone } = &mut *tx;
        match p {
            Prod::Pair(p) => self.send_on::<C, _>(p, *bell, zone, peer, ch, pkt, stall, t0),
            Prod::Shared(q) => self.send_on::<C, _>(q, *bell, zone, peer, ch, pkt, stall, t0),
        }
    }

    /// [`send_with`](Self::send_with) once the packet was checked and the
    /// producer locked: one copy per producer kind.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn send_on<C: Clock, P: Sink>(
        &self,
        p: &mut P,
        bell: Bell,
        zone: &mut Zone,
        peer: usize,
        ch: Channel,
        pkt: &Packet<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
        t0: C::Mark,
    ) -> Result<Sent> {
        let (nw, len) = (pkt.words.len(), pkt.payload.len());
        if let Some(off) = pkt.deposit {
            let seg = self.segment_of(peer);
            if !p.has_room() {
                return self.no_room(p, peer, ch);
            }
            let t = C::record(Stage::Enqueue, t0);
            // SAFETY: off + len <= seg.len (checked by `send_with`), so
            // `off` is an in-bounds offset into the peer's segment, mapped
            // in this process as long as the fabric.
            let dst = unsafe { seg.base.add(off as usize) };
            // SAFETY: dst..dst + len lies in the peer's segment (bounds
            // checked by `send_with`); the source is the caller's live
            // slice, which may itself lie in a segment (hence `copy`, a
            // memmove).
            unsafe { std::ptr::copy(pkt.payload.as_ptr(), dst, len) };
            announce::<C, P>(p, bell, pkt, F_DEPOSIT, off, t);
            self.mark_if_self(peer, ch);
            return Ok(Ok(()));
        }
        if !p.has_room() {
            return self.no_room(p, peer, ch);
        }
        let t = C::record(Stage::Enqueue, t0);
        let cap0 = p.capacity(nw);
        if len > cap0 && len <= zone.alloc.capacity() {
            // Into the landing zone in one copy; the cell only announces it.
            // A large one lands half a page away from its source's offset
            // in a page (see zone::PAGE: 4 KiB aliasing of the copy).
            let phase = (len >= zone::PHASE_MIN).then(|| {
                (pkt.payload.as_ptr() as usize + zone::PAGE / 2).wrapping_sub(zone.base as usize)
                    % zone::PAGE
            });
            let Some(at) = zone.alloc.place_in_phase(len, phase, |seq| p.released(seq)) else {
                return self.zone_full(p, peer, ch); // full of Mediums being handled
            };
            // Its pages ahead of the first lap, not one fault per 4 KiB.
            // SAFETY: the zone lies in the peer's file, mapped as long as
            // the fabric (Layout::new, connect); at + len <= its length.
            unsafe {
                zone.populated
                    .cover(zone.base, at + len, zone.alloc.capacity())
            };
            // SAFETY: at + len <= the zone's length (ZoneAlloc::place) and
            // the zone lies in the peer's file (Layout::new): an in-bounds
            // offset.
            let dst = unsafe { zone.base.add(at) };
            // SAFETY: dst..dst + len lies in the zone (as above); the peer
            // reads these bytes only after the cell published below names
            // them and until it releases that cell, before which place()
            // does not hand them out again. The source is the caller's slice,
            // and no safe API hands out a landing zone's bytes as one, so
            // the two do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(pkt.payload.as_ptr(), dst, len) };
            zone.alloc.placed(p.head(), at, len);
            announce::<C, P>(p, bell, pkt, F_ZONE, at as u64, t);
            self.mark_if_self(peer, ch);
            return Ok(Ok(()));
        }
        let first = len.min(cap0);
        let mut meta = CellMeta {
            tag: pkt.tag,
            flags: F_FIRST | if first == len { F_LAST } else { 0 },
            nwords: nw as u8,
            len: first as u32,
            total: len as u32,
            pad: 0,
            deposit: 0,
        };
        p.write(meta, pkt.words, &pkt.payload[..first]);
        let t = C::record(Stage::Copy, t);
        p.publish();
        self.mark_if_self(peer, ch);
        bell.get().ring();
        C::record(Stage::Publish, t);
        let cap = p.capacity(0);
        let mut sent = first;
        while sent < len {
            let mut waits = 0;
            while !p.has_room() {
                if p.forged() {
                    return Err(self.forged_tail(peer, ch));
                }
                // (no `want_room` here: this thread holds the producer,
                // so a look's `room_came` could never ask it)
                stall(waits).map_err(|e| e.at_rank(self.global))?;
                waits = waits.saturating_add(1);
            }
            let n = (len - sent).min(cap);
            meta.flags = if sent + n == len { F_LAST } else { 0 };
            meta.nwords = 0;
            meta.len = n as u32;
            p.push(meta, &[], &pkt.payload[sent..sent + n]);
            self.mark_if_self(peer, ch);
            bell.get().ring();
            sent += n;
        }
        Ok(Ok(()))
    }

    /// A send found no room on the producer `p` to local rank `peer`:
    /// would block (and ask to be told of room), or, when the consumer's
    /// word is forged ([`Sink::forged`]), the protocol error naming the
    /// peer.
    #[cold]
    #[inline(never)]
    fn no_room<P: Sink>(&self, p: &P, peer: usize, ch: Channel) -> Result<Sent> {
        if p.forged() {
            return Err(self.forged_tail(peer, ch));
        }
        self.want_room(peer * 2 + ch as usize);
        Ok(Err(WouldBlock::PeerRingFull))
    }

    /// A Medium found the landing zone to local rank `peer` full: would
    /// block, or, when the consumer's word is forged ([`Sink::forged`]:
    /// then no cell would ever be released and the zone never empty), the
    /// protocol error naming the peer.
    #[cold]
    #[inline(never)]
    fn zone_full<P: Sink>(&self, p: &P, peer: usize, ch: Channel) -> Result<Sent> {
        if p.forged() {
            return Err(self.forged_tail(peer, ch));
        }
        Ok(Err(WouldBlock::LandingZoneFull))
    }

    /// The error of a ring to local rank `peer` whose consumer's tail word
    /// is past the producer's head (forged or corrupt: no room would ever
    /// come).
    #[cold]
    #[inline(never)]
    fn forged_tail(&self, peer: usize, ch: Channel) -> Error {
        Error::protocol(format!(
            "shm ring to rank {} (channel {ch:?}): the consumer's tail is past the \
             producer's head (forged or corrupt)",
            self.members[peer]
        ))
        .at_rank(self.global)
        .with_peer(self.members[peer])
    }

    /// A Short's path (argument words only, one cell): `peer` is a global
    /// rank. Each check once, the errors out of line; the words stored
    /// one by one (no `memcpy` call); on the owner thread of a
    /// `SPLITRT_THREADS=single` rank, no lock. `Ok(false)`: the ring is
    /// full, nothing was sent (the caller waits, out of line). With
    /// tracing on, the general path with its probes.
    #[inline(always)]
    fn send_short(&self, peer: usize, ch: Channel, tag: u16, words: &[u64]) -> Result<bool> {
        let l = match self.local_of.get(peer) {
            Some(&l) if l != NOT_HERE => l as usize,
            _ => return Err(self.not_local(peer)),
        };
        if words.len() > MAX_WORDS || trace::enabled() {
            return self.send_short_generic(l, ch, tag, words);
        }
        let mut tx = match self.owner.lock(&self.tx[l * 2 + ch as usize]) {
            Ok(tx) => tx,
            Err(e) => return Err(e.at_rank(self.global)),
        };
        let Tx { p, bell, .. } = &mut *tx;
        let room = match p {
            Prod::Pair(p) => {
                let room = p.has_room();
                if room {
                    p.push_short(tag, words);
                    self.mark_if_self(l, ch);
                } else if p.tail_forged() {
                    return Err(self.forged_tail(l, ch));
                }
                room
            }
            Prod::Shared(q) => {
                let room = q.has_room();
                if room {
                    q.push_short(tag, words);
                }
                room
            }
        };
        if room {
            timeline::sent();
            bell.get().ring();
        } else {
            timeline::stamp(timeline::Ev::Refused, ch as u8, 0);
            self.want_room(l * 2 + ch as usize);
        }
        Ok(room)
    }

    /// A Short through [`send_with`](Self::send_with): with tracing on,
    /// or to word the error of too many words.
    #[cold]
    #[inline(never)]
    fn send_short_generic(&self, l: usize, ch: Channel, tag: u16, words: &[u64]) -> Result<bool> {
        let pkt = Packet {
            tag,
            words,
            payload: &[],
            deposit: None,
        };
        let stall = &mut |_| Ok(());
        let sent = if trace::enabled() {
            self.send_with::<On>(l, ch, &pkt, stall)
        } else {
            self.send_with::<Off>(l, ch, &pkt, stall)
        };
        sent.map(|r| r.is_ok())
    }

    /// After publishing into `peer`'s ring: if that is this rank's own,
    /// say so to its next poll.
    #[inline]
    fn mark_if_self(&self, peer: usize, ch: Channel) {
        if peer == self.me {
            self.self_pending[ch as usize].store(true, Ordering::Release);
        }
    }

    /// Whether this rank's own ring on `ch` may hold a message; clears the
    /// mark. The read-modify-write (a full fence) runs only when the mark
    /// is set: anything published before a mark it reads is then visible
    /// to the look that follows, and a later publish marks again.
    #[inline]
    fn take_self_pending(&self, ch: Channel) -> bool {
        let m = &self.self_pending[ch as usize];
        m.load(Ordering::Relaxed) && m.swap(false, Ordering::AcqRel)
    }

    /// `Some` once the bridge's look that holds a ring set is over
    /// (bounded: a look preempted mid-way is not waited for); `None` if
    /// no look was under way.
    #[cold]
    fn after_peek(&self) -> Option<()> {
        if !self.peeking.load(Ordering::Acquire) {
            return None;
        }
        for _ in 0..256 {
            std::hint::spin_loop();
            if !self.peeking.load(Ordering::Acquire) {
                return Some(());
            }
        }
        None
    }

    fn poll_with<C: Clock>(
        &self,
        ch: Channel,
        deliver: &mut dyn FnMut(&Delivery<'_>),
    ) -> Result<usize> {
        let Some(mut set) = self.owner.try_lock(&self.rx[ch as usize]).or_else(|| {
            // held: by the bridge's look (a few loads; wait for it), by
            // another thread that polls, or by a handler up this stack
            self.after_peek()
                .and_then(|()| self.owner.try_lock(&self.rx[ch as usize]))
        }) else {
            // or a single-threaded rank called from another thread
            self.owner
                .allows_this_thread()
                .map_err(|e| e.at_rank(self.global))?;
            return Ok(0);
        };
        let set = &mut *set;
        if let Some(q) = &mut set.queue {
            let got = self.poll_shared::<C>(q, deliver);
            match got {
                Ok(0) => timeline::empty_poll(),
                Ok(n) => timeline::stamp(timeline::Ev::Poll, ch as u8, n as u64),
                Err(_) => {}
            }
            return got;
        }
        let n = set.rings.len();
        let start = set.next;
        set.next = if start + 1 == n { 0 } else { start + 1 };
        let mut delivered = 0;
        // A ring with nothing published costs a look at one sequence word;
        // draining one is out of line (`drain`), so an idle poll stays
        // short.
        for i in 0..n {
            let src = if start + i >= n {
                start + i - n
            } else {
                start + i
            };
            let r = &mut set.rings[src];
            if src == self.me {
                // skipped unless it sent to itself since the last look
                if self.take_self_pending(ch) {
                    delivered += self.drain_own::<C>(ch, r, deliver)?;
                }
            } else if r.cons.has_next() {
                delivered += self.drain::<C>(src, r, deliver)?.0;
            }
        }
        if delivered > 0 {
            timeline::stamp(timeline::Ev::Poll, ch as u8, delivered as u64);
            // another thread of this rank may be asleep waiting for what
            // the handlers just did
            self.own_bell.get().ring();
        } else {
            timeline::empty_poll();
        }
        Ok(delivered)
    }

    /// [`drain`](Self::drain) this rank's own ring: if it is not drained
    /// (the budget ran out, a malformed cell returned an error, a handler
    /// panicked), it is marked for the next poll to look again.
    #[inline(never)]
    fn drain_own<C: Clock>(
        &self,
        ch: Channel,
        r: &mut RxRing,
        deliver: &mut dyn FnMut(&Delivery<'_>),
    ) -> Result<usize> {
        let mut again = Remark(Some(&self.self_pending[ch as usize]));
        let (delivered, empty) = self.drain::<C>(self.me, r, deliver)?;
        if empty {
            again.0 = None;
        }
        Ok(delivered)
    }

    /// Deliver what local rank `src`'s ring holds, at most a ring's length
    /// of cells (so one busy sender cannot starve the others), and ring
    /// the sender's doorbell if cells were freed (it may be asleep waiting
    /// for room). Returns how many packets were delivered and whether the
    /// ring was found empty.
    #[inline(never)]
    fn drain<C: Clock>(
        &self,
        src: usize,
        r: &mut RxRing,
        deliver: &mut dyn FnMut(&Delivery<'_>),
    ) -> Result<(usize, bool)> {
        let global = self.members[src];
        let mut delivered = 0;
        let mut freed = false;
        let mut empty = false;
        let mut parts = receive::RxParts {
            cons: &mut r.cons,
            reasm: std::slice::from_mut(&mut r.reasm),
            zone: Some(receive::ZoneRx {
                base: r.zone,
                populated: &mut r.zone_populated,
            }),
            src: global,
        };
        for _ in 0..self.layout.ring_len {
            match self.rx_one::<C, _>(&mut parts, deliver)? {
                None => {
                    empty = true;
                    break;
                }
                Some(done) => {
                    delivered += done as usize;
                    freed = true;
                }
            }
        }
        if freed {
            r.bell.get().ring();
        }
        Ok((delivered, empty))
    }
}

impl Fabric for ShmFabric {
    fn rank(&self) -> usize {
        self.global
    }

    fn size(&self) -> usize {
        self.local_of.len()
    }

    fn max_inline(&self, _peer: usize) -> usize {
        self.max_medium
    }

    fn segment_len(&self, _peer: usize) -> usize {
        self.layout.segment_len
    }

    fn local_segment(&self) -> SegmentRef {
        self.segment_of(self.me)
    }

    fn try_send_why(
        &self,
        peer: usize,
        ch: Channel,
        pkt: &Packet<'_>,
        stall: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<Sent> {
        let peer = self.local(peer)?;
        // One check of the tracing switch per send; the `Off` copy has no probes.
        let sent = if trace::enabled() {
            self.send_with::<On>(peer, ch, pkt, stall)
        } else {
            self.send_with::<Off>(peer, ch, pkt, stall)
        };
        match &sent {
            Ok(Ok(())) => timeline::sent(),
            Ok(Err(_)) => timeline::stamp(timeline::Ev::Refused, ch as u8, 1),
            Err(_) => {}
        }
        sent
    }

    #[inline(always)]
    fn try_send_short(&self, peer: usize, ch: Channel, tag: u16, words: &[u64]) -> Result<bool> {
        self.send_short(peer, ch, tag, words)
    }

    fn poll(&self, ch: Channel, deliver: &mut dyn FnMut(&Delivery<'_>)) -> Result<usize> {
        if trace::enabled() {
            self.poll_with::<On>(ch, deliver)
        } else {
            self.poll_with::<Off>(ch, deliver)
        }
    }

    fn credits(&self, peer: usize, ch: Channel) -> Option<(usize, usize)> {
        let l = *self.local_of.get(peer)?;
        if l == NOT_HERE {
            return None;
        }
        let p = self
            .owner
            .try_lock(self.tx.get(l as usize * 2 + ch as usize)?)?;
        let (free, total) = p.p.free_cells();
        Some((free as usize, total as usize))
    }

    /// Nothing: a sender deposits inside its guarded send, where it
    /// checks the frozen ranges itself.
    fn share_frozen(&mut self, _frozen: std::sync::Arc<crate::frozen::FrozenRanges>) {}

    /// Never: a packet is delivered from the ring cell its sender wrote,
    /// deposits included (written by the sender).
    fn arrivals_waiting(&self) -> bool {
        false
    }

    #[inline]
    fn load_store(&self) -> Option<&dyn LoadStore> {
        Some(self)
    }

    #[inline]
    fn wakeup(&self) -> Option<&dyn Wakeup> {
        Some(self)
    }
}

/// Every rank of this host: its file is mapped here.
impl LoadStore for ShmFabric {
    fn peer_segment(&self, peer: usize) -> Option<SegmentRef> {
        let l = *self.local_of.get(peer)?;
        (l != NOT_HERE).then(|| self.segment_of(l as usize))
    }
}

/// This rank's doorbell, which every peer of the host rings when it gives
/// this rank work.
impl Wakeup for ShmFabric {
    fn traffic_seq(&self) -> Option<u32> {
        Some(self.own_bell.get().seq())
    }

    /// Sleep on this rank's doorbell until a peer rings it (at most
    /// [`doorbell::WAIT_LIMIT`]; `_sleep`, the timed sleep of fabrics
    /// without a doorbell, does not apply), unless `done()` or work shows
    /// once the sleep is announced.
    fn idle_wait(&self, _sleep: std::time::Duration, done: &dyn Fn() -> bool) -> bool {
        self.own_bell
            .get()
            .wait(doorbell::WAIT_LIMIT, || self.has_work() || done())
    }

    /// Sleep on this rank's doorbell as one of its sleepers (so every peer
    /// giving it work rings: a `FUTEX_WAKE` per ring while someone waits
    /// here, one load otherwise) until rung, `limit` (at most
    /// [`doorbell::WAIT_LIMIT`]) passed or `stop()`. Before sleeping it
    /// looks into the rings where it can without waiting. A ring set
    /// another thread holds is not counted as work (that thread is
    /// delivering) but the holder may have passed a ring before a message
    /// came: the wait is then cut to [`HELD_LOOK`] and the look repeated,
    /// so such a message waits that long, not the whole limit. After the
    /// limit, a ring it cannot look into counts as work
    /// (`SPLITRT_THREADS=single`: only the owner thread may look, so a
    /// helper answers "maybe" once per wait limit). A wake-up the
    /// unfenced ring lost (see [`doorbell`]) is found by that last look.
    fn await_traffic(&self, limit: std::time::Duration, stop: &dyn Fn() -> bool) -> bool {
        let bell = self.own_bell.get();
        let deadline = std::time::Instant::now() + limit.min(doorbell::WAIT_LIMIT);
        let mut held = false;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return self.has_work();
            }
            // after a held look, a short wait in which a held set counts
            // as empty; else a look that finds a held set does not sleep
            let step = if held { left.min(HELD_LOOK) } else { left };
            let mut look = Look::Empty;
            let mut stopped = false;
            let rung = bell.wait(step, || {
                look = self.look();
                stopped = stop();
                look == Look::Seen || (look == Look::Held && !held) || stopped
            });
            if rung || look == Look::Seen {
                return true;
            }
            if stopped {
                return false;
            }
            held = look == Look::Held && !held;
        }
    }
}

/// How long the doorbell bridge's wait lasts after it found a ring set
/// held by another thread, before it looks again (see
/// [`ShmFabric::await_traffic`]).
pub const HELD_LOOK: std::time::Duration = std::time::Duration::from_micros(50);

/// What [`ShmFabric::look`] found.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Look {
    Seen,
    Empty,
    Held,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::fabric::Deposit;
    use rand::{Rng, SeedableRng};

    /// A raw cell into a 1-rank fabric's own Request ring, as a broken
    /// sender would write it (past `send_with`'s checks), marked for the
    /// next poll.
    fn inject(f: &ShmFabric, meta: CellMeta) {
        let mut tx = f.tx[0].lock();
        let Prod::Pair(p) = &mut tx.p else {
            panic!("not a ring")
        };
        assert!(p.has_room());
        p.push(meta, &[], &[]);
        f.mark_if_self(0, Channel::Request);
    }

    fn solo(tag: &str, cell: usize, ring: usize) -> ShmFabric {
        let job = format!("unit{tag}{}", std::process::id());
        let cfg = Config {
            segment_size: 1 << 20,
            cell_size: cell,
            ring_len: ring,
            max_medium: 4096,
            ..Config::default()
        };
        let f = PendingShm::create(&job, 0, &[0], 1, &cfg.shm())
            .unwrap()
            .connect()
            .unwrap();
        f.unlink_own().unwrap();
        f
    }

    /// A peer's file of another layout version is named as one whatever
    /// its other header words say (its `ready` word may be elsewhere: here
    /// 0), a file without the magic as not splitrt's, and only a file of
    /// this version whose header is unfinished as not ready. (OLD: `ready`
    /// was checked first, so the other version's peer was "not ready".)
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn check_peer_names_another_version_before_readiness() {
        let job = format!("unitver{}", std::process::id());
        let cfg = Config {
            segment_size: 1 << 20,
            max_medium: 4096,
            ..Config::default()
        };
        let p = PendingShm::create(&job, 0, &[0], 1, &cfg.shm()).unwrap();
        // unlinked at once (the mapping stays): nothing left if this fails
        p.own.unlink().unwrap();
        let h = p.own.as_ptr() as *mut FileHeader;
        let check = || match check_peer(&p.own, 0, &p.layout, p.max_medium, "") {
            Ok(()) => "ok".to_string(),
            Err(e) => e.to_string(),
        };
        assert_eq!(check(), "ok");
        let set = |version: u32, magic: u64, ready: u32| {
            // SAFETY: the file is this test's own (no peer maps it, it is
            // unlinked) and holds a header at its page-aligned start;
            // nothing else reads or writes it while this runs.
            let hdr = unsafe { &mut *h };
            hdr.version = version;
            hdr.magic = magic;
            hdr.ready.store(ready, Ordering::Release);
        };
        set(VERSION + 1, MAGIC, 0);
        assert!(
            check().contains(&format!("layout v{}", VERSION + 1)),
            "{}",
            check()
        );
        set(VERSION, MAGIC ^ 1, 0);
        assert!(check().contains("wrong magic"), "{}", check());
        set(VERSION, MAGIC, 0);
        assert!(check().contains("not ready"), "{}", check());
        set(VERSION, MAGIC, 1);
        assert_eq!(check(), "ok");
    }

    /// The default `try_send_segment_why` (shm frames no segment source
    /// itself): the bytes are copied out of the segment into a buffer and
    /// sent as a Medium, whole, in one cell and across several.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn a_medium_from_the_segment_arrives_byte_for_byte() {
        let f = solo("segsrc", 256, 8);
        let seg = f.local_segment();
        let pattern = |i: usize| (i.wrapping_mul(7) ^ (i >> 9)) as u8;
        for i in 0..seg.len() {
            // SAFETY: the 1-rank fabric's own segment, mapped while `f`
            // lives; nothing else reads or writes it meanwhile.
            unsafe { seg.base().wrapping_add(i).write(pattern(i)) };
        }
        for (off, len) in [(0, 4096), (12_345, 100), (9, 1), (70_000, 3000)] {
            // SAFETY: `f` (which keeps the segment mapped) outlives `src`.
            let src = unsafe { crate::fabric::SegmentBytes::new(seg, off, len) }.unwrap();
            let mut got = Vec::new();
            let mut stall = |_| -> Result<()> {
                f.poll(Channel::Request, &mut |d| got.extend_from_slice(d.payload))?;
                Ok(())
            };
            let sent = f
                .try_send_segment_why(0, Channel::Request, 2, &[], src, &mut stall)
                .unwrap();
            assert_eq!(sent, Ok(()));
            for _ in 0..100 {
                f.poll(Channel::Request, &mut |d| got.extend_from_slice(d.payload))
                    .unwrap();
            }
            let want: Vec<u8> = (off..off + len).map(pattern).collect();
            assert_eq!(got, want, "{len} B from offset {off}");
        }
    }

    /// Review finding 1 of h14-bounce: a segment source longer than the
    /// Medium maximum (a peer's over-long get) is refused before it is
    /// copied into the thread's buffer, not after a copy of up to 64 MiB.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn an_over_long_segment_source_is_refused_before_any_copy() {
        let f = solo("seglong", 256, 8);
        let seg = f.local_segment();
        let max = f.max_inline(0);
        let mut stall = |_| -> Result<()> { Ok(()) };
        let before = crate::fabric::bounce_copies();
        // SAFETY: `f` (which keeps the segment mapped) outlives `src`.
        let src = unsafe { crate::fabric::SegmentBytes::new(seg, 0, max + 1) }.unwrap();
        let e = f
            .try_send_segment_why(0, Channel::Request, 2, &[], src, &mut stall)
            .unwrap_err();
        let e = e.to_string();
        assert!(e.contains("exceeds the Medium maximum"), "{e}");
        // names the rank and the peer, as a slice's refusal does
        assert!(e.contains("rank 0 (peer 0)"), "{e}");
        assert_eq!(crate::fabric::bounce_copies(), before, "nothing copied");
        // the largest allowed one is copied once and sent
        // SAFETY: as above.
        let src = unsafe { crate::fabric::SegmentBytes::new(seg, 0, max) }.unwrap();
        let sent = f
            .try_send_segment_why(0, Channel::Request, 2, &[], src, &mut stall)
            .unwrap();
        assert_eq!(sent, Ok(()));
        assert_eq!(crate::fabric::bounce_copies(), before + 1);
    }

    /// The receive side's Short fast path takes only a well-formed Short:
    /// a cell that looks like one but breaks a rule (too many words, a
    /// payload claimed, a reassembly under way) is still an error naming
    /// the peer, and the ring goes on.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn a_cell_that_almost_is_a_short_is_rejected() {
        let f = solo("almost", 256, 4);
        let short = CellMeta {
            tag: 3,
            flags: F_FIRST | F_LAST,
            ..CellMeta::default()
        };
        let first_chunk = CellMeta {
            flags: F_FIRST,
            len: 8,
            total: 100,
            ..CellMeta::default()
        };
        let bad = [
            (
                vec![CellMeta {
                    nwords: MAX_WORDS as u8 + 1,
                    ..short
                }],
                "argument words",
            ),
            (vec![CellMeta { total: 5, ..short }], "claims 5 B"),
            (
                vec![CellMeta {
                    flags: 0x13,
                    ..short
                }],
                "unknown cell flags",
            ),
            (vec![first_chunk, short], "being reassembled"),
        ];
        for (cells, why) in bad {
            let mut errors = Vec::new();
            for meta in cells {
                inject(&f, meta);
                if let Err(e) = f.poll(Channel::Request, &mut |d| {
                    panic!("delivered {} words with tag {}", d.words.len(), d.tag)
                }) {
                    errors.push(e);
                }
            }
            let e = errors.last().expect("an error");
            assert!(matches!(e.kind(), ErrorKind::Protocol(_)), "{e}");
            assert!(e.to_string().contains("from rank 0"), "{e}");
            assert!(e.to_string().contains(why), "{why}: {e}");
        }
        assert!(f.try_send_short(0, Channel::Request, 4, &[8, 9]).unwrap());
        let mut got = Vec::new();
        f.poll(Channel::Request, &mut |d| {
            got.push((d.tag, d.words.to_vec()))
        })
        .unwrap();
        assert_eq!(got, vec![(4, vec![8, 9])]);
    }

    /// A ring whose consumer's tail word is forged past the producer's
    /// head: a Short, a Medium and a Long to it end with a protocol error
    /// naming the peer (OLD: `Ok(false)`, back-pressure, forever, so the
    /// sender waited until the hang report), and its credits say none
    /// free (OLD: all free); with the true tail back, sends go on.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn a_forged_ring_tail_is_a_protocol_error_naming_the_peer() {
        let f = solo("forged", 256, 4);
        for k in 0..4 {
            assert!(f.try_send_short(0, Channel::Request, 1, &[k]).unwrap());
        }
        let ring_tail = |v: u64| {
            let tx = f.tx[0].lock();
            let Prod::Pair(p) = &tx.p else {
                panic!("not a ring")
            };
            p.ring().ctrl(0).store(v, Ordering::Release);
        };
        ring_tail(9);
        assert_eq!(f.credits(0, Channel::Request), Some((0, 4)));
        let short = f.try_send_short(0, Channel::Request, 1, &[5]);
        let medium = Packet {
            tag: 2,
            words: &[],
            payload: &[7; 100],
            deposit: None,
        };
        let long = Packet {
            deposit: Some(64),
            ..medium
        };
        let mut stall = |_| Ok(());
        let medium = f.try_send(0, Channel::Request, &medium, &mut stall);
        let long = f.try_send(0, Channel::Request, &long, &mut stall);
        for (what, r) in [("short", short), ("medium", medium), ("long", long)] {
            let e = r.expect_err(what);
            assert!(matches!(e.kind(), ErrorKind::Protocol(_)), "{what}: {e}");
            assert_eq!(e.peer(), Some(0), "{what}: {e}");
            assert!(e.to_string().contains("tail is past"), "{what}: {e}");
        }
        // the consumer's true tail (one cell used): room again
        ring_tail(1);
        assert_eq!(f.credits(0, Channel::Request), Some((1, 4)));
        assert!(f.try_send_short(0, Channel::Request, 1, &[6]).unwrap());
    }

    /// A direct write into a peer's segment wakes it through the segment
    /// reference: with a sleeper announced on the owner's doorbell, the
    /// bell moves; with none, it does not (the common case is one load).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn a_segment_reference_rings_its_owners_doorbell() {
        let f = solo("bell", 256, 8);
        let seg = f.peer_segment(0).unwrap();
        let bell = f.own_bell.get();
        let before = bell.bell.load(Ordering::SeqCst);
        // SAFETY: `f`, which handed out `seg`, lives to the test's end.
        unsafe { seg.wake_owner() };
        assert_eq!(
            bell.bell.load(Ordering::SeqCst),
            before,
            "no sleeper: no ring"
        );
        bell.sleepers.fetch_add(1, Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { seg.wake_owner() };
        bell.sleepers.fetch_sub(1, Ordering::SeqCst);
        assert_eq!(
            bell.bell.load(Ordering::SeqCst),
            before + 1,
            "a sleeper is rung"
        );
        assert_eq!(f.local_segment().base(), seg.base());
    }

    /// The Short path delivers what the general one does (tag, every
    /// word, no payload), returns `Ok(false)` on a full ring, and refuses
    /// too many words and a rank that is not here, as the general path.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn a_short_takes_its_own_path_and_arrives_whole() {
        let f = solo("short", 256, 4);
        for n in [0, 1, 3, MAX_WORDS] {
            let words: Vec<u64> = (0..n as u64).map(|i| i * 7 + 1).collect();
            assert!(f.try_send_short(0, Channel::Request, 9, &words).unwrap());
            let mut got = Vec::new();
            f.poll(Channel::Request, &mut |d| {
                got.push((d.tag, d.words.to_vec(), d.payload.len(), d.deposit));
            })
            .unwrap();
            assert_eq!(got, vec![(9, words, 0, None)]);
        }
        for _ in 0..4 {
            assert!(f.try_send_short(0, Channel::Reply, 1, &[5]).unwrap());
        }
        assert!(
            !f.try_send_short(0, Channel::Reply, 1, &[5]).unwrap(),
            "a full ring: back-pressure"
        );
        assert_eq!(f.poll(Channel::Reply, &mut |_| {}).unwrap(), 4);
        let e = f
            .try_send_short(0, Channel::Reply, 1, &[0; MAX_WORDS + 1])
            .unwrap_err();
        assert!(e.to_string().contains("argument words"), "{e}");
        let e = f.try_send_short(3, Channel::Reply, 1, &[]).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }

    /// A refused send says why: a full ring of Shorts is `PeerRingFull`;
    /// Mediums larger than a cell, which go through the landing zone,
    /// meet `LandingZoneFull` first when the ring is long.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn a_refused_send_names_the_limit_it_met() {
        let mut none = |_| -> Result<()> { Ok(()) };
        let f = solo("whyring", 256, 4);
        let short = Packet {
            tag: 1,
            words: &[5],
            payload: &[],
            deposit: None,
        };
        for _ in 0..4 {
            assert_eq!(
                f.try_send_why(0, Channel::Request, &short, &mut none)
                    .unwrap(),
                Ok(())
            );
        }
        assert_eq!(
            f.try_send_why(0, Channel::Request, &short, &mut none)
                .unwrap(),
            Err(WouldBlock::PeerRingFull)
        );
        assert_eq!(f.poll(Channel::Request, &mut |_| {}).unwrap(), 4);
        assert_eq!(
            f.try_send_why(0, Channel::Request, &short, &mut none)
                .unwrap(),
            Ok(())
        );

        let f = solo("whyzone", 256, 1024);
        let sent = fill_the_landing_zone(&f);
        assert_eq!(f.poll(Channel::Request, &mut |_| {}).unwrap(), sent);
    }

    /// 4 KiB Mediums sent to rank 0 of `f` (a cell of 256 B, a long ring)
    /// until one is refused, which must be for a full landing zone; the
    /// count sent.
    fn fill_the_landing_zone(f: &ShmFabric) -> usize {
        let mut none = |_| -> Result<()> { Ok(()) };
        let data = vec![7u8; 4096];
        let medium = Packet {
            tag: 2,
            words: &[],
            payload: &data,
            deposit: None,
        };
        let mut sent = 0;
        let why = loop {
            match f
                .try_send_why(0, Channel::Request, &medium, &mut none)
                .unwrap()
            {
                Ok(()) => sent += 1,
                Err(why) => break why,
            }
            assert!(sent < 1024, "the landing zone never filled");
        };
        assert_eq!(why, WouldBlock::LandingZoneFull, "after {sent} Mediums");
        sent
    }

    /// A forged tail while the landing zone is full: the zone can never
    /// empty (no cell counts as released past a forged tail), so the send
    /// is the protocol error naming the peer, not `LandingZoneFull` for
    /// ever. (OLD: `Ok(Err(LandingZoneFull))` after the forgery, every
    /// time: the ring's cached tail still showed room, so the no-room
    /// path that asks `forged` was never reached.)
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn miscfix_a_forged_tail_behind_a_full_landing_zone_is_named() {
        let mut none = |_| -> Result<()> { Ok(()) };
        let f = solo("fzone", 256, 1024);
        let sent = fill_the_landing_zone(&f) as u64;
        let data = vec![7u8; 4096];
        let medium = Packet {
            tag: 2,
            words: &[],
            payload: &data,
            deposit: None,
        };
        {
            let tx = f.tx[0].lock();
            let Prod::Pair(p) = &tx.p else {
                panic!("not a ring")
            };
            p.ring().ctrl(0).store(sent + 5, Ordering::Release);
        }
        for _ in 0..3 {
            let e = f
                .try_send_why(0, Channel::Request, &medium, &mut none)
                .expect_err("a forged tail behind a full zone");
            assert!(matches!(e.kind(), ErrorKind::Protocol(_)), "{e}");
            assert_eq!(e.peer(), Some(0), "{e}");
            assert!(e.to_string().contains("tail is past"), "{e}");
        }
    }

    /// The doorbell bridge's wait: `false` when it timed out with the rings
    /// empty or `stop()` held, `true` when a message waits (at once) or a
    /// ring of the doorbell ended it.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn await_traffic_tells_traffic_from_a_timeout() {
        let f = solo("await", 256, 8);
        let t = std::time::Instant::now();
        assert!(!f.await_traffic(std::time::Duration::from_secs(5), &|| false));
        let e = t.elapsed();
        assert!(
            e >= doorbell::WAIT_LIMIT && e < std::time::Duration::from_secs(1),
            "{e:?}"
        );
        assert!(
            !f.await_traffic(std::time::Duration::from_secs(5), &|| true),
            "stopped"
        );
        let pkt = Packet {
            tag: 1,
            words: &[7],
            payload: &[],
            deposit: None,
        };
        assert!(f
            .try_send(0, Channel::Reply, &pkt, &mut |_| Ok(()))
            .unwrap());
        let t = std::time::Instant::now();
        assert!(f.await_traffic(std::time::Duration::from_secs(5), &|| false));
        assert!(
            t.elapsed() < doorbell::WAIT_LIMIT,
            "a waiting message: no sleep"
        );
        assert_eq!(f.poll(Channel::Reply, &mut |_| {}).unwrap(), 1);
        assert!(
            !f.await_traffic(std::time::Duration::from_secs(5), &|| false),
            "drained"
        );
        // a peer's ring (a direct write into the segment) ends the wait
        let bell = f.own_bell.get();
        std::thread::scope(|s| {
            let waiter =
                s.spawn(
                    || {
                        while !f.await_traffic(std::time::Duration::from_secs(5), &|| false) {}
                    },
                );
            let start = std::time::Instant::now();
            while !waiter.is_finished() {
                assert!(
                    start.elapsed() < std::time::Duration::from_secs(10),
                    "not woken"
                );
                if bell.sleepers.load(Ordering::SeqCst) > 0 {
                    let seg = f.peer_segment(0).unwrap();
                    // SAFETY: the segment's bell lies in `f`'s own mapping,
                    // which lives until the end of the test.
                    unsafe { seg.wake_owner() };
                }
                std::thread::yield_now();
            }
        });
    }

    /// A message that came while another thread held the ring set (a
    /// poller that had passed that ring) is noticed soon after the holder
    /// lets go, not at the end of the doorbell's wait limit: the old look
    /// counted a held set as empty and slept the whole 2 ms.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn await_traffic_notices_a_message_behind_a_held_ring_set_soon() {
        let f = solo("held", 256, 8);
        let pkt = Packet {
            tag: 1,
            words: &[7],
            payload: &[],
            deposit: None,
        };
        assert!(f
            .try_send(0, Channel::Reply, &pkt, &mut |_| Ok(()))
            .unwrap());
        let mut best = std::time::Duration::MAX;
        for _ in 0..5 {
            std::thread::scope(|s| {
                let held = f.rx[Channel::Reply as usize].lock();
                let waiter = s.spawn(|| {
                    let t = std::time::Instant::now();
                    let r = f.await_traffic(std::time::Duration::from_secs(5), &|| false);
                    (r, t.elapsed())
                });
                // let go once the waiter looked (it announces itself as a
                // sleeper first, then looks)
                let t = std::time::Instant::now();
                while f.own_bell.get().sleepers.load(Ordering::SeqCst) == 0
                    && !waiter.is_finished()
                    && t.elapsed() < std::time::Duration::from_secs(10)
                {
                    std::thread::yield_now();
                }
                std::thread::sleep(std::time::Duration::from_micros(300));
                drop(held);
                let (r, e) = waiter.join().unwrap();
                assert!(r, "the message is traffic");
                best = best.min(e);
            });
        }
        assert!(
            best < doorbell::WAIT_LIMIT * 3 / 4,
            "noticed after {best:?} at best (the wait limit is {:?})",
            doorbell::WAIT_LIMIT
        );
        assert_eq!(f.poll(Channel::Reply, &mut |_| {}).unwrap(), 1);
    }

    /// Mediums larger than a cell land in the zone (round and round it)
    /// and reach the handler whole; a cell naming bytes outside the zone,
    /// or claiming more than a Medium holds, is refused naming the sender.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn large_mediums_land_in_the_zone_and_bad_offsets_are_refused() {
        let f = solo("zone", 256, 8);
        let zone = f.layout.zone_len();
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let mut placed = 0;
        for round in 0..500u64 {
            let n = 300 + (round as usize * 997) % 3797; // 300..4096 B
            let pkt = Packet {
                tag: 3,
                words: &[round],
                payload: &data[..n],
                deposit: None,
            };
            assert!(f
                .try_send(0, Channel::Request, &pkt, &mut |_| Ok(()))
                .unwrap());
            placed += n;
            let mut got = 0;
            f.poll(Channel::Request, &mut |d| {
                assert_eq!((d.tag, d.words, d.payload), (3, &[round][..], &data[..n]));
                assert!(d.deposit.is_none());
                got += 1;
            })
            .unwrap();
            assert_eq!(got, 1);
        }
        assert!(placed > 2 * zone, "went round the zone");
        for (at, total) in [(zone as u64 - 5, 10u32), (u64::MAX, 10), (0, 4097)] {
            let meta = CellMeta {
                tag: 1,
                flags: F_FIRST | F_LAST | F_ZONE,
                nwords: 0,
                len: 0,
                total,
                pad: 0,
                deposit: at,
            };
            inject(&f, meta);
            let e = f
                .poll(Channel::Request, &mut |_| panic!("delivered a bad offset"))
                .unwrap_err();
            assert!(e.to_string().contains("landing zone"), "{e}");
        }
    }

    /// Random cell headers (as a buggy or hostile peer could write) are
    /// rejected with an error naming the sender; deliveries that do get
    /// through never exceed what the cell or segment holds; the ring keeps
    /// working afterwards. Seeded: a failure reproduces.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn garbage_cells_are_rejected_and_the_ring_recovers() {
        let f = solo("garbage", 256, 4);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x5eed);
        let mut errors = 0;
        for _ in 0..200_000 {
            let meta = CellMeta {
                tag: rng.gen(),
                flags: rng.gen::<u8>() & 0x0f,
                nwords: rng.gen_range(0..20),
                len: rng.gen_range(0..400),
                total: rng.gen_range(0..10_000),
                pad: 0,
                deposit: rng.gen_range(0..(2u64 << 20)),
            };
            inject(&f, meta);
            let r = f.poll(Channel::Request, &mut |d| {
                assert!(d.words.len() <= MAX_WORDS);
                match d.deposit {
                    Some(dep) => {
                        assert!(dep.offset as usize + dep.len <= 1 << 20);
                        assert!(d.payload.is_empty(), "a deposit delivered as bytes");
                    }
                    None => assert!(d.payload.len() <= 4096),
                }
            });
            if let Err(e) = r {
                assert!(matches!(e.kind(), ErrorKind::Protocol(_)), "{e}");
                assert!(e.to_string().contains("from rank 0"), "{e}");
                errors += 1;
            }
        }
        assert!(errors > 10_000, "only {errors} rejections");
        // Garbage may have left a half-reassembled packet behind. A bare LAST
        // cell ends it either way (completing or rejecting it), after which
        // a well-formed streamed packet must arrive intact, first time.
        let end = CellMeta {
            flags: F_LAST,
            ..CellMeta::default()
        };
        inject(&f, end);
        let _ = f.poll(Channel::Request, &mut |_| {});
        let payload: Vec<u8> = (0..600u32).map(|i| i as u8).collect();
        let pkt = Packet {
            tag: 7,
            words: &[1, 2, 3],
            payload: &payload,
            deposit: None,
        };
        let mut got = 0;
        let mut check = |d: &Delivery<'_>| {
            assert_eq!(
                (d.tag, d.words, d.payload),
                (7, &[1u64, 2, 3][..], &payload[..])
            );
            got += 1;
        };
        // 600 B needs 3 cells of a 4-cell ring: it fits without stalling
        let mut no_stall = |_| -> Result<()> { panic!("the ring had room") };
        assert!(f
            .try_send(0, Channel::Request, &pkt, &mut no_stall)
            .unwrap());
        f.poll(Channel::Request, &mut check).unwrap();
        assert_eq!(got, 1);
    }

    /// A malformed cell in a rank's own ring fails the poll; a good
    /// message to itself queued behind it still arrives at the next poll
    /// (the own-ring mark is set again when a poll ends without draining).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn a_message_to_itself_behind_a_bad_cell_is_not_stranded() {
        let f = solo("selfbad", 256, 4);
        inject(
            &f,
            CellMeta {
                flags: F_FIRST | F_LAST | F_ZONE,
                total: 10,
                deposit: u64::MAX,
                ..CellMeta::default()
            },
        );
        let pkt = Packet {
            tag: 9,
            words: &[4],
            payload: &[],
            deposit: None,
        };
        let mut no_stall = |_| -> Result<()> { panic!("the ring had room") };
        assert!(f
            .try_send(0, Channel::Request, &pkt, &mut no_stall)
            .unwrap());
        assert!(f.poll(Channel::Request, &mut |_| {}).is_err());
        let mut got = 0;
        for _ in 0..3 {
            got += f
                .poll(Channel::Request, &mut |d| {
                    assert_eq!((d.tag, d.words), (9, &[4][..]))
                })
                .unwrap();
        }
        assert_eq!(got, 1);
    }

    /// With tracing on, one packet through a real ring leaves a sample in
    /// every fabric stage (send: enqueue, copy, publish; receive: poll,
    /// release) on this thread.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn trace_records_every_fabric_stage() {
        let f = solo("trace", 256, 4);
        let _ = trace::take();
        trace::set_enabled(true);
        let pkt = Packet {
            tag: 1,
            words: &[7],
            payload: b"abc",
            deposit: None,
        };
        assert!(f
            .try_send(0, Channel::Request, &pkt, &mut |_| Ok(()))
            .unwrap());
        let mut got = 0;
        f.poll(Channel::Request, &mut |_| got += 1).unwrap();
        trace::set_enabled(false);
        let t = trace::take();
        assert_eq!(got, 1);
        for s in [
            Stage::Enqueue,
            Stage::Copy,
            Stage::Publish,
            Stage::Poll,
            Stage::Release,
        ] {
            assert_eq!(t.count[s as usize], 1, "{s:?}: {t:?}");
        }
    }

    /// A Long's deposit is delivered as a range of the segment, never as a
    /// `&[u8]` over it: peers deposit into the segment concurrently, so a
    /// slice there would be a shared reference over bytes another writer
    /// changes (issue 23). No delivery's payload lies in the segment.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn a_deposit_is_delivered_as_a_range_not_segment_bytes() {
        let f = solo("deprange", 512, 2);
        let seg = f.local_segment();
        let in_segment = |p: &[u8]| {
            let (a, b) = (seg.base() as usize, seg.base() as usize + seg.len());
            !p.is_empty() && (p.as_ptr() as usize) < b && p.as_ptr() as usize + p.len() > a
        };
        let data = [7u8; 64];
        for (off, len) in [(0u64, 64usize), (4096, 1), ((1 << 20) - 64, 64)] {
            let pkt = Packet {
                tag: 9,
                words: &[1],
                payload: &data[..len],
                deposit: Some(off),
            };
            assert!(f
                .try_send(0, Channel::Request, &pkt, &mut |_| Ok(()))
                .unwrap());
            let mut got = Vec::new();
            f.poll(Channel::Request, &mut |d| {
                assert!(!in_segment(d.payload), "payload over segment bytes");
                got.push((d.tag, d.payload.len(), d.deposit));
            })
            .unwrap();
            let want = Deposit { offset: off, len };
            assert_eq!(got, vec![(9, 0, Some(want))]);
        }
    }

    /// Senders check Long deposits and Medium sizes before touching memory.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates and maps a file in /dev/shm (mmap of a file: FFI)"
    )]
    fn sender_side_checks() {
        let f = solo("checks", 512, 2);
        let mut stall = |_| Ok(());
        let long = |off: u64, len: usize| Packet {
            tag: 0,
            words: &[],
            payload: &[0u8; 64][..len],
            deposit: Some(off),
        };
        for (off, len) in [((1 << 20) - 8, 16), (u64::MAX - 1, 8), (1 << 20, 1)] {
            let e = f
                .try_send(0, Channel::Request, &long(off, len), &mut stall)
                .unwrap_err();
            assert!(matches!(e.kind(), ErrorKind::OutOfBounds { .. }), "{e}");
            assert_eq!(e.peer(), Some(0));
        }
        assert!(f
            .try_send(0, Channel::Request, &long((1 << 20) - 64, 64), &mut stall)
            .unwrap());
        let big = vec![0u8; 4097];
        let e = f
            .try_send(
                0,
                Channel::Request,
                &Packet {
                    tag: 0,
                    words: &[],
                    payload: &big,
                    deposit: None,
                },
                &mut stall,
            )
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("exceeds the Medium maximum of 4096 B"),
            "{e}"
        );
        let e = f
            .try_send(
                3,
                Channel::Request,
                &Packet {
                    tag: 0,
                    words: &[],
                    payload: &[],
                    deposit: None,
                },
                &mut stall,
            )
            .unwrap_err();
        assert!(e.to_string().contains("rank 3 does not exist"), "{e}");
    }
}
