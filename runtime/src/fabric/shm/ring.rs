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

use super::layout::{
    cell_stride, CellMeta, CELL_HDR, F_DEPOSIT, F_FIRST, F_LAST, F_ZONE, RING_CTRL,
};
use crate::fabric::MAX_WORDS;
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

/// A ring in a mapped file.
#[derive(Clone, Copy)]
pub(crate) struct Ring {
    base: *mut u8,
    cell_size: usize,
    stride: usize,
    len: u64,
    /// `len - 1` when `len` is a power of two (the default 64): the cell
    /// index is then a mask, not a 64-bit division (20-40 cycles on every
    /// poll and send); 0 otherwise.
    mask: u64,
}

// SAFETY: the ring lives in a shared mapping owned by the fabric; access is
// serialized by the producer lock / consumer lock and the sequence protocol.
unsafe impl Send for Ring {}

impl Ring {
    /// # Safety
    /// `base` must point to `RING_CTRL + len * cell_stride(cell_size)`
    /// mapped bytes that stay mapped for the lifetime of the ring, 64-byte
    /// aligned.
    pub(crate) unsafe fn new(base: *mut u8, cell_size: usize, len: usize) -> Self {
        Ring {
            base,
            cell_size,
            stride: cell_stride(cell_size),
            len: len as u64,
            mask: if len.is_power_of_two() {
                len as u64 - 1
            } else {
                0
            },
        }
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: the control block starts the ring, is 8-aligned and mapped
        // for the ring's lifetime; only atomics touch it.
        unsafe { &*(self.base as *const AtomicU64) }
    }

    #[inline(always)]
    fn cell(&self, n: u64) -> *mut u8 {
        // (len >= 2, so a zero mask means "not a power of two")
        let i = if self.mask != 0 {
            n & self.mask
        } else {
            n % self.len
        };
        // SAFETY: i < len (a mask of a power of two, or a remainder), so
        // the cell lies inside the ring.
        unsafe { self.base.add(RING_CTRL + i as usize * self.stride) }
    }

    fn seq(&self, n: u64) -> &AtomicU64 {
        // SAFETY: every cell starts with an 8-aligned sequence word.
        unsafe { &*(self.cell(n) as *const AtomicU64) }
    }

    /// The ring's bytes: its first byte and its length (control block and
    /// cells).
    pub(crate) fn span(&self) -> (*mut u8, usize) {
        (self.base, RING_CTRL + self.len as usize * self.stride)
    }

    /// Payload capacity of a cell carrying `nwords` argument words.
    pub(crate) fn capacity(&self, nwords: usize) -> usize {
        self.cell_size - CELL_HDR - nwords * 8
    }
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
    /// cached one says the ring is full.
    #[inline(always)]
    pub(crate) fn has_room(&mut self) -> bool {
        if self.head - self.cached_tail < self.ring.len {
            return true;
        }
        self.cached_tail = self.ring.tail().load(order::READ_CREDIT);
        self.head - self.cached_tail < self.ring.len
    }

    /// The sequence number the next published cell gets.
    #[inline]
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// Whether the consumer has released cell `seq` (re-reads its tail
    /// only when the cached one says no).
    #[inline]
    pub(crate) fn released(&mut self, seq: u64) -> bool {
        if self.cached_tail > seq {
            return true;
        }
        self.cached_tail = self.ring.tail().load(order::READ_CREDIT);
        self.cached_tail > seq
    }

    /// Free cells as the consumer last published them, and the ring length.
    pub(crate) fn free_cells(&self) -> (u64, u64) {
        let tail = self.ring.tail().load(order::READ_CREDIT);
        (
            self.ring.len - self.head.saturating_sub(tail).min(self.ring.len),
            self.ring.len,
        )
    }

    /// Write one cell without publishing it. The caller checked
    /// [`Self::has_room`], `words.len() <= MAX_WORDS` and that `chunk` fits.
    #[inline]
    pub(crate) fn write(&mut self, meta: CellMeta, words: &[u64], chunk: &[u8]) {
        debug_assert!(chunk.len() <= self.ring.capacity(words.len()));
        let cell = self.write_head(meta, words);
        // SAFETY: the words end at most at the cell's end (the caller's
        // size check), so the payload's start is inside or one past it.
        let payload = unsafe { cell.add(CELL_HDR + words.len() * 8) };
        // SAFETY: `chunk` is a live slice; `chunk.len() <= capacity(words)`
        // (the caller's check) keeps the destination inside the free cell,
        // and `memmove` needs no alignment.
        unsafe { crate::memmove::memmove(chunk.as_ptr(), payload, chunk.len()) };
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
        let cell = self.write_head(meta, words);
        let n = self.head;
        // SAFETY: every cell starts with its 8-aligned sequence word, and
        // `cell` is cell `n` (`write_head`).
        let seq = unsafe { &*(cell as *const AtomicU64) };
        seq.store(n + 1, order::PUBLISH);
        self.head = n + 1;
    }

