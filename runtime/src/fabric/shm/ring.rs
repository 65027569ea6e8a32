//! The single-producer single-consumer ring of cells (the thesis' circular
//! buffer). The producer writes a cell, then publishes its sequence word
//! (release); the consumer sees the sequence it expects (acquire), uses the
//! cell in place, then publishes its tail (release), which hands the cell
//! back. Sequence words never repeat (they count packets cells, not laps), so
//! cells are never cleared and a stale cell is never mistaken for a new one.
//!
//! The producer keeps a cached copy of the consumer's tail and reads the
//! shared one only when the cache says the ring is full: the free cells are
//! the producer's credits, and publishing the tail is how the consumer
//! returns them.

use super::cells::{CellView, Cells, Peek};
use super::layout::{CellMeta, F_FIRST, F_LAST};
use super::timeline::{self, Ev};
use std::sync::atomic::AtomicU64;

/// The orderings of the ring protocol. The loom model of the protocol
/// (`super::models`, `--cfg loom`) uses these very constants, so weakening
/// one here makes the model fail.
pub(crate) mod order {
    use std::sync::atomic::Ordering;
    /// The producer publishes a written cell (its sequence word).
    pub(crate) const PUBLISH: Ordering = Ordering::Release;
    /// The consumer reads a cell's sequence word before the cell.
    pub(crate) const OBSERVE: Ordering = Ordering::Acquire;
    /// The consumer hands used cells back (publishes its tail).
    pub(crate) const RETURN_CREDIT: Ordering = Ordering::Release;
    /// The producer reads the consumer's tail before reusing cells.
    pub(crate) const READ_CREDIT: Ordering = Ordering::Acquire;
}

/// A ring in a mapped file: its cells ([`Cells`]), whose first word is
/// the sequence word, after a control block whose first word is the
/// consumer's tail.
pub(crate) type Ring = Cells;

/// The consumer's tail (offset 0 of the control block).
#[inline(always)]
fn tail(ring: &Ring) -> &AtomicU64 {
    ring.ctrl(0)
}

/// Whether a ring of `len` cells has a free one with the producer at
/// `head` and the consumer's tail at `tail` (a word in shared memory:
/// one past `head` is forged and gives no room, never an overflow).
#[inline(always)]
fn room(head: u64, tail: u64, len: u64) -> bool {
    head.checked_sub(tail).is_some_and(|used| used < len)
}

/// The producer's side of one ring.
pub(crate) struct Producer {
    ring: Ring,
    head: u64,
    cached_tail: u64,
}

impl Producer {
    pub(crate) fn new(ring: Ring) -> Self {
        Producer {
            ring,
            head: 0,
            cached_tail: 0,
        }
    }

    pub(crate) fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Whether a cell is free; re-reads the consumer's tail only when the
    /// cached one says the ring is full. A tail past `head` (a forged
    /// word: the consumer cannot release a cell not yet published) gives
    /// no room and never an overflow, and is not cached (the cache stays
    /// at most `head`, so [`released`](Self::released) is not fooled by
    /// it); [`tail_forged`](Self::tail_forged) tells the caller why.
    #[inline(always)]
    pub(crate) fn has_room(&mut self) -> bool {
        if room(self.head, self.cached_tail, self.ring.len()) {
            return true;
        }
        let t = tail(&self.ring).load(order::READ_CREDIT);
        if t <= self.head {
            self.cached_tail = t;
        }
        timeline::stamp(
            Ev::RingTail,
            0xff,
            self.ring.len().saturating_sub(self.head.wrapping_sub(t)),
        );
        room(self.head, t, self.ring.len())
    }

    /// Whether the consumer's tail word is past `head` (read now): a
    /// forged word, since the consumer cannot release a cell that was not
    /// published. [`has_room`](Self::has_room) and
    /// [`room_now`](Self::room_now) then say no room,
    /// [`released`](Self::released) says not released and
    /// [`free_cells`](Self::free_cells) none free, so the caller that
    /// finds no room asks this to report a protocol error (naming the
    /// peer) rather than wait for a cell that will never come.
    #[cold]
    pub(crate) fn tail_forged(&self) -> bool {
        tail(&self.ring).load(order::READ_CREDIT) > self.head
    }

    /// Whether [`has_room`](Self::has_room) would find a free cell now
    /// (re-reads the consumer's tail; changes nothing): a sleeper's last
    /// look before it sleeps.
    pub(crate) fn room_now(&self) -> bool {
        let len = self.ring.len();
        room(self.head, self.cached_tail, len)
            || room(self.head, tail(&self.ring).load(order::READ_CREDIT), len)
    }

    /// The sequence number the next published cell gets.
    #[inline]
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// Whether the consumer has released cell `seq` (re-reads its tail
    /// only when the cached one says no). A tail past `head` is forged
    /// ([`tail_forged`](Self::tail_forged)): it releases nothing and is
    /// not cached.
    #[inline]
    pub(crate) fn released(&mut self, seq: u64) -> bool {
        if self.cached_tail > seq {
            return true;
        }
        let t = tail(&self.ring).load(order::READ_CREDIT);
        if t > self.head {
            return false;
        }
        self.cached_tail = t;
        t > seq
    }

