//! A producer's ring of spectrum buffers and the validated read.
//!
//! The ring lives in memory others can read (the producer's exported
//! segment). The producer only ever writes forward and never waits for
//! readers. Each buffer is framed by its sequence id at the head and at the
//! tail (a seqlock with two words):
//!
//! ```text
//! slot: head seq u64 | timestamp u64 | data (bytes, padded to 8) | tail seq u64
//! ```
//!
//! The writer stores the new head, then (release fence) the data, then the
//! tail (release). A reader loads the tail (then an acquire fence), copies
//! the data, then (acquire fence) loads the head: the read is good only if
//! both equal the sequence id the signal announced. A rewrite that began
//! before the copy ended shows in the head; one that ended before the copy
//! began shows in the tail; so a torn spectrum is never taken for a good
//! one, digest or not. All accesses are atomic words, so this is sound
//! within one process and across processes sharing the mapping.
//!
//! A reader's every access is a *relaxed load* (ordered by fences, not by
//! acquire loads): a consumer maps the ring read-only, and only relaxed
//! atomic loads of at most 8 bytes are sound on read-only memory (an
//! acquire load may be implemented by an instruction that writes; see
//! `std::sync::atomic`, "Atomic accesses to read-only memory").
//! [`ReadOnlyWords`] is how such a ring reaches the reader: it offers
//! nothing else.
//!
//! The algorithm is written once over a `Word` trait, which std's `AtomicU64`
//! implements and, in the model checks (`--cfg loom`), loom's: the loom
//! model at the end of this file runs this very code.

use super::signal::{DigestKind, SpectrumInfo};
use std::sync::atomic::{AtomicU64, Ordering};

/// One 8-byte word of ring memory as the seqlock touches it: std's
/// [`AtomicU64`] in the program, loom's in the model checks.
pub(crate) trait Word: Sync {
    /// A relaxed load (the only load the readers use).
    fn load_relaxed(&self) -> u64;
    /// A store with `order` (the writer's).
    fn store_ordered(&self, v: u64, order: Ordering);
    /// A fence of the same memory model as the words.
    fn fence(order: Ordering);
}

impl Word for AtomicU64 {
    #[inline(always)]
    fn load_relaxed(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
    #[inline(always)]
    fn store_ordered(&self, v: u64, order: Ordering) {
        self.store(v, order)
    }
    #[inline(always)]
    fn fence(order: Ordering) {
        std::sync::atomic::fence(order)
    }
}

#[cfg(all(test, loom))]
impl Word for loom::sync::atomic::AtomicU64 {
    fn load_relaxed(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
    fn store_ordered(&self, v: u64, order: Ordering) {
        self.store(v, order)
    }
    fn fence(order: Ordering) {
        loom::sync::atomic::fence(order)
    }
}

/// A ring's words as a reader sees them: relaxed loads only, so a ring
/// mapped read-only (a consumer's [`ImportedRing`](super::export::ImportedRing))
/// is read soundly. To order later reads after a load, follow it with
/// `std::sync::atomic::fence(Ordering::Acquire)`.
#[derive(Clone, Copy)]
pub struct ReadOnlyWords<'a> {
    words: &'a [AtomicU64],
}

impl<'a> From<&'a [AtomicU64]> for ReadOnlyWords<'a> {
    fn from(words: &'a [AtomicU64]) -> Self {
        ReadOnlyWords { words }
    }
}

impl<'a> ReadOnlyWords<'a> {
    /// Words in the ring.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether the ring has no words.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Word `i` (a relaxed load); panics if `i` is out of range.
    #[inline]
    pub fn load(&self, i: usize) -> u64 {
        self.words[i].load(Ordering::Relaxed)
    }
}

/// Where a spectrum's data begins in its slot (after the head sequence id
/// and the timestamp).
pub const DATA_OFFSET: usize = 16;

/// Bytes of a slot for spectra of `bytes` bytes.
pub const fn slot_bytes(bytes: usize) -> usize {
    24 + bytes.div_ceil(8) * 8
}

/// The producer's side of a ring of `slots` buffers.
pub struct RingWriter<'a> {
    words: &'a [AtomicU64],
    bytes: usize,
    slots: usize,
    next: u64,
}

