//! The shared receive queue (`SPLITRT_SHM_QUEUE=shared`): one
//! multi-producer, single-consumer queue of cells per rank and channel,
//! which every sender of the host writes into, instead of one ring per
//! sender (`ring.rs`). A rank's file then holds two queues whatever the
//! number of ranks on its host: memory linear in the ranks of a node, not
//! quadratic (issue 28). GASNet-EX's PSHM keeps one receive queue per
//! process in the same way; this one is a bounded array of cells in the
//! manner of Vyukov's bounded queue, with a ticket word.
//!
//! Words, in the queue's 128-byte control block:
//! * `tail` (offset 0): the consumer's position, published with each
//!   release (the senders' credits: a ticket below it came back; and
//!   [`QProducer::free_cells`], the credit report);
//! * `want` (offset 8, `tail`'s line, which the consumer keeps): set by a
//!   sender that found the queue full or ran out of credits
//!   ([`QProducer::reclaim`]); the consumer that frees cells and sees it
//!   rings every sender's doorbell;
//! * `head` (offset 64, a line only senders touch): the next ticket; a
//!   sender claims ticket `t` by a compare-and-swap `t -> t + 1`, and only
//!   if cell `t % len` is free for `t`, so a claim never waits on another
//!   sender and a full queue is seen before anything is claimed.
//!
//! Each cell starts with its state word. For ticket `t` whose cell's lap
//! begins at `b = t - t % len`: `b` means free for `t`, `b + 1` published
//! (the cell holds `t`'s packet), `b + len` released (free for `t + len`).
//! A zero-filled file is therefore a free queue (no initialisation), and
//! states only grow, so a stale one never looks current.
//!
//! The sender writes its local rank in the cell's `CellMeta::pad`, which
//! the consumer checks against the host's ranks before it uses it
//! (per-sender reassembly of streamed packets). The queue's words are
//! written by every rank of the host: a broken one can make the queue look
//! full or stall it (as it can stop answering), but every cell index is
//! reduced modulo the length before use, claims give up after
//! [`CLAIM_TRIES`], and the consumer validates every cell as for a ring, so
//! nothing written there makes this rank panic or write outside the queue.
//!
//! Back-pressure: a sender claims a cell only when it is free, writes it
//! and publishes it at once (a claimed cell is never held while its sender
//! waits for anything), so the consumer is never stuck behind a sender that
//! waits; a full queue is `try_send`'s `Ok(false)` (`PeerRingFull`).
//!
//! Per-sender credits, in the queue's own words: a sender holds at most
//! [`sender_quota`] unreleased cells (so one flooding sender leaves a
//! quarter of the queue to the others); it keeps its tickets and, at its
//! quota, reads the consumer's published `tail` once (the consumer
//! releases in ticket order, so every ticket below it came back) and
//! forgets the tickets it passed; only if none came back does it ask for
//! a doorbell and look again. Any rank of the host can write `tail`, so
//! it is only a hint: the newest ticket it passed is confirmed by that
//! ticket's own state word before any is forgotten (one more load), and a
//! tail written ahead of the consumer falls back to confirming the
//! tickets one by one, so it cannot lift an honest sender's quota. A tail
//! written behind the consumer gives a sender no credit back: it stalls
//! that sender (until its doorbell and the consumer's next release), as a
//! broken rank can stall the queue anyway.

use super::cells::{CellView, Cells, Peek};
use super::layout::{CellMeta, F_FIRST, F_LAST};
use super::timeline::{self, Ev};
use crate::fabric::MAX_WORDS;
use std::sync::atomic::{AtomicU64, Ordering};

/// The orderings of the queue protocol (the loom model below uses these
/// very constants).
pub(crate) mod order {
    use std::sync::atomic::Ordering;
    /// A sender reads a cell's state before it claims the cell: it must
    /// see the consumer's release of the previous lap (and so the
    /// consumer's reads happen before its writes).
    pub(crate) const SEE_FREE: Ordering = Ordering::Acquire;
    /// The compare-and-swap on `head` that claims a ticket.
    pub(crate) const CLAIM: Ordering = Ordering::Relaxed;
    /// A sender publishes a written cell (its state word).
    pub(crate) const PUBLISH: Ordering = Ordering::Release;
    /// The consumer reads a cell's state before the cell.
    pub(crate) const OBSERVE: Ordering = Ordering::Acquire;
    /// The consumer frees a cell for the next lap.
    pub(crate) const RETURN: Ordering = Ordering::Release;
    /// The consumer publishes its tail after a release (a sender's
    /// credits come back).
    pub(crate) const PUBLISH_TAIL: Ordering = Ordering::Release;
    /// A sender reads the consumer's tail to learn which of its tickets
    /// came back.
    pub(crate) const SEE_TAIL: Ordering = Ordering::Acquire;
}

/// Offset of `tail` in the control block.
const TAIL_OFF: usize = 0;
/// Offset of `head` in the control block.
const HEAD_OFF: usize = 64;
/// Offset of `want` in the control block: on the consumer's line, with
/// `tail`, not on the senders' line with `head`. The consumer loads `want`
/// after every poll that freed cells; on `head`'s line that load pulled
/// the line the next sender's compare-and-swap then had to take back (two
/// transfers a message on a ping-pong). On `tail`'s line it hits: senders
/// write `want` only when out of room and read `tail` only at their quota.
const WANT_OFF: usize = 8;
// `want` with `tail`, `head` on a line of its own (64-byte lines), all in
// the control block.
static_assertions::const_assert!(WANT_OFF / 64 == TAIL_OFF / 64 && WANT_OFF != TAIL_OFF);
static_assertions::const_assert!(HEAD_OFF / 64 != TAIL_OFF / 64);
static_assertions::const_assert!(
    HEAD_OFF + 8 <= super::layout::RING_CTRL && WANT_OFF.is_multiple_of(8)
);
/// Attempts at a claim (each after another sender's claim moved `head`)
/// before the sender reports the queue full and tries again later: bounds
/// the loop whatever the shared words say.
pub(crate) const CLAIM_TRIES: u32 = 64;

/// A queue in a mapped file (the same bytes as a ring of `len` cells:
/// `RING_CTRL + len * cell_stride(cell_size)`): cells ([`Cells`]) whose
/// first word is the state word, after the control block above.
pub(crate) type Queue = Cells;

/// The state that means "free for `t`": the start of `t`'s lap.
#[inline(always)]
fn lap(q: &Queue, t: u64) -> u64 {
    t.wrapping_sub(q.index(t))
}

