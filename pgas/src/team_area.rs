//! A team's shared-memory area: one block per member, in that member's own
//! segment, through which the team's collectives run when every member's
//! segment is mapped here on the native path (`team_shm.rs` has the
//! algorithms). Only the owner writes its block; the other members read
//! it. Each block holds:
//!
//! | offset | words |
//! |---|---|
//! | 0 | `ready`: the last step whose data (and header) the owner published |
//! | 8 | `done`: the last step whose reads the owner finished, [`DROPPED`] once it dropped the team |
//! | 16 | `tag`: the team's id (a reused block shows another) |
//! | 64, 128 | the header of even and odd steps: collective number, kind, op, root, count, element size |
//! | 256 | two data halves of `half` bytes, for even and odd steps |
//!
//! Step k writes half k % 2 and publishes `ready = k`; every member then
//! waits until every member's `ready` is at least k, checks their headers
//! against its own and reads what it needs. A member writes half k % 2
//! again at step k + 2, after the wait of step k + 1, which every member
//! entered only once it had read what it needed of step k: one wait per
//! step, no acknowledgement back. Control words are atomics; data is
//! copied in and out (never referenced), and a peer's values are data:
//! never an index, never a length.

use parking_lot::Mutex;
use splitrt_runtime::fabric::SegmentRef;
use splitrt_runtime::memmove::memmove;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Offset of the data halves in a block.
pub(crate) const DATA_OFF: usize = 256;
/// Bytes of one data half of a split team's block.
pub(crate) const TEAM_HALF: usize = 32 << 10;
/// Bytes of a split team's block.
pub(crate) const TEAM_AREA: usize = DATA_OFF + 2 * TEAM_HALF;
/// Split teams' blocks a rank holds at most (live and retired): past it a
/// new team's collectives go by messages (4 MiB of a segment at most).
pub(crate) const MAX_AREAS: usize = 64;

const READY: usize = 0;
const DONE: usize = 8;
const TAG: usize = 16;
const HDR: usize = 64;
/// `done` of a member that dropped the team: it reads no member's block
/// for this team any more.
pub(crate) const DROPPED: u64 = u64::MAX;
/// Words of a step header.
pub(crate) const HDR_WORDS: usize = 6;

/// The area of one team on this rank: where every member's block is.
pub(crate) struct TeamArea {
    /// Every member's segment (team order), as mapped here.
    segs: Vec<SegmentRef>,
    /// Offset of every member's block in its segment.
    offs: Vec<usize>,
    me: usize,
    half: usize,
    tag: u64,
    /// Steps so far (the same on every member).
    step: AtomicU64,
    /// This rank's block, to retire when the team is dropped (none for
    /// the world team's, which is the collectives' scratch block).
    own: Option<(u64, Arc<Retired>)>,
    /// Whether `publish` counts its rings (a host group's area, whose
    /// steps an awaited hierarchical scan looks at: `team_nb.rs`).
    counted: bool,
}

/// The lazily set-up area of a team handle and its clones: `None` once
/// the members agreed to go by messages.
pub(crate) type AreaSlot = OnceLock<Option<Arc<TeamArea>>>;

/// A dropped team's block that peers may still read: freed once every
/// member dropped the team (or its block shows another tag). Finishing
/// the last step is not enough: a hierarchical scan reads its
/// host-mates' step headers outside any step (`team_mates.rs`) for as
/// long as it runs, and a member holds its area while it may call one.
pub(crate) struct RetiredArea {
    /// Where every member's block is (owning nothing).
    pub area: TeamArea,
    /// This rank's block.
    pub off: u64,
    /// Members seen gone (dropped the team, or their block shows another
    /// tag): not read again, as their blocks may be freed and reused.
    pub gone: Vec<bool>,
    /// Whether this member's `done` says [`DROPPED`] yet: stored at the
    /// first look (`reclaimable`, from [`Retired::reclaim`]: a team
    /// set-up, or the drop of a split team's last handle, both while the
    /// segments are mapped), not in `Drop for TeamArea`, which may run at
    /// the job's end after the endpoint unmapped them (the world team's
    /// host-group area, or an area a dropped request's schedule held).
    pub marked: bool,
}