/// What a validated read found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The data is the spectrum the signal announced.
    Valid,
    /// The buffer was rewritten before or while it was read (the producer
    /// lapped the reader).
    Overwritten,
    /// Head and tail matched but the data's digest did not.
    DigestMismatch,
    /// The announced place is not a slot of this ring.
    OutOfRing,
}

impl<'a> RingWriter<'a> {
    /// A writer over `words` (at least `slots * slot_bytes(bytes) / 8`),
    /// starting at sequence id `first` (ids are never 0 once written).
    pub fn new(words: &'a [AtomicU64], bytes: usize, slots: usize, first: u64) -> RingWriter<'a> {
        assert!(slots >= 1 && words.len() * 8 >= slots * slot_bytes(bytes));
        RingWriter {
            words,
            bytes,
            slots,
            next: first.max(1),
        }
    }

    /// Write the next spectrum and return what a signal announces of it.
    /// `data` must be exactly the ring's spectrum size.
    pub fn write(&mut self, data: &[u8], timestamp: u64, digest: DigestKind) -> SpectrumInfo {
        let seq = self.next;
        self.next += 1;
        write_slot(
            self.words, self.bytes, self.slots, seq, data, timestamp, digest,
        )
    }

    /// The sequence id the next [`write`](Self::write) uses.
    pub fn next_seq(&self) -> u64 {
        self.next
    }
}

/// Write spectrum `seq` (>= 1) into its slot (`(seq - 1) % slots`) of a
/// ring of `slots` spectra of `bytes` bytes: head, data, tail, in the
/// order the validated read relies on. `data` must be `bytes` long.
pub fn write_slot(
    words: &[AtomicU64],
    bytes: usize,
    slots: usize,
    seq: u64,
    data: &[u8],
    timestamp: u64,
    digest: DigestKind,
) -> SpectrumInfo {
    write_core(words, bytes, slots, seq, data, timestamp, digest)
}

/// [`write_slot`] over any [`Word`].
#[inline]
fn write_core<W: Word>(
    words: &[W],
    bytes: usize,
    slots: usize,
    seq: u64,
    data: &[u8],
    timestamp: u64,
    digest: DigestKind,
) -> SpectrumInfo {
    assert_eq!(data.len(), bytes, "spectrum size");
    assert!(seq >= 1, "sequence ids start at 1");
    let slot = ((seq - 1) % slots as u64) as usize;
    let off = slot * slot_bytes(bytes);
    let w = &words[off / 8..(off + slot_bytes(bytes)) / 8];
    let last = w.len() - 1;
    w[0].store_ordered(seq, Ordering::Relaxed);
    W::fence(Ordering::Release);
    w[1].store_ordered(timestamp, Ordering::Relaxed);
    let mut chunks = data.chunks_exact(8);
    for (i, chunk) in chunks.by_ref().enumerate() {
        let v = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        w[2 + i].store_ordered(v, Ordering::Relaxed);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        w[2 + bytes / 8].store_ordered(u64::from_le_bytes(b), Ordering::Relaxed);
    }
    w[last].store_ordered(seq, Ordering::Release);
    SpectrumInfo {
        offset: off as u64,
        timestamp,
        seq,
        digest: digest.of(data),
    }
}

/// What [`snapshot_slot`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Snapshot {
    /// The slot is in `out` (still to be checked with [`check_slot`]: a
    /// rewrite may have begun while it was copied).
    Copied,
    /// Its tail already held another sequence id: rewritten, not copied.
    Overwritten,
    /// The range is not inside the ring.
    OutOfRing,
}

/// Copy the whole slot of `stride` bytes at byte `offset` of `words`, that
/// should hold spectrum `seq`, into `out` (resized to `stride`) in the
/// order a validated read needs: the tail word first, then the rest, the
/// head word last. This is what a remote read serves; the reader then
/// checks the copy with [`check_slot`]. A slot whose tail already moved on
/// is not copied.
pub fn snapshot_slot(
    words: &[AtomicU64],
    offset: u64,
    stride: usize,
    seq: u64,
    out: &mut Vec<u8>,
) -> Snapshot {
    snapshot_core(words, offset, stride, seq, out)
}