/// One sender's side of a queue (a rank's, toward one peer and channel).
pub(crate) struct QProducer {
    q: Queue,
    /// This sender's local rank, written into every cell.
    src: u32,
    /// The ticket claimed by [`has_room`](Self::has_room) and not yet
    /// published, if `held`.
    ticket: u64,
    /// Its cell's index (`q.index(ticket)`, kept: the send path computes
    /// it once).
    at: u64,
    /// Whether this sender holds a claimed ticket.
    held: bool,
    /// This sender's tickets the consumer may not have released yet,
    /// oldest first: at most `quota`.
    mine: Tickets,
    /// How many cells of the queue this sender may hold unreleased: its
    /// credits ([`sender_quota`]).
    quota: usize,
}

/// The cells of a queue of `len` one sender may hold unreleased (its
/// credits): three quarters of them (and at least one cell fewer than the
/// queue, at least one), so one flooding sender always leaves a quarter of
/// the queue to the others (one cell of a queue of 2 or 3).
pub(crate) fn sender_quota(len: u64) -> usize {
    (len - (len / 4).max(1)).max(1) as usize
}

/// A sender's unreleased tickets, oldest first: a ring of a power of two
/// slots at least its quota, made whole at its first claim
/// (`quota.next_power_of_two()` x 8 B: 512 B for a queue of 64 cells, so a
/// peer this rank never sends to costs no memory); pushing is a store and
/// an add.
struct Tickets {
    buf: Box<[u64]>,
    /// Pushes and pops so far (wrapping): the oldest is slot
    /// `first & mask`, and `next - first` tickets are held.
    first: usize,
    next: usize,
}

impl Tickets {
    fn new() -> Self {
        Tickets {
            buf: Box::default(),
            first: 0,
            next: 0,
        }
    }

    #[inline(always)]
    fn len(&self) -> usize {
        self.next.wrapping_sub(self.first)
    }

    /// Slot of count `n` (the ring is made, a power of two long).
    #[inline(always)]
    fn slot(&self, n: usize) -> u64 {
        self.buf[n & (self.buf.len() - 1)]
    }

    /// Add the newest; the caller holds fewer than `quota`.
    #[inline(always)]
    fn push(&mut self, t: u64, quota: usize) {
        debug_assert!(self.len() < quota, "a ticket beyond the quota");
        if self.buf.is_empty() {
            self.make(quota);
        }
        let m = self.buf.len() - 1;
        self.buf[self.next & m] = t;
        self.next = self.next.wrapping_add(1);
    }

    #[cold]
    fn make(&mut self, quota: usize) {
        self.buf = vec![0; quota.next_power_of_two()].into_boxed_slice();
    }

    /// Forget the tickets the consumer released, oldest first; true if one
    /// was. `tail` (the consumer's published tail, which any rank of the
    /// host can write) is only a hint: the newest ticket it passed is
    /// confirmed by `released` (that ticket's own state word; the consumer
    /// releases in ticket order, so the older ones came back too) before
    /// any is forgotten. A tail ahead of the consumer fails that check, and
    /// the tickets are then confirmed one by one, oldest first; a tail
    /// behind it passes none (the sender waits for a doorbell: it stalls
    /// only itself).
    #[inline(always)]
    fn forget_before(&mut self, tail: u64, released: impl Fn(u64) -> bool) -> bool {
        if self.len() == 0 || !passed(tail, self.slot(self.first)) {
            return false;
        }
        // `end`: one past the newest ticket the tail passed
        let end = if passed(tail, self.slot(self.next.wrapping_sub(1))) {
            // every one passed (a round trip's case): no walk
            self.next
        } else {
            let mut e = self.first.wrapping_add(1);
            while e != self.next && passed(tail, self.slot(e)) {
                e = e.wrapping_add(1);
            }
            e
        };
        if released(self.slot(end.wrapping_sub(1))) {
            self.first = end;
            return true;
        }
        self.forget_confirmed(&released)
    }

    /// The tail lied (it passed a ticket the consumer did not release):
    /// forget the tickets whose own state word says released, oldest first.
    #[cold]
    #[inline(never)]
    fn forget_confirmed(&mut self, released: &impl Fn(u64) -> bool) -> bool {
        let from = self.first;
        while self.first != self.next && released(self.slot(self.first)) {
            self.first = self.first.wrapping_add(1);
        }
        self.first != from
    }
}

/// Whether the consumer's published tail `tail` is past ticket `t` (so it
/// released `t`: it releases in ticket order and publishes the tail after
/// the release). Tickets and tails wrap, hence the signed distance;
/// whatever a broken peer wrote in `tail`, it is an answer, never an index.
#[inline(always)]
fn passed(tail: u64, t: u64) -> bool {
    (tail.wrapping_sub(t) as i64) > 0
}

/// Whether ticket `t`'s cell says the consumer released `t` (its state is
/// `lap(t) + len` or later: released, or claimed again for a later lap).
/// The confirmation of a tail that passed `t` ([`Tickets::forget_before`]).
#[inline]
fn released(q: &Queue, t: u64) -> bool {
    is_released(q.word(t).load(order::SEE_FREE), t, q.len())
}

/// Whether state `s` of ticket `t`'s cell, in a queue of `len`, says `t`
/// was released (the loom model uses this very test).
#[inline(always)]
fn is_released(s: u64, t: u64, len: u64) -> bool {
    let lap = t.wrapping_sub(t % len);
    (s.wrapping_sub(lap.wrapping_add(len)) as i64) >= 0
}

/// A sender's credit step when out of credits ([`QProducer::reclaim`];
/// the loom model runs this very function over its own atomics): forget
/// the tickets the consumer released by one look at its tail (`tail`,
/// confirmed by `released`); if none came back, ask for a doorbell
/// (`ask_ring`: store `want`, then a `SeqCst` fence) and look once more.
/// True if a credit is free.
#[inline(always)]
fn reclaim_step(
    mine: &mut Tickets,
    tail: impl Fn() -> u64,
    released: impl Fn(u64) -> bool,
    ask_ring: impl FnOnce(),
) -> bool {
    if mine.forget_before(tail(), &released) {
        return true;
    }
    ask_ring();
    mine.forget_before(tail(), &released)
}

impl QProducer {
    pub(crate) fn new(q: Queue, src: usize) -> Self {
        QProducer {
            q,
            src: src as u32,
            ticket: 0,
            at: 0,
            held: false,
            mine: Tickets::new(),
            quota: sender_quota(q.len()),
        }
    }

    pub(crate) fn queue(&self) -> &Queue {
        &self.q
    }