    /// Free cells as the consumer last published them, and the ring
    /// length; none free when the tail is forged past `head`
    /// ([`tail_forged`](Self::tail_forged)), as [`has_room`](Self::has_room)
    /// says.
    pub(crate) fn free_cells(&self) -> (u64, u64) {
        let tail = tail(&self.ring).load(order::READ_CREDIT);
        let len = self.ring.len();
        let used = self.head.checked_sub(tail).map_or(len, |u| u.min(len));
        (len - used, len)
    }

    /// Write one cell without publishing it. The caller checked
    /// [`Self::has_room`], `words.len() <= MAX_WORDS` and that `chunk` fits.
    #[inline]
    pub(crate) fn write(&mut self, meta: CellMeta, words: &[u64], chunk: &[u8]) {
        // SAFETY: the cell of `head` is free (`has_room`, checked by the
        // caller), so the consumer does not read it until `publish` stores
        // its sequence word, and nobody else writes it (the producer side
        // is `&mut self`); the caller checked the words and the chunk fit.
        unsafe { self.ring.write(self.head, meta, words, chunk) };
    }

    /// Write and publish a Short: a one-cell packet of argument words
    /// only (`F_FIRST | F_LAST`, no payload). The caller checked
    /// [`Self::has_room`] and `words.len() <= MAX_WORDS` (which every cell
    /// holds: cells are at least 256 B, `Config::validate`). The cell is
    /// found once (not again to publish it, as [`Self::push`] does).
    #[inline(always)]
    pub(crate) fn push_short(&mut self, tag: u16, words: &[u64]) {
        let meta = CellMeta {
            tag,
            flags: F_FIRST | F_LAST,
            nwords: words.len() as u8,
            len: 0,
            total: 0,
            pad: 0,
            deposit: 0,
        };
        let n = self.head;
        // SAFETY: as in `write`: the cell of `head` is free and this
        // producer's; the caller checked the words.
        let cell = unsafe { self.ring.write_head(n, meta, words) };
        // SAFETY: every cell starts with its 8-aligned sequence word, and
        // `cell` is cell `n` (`write_head`).
        let seq = unsafe { &*(cell as *const AtomicU64) };
        seq.store(n + 1, order::PUBLISH);
        self.head = n + 1;
    }

    /// Publish the cell written last: it becomes visible to the consumer.
    #[inline]
    pub(crate) fn publish(&mut self) {
        let n = self.head;
        self.ring.word(n).store(n + 1, order::PUBLISH);
        self.head = n + 1;
    }

    /// Write and publish one cell.
    #[inline]
    pub(crate) fn push(&mut self, meta: CellMeta, words: &[u64], chunk: &[u8]) {
        self.write(meta, words, chunk);
        self.publish();
    }
}

/// The consumer's side of one ring.
pub(crate) struct Consumer {
    ring: Ring,
    tail: u64,
}

impl Consumer {
    pub(crate) fn new(ring: Ring) -> Self {
        Consumer { ring, tail: 0 }
    }