/// [`snapshot_slot`] over any [`Word`].
fn snapshot_core<W: Word>(
    words: &[W],
    offset: u64,
    stride: usize,
    seq: u64,
    out: &mut Vec<u8>,
) -> Snapshot {
    let Ok(off) = usize::try_from(offset) else {
        return Snapshot::OutOfRing;
    };
    if !off.is_multiple_of(8)
        || !stride.is_multiple_of(8)
        || stride < 24
        || off.checked_add(stride).is_none_or(|e| e > words.len() * 8)
    {
        return Snapshot::OutOfRing;
    }
    let w = &words[off / 8..(off + stride) / 8];
    let last = w.len() - 1;
    let tail = w[last].load_relaxed();
    W::fence(Ordering::Acquire);
    if tail != seq {
        return Snapshot::Overwritten;
    }
    out.resize(stride, 0);
    out[stride - 8..].copy_from_slice(&tail.to_le_bytes());
    copy_words(&w[1..last], &mut out[8..stride - 8]);
    W::fence(Ordering::Acquire);
    out[..8].copy_from_slice(&w[0].load_relaxed().to_le_bytes());
    Snapshot::Copied
}

/// Validate a slot copied by [`snapshot_slot`] (`slot` is the whole slot,
/// `slot_bytes(bytes)` long) against what the signal announced.
pub fn check_slot(
    slot: &[u8],
    bytes: usize,
    info: &SpectrumInfo,
    digest: DigestKind,
) -> ReadOutcome {
    if slot.len() != slot_bytes(bytes) {
        return ReadOutcome::OutOfRing;
    }
    let head = u64::from_le_bytes(slot[..8].try_into().expect("8 bytes"));
    let tail = u64::from_le_bytes(slot[slot.len() - 8..].try_into().expect("8 bytes"));
    if head != info.seq || tail != info.seq {
        return ReadOutcome::Overwritten;
    }
    if digest != DigestKind::None
        && digest.of(&slot[DATA_OFFSET..DATA_OFFSET + bytes]) != info.digest
    {
        return ReadOutcome::DigestMismatch;
    }
    ReadOutcome::Valid
}

/// Copy `out.len()` bytes out of `words` (relaxed atomic loads: the
/// words may be written concurrently; the caller validates). Whole words
/// in a fixed-size loop the compiler turns into plain moves, the partial
/// last word apart.
#[inline]
fn copy_words<W: Word>(words: &[W], out: &mut [u8]) {
    let whole = out.len() / 8;
    let mut chunks = out.chunks_exact_mut(8);
    for (c, w) in chunks.by_ref().zip(words) {
        c.copy_from_slice(&w.load_relaxed().to_le_bytes());
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let n = rest.len();
        let v = words[whole].load_relaxed().to_le_bytes();
        rest.copy_from_slice(&v[..n]);
    }
}

/// Read the spectrum `info` announced from a ring of spectra of `bytes`
/// bytes into `out` (exactly `bytes` long) and validate it. Relaxed loads
/// and acquire fences only: sound on a ring mapped read-only.
pub fn read_validated(
    words: ReadOnlyWords<'_>,
    bytes: usize,
    info: &SpectrumInfo,
    digest: DigestKind,
    out: &mut [u8],
) -> ReadOutcome {
    read_core(words.words, bytes, info, digest, out)
}