    /// Claim a free cell (if this sender holds none); false when the queue
    /// is full (then `want` is set, so the consumer rings this rank when it
    /// frees cells). A claimed cell must be written and published (it is
    /// what the next [`write`](Self::write) / [`publish`](Self::publish)
    /// use): the consumer waits for it. The uncontended claim (the cell at
    /// `head` free, the compare-and-swap won) is inline; anything else is
    /// [`claim_contended`](Self::claim_contended).
    ///
    /// A sender holding its [`sender_quota`] of unreleased cells gets no
    /// more until the consumer releases its oldest
    /// ([`reclaim`](Self::reclaim)): per-sender credits, read from the
    /// consumer's published tail, taken as a hint and confirmed by the
    /// state word of the newest ticket it passed
    /// ([`Tickets::forget_before`]).
    #[inline(always)]
    pub(crate) fn has_room(&mut self) -> bool {
        if self.held {
            return true;
        }
        if self.mine.len() >= self.quota && !self.reclaim() {
            return false;
        }
        let head = self.q.ctrl(HEAD_OFF);
        let t = head.load(Ordering::Relaxed);
        let i = self.q.index(t);
        // SAFETY: i = index(t) < len.
        let state = unsafe { self.q.word_at(i) };
        if state.load(order::SEE_FREE) == t.wrapping_sub(i)
            && head
                .compare_exchange(t, t.wrapping_add(1), order::CLAIM, Ordering::Relaxed)
                .is_ok()
        {
            self.took(t, i);
            return true;
        }
        self.claim_contended()
    }

    /// [`has_room`](Self::has_room) after the first look failed: another
    /// sender moved `head`, or the queue is full.
    #[cold]
    #[inline(never)]
    fn claim_contended(&mut self) -> bool {
        let head = self.q.ctrl(HEAD_OFF);
        let mut t = head.load(Ordering::Relaxed);
        for _ in 0..CLAIM_TRIES {
            let s = self.q.word(t).load(order::SEE_FREE);
            let d = s.wrapping_sub(lap(&self.q, t)) as i64;
            if d == 0 {
                match head.compare_exchange_weak(
                    t,
                    t.wrapping_add(1),
                    order::CLAIM,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        self.took(t, self.q.index(t));
                        return true;
                    }
                    Err(now) => t = now,
                }
            } else if d < 0 {
                // the cell still holds (or is being written with) the
                // packet of the previous lap: full
                return self.full_at(t);
            } else {
                // another sender claimed `t` since: look at the new head
                t = head.load(Ordering::Relaxed);
            }
        }
        self.full_at(head.load(Ordering::Relaxed))
    }

    /// Ticket `t` (cell `i`) is this sender's: hold it, and count it
    /// against the credits until released.
    #[inline(always)]
    fn took(&mut self, t: u64, i: u64) {
        self.ticket = t;
        self.at = i;
        self.held = true;
        self.mine.push(t, self.quota);
    }

    /// Out of credits: forget what the consumer released (one load of
    /// its tail, confirmed by a state word); if that frees none, ask for a
    /// doorbell (`want`) and look once more, as [`full_at`](Self::full_at)
    /// does (either the consumer that releases the oldest ticket sees
    /// `want`, or this second look sees its tail): [`reclaim_step`]. True
    /// if a credit is free.
    #[cold]
    #[inline(never)]
    fn reclaim(&mut self) -> bool {
        let q = self.q;
        let held = self.mine.len();
        let got = reclaim_step(
            &mut self.mine,
            || q.ctrl(TAIL_OFF).load(order::SEE_TAIL),
            |t| released(&q, t),
            || {
                q.ctrl(WANT_OFF).store(1, Ordering::SeqCst);
                std::sync::atomic::fence(Ordering::SeqCst);
            },
        );
        timeline::stamp(Ev::Reclaim, 0xff, (held - self.mine.len()) as u64);
        got
    }

    /// The queue looked full at ticket `t`: ask for a doorbell (`want`),
    /// then look at the cell once more and claim it if it is free now.
    /// A consumer that freed every cell and looked at `want` between the
    /// first look and the store of `want` rings no one; the fence pairs
    /// with the one in [`QConsumer::freed`]: either the consumer sees
    /// `want`, or this second look sees the freed cell. True if claimed.
    #[cold]
    fn full_at(&mut self, t: u64) -> bool {
        timeline::stamp(Ev::Full, 0xff, t);
        self.q.ctrl(WANT_OFF).store(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        let s = self.q.word(t).load(order::SEE_FREE);
        if s == lap(&self.q, t)
            && self
                .q
                .ctrl(HEAD_OFF)
                .compare_exchange(t, t.wrapping_add(1), order::CLAIM, Ordering::Relaxed)
                .is_ok()
        {
            // (`want` stays set: at worst one doorbell too many)
            self.took(t, self.q.index(t));
            return true;
        }
        // another sender took `t` meanwhile: its packet's release rings
        // this rank (`want` is set)
        false
    }

    /// Whether [`has_room`](Self::has_room) would find room now, claiming
    /// nothing and asking for no doorbell: a credit (fewer than the quota
    /// held, or the consumer's tail passed the oldest ticket held) and the
    /// cell at `head` free (or claimed since by another sender: `head`
    /// moved, worth another try). A sleeper's last look before it sleeps,
    /// so a doorbell rung for room before the sleep was announced is not
    /// lost. Only a hint (the words are the host's): the claim itself
    /// checks again.
    pub(crate) fn room_now(&self) -> bool {
        if self.held {
            return true;
        }
        if self.mine.len() >= self.quota {
            // a credit only if the tail passed the oldest ticket held and
            // its cell confirms the release (as `reclaim` requires: a
            // forged tail must not make a sleeper spin)
            let first = self.mine.slot(self.mine.first);
            if !passed(self.q.ctrl(TAIL_OFF).load(order::SEE_TAIL), first)
                || !released(&self.q, first)
            {
                return false;
            }
        }
        let head = self.q.ctrl(HEAD_OFF);
        let t = head.load(Ordering::Relaxed);
        let d = self
            .q
            .word(t)
            .load(order::SEE_FREE)
            .wrapping_sub(lap(&self.q, t)) as i64;
        // free, or claimed since by another sender (then `head` moved:
        // a forged state word alone does not count)
        d == 0 || (d > 0 && head.load(Ordering::Relaxed) != t)
    }

    /// The claimed ticket (a sequence number of the queue), if any.
    pub(crate) fn claimed(&self) -> Option<u64> {
        self.held.then_some(self.ticket)
    }

    /// Free cells as the consumer last published them, and the length.
    pub(crate) fn free_cells(&self) -> (u64, u64) {
        let tail = self.q.ctrl(TAIL_OFF).load(Ordering::Acquire);
        let head = self.q.ctrl(HEAD_OFF).load(Ordering::Relaxed);
        let len = self.q.len();
        (len - head.saturating_sub(tail).min(len), len)
    }

    /// The claimed ticket, for a write.
    #[inline(always)]
    fn ticket(&self) -> u64 {
        assert!(
            self.held,
            "QProducer::write without a claimed cell (has_room first)"
        );
        self.ticket
    }

    /// Write the claimed cell without publishing it. The caller got `true`
    /// from [`has_room`](Self::has_room), checked `words.len() <=
    /// MAX_WORDS` and that `chunk` fits ([`Cells::capacity`]).
    #[inline(always)]
    pub(crate) fn write(&mut self, mut meta: CellMeta, words: &[u64], chunk: &[u8]) {
        assert!(words.len() <= MAX_WORDS && chunk.len() <= self.q.capacity(words.len()));
        let t = self.ticket();
        meta.pad = self.src;
        // SAFETY: ticket `t` is this sender's alone (claimed by `has_room`,
        // not yet published), so nobody reads or writes its cell until the
        // publish; the words and the chunk fit (asserted above).
        unsafe { self.q.write(t, meta, words, chunk) };
    }

    /// Publish the claimed cell: the consumer may read it from now on.
    #[inline]
    pub(crate) fn publish(&mut self) {
        if self.held {
            let (t, i) = (self.ticket, self.at);
            self.held = false;
            // SAFETY: `at` = index(ticket) < len (`took`).
            let state = unsafe { self.q.word_at(i) };
            state.store(t.wrapping_sub(i).wrapping_add(1), order::PUBLISH);
        }
    }

    /// Overwrite the sender rank of the claimed, written cell (tests: what
    /// a broken sender writes).
    #[cfg(test)]
    pub(crate) fn forge_src(&mut self, src: u32) {
        if self.held {
            let t = self.ticket;
            // SAFETY: offset 8 (the CellMeta) of the claimed cell, which is
            // this sender's until published; `pad` is its 5th field.
            let at = unsafe { self.q.cell(t).add(8) } as *mut CellMeta;
            // SAFETY: as above: in bounds, 8-aligned, not shared yet.
            let meta = unsafe { &mut *at };
            meta.pad = src;
        }
    }

    /// Write and publish one cell (claimed by `has_room`).
    #[inline]
    pub(crate) fn push(&mut self, meta: CellMeta, words: &[u64], chunk: &[u8]) {
        self.write(meta, words, chunk);
        self.publish();
    }

    /// Write and publish a Short (claimed by `has_room`); the cell is
    /// found once.
    #[inline]
    pub(crate) fn push_short(&mut self, tag: u16, words: &[u64]) {
        assert!(words.len() <= MAX_WORDS);
        let meta = CellMeta {
            tag,
            flags: F_FIRST | F_LAST,
            nwords: words.len() as u8,
            pad: self.src,
            ..Default::default()
        };
        let (t, i) = (self.ticket(), self.at);
        // SAFETY: as in `write`: ticket `t`'s cell (`at` = index(t) < len,
        // `took`) is this sender's until published; the words fit
        // (asserted).
        let cell = unsafe { self.q.write_head_at(i, meta, words) };
        // SAFETY: the cell of `t` starts with its 8-aligned state word.
        let state = unsafe { &*(cell as *const AtomicU64) };
        self.held = false;
        state.store(t.wrapping_sub(i).wrapping_add(1), order::PUBLISH);
    }
}