    /// Write the next cell's meta and argument words (not its sequence
    /// word); returns the cell. The caller checked [`Self::has_room`] and
    /// `words.len() <= MAX_WORDS`.
    #[inline(always)]
    fn write_head(&mut self, meta: CellMeta, words: &[u64]) -> *mut u8 {
        debug_assert!(words.len() <= MAX_WORDS);
        debug_assert!(words.len() * 8 <= self.ring.capacity(0));
        let cell = self.ring.cell(self.head);
        // Every access below stays in the cell `cell` points to: the cell is
        // free (`has_room`, checked by the caller), so the consumer does not
        // read it until `publish` stores its sequence word, and nobody else
        // writes it (the producer side is `&mut self`).
        // SAFETY: offset 8 (past the sequence word) is inside the cell,
        // which `Ring::cell` keeps inside the mapping.
        let meta_at = unsafe { cell.add(8) } as *mut CellMeta;
        // SAFETY: the CellMeta slot is bytes 8..CELL_HDR of the free cell,
        // 8-aligned (cells are 64-aligned; `align_of::<CellMeta>() == 8`,
        // asserted in `layout`).
        unsafe { std::ptr::write(meta_at, meta) };
        // SAFETY: CELL_HDR < cell_size, so the words' start is inside the
        // cell.
        let at = unsafe { cell.add(CELL_HDR) } as *mut u64;
        // Word by word with volatile stores: a loop of plain writes (or
        // `copy_nonoverlapping`) is compiled into a libc `memcpy` call,
        // about 20 instructions for a one-word Short (a loop of volatile
        // stores is never turned into a call; check with `objdump -d`).
        for (i, &w) in words.iter().enumerate() {
            // SAFETY: i < words.len() <= MAX_WORDS, and the caller checked
            // the words fit the cell (`capacity` cannot underflow), so word
            // `i` is inside it.
            let word = unsafe { at.add(i) };
            // SAFETY: word `i` of the free cell, in bounds (above) and
            // 8-aligned (64-aligned cell, CELL_HDR = 32); nobody else
            // accesses it until it is published (above).
            unsafe { word.write_volatile(w) };
        }
        cell
    }

    /// Publish the cell written last: it becomes visible to the consumer.
    #[inline]
    pub(crate) fn publish(&mut self) {
        let n = self.head;
        self.ring.seq(n).store(n + 1, order::PUBLISH);
        self.head = n + 1;
    }

    /// Write and publish one cell.
    #[inline]
    pub(crate) fn push(&mut self, meta: CellMeta, words: &[u64], chunk: &[u8]) {
        self.write(meta, words, chunk);
        self.publish();
    }
}

/// A cell as the consumer sees it, valid until [`Consumer::release`].
pub(crate) struct CellView<'a> {
    pub meta: CellMeta,
    pub words: &'a [u64],
    pub chunk: &'a [u8],
}

/// What [`Consumer::peek_short`] found.
pub(crate) enum Peek<'a> {
    /// Nothing published yet.
    Empty,
    /// A well-formed Short: its tag and argument words.
    Short(u16, &'a [u64]),
    /// Something else (a Medium, a Long, a chunk, a bad cell).
    Other,
}