/// [`read_validated`] over any [`Word`].
#[inline]
fn read_core<W: Word>(
    words: &[W],
    bytes: usize,
    info: &SpectrumInfo,
    digest: DigestKind,
    out: &mut [u8],
) -> ReadOutcome {
    let stride = slot_bytes(bytes);
    let off = info.offset as usize;
    if !info.offset.is_multiple_of(8)
        || info.offset > usize::MAX as u64
        || off.checked_add(stride).is_none_or(|e| e > words.len() * 8)
        || out.len() != bytes
    {
        return ReadOutcome::OutOfRing;
    }
    let w = &words[off / 8..(off + stride) / 8];
    let last = w.len() - 1;
    let tail = w[last].load_relaxed();
    W::fence(Ordering::Acquire);
    // already rewritten (or being rewritten): say so without copying, so a
    // consumer that fell behind catches up at the cost of two loads
    if tail != info.seq || w[0].load_relaxed() != info.seq {
        return ReadOutcome::Overwritten;
    }
    copy_words(&w[2..last], out);
    W::fence(Ordering::Acquire);
    let head = w[0].load_relaxed();
    if head != info.seq {
        return ReadOutcome::Overwritten;
    }
    if digest != DigestKind::None && digest.of(out) != info.digest {
        return ReadOutcome::DigestMismatch;
    }
    ReadOutcome::Valid
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::checkable;

    /// Checkable data: a function of the spectrum's sequence id.
    fn fill(seq: u64, out: &mut [u8]) {
        checkable::fill(([0, 0], 0, 0), seq, out)
    }

    #[test]
    fn a_read_after_the_write_is_valid_and_a_lap_is_not() {
        let bytes = 100;
        let words: Vec<AtomicU64> = (0..2 * slot_bytes(bytes) / 8)
            .map(|_| AtomicU64::new(0))
            .collect();
        let mut w = RingWriter::new(&words, bytes, 2, 1);
        let mut d = vec![0u8; bytes];
        fill(1, &mut d);
        let a = w.write(&d, 10, DigestKind::Crc32c);
        let mut out = vec![0u8; bytes];
        assert_eq!(
            read_validated(words[..].into(), bytes, &a, DigestKind::Crc32c, &mut out),
            ReadOutcome::Valid
        );
        assert_eq!(out, d);
        fill(2, &mut d);
        w.write(&d, 11, DigestKind::Crc32c);
        fill(3, &mut d);
        w.write(&d, 12, DigestKind::Crc32c); // laps slot of seq 1
        assert_eq!(
            read_validated(words[..].into(), bytes, &a, DigestKind::Crc32c, &mut out),
            ReadOutcome::Overwritten
        );
        let bad = SpectrumInfo {
            offset: 8 * words.len() as u64,
            ..a
        };
        assert_eq!(
            read_validated(words[..].into(), bytes, &bad, DigestKind::None, &mut out),
            ReadOutcome::OutOfRing
        );
        let odd = SpectrumInfo { offset: 3, ..a };
        assert_eq!(
            read_validated(words[..].into(), bytes, &odd, DigestKind::None, &mut out),
            ReadOutcome::OutOfRing
        );
    }

    /// A ring in read-only memory, as a consumer maps a producer's: the
    /// validated read only loads, relaxed (under Miri an acquire load of
    /// read-only memory, which may be compiled to a write on some targets,
    /// is an error). Under Miri this needs Tree Borrows
    /// (`MIRIFLAGS=-Zmiri-tree-borrows`, as `.ci/run` runs it): Stacked
    /// Borrows refuses any atomic view of an immutable static, before the
    /// load.
    #[test]
    fn a_read_only_ring_is_read_with_relaxed_loads_only() {
        // one slot holding spectrum 1 of 8 bytes: head, timestamp, data, tail
        static RING: [u64; 4] = [1, 10, 0x0807_0605_0403_0201, 1];
        // SAFETY: RING is 4 words, 8-aligned and immutable for the whole
        // run (read-only memory: .rodata, a read-only allocation under
        // Miri); AtomicU64 has u64's size and alignment; the slice is only
        // read, through ReadOnlyWords's relaxed loads.
        let words: &[AtomicU64] =
            unsafe { std::slice::from_raw_parts(std::ptr::addr_of!(RING).cast::<AtomicU64>(), 4) };
        let info = SpectrumInfo {
            offset: 0,
            timestamp: 10,
            seq: 1,
            digest: 0,
        };
        let mut out = [0u8; 8];
        let r = read_validated(words.into(), 8, &info, DigestKind::None, &mut out);
        assert_eq!(r, ReadOutcome::Valid);
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8]);
        let ro = ReadOnlyWords::from(words);
        assert_eq!((ro.len(), ro.load(3)), (4, 1));
    }

    /// A producer lapping a slower reader on a 3-slot ring, a million
    /// spectra, digest `none`: every spectrum the reader accepts has
    /// exactly the expected content; the rest are reported overwritten.
    #[test]
    fn no_torn_spectrum_is_ever_valid() {
        let bytes = 256;
        let slots = 3;
        // (Miri interprets every step and switches threads at random
        // points: a few hundred spectra there)
        let (total, least_valid) = if cfg!(miri) {
            (300u64, 1)
        } else {
            (1_000_000u64, 1000)
        };
        let words: Arc<Vec<AtomicU64>> = Arc::new(
            (0..slots * slot_bytes(bytes) / 8)
                .map(|_| AtomicU64::new(0))
                .collect(),
        );
        let latest = Arc::new(AtomicU64::new(0));
        let (wr, lt) = (words.clone(), latest.clone());
        let producer = std::thread::spawn(move || {
            let mut w = RingWriter::new(&wr, bytes, slots, 1);
            let mut d = vec![0u8; bytes];
            for seq in 1..=total {
                fill(seq, &mut d);
                let info = w.write(&d, seq, DigestKind::None);
                lt.store(info.seq, Ordering::Release);
            }
        });
        let (mut valid, mut overwritten) = (0u64, 0u64);
        let mut out = vec![0u8; bytes];
        let mut expect = vec![0u8; bytes];
        loop {
            let seq = latest.load(Ordering::Acquire);
            if seq == 0 {
                std::hint::spin_loop();
                continue;
            }
            // the spectrum the latest signal announced (and an older one,
            // more likely to be overwritten while read)
            for s in [seq, seq.saturating_sub(2).max(1)] {
                let slot = ((s - 1) % slots as u64) as usize;
                let info = SpectrumInfo {
                    offset: (slot * slot_bytes(bytes)) as u64,
                    timestamp: s,
                    seq: s,
                    digest: 0,
                };
                match read_validated(words[..].into(), bytes, &info, DigestKind::None, &mut out) {
                    ReadOutcome::Valid => {
                        fill(s, &mut expect);
                        assert_eq!(out, expect, "spectrum {s} accepted torn");
                        valid += 1;
                    }
                    ReadOutcome::Overwritten => overwritten += 1,
                    other => panic!("{other:?}"),
                }
            }
            if seq == total {
                break;
            }
        }
        producer.join().unwrap();
        assert!(
            valid >= least_valid && (cfg!(miri) || overwritten > 0),
            "valid {valid}, overwritten {overwritten}"
        );
        println!("{valid} valid, {overwritten} overwritten (none torn)");
    }
}