/// The receiving rank's side of its queue.
pub(crate) struct QConsumer {
    q: Queue,
    tail: u64,
}

impl QConsumer {
    pub(crate) fn new(q: Queue) -> Self {
        QConsumer { q, tail: 0 }
    }

    /// Whether the cell at the tail has been published.
    #[inline(always)]
    pub(crate) fn has_next(&self) -> bool {
        self.q.word(self.tail).load(order::OBSERVE) == lap(&self.q, self.tail).wrapping_add(1)
    }

    /// The published cell at the tail, if any, with its sender's local
    /// rank (as the sender wrote it: the caller checks it); `Err` for a
    /// cell whose header is malformed (release it and report).
    #[inline]
    pub(crate) fn peek(&self) -> Option<(usize, Result<CellView<'_>, String>)> {
        if !self.has_next() {
            return None;
        }
        // SAFETY: the acquire load in `has_next` saw the sender's publish,
        // so the cell is complete; no sender writes it before `release`
        // frees it for the next lap (which needs `&mut self`).
        let (meta, view) = unsafe { self.q.read(self.tail) };
        Some((meta.pad as usize, view))
    }

    /// The cell at the tail if published and a well-formed Short.
    #[inline(always)]
    pub(crate) fn peek_short(&self) -> Peek<'_> {
        if !self.has_next() {
            return Peek::Empty;
        }
        // SAFETY: as in `peek`.
        unsafe { self.q.read_short(self.tail) }
    }

    /// Free the cell at the tail for the next lap, and publish the new
    /// tail (the sender's credit comes back).
    #[inline]
    pub(crate) fn release(&mut self) {
        let t = self.tail;
        self.q
            .word(t)
            .store(lap(&self.q, t).wrapping_add(self.q.len()), order::RETURN);
        self.tail = t.wrapping_add(1);
        self.q.ctrl(TAIL_OFF).store(self.tail, order::PUBLISH_TAIL);
    }

    /// After a poll that freed cells: say whether a sender found the
    /// queue full or ran out of credits since the last time (it then
    /// waits for a ring of its doorbell).
    #[inline]
    pub(crate) fn freed(&mut self) -> bool {
        // the cells' release and tail stores above before the look at
        // `want`, as a sender's store of `want` before its second look at
        // the state word it found full (`QProducer::full_at`) or at the
        // tail that gave it no credit (`QProducer::reclaim`): one of the
        // two sees the other
        std::sync::atomic::fence(Ordering::SeqCst);
        let want = self.q.ctrl(WANT_OFF);
        want.load(Ordering::Relaxed) != 0 && want.swap(0, Ordering::AcqRel) != 0
    }

    /// The queue's length in cells.
    pub(crate) fn len(&self) -> usize {
        self.q.len() as usize
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::{cell_stride, RING_CTRL};
    use super::*;

    fn mem(cell: usize, len: usize) -> Vec<u64> {
        vec![0u64; (RING_CTRL + cell_stride(cell) * len) / 8]
    }

    /// Two senders and the consumer in one thread: every packet arrives
    /// once, each sender's in order, a full queue refuses a claim and
    /// sets `want`, and cells are reused lap after lap (a length by mask
    /// and by remainder).
    #[test]
    fn two_senders_share_one_queue() {
        for len in [4usize, 3, 2] {
            let mut m = mem(256, len);
            // SAFETY: `m` outlives the queue, 8-aligned, 256 B cells.
            let q = unsafe { Queue::new(m.as_mut_ptr() as *mut u8, 256, len) };
            let (mut a, mut b, mut c) = (
                QProducer::new(q, 0),
                QProducer::new(q, 1),
                QConsumer::new(q),
            );
            let mut next = [0u64; 2];
            for round in 0..if cfg!(miri) { 30u64 } else { 500 } {
                let (mut sent, mut refused) = (0, false);
                for (i, p) in [&mut a, &mut b].into_iter().enumerate() {
                    for mine in 0..(round % 3) as usize {
                        if !p.has_room() {
                            // the queue is full, or this sender holds its
                            // credits (the consumer took all earlier cells)
                            assert!(
                                sent >= len || mine >= sender_quota(len as u64),
                                "room ran out at {sent} of {len} ({mine} of this sender's)"
                            );
                            refused = true;
                            break;
                        }
                        let meta = CellMeta {
                            flags: F_FIRST | F_LAST,
                            nwords: 1,
                            len: 2,
                            total: 2,
                            ..Default::default()
                        };
                        p.push(meta, &[round], &[i as u8, 7]);
                        sent += 1;
                    }
                }
                let mut got = 0;
                while let Some((src, v)) = c.peek() {
                    let v = v.unwrap();
                    assert_eq!(v.chunk, &[src as u8, 7]);
                    assert!(v.words[0] >= next[src]);
                    next[src] = v.words[0];
                    got += 1;
                    c.release();
                }
                assert_eq!(got, sent);
                assert_eq!(c.freed(), refused, "a refused claim asks for a ring");
            }
        }
    }

    /// A padded queue's cell (`Cells::padded`, what `shared_rx::queue`
    /// makes) carries its 64 B pad: 256 B cells hold 288 B after the
    /// header. Full cells, the last one's pad at the end of the memory,
    /// lap after lap: each arrives whole, and writing a pad leaves the
    /// next cell's state word alone (the consumer sees the next cell
    /// empty, then published). One byte more is a malformed cell.
    #[test]
    fn padded_cells_carry_their_pad() {
        let len = 2;
        let mut m = mem(256, len);
        // SAFETY: `m` outlives the queue, 8-aligned, 256 B cells.
        let q = unsafe { Queue::new(m.as_mut_ptr() as *mut u8, 256, len) }.padded();
        assert_eq!((q.capacity(0), q.capacity(1)), (288, 280));
        let (mut p, mut c) = (QProducer::new(q, 1), QConsumer::new(q));
        let full = |i: u64| -> Vec<u8> { (0..280).map(|b| (b as u64 * 7 + i) as u8).collect() };
        for i in 0..6u64 {
            assert!(p.has_room(), "lap {i}");
            let meta = CellMeta {
                flags: F_FIRST | F_LAST,
                nwords: 1,
                len: 280,
                total: 280,
                ..Default::default()
            };
            p.push(meta, &[i], &full(i));
            let (src, v) = c.peek().expect("published");
            let v = v.unwrap();
            assert_eq!((src, v.words, v.chunk), (1, &[i][..], &full(i)[..]));
            c.release();
            assert!(c.peek().is_none(), "the next cell looks published");
        }
        assert!(p.has_room());
        let meta = CellMeta {
            flags: F_FIRST | F_LAST,
            len: 289,
            total: 289,
            ..Default::default()
        };
        p.push(meta, &[], &[]);
        let (_, v) = c.peek().expect("published");
        assert!(v.err().unwrap().contains("holds at most 288"));
    }

    /// Review of h15-medium: padded cells filled to their last byte by two
    /// senders on threads of their own while the consumer peeks, checks
    /// and releases on a third. Under Miri this checks that a sender's
    /// write into its cell's pad never races a look at the next cell's
    /// state word (with a room one byte past the pad, Miri reported
    /// exactly that data race); natively, that every byte arrives, in
    /// each sender's order. Bounded: 10 s for room, 30 s in all.
    #[test]
    fn full_padded_cells_from_two_threads() {
        use std::time::{Duration, Instant};
        let len = 4;
        let mut m = mem(256, len);
        // SAFETY: `m` outlives the queue (the scope below ends first),
        // 8-aligned, 256 B cells.
        let q = unsafe { Queue::new(m.as_mut_ptr() as *mut u8, 256, len) }.padded();
        let per = if cfg!(miri) { 12u64 } else { 2000 };
        let room = q.capacity(1);
        let full = move |src: u64, i: u64| -> Vec<u8> {
            (0..room)
                .map(|b| (b as u64 * 31 + i * 7 + src) as u8)
                .collect()
        };
        let meta = CellMeta {
            flags: F_FIRST | F_LAST,
            nwords: 1,
            len: room as u32,
            total: room as u32,
            ..Default::default()
        };
        std::thread::scope(|s| {
            for src in 0..2u64 {
                s.spawn(move || {
                    let mut p = QProducer::new(q, src as usize);
                    for i in 0..per {
                        let t0 = Instant::now();
                        while !p.has_room() {
                            assert!(t0.elapsed() < Duration::from_secs(10), "no room");
                            std::thread::yield_now();
                        }
                        p.push(meta, &[i], &full(src, i));
                    }
                });
            }
            let mut c = QConsumer::new(q);
            let mut next = [0u64; 2];
            let t0 = Instant::now();
            while next.iter().sum::<u64>() < 2 * per {
                assert!(t0.elapsed() < Duration::from_secs(30), "got {next:?}");
                match c.peek() {
                    Some((src, v)) => {
                        let v = v.unwrap();
                        assert_eq!(v.words, &[next[src]][..], "sender {src}");
                        assert_eq!(v.chunk, &full(src as u64, next[src])[..]);
                        next[src] += 1;
                        c.release();
                    }
                    None => std::thread::yield_now(),
                }
            }
        });
    }

    /// Shorts through `peek_short`, with the sender's rank.
    #[test]
    fn shorts_carry_their_sender() {
        let mut m = mem(256, 4);
        // SAFETY: as above.
        let q = unsafe { Queue::new(m.as_mut_ptr() as *mut u8, 256, 4) };
        let (mut p, mut c) = (QProducer::new(q, 5), QConsumer::new(q));
        for i in 0..10u64 {
            assert!(matches!(c.peek_short(), Peek::Empty));
            assert!(p.has_room());
            p.push_short(3, &[i, i + 1]);
            match c.peek_short() {
                Peek::Short(src, tag, w) => assert_eq!((src, tag, w), (5, 3, &[i, i + 1][..])),
                _ => panic!("no Short"),
            }
            c.release();
        }
    }

    /// `room_now` (a sleeper's last look) agrees with `has_room` and
    /// changes nothing: false at the quota and with the queue full, true
    /// once the consumer released the sender's oldest cell, and it claims
    /// no cell (the other sender still gets the next one).
    #[test]
    fn room_now_says_what_has_room_would_find_and_claims_nothing() {
        for len in [8usize, 2] {
            let mut m = mem(256, len);
            // SAFETY: `m` outlives the queue, 8-aligned, 256 B cells.
            let q = unsafe { Queue::new(m.as_mut_ptr() as *mut u8, 256, len) };
            let (mut a, mut b, mut c) = (
                QProducer::new(q, 0),
                QProducer::new(q, 1),
                QConsumer::new(q),
            );
            assert!(a.room_now());
            while a.has_room() {
                a.push_short(1, &[0]);
            }
            assert!(!a.room_now(), "at its quota ({len} cells)");
            while b.has_room() {
                b.push_short(2, &[0]);
            }
            assert!(!b.room_now(), "the queue is full ({len} cells)");
            assert!(matches!(c.peek_short(), Peek::Short(0, 1, _)));
            c.release();
            assert!(a.room_now(), "room after a release ({len} cells)");
            assert!(a.room_now(), "a look claims nothing ({len} cells)");
            assert_eq!(a.claimed(), None);
            assert!(a.has_room());
            a.push_short(1, &[1]);
            assert!(!a.room_now() && !b.room_now());
        }
    }

    /// One sender flooding a queue (claiming until refused, the consumer
    /// not polling) takes at most its credits: another sender still gets a
    /// cell, and the flooder gets one again once the consumer released
    /// its oldest. Queues of 64 (the default), 8, 4 and 2 cells.
    #[test]
    fn a_flooding_sender_leaves_room_for_the_others() {
        for len in [64usize, 8, 4, 2] {
            let mut m = mem(256, len);
            // SAFETY: `m` outlives the queue, 8-aligned, 256 B cells.
            let q = unsafe { Queue::new(m.as_mut_ptr() as *mut u8, 256, len) };
            let (mut a, mut b, mut c) = (
                QProducer::new(q, 0),
                QProducer::new(q, 1),
                QConsumer::new(q),
            );
            let mut took = 0u64;
            while a.has_room() {
                a.push_short(1, &[took]);
                took += 1;
                assert!(took <= len as u64, "more cells than the queue has");
            }
            assert!(
                took < len as u64,
                "a flooding sender took all {len} cells of the queue"
            );
            assert!(b.has_room(), "the other sender was starved ({len} cells)");
            b.push_short(2, &[0]);
            assert!(matches!(c.peek_short(), Peek::Short(0, 1, _)));
            c.release();
            assert!(a.has_room(), "no credit back after a release ({len} cells)");
            a.push_short(1, &[took]);
            // a partial release (`k` more of the flooder's oldest, all
            // before the other sender's ticket): flooding again takes
            // exactly `k` cells, stopping at the quota with free cells left
            let quota = sender_quota(len as u64) as u64;
            let k = (quota / 2).max(1).min(took - 1);
            for _ in 0..k {
                assert!(matches!(c.peek_short(), Peek::Short(0, 1, _)));
                c.release();
            }
            let mut again = 0u64;
            while a.has_room() {
                a.push_short(1, &[took + 1 + again]);
                again += 1;
                assert!(again <= len as u64, "more cells than the queue has");
            }
            assert_eq!(again, k, "flooding again went past the quota ({len} cells)");
        }
    }

    /// A caller pushing a ticket beyond the quota is a bug, caught in
    /// debug builds (the ring holds `quota.next_power_of_two()`: the push
    /// would silently overwrite the oldest once past it).
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "beyond the quota")]
    fn shmqfix_a_ticket_beyond_the_quota_is_caught() {
        let mut m = Tickets::new();
        for t in 0..7 {
            m.push(t, 6);
        }
    }

    /// `Tickets::forget_before` forgets exactly the tickets the tail
    /// passed (the walk, not only the all-passed shortcut), nothing when
    /// none passed, and only the confirmed ones when the tail lies; round
    /// after round, so the counts wrap the ring (quota 6: 8 slots), and
    /// across the wrap of the ticket numbers.
    #[test]
    fn shmqfix_tickets_forget_what_the_tail_passed() {
        for base in [0u64, 5, u64::MAX - 20] {
            let mut m = Tickets::new();
            let mut t0 = base;
            for round in 0..12 {
                for i in 0..6 {
                    m.push(t0.wrapping_add(i), 6);
                }
                assert_eq!(m.len(), 6);
                let back = |n: u64| move |t: u64| passed(t0.wrapping_add(n), t);
                if round % 2 == 0 {
                    assert!(m.forget_before(t0.wrapping_add(3), back(3)));
                } else {
                    // a tail far ahead: only the confirmed three go
                    assert!(m.forget_before(t0.wrapping_add(1 << 40), back(3)));
                }
                assert_eq!(m.len(), 3, "round {round} from {base}");
                assert!(!m.forget_before(t0.wrapping_add(3), back(3)));
                assert_eq!(m.len(), 3);
                // a tail behind the oldest, or one unconfirmed: none
                assert!(!m.forget_before(t0, back(6)));
                assert!(!m.forget_before(t0.wrapping_add(6), back(3)));
                assert_eq!(m.len(), 3);
                assert!(m.forget_before(t0.wrapping_add(5), back(5)));
                assert_eq!(m.len(), 1);
                assert!(m.forget_before(t0.wrapping_add(6), back(6)));
                assert_eq!(m.len(), 0);
                assert!(!m.forget_before(t0.wrapping_add(6), back(6)));
                t0 = t0.wrapping_add(6);
            }
        }
    }

    /// A rank that rewrites the queue's `tail` far ahead of the senders'
    /// tickets (review finding: a queue of 8 cells, quota 6, a flooder
    /// rewriting `tail = 1 << 40` took 8 of 8 cells and starved the other
    /// sender): the flooder still stops at its quota, as it confirms the
    /// tail with its tickets' own state words.
    #[test]
    fn shmqfix_a_forged_tail_does_not_lift_the_quota() {
        let len = 8usize;
        let mut m = mem(256, len);
        // SAFETY: `m` outlives the queue, 8-aligned, 256 B cells.
        let q = unsafe { Queue::new(m.as_mut_ptr() as *mut u8, 256, len) };
        let (mut a, mut b) = (QProducer::new(q, 0), QProducer::new(q, 1));
        let mut took = 0u64;
        loop {
            q.ctrl(TAIL_OFF).store(1 << 40, Ordering::Relaxed);
            if !a.has_room() {
                break;
            }
            a.push_short(1, &[took]);
            took += 1;
            assert!(took <= len as u64, "more cells than the queue has");
        }
        assert_eq!(
            took,
            sender_quota(len as u64) as u64,
            "a forged tail lifted the quota: {took} of {len} cells"
        );
        assert!(b.has_room(), "the other sender was starved");
    }

    /// Review of the lost-doorbell fix: a sleeper's last look
    /// (`room_now`) is not fooled by forged words where `has_room` is not
    /// (before: a tail forged past the quota, or a state word forged ahead
    /// of `head`, made `room_now` true while every claim was refused, so
    /// a refused sender's waits never slept: a spin a broken rank could
    /// cause).
    #[test]
    fn shmqfix_room_now_is_not_fooled_by_forged_words() {
        let len = 8usize;
        let mut m = mem(256, len);
        // SAFETY: `m` outlives the queue, 8-aligned, 256 B cells.
        let q = unsafe { Queue::new(m.as_mut_ptr() as *mut u8, 256, len) };
        let (mut a, mut b) = (QProducer::new(q, 0), QProducer::new(q, 1));
        // a forged tail far ahead: `a` still stops at its quota
        while a.has_room() {
            q.ctrl(TAIL_OFF).store(1 << 40, Ordering::Relaxed);
            a.push_short(1, &[0]);
        }
        q.ctrl(TAIL_OFF).store(1 << 40, Ordering::Relaxed);
        assert!(!a.has_room());
        assert!(!a.room_now(), "a forged tail made room_now lift the quota");
        // a forged state word ahead of `head` (as if another sender had
        // claimed it, but `head` did not move): no claim, no room
        let t = q.ctrl(HEAD_OFF).load(Ordering::Relaxed);
        q.word(t).store(lap(&q, t) + 1, Ordering::Relaxed);
        assert!(!b.has_room(), "a forged state word let b claim");
        assert!(!b.room_now(), "a forged state word made room_now true");
    }

    /// Garbage in every shared word (head, want, state words, cells) never
    /// panics nor goes out of bounds: claims give up or land in the queue,
    /// and the consumer reports bad cells. (Miri checks the bounds.)
    #[test]
    fn garbage_in_the_shared_words_is_survived() {
        let len = 4usize;
        let mut m = mem(256, len);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..if cfg!(miri) { 20 } else { 2000 } {
            for w in m.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *w = if x.is_multiple_of(3) { x % 16 } else { x };
            }
            // SAFETY: as above.
            let q = unsafe { Queue::new(m.as_mut_ptr() as *mut u8, 256, len) };
            let mut p = QProducer::new(q, 1);
            if p.has_room() {
                p.push_short(1, &[1, 2, 3]);
            }
            let mut c = QConsumer::new(q);
            c.tail = x % 64;
            for _ in 0..len {
                match c.peek() {
                    None => break,
                    Some((_, Err(_))) | Some((_, Ok(_))) => c.release(),
                }
            }
            let _ = c.peek_short();
            let _ = c.freed();
            let _ = p.free_cells();
        }
    }
}