    /// The next cell if it has been published.
    #[inline]
    pub(crate) fn peek(&self) -> Option<Result<CellView<'_>, String>> {
        if !self.has_next() {
            return None;
        }
        // SAFETY: the acquire load in `has_next` saw the producer's release
        // of this cell, so its contents are complete and the producer will
        // not touch it until `release` publishes the tail (which needs
        // `&mut self`, so not while the view borrows `self`).
        Some(unsafe { self.ring.read(self.tail) }.1)
    }

    /// The next cell if it has been published and is a well-formed Short
    /// (a one-cell packet of argument words only: `F_FIRST | F_LAST`, no
    /// payload, at most `MAX_WORDS` words): its tag and words, valid
    /// until [`release`](Self::release). [`Peek::Other`] for any other
    /// published cell, which the caller reads with [`peek`](Self::peek)
    /// (a bad one is reported there). Plain compares, no `Result`.
    #[inline(always)]
    pub(crate) fn peek_short(&self) -> Peek<'_> {
        if !self.has_next() {
            return Peek::Empty;
        }
        // SAFETY: as in `peek`: published, unchanged until `release`.
        unsafe { self.ring.read_short(self.tail) }
    }

    /// Whether the next cell has been published (for a sleeper's last look).
    #[inline(always)]
    pub(crate) fn has_next(&self) -> bool {
        self.ring.word(self.tail).load(order::OBSERVE) == self.tail + 1
    }

    /// Hand the current cell back to the producer.
    #[inline]
    pub(crate) fn release(&mut self) {
        self.tail += 1;
        tail(&self.ring).store(self.tail, order::RETURN_CREDIT);
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::{cell_stride, RING_CTRL};
    use super::*;

    /// A ring in ordinary memory, driven by one thread as producer and
    /// consumer: wrap-around, back-pressure and payload integrity.
    #[test]
    fn single_thread_wraparound() {
        // a power of two (cell index by mask) and not (by remainder)
        for len in [4, 5, 2, 3] {
            wraparound(len);
        }
    }

    /// `peek_short` takes a published Short only: nothing before the
    /// publish, `Other` for a cell with a payload, and the words of a
    /// Short, across laps of the ring.
    #[test]
    fn peek_short_sees_only_published_shorts() {
        let (cell, len) = (256usize, 4);
        let mut mem = vec![0u64; (RING_CTRL + cell_stride(cell) * len) / 8];
        // SAFETY: `mem` outlives the ring and is 8-aligned; the test needs
        // only 8-byte alignment.
        let ring = unsafe { Ring::new(mem.as_mut_ptr() as *mut u8, cell, len) };
        let (mut p, mut c) = (Producer::new(ring), Consumer::new(ring));
        for round in 0..10u64 {
            assert!(matches!(c.peek_short(), Peek::Empty));
            p.push_short(7, &[round, round + 1]);
            match c.peek_short() {
                Peek::Short(_, tag, words) => {
                    assert_eq!((tag, words), (7, &[round, round + 1][..]))
                }
                _ => panic!("a Short was not seen"),
            }
            c.release();
            let meta = CellMeta {
                flags: F_FIRST | F_LAST,
                len: 1,
                total: 1,
                ..Default::default()
            };
            p.push(meta, &[], &[1]);
            assert!(matches!(c.peek_short(), Peek::Other));
            assert_eq!(c.peek().unwrap().unwrap().chunk, &[1]);
            c.release();
        }
    }

    /// A consumer's tail word past the producer's head (forged: no cell
    /// past `head` was published) gives no room, in `has_room` and in
    /// `room_now` alike, and never an overflow (OLD: `head - tail`
    /// overflowed in `has_room`, a panic where overflow checks are on).
    #[test]
    fn a_forged_tail_past_the_head_gives_no_room() {
        let (cell, len) = (256usize, 4);
        for forged_past in [1, 2, 1 << 40, u64::MAX - 4] {
            let mut mem = vec![0u64; (RING_CTRL + cell_stride(cell) * len) / 8];
            // SAFETY: `mem` outlives the ring and is 8-aligned; the test
            // needs only 8-byte alignment.
            let ring = unsafe { Ring::new(mem.as_mut_ptr() as *mut u8, cell, len) };
            let mut p = Producer::new(ring);
            for _ in 0..len {
                assert!(p.has_room());
                p.push_short(1, &[1]);
            }
            // full: the next look re-reads the tail, which is forged
            let forged = p.head() + forged_past;
            tail(&ring).store(forged, order::RETURN_CREDIT);
            assert!(!p.has_room(), "a forged tail {forged} gave room");
            assert!(!p.room_now(), "a forged tail {forged} gave room now");
            // the same answer everywhere: nothing released, nothing free,
            // and the reason known (OLD: `released` said yes and
            // `free_cells` all free while `has_room` said no room)
            assert!(p.tail_forged());
            assert!(!p.released(0), "a forged tail {forged} released a cell");
            assert_eq!(p.free_cells(), (0, len as u64), "forged tail {forged}");
            assert!(
                !p.has_room() && !p.released(0),
                "the forged tail was cached"
            );
            // the consumer's true tail again: room
            tail(&ring).store(1, order::RETURN_CREDIT);
            assert!(!p.tail_forged());
            assert!(p.room_now() && p.has_room());
            assert!(p.released(0) && !p.released(1));
            assert_eq!(p.free_cells(), (1, len as u64));
        }
    }

    fn wraparound(len: usize) {
        let cell = 256usize;
        let mut mem = vec![0u64; (RING_CTRL + cell_stride(cell) * len) / 8];
        // SAFETY: `mem` outlives the ring and is 8-aligned; the test needs
        // only 8-byte alignment.
        let ring = unsafe { Ring::new(mem.as_mut_ptr() as *mut u8, cell, len) };
        let (mut p, mut c) = (Producer::new(ring), Consumer::new(ring));
        // (60 rounds under Miri, which interprets every step: still many
        // laps of these 2-5 cell rings)
        for round in 0u64..if cfg!(miri) { 60 } else { 1000 } {
            let k = (round % 7) as usize;
            for i in 0..k {
                if !p.has_room() {
                    assert_eq!(i, len, "room ran out early");
                    break;
                }
                let meta = CellMeta {
                    tag: i as u16,
                    flags: F_FIRST | F_LAST,
                    nwords: 1,
                    len: 3,
                    ..Default::default()
                };
                p.push(meta, &[round], &[i as u8; 3]);
            }
            let mut got = 0;
            while let Some(v) = c.peek() {
                let v = v.unwrap();
                assert_eq!(v.words, &[round]);
                assert_eq!(v.chunk, &[got as u8; 3]);
                assert_eq!(v.meta.tag, got as u16);
                got += 1;
                c.release();
            }
            assert_eq!(got, k.min(len));
        }
    }
}
