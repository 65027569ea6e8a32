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
//! tail (release). A reader loads the tail (acquire), copies the data,
//! then (acquire fence) loads the head: the read is good only if both equal
//! the sequence id the signal announced. A rewrite that began before the
//! copy ended shows in the head; one that ended before the copy began shows
//! in the tail; so a torn spectrum is never taken for a good one, digest or
//! not. All accesses are atomic words, so this is sound within one process
//! and across processes sharing the mapping.

use super::signal::{DigestKind, SpectrumInfo};
use std::sync::atomic::{fence, AtomicU64, Ordering};

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
        assert_eq!(data.len(), self.bytes, "spectrum size");
        let seq = self.next;
        self.next += 1;
        let slot = ((seq - 1) % self.slots as u64) as usize;
        let off = slot * slot_bytes(self.bytes);
        let w = &self.words[off / 8..(off + slot_bytes(self.bytes)) / 8];
        let last = w.len() - 1;
        w[0].store(seq, Ordering::Relaxed);
        fence(Ordering::Release);
        w[1].store(timestamp, Ordering::Relaxed);
        for (i, chunk) in data.chunks(8).enumerate() {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            w[2 + i].store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
        w[last].store(seq, Ordering::Release);
        SpectrumInfo {
            offset: off as u64,
            timestamp,
            seq,
            digest: digest.of(data),
        }
    }
}

/// Read the spectrum `info` announced from a ring of spectra of `bytes`
/// bytes into `out` (exactly `bytes` long) and validate it.
pub fn read_validated(
    words: &[AtomicU64],
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
    let tail = w[last].load(Ordering::Acquire);
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let v = w[2 + i].load(Ordering::Relaxed).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    fence(Ordering::Acquire);
    let head = w[0].load(Ordering::Relaxed);
    if tail != info.seq || head != info.seq {
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

    /// Checkable data: a function of the spectrum's sequence id.
    fn fill(seq: u64, out: &mut [u8]) {
        for (i, b) in out.iter_mut().enumerate() {
            *b = (seq.wrapping_mul(31).wrapping_add(i as u64 * 7) >> 1) as u8;
        }
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
            read_validated(&words, bytes, &a, DigestKind::Crc32c, &mut out),
            ReadOutcome::Valid
        );
        assert_eq!(out, d);
        fill(2, &mut d);
        w.write(&d, 11, DigestKind::Crc32c);
        fill(3, &mut d);
        w.write(&d, 12, DigestKind::Crc32c); // laps slot of seq 1
        assert_eq!(
            read_validated(&words, bytes, &a, DigestKind::Crc32c, &mut out),
            ReadOutcome::Overwritten
        );
        let bad = SpectrumInfo {
            offset: 8 * words.len() as u64,
            ..a
        };
        assert_eq!(
            read_validated(&words, bytes, &bad, DigestKind::None, &mut out),
            ReadOutcome::OutOfRing
        );
        let odd = SpectrumInfo { offset: 3, ..a };
        assert_eq!(
            read_validated(&words, bytes, &odd, DigestKind::None, &mut out),
            ReadOutcome::OutOfRing
        );
    }

    /// A producer lapping a slower reader on a 3-slot ring, a million
    /// spectra, digest `none`: every spectrum the reader accepts has
    /// exactly the expected content; the rest are reported overwritten.
    #[test]
    fn no_torn_spectrum_is_ever_valid() {
        let bytes = 256;
        let slots = 3;
        let total = 1_000_000u64;
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
                match read_validated(&words, bytes, &info, DigestKind::None, &mut out) {
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
            valid > 1000 && overwritten > 0,
            "valid {valid}, overwritten {overwritten}"
        );
        println!("{valid} valid, {overwritten} overwritten (none torn)");
    }
}