/// loom model of the claim / publish / release protocol with two senders
/// (`RUSTFLAGS="--cfg loom" cargo test -p splitrt-runtime --release --lib
/// loom`), restated over loom's atomics with the orderings of [`order`];
/// the sender's credit step is the production [`reclaim_step`] (with the
/// real [`Tickets`] and [`is_released`]), run over the model's atomics.
#[cfg(all(test, loom))]
mod models {
    use super::order;
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::{AtomicU64, Ordering};
    use loom::sync::Arc;

    struct Q {
        state: Vec<AtomicU64>,
        cells: Vec<UnsafeCell<u64>>,
        head: AtomicU64,
        len: u64,
    }

    impl Q {
        fn claim(&self) -> Option<u64> {
            let mut t = self.head.load(Ordering::Relaxed);
            for _ in 0..4 {
                let i = (t % self.len) as usize;
                let lap = t - t % self.len;
                let s = self.state[i].load(order::SEE_FREE);
                let d = s.wrapping_sub(lap) as i64;
                if d == 0 {
                    match self
                        .head
                        .compare_exchange(t, t + 1, order::CLAIM, Ordering::Relaxed)
                    {
                        Ok(_) => return Some(t),
                        Err(now) => t = now,
                    }
                } else if d < 0 {
                    return None;
                } else {
                    t = self.head.load(Ordering::Relaxed);
                }
            }
            None
        }