/// loom model of the seqlock (`RUSTFLAGS="--cfg loom" cargo test -p
/// splitrt-pgas --release --lib loom`): this file's own writer and reader
/// (`write_core`, `read_core`, `snapshot_core`), run over loom's atomics,
/// under every interleaving and every value a relaxed load may return.
/// Weakening any of their orderings (the writer's release fence or tail
/// store, the reader's acquire fences) makes it fail.
#[cfg(all(test, loom))]
mod loom_model {
    use super::*;
    use loom::sync::atomic::AtomicU64 as LoomWord;
    use loom::sync::Arc;

    /// Two data words, so a torn copy can mix two spectra.
    const BYTES: usize = 16;

    fn data(seq: u64) -> [u8; BYTES] {
        let mut d = [0u8; BYTES];
        d[..8].copy_from_slice(&(seq * 0x0101).to_le_bytes());
        d[8..].copy_from_slice(&(seq * 0x1001).to_le_bytes());
        d
    }

    fn info(seq: u64) -> SpectrumInfo {
        SpectrumInfo {
            offset: 0,
            timestamp: seq,
            seq,
            digest: 0,
        }
    }

    /// A one-slot ring holding spectrum 1; the writer overwrites it with
    /// spectrum 2 while the reader reads 2, then 1, then snapshots 1 (the
    /// remote read's copy): whatever is accepted is exactly that spectrum.
    #[test]
    fn loom_seqlock_never_accepts_a_torn_spectrum() {
        loom::model(|| {
            let words: Arc<Vec<LoomWord>> = Arc::new(
                (0..slot_bytes(BYTES) / 8)
                    .map(|_| LoomWord::new(0))
                    .collect(),
            );
            write_core(&words[..], BYTES, 1, 1, &data(1), 1, DigestKind::None);
            let w = words.clone();
            let writer = loom::thread::spawn(move || {
                write_core(&w[..], BYTES, 1, 2, &data(2), 2, DigestKind::None);
            });
            let mut out = [0u8; BYTES];
            for seq in [2, 1] {
                if read_core(&words[..], BYTES, &info(seq), DigestKind::None, &mut out)
                    == ReadOutcome::Valid
                {
                    assert_eq!(out, data(seq), "spectrum {seq} accepted torn");
                }
            }
            let mut slot = Vec::new();
            if snapshot_core(&words[..], 0, slot_bytes(BYTES), 1, &mut slot) == Snapshot::Copied
                && check_slot(&slot, BYTES, &info(1), DigestKind::None) == ReadOutcome::Valid
            {
                assert_eq!(
                    slot[DATA_OFFSET..DATA_OFFSET + BYTES],
                    data(1),
                    "snapshot torn"
                );
            }
            writer.join().unwrap();
        });
    }
}