impl RetiredArea {
    /// Whether the block may be freed: every member dropped the team
    /// (see [`TeamArea::all_dropped`]).
    pub(crate) fn reclaimable(&mut self) -> bool {
        if !self.marked {
            self.marked = true;
            self.area.drop_own();
        }
        self.area.all_dropped(&mut self.gone)
    }
}

/// A rank's split-team blocks: how many it holds and those retired.
#[derive(Default)]
pub(crate) struct Retired {
    /// Blocks held (live and retired).
    pub held: std::sync::atomic::AtomicUsize,
    /// Retired blocks not yet freed.
    pub list: Mutex<Vec<RetiredArea>>,
}

impl Retired {
    /// Mark every retired block's team dropped by this member (the first
    /// look at each: [`RetiredArea::reclaimable`]) and give each block
    /// whose members all dropped the team to `free` (its offset), untagged
    /// and no longer counted. Call only while every segment of the
    /// retired areas is mapped: from a team set-up, or when a split
    /// team's last handle goes (`Drop for Team`), whose context owns the
    /// mapping.
    pub(crate) fn reclaim(&self, mut free: impl FnMut(u64)) {
        let mut list = self.list.lock();
        list.retain_mut(|r| {
            if !r.reclaimable() {
                return true;
            }
            r.area.untag();
            free(r.off);
            self.held.fetch_sub(1, Ordering::Relaxed);
            false
        });
    }
}

// SAFETY: the segment references point into mappings the endpoint keeps
// for the life of the job (the Pgas context, which the team holds,
// outlives the area); every shared word is accessed atomically and data
// is copied, never referenced.
unsafe impl Send for TeamArea {}
// SAFETY: as above.
unsafe impl Sync for TeamArea {}

impl std::fmt::Debug for TeamArea {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamArea")
            .field("offs", &self.offs)
            .field("half", &self.half)
            .finish()
    }
}

impl TeamArea {
    /// The area over members' segments `segs` with blocks at `offs`, as
    /// team rank `me`. `None` if a block does not lie inside its segment
    /// (a peer's offset is data) or is not 64-byte aligned.
    pub(crate) fn new(
        segs: Vec<SegmentRef>,
        offs: Vec<usize>,
        me: usize,
        half: usize,
        tag: u64,
        own: Option<(u64, Arc<Retired>)>,
    ) -> Option<TeamArea> {
        let len = DATA_OFF.checked_add(half.checked_mul(2)?)?;
        let ok = segs.len() == offs.len()
            && me < segs.len()
            && segs
                .iter()
                .zip(&offs)
                .all(|(s, &o)| o % 64 == 0 && s.contains(o, len) && !s.base().is_null());
        ok.then(|| TeamArea {
            segs,
            offs,
            me,
            half,
            tag,
            step: AtomicU64::new(0),
            own,
            counted: false,
        })
    }

    /// This area with counted rings (see [`publish`](Self::publish)).
    pub(crate) fn counted(mut self) -> TeamArea {
        self.counted = true;
        self
    }

    /// Bytes of one data half.
    pub(crate) fn half(&self) -> usize {
        self.half
    }

    /// Members.
    pub(crate) fn size(&self) -> usize {
        self.segs.len()
    }

    fn word(&self, j: usize, off: usize) -> &AtomicU64 {
        let p = self.segs[j].base().wrapping_add(self.offs[j] + off);
        // SAFETY: `new` checked that member j's block lies inside its
        // segment and is 64-byte aligned, so p (off < DATA_OFF, a multiple
        // of 8) is an aligned word of it, and the mapping outlives `self`
        // (see the Send impl). While this member holds the team's area
        // (not retired), no member frees its block (`all_dropped` waits
        // for every member's `DROPPED`), so only atomics touch these words.
        // A retired area's `all_dropped` may read a word of a block its
        // owner freed and reused meanwhile (the owner saw this member's
        // `DROPPED`): another process's plain stores against this atomic
        // load, outside Rust's memory model as every cross-process access
        // to a segment is (docs/safety.md, "What remains outside the
        // reference model"; in one process, the memmove-against-atomic
        // case listed there). The value is only compared, and any value
        // there gives a right answer (that member did drop the team); the
        // reference lives only for that load.
        unsafe { &*(p as *const AtomicU64) }
    }