        fn push(&self, v: u64) -> bool {
            self.push_ticket(v).is_some()
        }

        /// `push`, giving the claimed ticket (for the sender's credits).
        fn push_ticket(&self, v: u64) -> Option<u64> {
            let t = self.claim()?;
            let i = (t % self.len) as usize;
            self.cells[i].with_mut(|p| {
                // SAFETY: loom's cell; loom itself reports a concurrent access.
                unsafe { *p = v }
            });
            self.state[i].store(t - t % self.len + 1, order::PUBLISH);
            Some(t)
        }

        fn pop(&self, tail: &mut u64) -> Option<u64> {
            let i = (*tail % self.len) as usize;
            let lap = *tail - *tail % self.len;
            if self.state[i].load(order::OBSERVE) != lap + 1 {
                return None;
            }
            let v = self.cells[i].with(|p| {
                // SAFETY: loom's cell; loom itself reports a concurrent access.
                unsafe { *p }
            });
            self.state[i].store(lap + self.len, order::RETURN);
            *tail += 1;
            Some(v)
        }
    }

    /// Two senders into a queue of two cells, sender A twice (so a cell
    /// is reused when the consumer took one in between), B once, the
    /// consumer taking up to three while they run (no thread spins: a
    /// full queue is a refused push, as `try_send`'s `Ok(false)`): every
    /// value pushed arrives once, each sender's in order, nothing else
    /// arrives, and loom finds no race on a cell.
    #[test]
    fn loom_two_senders_one_queue() {
        loom::model(|| {
            let q = Arc::new(Q {
                state: (0..2).map(|_| AtomicU64::new(0)).collect(),
                cells: (0..2).map(|_| UnsafeCell::new(0)).collect(),
                head: AtomicU64::new(0),
                len: 2,
            });
            let qa = q.clone();
            let a = loom::thread::spawn(move || {
                let first = qa.push(10);
                let second = qa.push(11);
                [(10, first), (11, second)]
            });
            let qb = q.clone();
            let b = loom::thread::spawn(move || [(20, qb.push(20))]);
            let mut tail = 0;
            let mut got = Vec::new();
            for _ in 0..3 {
                if let Some(v) = q.pop(&mut tail) {
                    got.push(v);
                }
            }
            let mut pushed: Vec<(u64, bool)> = a.join().unwrap().to_vec();
            pushed.extend(b.join().unwrap());
            while let Some(v) = q.pop(&mut tail) {
                got.push(v);
            }
            let mut want: Vec<u64> = pushed.iter().filter(|p| p.1).map(|p| p.0).collect();
            let mut sorted = got.clone();
            sorted.sort_unstable();
            want.sort_unstable();
            assert_eq!(sorted, want, "got {got:?}");
            let a_order: Vec<u64> = got.iter().copied().filter(|&v| v < 20).collect();
            assert!(a_order.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        });
    }

    /// A sender that finds the queue full sets `want` and looks once more
    /// (`QProducer::full_at`), a consumer that frees a cell fences and
    /// looks at `want` (`QConsumer::freed`): in every interleaving the
    /// sender either claims the freed cell or is rung. Without the second
    /// look, the consumer could free the cell and read `want == 0` between
    /// the sender's look and its store: no doorbell, a full back-off.
    #[test]
    fn loom_a_full_queue_is_claimed_or_rung() {
        loom::model(|| {
            // two cells, both published (tickets 0 and 1), head at 2
            let q = Arc::new(Q {
                state: (0..2).map(|_| AtomicU64::new(1)).collect(),
                cells: (0..2).map(|_| UnsafeCell::new(0)).collect(),
                head: AtomicU64::new(2),
                len: 2,
            });
            let want = Arc::new(AtomicU64::new(0));
            let (qs, ws) = (q.clone(), want.clone());
            let sender = loom::thread::spawn(move || {
                if qs.claim().is_some() {
                    return true;
                }
                // full: ask for a doorbell, then look once more
                ws.store(1, Ordering::SeqCst);
                loom::sync::atomic::fence(Ordering::SeqCst);
                let t = qs.head.load(Ordering::Relaxed);
                let lap = t - t % qs.len;
                qs.state[(t % qs.len) as usize].load(order::SEE_FREE) == lap
                    && qs
                        .head
                        .compare_exchange(t, t + 1, order::CLAIM, Ordering::Relaxed)
                        .is_ok()
            });
            let mut tail = 0;
            assert!(q.pop(&mut tail).is_some());
            loom::sync::atomic::fence(Ordering::SeqCst);
            let rung = want.load(Ordering::Relaxed) != 0;
            let claimed = sender.join().unwrap();
            assert!(claimed || rung, "the sender was neither let in nor rung");
        });
    }

    /// A sender's credits as `QProducer` keeps them: its unreleased
    /// tickets (the real [`super::Tickets`]), and the quota of its queue.
    struct Credits {
        mine: super::Tickets,
        quota: usize,
    }

    impl Credits {
        /// `QProducer::has_room`'s credit check with `reclaim`: at the
        /// quota, the production credit step (`super::reclaim_step`) over
        /// the model's tail, state words (`super::is_released`) and `want`
        /// with a loom fence. True if a credit is free.
        fn room(&mut self, q: &Q, tail: &AtomicU64, want: &AtomicU64) -> bool {
            if self.mine.len() < self.quota {
                return true;
            }
            super::reclaim_step(
                &mut self.mine,
                || tail.load(order::SEE_TAIL),
                |t| {
                    let s = q.state[(t % q.len) as usize].load(order::SEE_FREE);
                    super::is_released(s, t, q.len)
                },
                || {
                    want.store(1, Ordering::SeqCst);
                    loom::sync::atomic::fence(Ordering::SeqCst);
                },
            )
        }
    }

    /// Per-sender credits read from the consumer's published tail, with
    /// two senders racing a claim while the consumer releases. A queue of
    /// three cells (quota two a sender); sender A holds its quota
    /// (tickets 0 and 1 published, `head` at 2). A tries once more: out
    /// of credits, it reads the tail, else sets `want`, fences and reads
    /// it again (`QProducer::reclaim`), then claims a cell by its state
    /// word; B claims a cell at the same time (ticket 2, or 3 once the
    /// consumer freed cell 0); the consumer releases ticket 0, publishes
    /// its tail, fences and looks at `want` (`QConsumer::freed`). In every
    /// interleaving: A either gets a credit or is rung (no lost wake-up);
    /// no sender holds more than its quota; no ticket is claimed twice,
    /// and loom sees no race on a cell; every value arrives once, A's in
    /// order.
    #[test]
    fn loom_credits_come_back_through_the_tail() {
        loom::model(|| {
            let len = 3u64;
            let quota = super::sender_quota(len);
            assert_eq!(quota, 2);
            let q = Arc::new(Q {
                state: [1, 1, 0].into_iter().map(AtomicU64::new).collect(),
                cells: [10, 11, 0].into_iter().map(UnsafeCell::new).collect(),
                head: AtomicU64::new(2),
                len,
            });
            let tail = Arc::new(AtomicU64::new(0));
            let want = Arc::new(AtomicU64::new(0));
            let (qa, ta, wa) = (q.clone(), tail.clone(), want.clone());
            let a = loom::thread::spawn(move || {
                let mut c = Credits {
                    mine: super::Tickets::new(),
                    quota,
                };
                c.mine.push(0, quota);
                c.mine.push(1, quota);
                if !c.room(&qa, &ta, &wa) {
                    return (false, None);
                }
                let pushed = qa.push_ticket(12);
                if let Some(t) = pushed {
                    // as `QProducer::took`: the claim counts against the
                    // credits (the real ring, which holds only a quota)
                    assert!(c.mine.len() < c.quota, "a claim beyond the quota");
                    c.mine.push(t, c.quota);
                    assert!(c.mine.len() <= c.quota);
                }
                (true, pushed.map(|_| 12))
            });
            let qb = q.clone();
            let b = loom::thread::spawn(move || qb.push(20).then_some(20));
            // the consumer: release ticket 0, publish the tail, `freed`
            let mut next = 0;
            let first = q.pop(&mut next);
            tail.store(next, order::PUBLISH_TAIL);
            loom::sync::atomic::fence(Ordering::SeqCst);
            let rung = want.load(Ordering::Relaxed) != 0;
            let (credit, a_val) = a.join().unwrap();
            let b_val = b.join().unwrap();
            assert!(credit || rung, "out of credits, neither let in nor rung");
            assert_eq!(first, Some(10));
            let mut got = vec![10];
            while let Some(v) = q.pop(&mut next) {
                got.push(v);
            }
            let mut want_vals: Vec<u64> = [Some(10), Some(11), a_val, b_val]
                .into_iter()
                .flatten()
                .collect();
            let mut sorted = got.clone();
            sorted.sort_unstable();
            want_vals.sort_unstable();
            assert_eq!(sorted, want_vals, "got {got:?}");
            let a_order: Vec<u64> = got.iter().copied().filter(|&v| v < 20).collect();
            assert!(a_order.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        });
    }
}
