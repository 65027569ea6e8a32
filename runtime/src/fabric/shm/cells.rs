//! An array of cells in a mapped file: what the single-producer ring
//! (`ring.rs`, `SPLITRT_SHM_QUEUE=pairs`) and the multi-producer queue
//! (`mpq.rs`, `shared`) share. Both are a 128-byte control block followed
//! by `len` cells of `cell_stride(cell_size)` bytes; each cell starts with
//! a word its protocol owns (the ring's sequence word, the queue's state
//! word), then a [`CellMeta`], the argument words and the payload. This
//! module finds cells, writes a cell's head and payload and reads and
//! vets a published cell; when a cell may be written or read is the
//! protocols' business (their `order` modules).
//!
//! What a cell holds after its header: `cell_size - CELL_HDR` bytes in a
//! ring; in the shared queue also the
//! [`CELL_PAD`](super::layout::CELL_PAD) bytes that follow every cell
//! ([`Cells::padded`]: a 4 KiB Medium in one 4 KiB cell, not two).

use super::layout::{
    cell_stride, CellMeta, CELL_HDR, F_DEPOSIT, F_FIRST, F_LAST, F_ZONE, RING_CTRL,
};
use crate::fabric::MAX_WORDS;
use std::sync::atomic::AtomicU64;

/// `len` cells after a control block, in a mapped file.
#[derive(Clone, Copy)]
pub(crate) struct Cells {
    base: *mut u8,
    stride: usize,
    /// Bytes after a cell's header for its argument words and payload:
    /// `cell_size - CELL_HDR`, or [`CELL_PAD`](super::layout::CELL_PAD)
    /// more ([`padded`](Self::padded)); at most `stride - CELL_HDR`.
    room: usize,
    len: u64,
    /// `len - 1` when `len` is a power of two (the default 64): the cell
    /// index is then a mask, not a 64-bit division (20-40 cycles on every
    /// poll and send); 0 otherwise.
    mask: u64,
}

/// A cell as the consumer sees it, valid until the consumer releases it.
pub(crate) struct CellView<'a> {
    pub meta: CellMeta,
    pub words: &'a [u64],
    pub chunk: &'a [u8],
}