    /// Zero this member's control words and tag its block (before the
    /// members learn where it is).
    pub(crate) fn reset_own(&self) {
        for off in (0..DATA_OFF).step_by(8) {
            self.word(self.me, off).store(0, Ordering::Relaxed);
        }
        self.word(self.me, TAG).store(self.tag, Ordering::Release);
    }

    /// The next step's number.
    pub(crate) fn begin(&self) -> u64 {
        self.step.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Copy `bytes` into this member's half of step `k` at `at`.
    pub(crate) fn write(&self, k: u64, at: usize, bytes: &[u8]) {
        assert!(at.checked_add(bytes.len()).is_some_and(|e| e <= self.half));
        let off = self.offs[self.me] + DATA_OFF + (k % 2) as usize * self.half + at;
        // SAFETY: the range lies in this member's block (asserted above,
        // and `new` checked the block against the segment); only this
        // member writes its block, and no member reads this half until
        // `publish(k)` (the previous step on it, k - 2, was read by all:
        // see the module docs). `bytes` is the caller's buffer.
        unsafe {
            memmove(
                bytes.as_ptr(),
                self.segs[self.me].base().wrapping_add(off),
                bytes.len(),
            )
        };
    }

    /// Publish step `k` with header `hdr`, then wake every member (it may
    /// sleep waiting for this). A host group's area counts the rings
    /// ([`counted`](Self::counted): one atomic add on each member's
    /// doorbell): an `.await`ed hierarchical scan of a member looks at
    /// the steps from its task, which only a counted ring wakes when it
    /// came before the member's doorbell bridge slept.
    pub(crate) fn publish(&self, k: u64, hdr: [u64; HDR_WORDS]) {
        // orders the last `ready` store (step k - 1) before these header
        // words for a reader that acquires one of them (`latest`): no
        // instruction on x86-64, and the ordering does not rest on the
        // target's store order or on `full_fence`'s implementation
        std::sync::atomic::fence(Ordering::Release);
        let base = HDR + (k % 2) as usize * 64;
        for (w, v) in hdr.iter().enumerate() {
            self.word(self.me, base + 8 * w)
                .store(*v, Ordering::Relaxed);
        }
        self.word(self.me, READY).store(k, Ordering::Release);
        // Dekker with the sleepers (they announce, then look at the
        // words): a ring is never missed for one fence per step.
        crate::full_fence::full_fence();
        for s in &self.segs {
            if self.counted {
                // SAFETY: the segments come from the endpoint's fabric;
                // `publish` runs inside a collective on a live team, whose
                // handle holds the context and so the endpoint and its
                // mappings (the world host-group area outlives the
                // endpoint, but publishes nothing after it).
                unsafe { s.wake_owner_counted() };
            } else {
                // SAFETY: as above.
                unsafe { s.wake_owner() };
            }
        }
    }

    /// Whether member `j` published step `k` (or a later one).
    pub(crate) fn ready(&self, j: usize, k: u64) -> bool {
        self.word(j, READY).load(Ordering::Acquire) >= k
    }

    /// The last step member `j` published.
    pub(crate) fn published(&self, j: usize) -> u64 {
        self.word(j, READY).load(Ordering::Acquire)
    }

    /// Member `j`'s last published step and its header, read whole: `None`
    /// if j published another step meanwhile (look again). For a reader
    /// that does not wait for the step (`team_mates.rs`), as a sequence
    /// lock: j may rewrite that header slot at its step k + 2, storing its
    /// words after the release fence that begins `publish` of step k + 2,
    /// which follows step k + 1's `ready` store; so if a header word read
    /// here is step k + 2's, the release fence synchronises with the
    /// acquire fence below and the `ready` load after it sees k + 1 or
    /// later: the header is dropped. (A wrong header could only
    /// garble a mismatch report: the reader reports a step of its own
    /// collective's number, which no correct call publishes.)
    pub(crate) fn latest(&self, j: usize) -> Option<(u64, [u64; HDR_WORDS])> {
        let k = self.published(j);
        let h = self.header(j, k);
        std::sync::atomic::fence(Ordering::Acquire);
        (self.word(j, READY).load(Ordering::Relaxed) == k).then_some((k, h))
    }

    /// Team ranks that have not published step `k`.
    pub(crate) fn missing(&self, k: u64) -> Vec<usize> {
        (0..self.size()).filter(|&j| !self.ready(j, k)).collect()
    }

    /// Member `j`'s header of step `k` (read after `ready(j, k)`: it stays
    /// until j's step k + 2, which waits for this member's k + 1).
    pub(crate) fn header(&self, j: usize, k: u64) -> [u64; HDR_WORDS] {
        let base = HDR + (k % 2) as usize * 64;
        std::array::from_fn(|w| self.word(j, base + 8 * w).load(Ordering::Relaxed))
    }

    /// Copy member `j`'s half of step `k` from `at` into `out` (after
    /// `ready(j, k)`).
    pub(crate) fn read(&self, j: usize, k: u64, at: usize, out: &mut [u8]) {
        assert!(at.checked_add(out.len()).is_some_and(|e| e <= self.half));
        let off = self.offs[j] + DATA_OFF + (k % 2) as usize * self.half + at;
        // SAFETY: the range lies in member j's block (asserted above;
        // `new` checked the block); j wrote it before publishing step k,
        // which this member's Acquire load saw, and rewrites it only at
        // step k + 2 (see the module docs). `out` is the caller's buffer.
        unsafe {
            memmove(
                self.segs[j].base().wrapping_add(off),
                out.as_mut_ptr(),
                out.len(),
            )
        };
    }

    /// This member finished its reads of step `k` (a dropped member's
    /// `done` says [`DROPPED`] instead: see [`all_dropped`](Self::all_dropped)).
    pub(crate) fn finish(&self, k: u64) {
        self.word(self.me, DONE).store(k, Ordering::Release);
    }

    /// Whether every member dropped the team (after its last step), or no
    /// longer holds its block for this team (it was dropped there),
    /// looking only at members `gone` does not mark and marking those
    /// found gone (their blocks may then be freed and reused: not read
    /// again). Finishing the last step is not enough: a hierarchical scan
    /// reads its host-mates' blocks outside any step for as long as its
    /// member holds the team (`team_mates.rs`).
    pub(crate) fn all_dropped(&self, gone: &mut [bool]) -> bool {
        let mut all = true;
        for (j, g) in gone.iter_mut().enumerate().take(self.size()) {
            if !*g {
                *g = self.word(j, TAG).load(Ordering::Acquire) != self.tag
                    || self.word(j, DONE).load(Ordering::Acquire) == DROPPED;
                all &= *g;
            }
        }
        all && gone.len() >= self.size()
    }

    /// This member dropped the team: it reads no block of it any more
    /// (a retired area's first look, `RetiredArea::reclaimable`).
    pub(crate) fn drop_own(&self) {
        self.word(self.me, DONE).store(DROPPED, Ordering::Release);
    }

    /// Untag this member's block (it is about to be freed): the fence
    /// orders the untag before whatever the block's next user stores.
    pub(crate) fn untag(&self) {
        self.word(self.me, TAG).store(0, Ordering::Release);
        std::sync::atomic::fence(Ordering::Release);
    }
}

impl Drop for TeamArea {
    fn drop(&mut self) {
        if let Some((off, retired)) = self.own.take() {
            // peers may still read the last step: keep the block until
            // they finished (freed by the next team's set-up)
            let area = TeamArea {
                segs: std::mem::take(&mut self.segs),
                offs: std::mem::take(&mut self.offs),
                me: self.me,
                half: self.half,
                tag: self.tag,
                step: AtomicU64::new(0),
                own: None,
                counted: false,
            };
            // every read of this member through this area is over (the
            // last Arc of it is going): `DROPPED` is stored at the next
            // look (`Retired::reclaim`: right after this drop when a split
            // team's last handle goes, else at the next team set-up),
            // here nothing is touched (see `RetiredArea::marked`)
            let gone = vec![false; area.size()];
            retired.list.lock().push(RetiredArea {
                area,
                off,
                gone,
                marked: false,
            });
        }
    }
}