/// Why a cell was rejected.
pub(crate) fn check_meta(meta: &CellMeta, cap_bytes: usize) -> Result<(), String> {
    if meta.nwords as usize > MAX_WORDS {
        return Err(format!("{} argument words (max {MAX_WORDS})", meta.nwords));
    }
    let known = F_FIRST | F_LAST | F_DEPOSIT | F_ZONE;
    if meta.flags & !known != 0 {
        return Err(format!("unknown cell flags {:#x}", meta.flags));
    }
    let cap = cap_bytes - meta.nwords as usize * 8;
    if meta.len as usize > cap {
        return Err(format!("cell claims {} B, holds at most {cap}", meta.len));
    }
    if meta.flags & F_FIRST == 0 && meta.nwords != 0 {
        return Err("continuation cell carries argument words".into());
    }
    Ok(())
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
        let n = self.tail;
        if self.ring.seq(n).load(order::OBSERVE) != n + 1 {
            return None;
        }
        let cell = self.ring.cell(n);
        // The acquire load above saw the producer's release of this cell, so
        // its contents are complete and the producer will not touch it until
        // `release` publishes the tail (the ring protocol, `order`).
        // SAFETY: offset 8 (past the sequence word) is inside the cell, which
        // `Ring::cell` keeps inside the mapping.
        let meta_at = unsafe { cell.add(8) } as *const CellMeta;
        // SAFETY: the published cell's CellMeta slot, complete and 8-aligned
        // (64-aligned cell, `align_of::<CellMeta>() == 8`); every bit
        // pattern is a valid CellMeta (plain integers), and `check_meta`
        // below vets what a peer wrote.
        let meta = unsafe { std::ptr::read(meta_at) };
        if let Err(e) = check_meta(&meta, self.ring.cell_size - CELL_HDR) {
            return Some(Err(e));
        }
        let nw = meta.nwords as usize;
        // SAFETY: CELL_HDR < cell_size: the words' start is inside the cell.
        let words_at = unsafe { cell.add(CELL_HDR) } as *const u64;
        // SAFETY: check_meta bounded `nw` by MAX_WORDS, and every cell holds
        // that many (cell_size >= 256 >= CELL_HDR + 8 * MAX_WORDS, kept by
        // `Config::validate`), so the `nw` words lie in the published cell, which stays unchanged until
        // `release` (which needs `&mut self`, so not while this borrow of
        // `self` lives); 8-aligned (64-aligned cells, CELL_HDR = 32).
        let words = unsafe { std::slice::from_raw_parts(words_at, nw) };
        // SAFETY: `CELL_HDR + nw * 8 <= cell_size` (as above), inside or
        // one past the cell.
        let chunk_at = unsafe { cell.add(CELL_HDR + nw * 8) };
        // SAFETY: check_meta bounded `meta.len` by what the cell holds after
        // the words; the bytes stay unchanged until `release`, as above.
        let chunk = unsafe { std::slice::from_raw_parts(chunk_at, meta.len as usize) };
        Some(Ok(CellView { meta, words, chunk }))
    }

    /// The next cell if it has been published and is a well-formed Short
    /// (a one-cell packet of argument words only: `F_FIRST | F_LAST`, no
    /// payload, at most [`MAX_WORDS`] words): its tag and words, valid
    /// until [`release`](Self::release). [`Peek::Other`] for any other
    /// published cell, which the caller reads with [`peek`](Self::peek)
    /// (a bad one is reported there). Plain compares, no `Result`.
    #[inline(always)]
    pub(crate) fn peek_short(&self) -> Peek<'_> {
        let n = self.tail;
        let cell = self.ring.cell(n);
        // SAFETY: every cell starts with its 8-aligned sequence word, and
        // `Ring::cell` keeps the cell inside the mapping.
        let seq = unsafe { &*(cell as *const AtomicU64) };
        if seq.load(order::OBSERVE) != n + 1 {
            return Peek::Empty;
        }
        // SAFETY: offset 8 (past the sequence word) is inside the cell.
        let meta_at = unsafe { cell.add(8) } as *const CellMeta;
        // SAFETY: as in `peek`: the published cell's CellMeta slot,
        // complete (the acquire load above) and 8-aligned; any bit pattern
        // is a valid CellMeta, and only the one accepted below is used here.
        let meta = unsafe { std::ptr::read(meta_at) };
        if meta.flags != F_FIRST | F_LAST
            || meta.len != 0
            || meta.total != 0
            || meta.nwords as usize > MAX_WORDS
        {
            return Peek::Other;
        }
        // SAFETY: CELL_HDR < cell_size: the words' start is inside the cell.
        let words_at = unsafe { cell.add(CELL_HDR) } as *const u64;
        // SAFETY: nwords <= MAX_WORDS (checked just above), and every cell
        // holds that many words (cell_size >= 256 >= CELL_HDR + 8 *
        // MAX_WORDS, `Config::validate`); 8-aligned; unchanged until
        // `release`, which needs `&mut self` (so not while this borrow
        // lives).
        let words = unsafe { std::slice::from_raw_parts(words_at, meta.nwords as usize) };
        Peek::Short(meta.tag, words)
    }

    /// Whether the next cell has been published (for a sleeper's last look).
    #[inline]
    pub(crate) fn has_next(&self) -> bool {
        self.ring.seq(self.tail).load(order::OBSERVE) == self.tail + 1
    }

    /// Hand the current cell back to the producer.
    #[inline]
    pub(crate) fn release(&mut self) {
        self.tail += 1;
        self.ring.tail().store(self.tail, order::RETURN_CREDIT);
    }
}

#[cfg(test)]
mod tests {
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
                Peek::Short(tag, words) => assert_eq!((tag, words), (7, &[round, round + 1][..])),
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