/// What a consumer's `peek_short` found.
pub(crate) enum Peek<'a> {
    /// Nothing published yet.
    Empty,
    /// A well-formed Short: the sender's rank as it wrote it in
    /// `CellMeta::pad` (unchecked; 0 in a ring), its tag and argument
    /// words.
    Short(usize, u16, &'a [u64]),
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

// SAFETY: the cells live in a shared mapping owned by the fabric; access
// is ordered by the ring's or the queue's protocol.
unsafe impl Send for Cells {}

impl Cells {
    /// # Safety
    /// `base` must point to `RING_CTRL + len * cell_stride(cell_size)`
    /// mapped bytes that stay mapped for the lifetime of the cells, 64-byte
    /// aligned (8-byte aligned suffices for tests), with `len >= 2` and
    /// `cell_size >= CELL_HDR + 8 * MAX_WORDS` (`Config::validate`).
    pub(crate) unsafe fn new(base: *mut u8, cell_size: usize, len: usize) -> Self {
        debug_assert!(len >= 2 && cell_size >= CELL_HDR + 8 * MAX_WORDS);
        Cells {
            base,
            stride: cell_stride(cell_size),
            room: cell_size - CELL_HDR,
            len: len as u64,
            mask: if len.is_power_of_two() {
                len as u64 - 1
            } else {
                0
            },
        }
    }

    /// The same cells, each holding its
    /// [`CELL_PAD`](super::layout::CELL_PAD) bytes too: words and payload
    /// may run to the next cell's start (`stride - CELL_HDR` bytes after
    /// the header, not `cell_size - CELL_HDR`). The pad is a 64-byte cache
    /// line of its own (cells are 64-aligned, sizes multiples of 64), so
    /// filling it shares no 64-byte line with the next cell's state word
    /// (on CPUs with 128-byte lines or an adjacent-line prefetcher they are
    /// neighbours: a cost, not a race). The shared queue's cells
    /// (`mpq.rs`): with 4 KiB cells a 4 KiB Medium with up to 4 argument
    /// words takes one cell (4,128 B after the header, less 8 B a word;
    /// before, 4,064) and a 16 KiB one four, not five.
    /// The pad stays inside the mapping `new` was given (it spans `len`
    /// whole strides) and the headers stay where they were (the pad's
    /// purpose: different L1 sets). Writer and reader must agree: both
    /// sides of a queue are made by `shared_rx::queue`, and the file's
    /// layout version says so to a rank of another build.
    pub(crate) fn padded(self) -> Self {
        Cells {
            room: self.stride - CELL_HDR,
            ..self
        }
    }

    /// The word at offset `off` of the control block.
    #[inline(always)]
    pub(crate) fn ctrl(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off + 8 <= RING_CTRL && off.is_multiple_of(8));
        // SAFETY: `off + 8 <= RING_CTRL` (every caller passes a constant
        // inside the control block), which starts the mapping.
        let at = unsafe { self.base.add(off) } as *const AtomicU64;
        // SAFETY: the word lies in the control block, 8-aligned, mapped
        // for the cells' lifetime; only atomics touch it.
        unsafe { &*at }
    }

    /// The number of cells.
    #[inline(always)]
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The cell index of sequence number (ticket) `n`.
    #[inline(always)]
    pub(crate) fn index(&self, n: u64) -> u64 {
        // (len >= 2, so a zero mask means "not a power of two")
        if self.mask != 0 {
            n & self.mask
        } else {
            n % self.len
        }
    }

    /// The first byte of the cell of `n`.
    #[inline(always)]
    pub(crate) fn cell(&self, n: u64) -> *mut u8 {
        // SAFETY: index(n) < len (a mask of a power of two, or a
        // remainder).
        unsafe { self.cell_at(self.index(n)) }
    }

    /// The first byte of cell `i` (an index as [`index`](Self::index)
    /// returns, for a caller that keeps it rather than compute it again).
    ///
    /// # Safety
    /// `i < len`.
    #[inline(always)]
    pub(crate) unsafe fn cell_at(&self, i: u64) -> *mut u8 {
        debug_assert!(i < self.len);
        // SAFETY: i < len (the contract), so the cell lies inside the
        // mapping.
        unsafe { self.base.add(RING_CTRL + i as usize * self.stride) }
    }

    /// The first word of cell `i` (its protocol's word).
    ///
    /// # Safety
    /// `i < len`.
    #[inline(always)]
    pub(crate) unsafe fn word_at(&self, i: u64) -> &AtomicU64 {
        // SAFETY: i < len (the contract).
        let cell = unsafe { self.cell_at(i) };
        // SAFETY: the cell's 8-aligned first word lies inside the mapping,
        // and only atomics touch it.
        unsafe { &*(cell as *const AtomicU64) }
    }

    /// The first word of the cell of `n` (its protocol's word).
    #[inline(always)]
    pub(crate) fn word(&self, n: u64) -> &AtomicU64 {
        // SAFETY: every cell starts with an 8-aligned word inside the
        // mapping (`cell`), which only atomics touch.
        unsafe { &*(self.cell(n) as *const AtomicU64) }
    }

    /// The bytes: the first and the length (control block and cells).
    pub(crate) fn span(&self) -> (*mut u8, usize) {
        (self.base, RING_CTRL + self.len as usize * self.stride)
    }

    /// Payload capacity of a cell carrying `nwords` argument words.
    #[inline(always)]
    pub(crate) fn capacity(&self, nwords: usize) -> usize {
        self.room - nwords * 8
    }

    /// Write the meta and argument words of the cell of `n` (not its first
    /// word); returns the cell.
    ///
    /// # Safety
    /// The cell of `n` is the caller's to write: its protocol keeps the
    /// consumer off it until published and no other writer touches it.
    /// `words.len() <= MAX_WORDS` (which every cell holds: `new`).
    #[inline(always)]
    pub(crate) unsafe fn write_head(&self, n: u64, meta: CellMeta, words: &[u64]) -> *mut u8 {
        // SAFETY: index(n) < len; the rest is the caller's contract.
        unsafe { self.write_head_at(self.index(n), meta, words) }
    }

    /// [`write_head`](Self::write_head) of cell `i` (an index).
    ///
    /// # Safety
    /// `i < len`, and cell `i` is the caller's to write as in
    /// [`write_head`](Self::write_head); `words.len() <= MAX_WORDS`.
    #[inline(always)]
    pub(crate) unsafe fn write_head_at(&self, i: u64, meta: CellMeta, words: &[u64]) -> *mut u8 {
        debug_assert!(words.len() <= MAX_WORDS);
        // SAFETY: i < len (the contract).
        let cell = unsafe { self.cell_at(i) };
        // SAFETY: offset 8 (past the protocol's word) is inside the cell,
        // which `cell` keeps inside the mapping.
        let meta_at = unsafe { cell.add(8) } as *mut CellMeta;
        // SAFETY: the CellMeta slot is bytes 8..CELL_HDR of the cell,
        // 8-aligned (cells are 64-aligned; `align_of::<CellMeta>() == 8`,
        // asserted in `layout`); the caller's to write (contract).
        unsafe { std::ptr::write(meta_at, meta) };
        // SAFETY: CELL_HDR < cell_size, so the words' start is inside the
        // cell.
        let at = unsafe { cell.add(CELL_HDR) } as *mut u64;
        // Word by word with volatile stores: a loop of plain writes (or
        // `copy_nonoverlapping`) is compiled into a libc `memcpy` call,
        // about 20 instructions for a one-word Short (a loop of volatile
        // stores is never turned into a call; check with `objdump -d`).
        for (i, &w) in words.iter().enumerate() {
            // SAFETY: i < words.len() <= MAX_WORDS (the contract), and
            // every cell holds MAX_WORDS words (`new`): inside the cell.
            let word = unsafe { at.add(i) };
            // SAFETY: word `i` of the cell, in bounds (above) and 8-aligned
            // (64-aligned cell, CELL_HDR = 32); the caller's to write.
            unsafe { word.write_volatile(w) };
        }
        cell
    }

    /// Write the cell of `n` (meta, words, payload), not its first word.
    ///
    /// # Safety
    /// As [`write_head`](Self::write_head), and `chunk.len() <=
    /// capacity(words.len())`.
    #[inline(always)]
    pub(crate) unsafe fn write(&self, n: u64, meta: CellMeta, words: &[u64], chunk: &[u8]) {
        debug_assert!(chunk.len() <= self.capacity(words.len()));
        // SAFETY: the caller's contract is `write_head`'s.
        let cell = unsafe { self.write_head(n, meta, words) };
        // SAFETY: the words end at most `room` bytes past the header (the
        // contract), inside the cell's stride or one past it.
        let payload = unsafe { cell.add(CELL_HDR + words.len() * 8) };
        // SAFETY: `chunk` is a live slice; `chunk.len() <= capacity(words)`
        // (the contract) keeps the destination within `room` bytes of the
        // header, inside the cell's stride (its pad included), which is
        // the caller's to write; `memmove` needs no alignment.
        unsafe { crate::memmove::memmove(chunk.as_ptr(), payload, chunk.len()) };
    }

    /// Read and vet the published cell of `n`: its meta (with the sender's
    /// rank in `pad`, as written), words and payload; `Err` when its header
    /// is malformed.
    ///
    /// # Safety
    /// The cell of `n` is published (its protocol's acquire load saw the
    /// publish) and stays unchanged while the returned view lives (the
    /// consumer releases it only after).
    #[inline(always)]
    pub(crate) unsafe fn read(&self, n: u64) -> (CellMeta, Result<CellView<'_>, String>) {
        let cell = self.cell(n);
        // SAFETY: offset 8 (past the protocol's word) is inside the cell.
        let meta_at = unsafe { cell.add(8) } as *const CellMeta;
        // SAFETY: the published cell's CellMeta slot, complete (the
        // contract) and 8-aligned; every bit pattern is a valid CellMeta
        // (plain integers), and `check_meta` vets what a peer wrote.
        let meta = unsafe { std::ptr::read(meta_at) };
        if let Err(e) = check_meta(&meta, self.room) {
            return (meta, Err(e));
        }
        let nw = meta.nwords as usize;
        // SAFETY: CELL_HDR < cell_size: the words' start is inside the cell.
        let words_at = unsafe { cell.add(CELL_HDR) } as *const u64;
        // SAFETY: check_meta bounded `nw` by MAX_WORDS, and every cell
        // holds that many (`new`), so the words lie in the published cell,
        // unchanged while the view lives (the contract); 8-aligned.
        let words = unsafe { std::slice::from_raw_parts(words_at, nw) };
        // SAFETY: `nw * 8 <= room` (as above): inside the cell's stride
        // or one past it.
        let chunk_at = unsafe { cell.add(CELL_HDR + nw * 8) };
        // SAFETY: check_meta bounded `meta.len` by `room` less the words:
        // the chunk ends at most `room` bytes past the header, inside the
        // cell's stride (`room <= stride - CELL_HDR`), in the mapping;
        // unchanged while the view lives, as above.
        let chunk = unsafe { std::slice::from_raw_parts(chunk_at, meta.len as usize) };
        (meta, Ok(CellView { meta, words, chunk }))
    }

    /// The published cell of `n` if it is a well-formed Short (a one-cell
    /// packet of argument words only: `F_FIRST | F_LAST`, no payload, at
    /// most [`MAX_WORDS`] words): [`Peek::Short`] with the sender's rank
    /// as written, else [`Peek::Other`]. Plain compares, no `Result`.
    ///
    /// # Safety
    /// As [`read`](Self::read).
    #[inline(always)]
    pub(crate) unsafe fn read_short(&self, n: u64) -> Peek<'_> {
        let cell = self.cell(n);
        // SAFETY: offset 8 (past the protocol's word) is inside the cell.
        let meta_at = unsafe { cell.add(8) } as *const CellMeta;
        // SAFETY: as in `read`: complete, 8-aligned, any bit pattern valid;
        // only the one accepted below is used.
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
        // SAFETY: nwords <= MAX_WORDS (checked just above), which every
        // cell holds (`new`); 8-aligned; unchanged while the borrow lives
        // (the contract).
        let words = unsafe { std::slice::from_raw_parts(words_at, meta.nwords as usize) };
        Peek::Short(meta.pad as usize, meta.tag, words)
    }
}
