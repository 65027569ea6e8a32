//! Segment ranges frozen read-only: the one set that both the AM layer
//! (refusing its own sends and writes) and the fabrics (refusing a peer's
//! deposit as it is written, see [`SegmentSink`](crate::fabric::frames))
//! consult. The [`World`](crate::world::World) makes it and hands it to
//! its fabrics; every rank freezes the same ranges (the PGAS layer's
//! `Pgas::freeze` does).
//!
//! A range is frozen in two steps: marked ([`add`](FrozenRanges::add):
//! senders refuse writes into it, while deposits already on their way
//! still land, as part of the frozen contents), then sealed
//! ([`seal`](FrozenRanges::seal), once every rank has drained and the
//! arrivals are fed: references to it are handed out after this, so the
//! fabrics refuse any deposit into it).
//!
//! `n` is read first (one load, usually 0), so a check costs one load
//! while nothing is frozen; the lock is taken only while something is.

use crate::error::{Error, Result};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The set of frozen segment ranges (offsets into this rank's segment;
/// ranges are symmetric, so the same offsets hold on every rank).
#[derive(Debug, Default)]
pub struct FrozenRanges {
    n: AtomicUsize,
    /// Each range, and whether it is sealed.
    ranges: parking_lot::RwLock<Vec<(Range<u64>, bool)>>,
}

impl FrozenRanges {
    /// Mark `offset..offset + len` frozen; an error if it overflows or
    /// overlaps a frozen range.
    pub fn add(&self, offset: u64, len: u64) -> Result<()> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| Error::usage("frozen range overflows"))?;
        let mut r = self.ranges.write();
        if let Some((o, _)) = r.iter().find(|(o, _)| offset < o.end && o.start < end) {
            return Err(Error::usage(format!(
                "segment bytes {offset:#x}..{end:#x} overlap bytes {:#x}..{:#x}, frozen already",
                o.start, o.end
            )));
        }
        r.push((offset..end, false));
        self.n.store(r.len(), Ordering::Release);
        Ok(())
    }

    /// Unmark the range `offset..offset + len` (exactly as added); an
    /// error if it is not frozen.
    pub fn remove(&self, offset: u64, len: u64) -> Result<()> {
        let end = offset.saturating_add(len);
        let mut r = self.ranges.write();
        let Some(i) = r.iter().position(|(o, _)| *o == (offset..end)) else {
            return Err(Error::usage(format!(
                "segment bytes {offset:#x}..{end:#x} are not frozen"
            )));
        };
        r.swap_remove(i);
        self.n.store(r.len(), Ordering::Release);
        Ok(())
    }

    /// Seal the marked range `offset..offset + len` (exactly as added):
    /// from now on deposits into it are refused too. An error if it is
    /// not marked.
    pub fn seal(&self, offset: u64, len: u64) -> Result<()> {
        let end = offset.saturating_add(len);
        let mut r = self.ranges.write();
        let Some(e) = r.iter_mut().find(|(o, _)| *o == (offset..end)) else {
            return Err(Error::usage(format!(
                "segment bytes {offset:#x}..{end:#x} are not frozen"
            )));
        };
        e.1 = true;
        Ok(())
    }

    /// Undo [`seal`](Self::seal): deposits into the range land again,
    /// senders still refuse it. An error if it is not frozen.
    pub fn unseal(&self, offset: u64, len: u64) -> Result<()> {
        let end = offset.saturating_add(len);
        let mut r = self.ranges.write();
        let Some(e) = r.iter_mut().find(|(o, _)| *o == (offset..end)) else {
            return Err(Error::usage(format!(
                "segment bytes {offset:#x}..{end:#x} are not frozen"
            )));
        };
        e.1 = false;
        Ok(())
    }

    /// The frozen range (marked or sealed) that `len` bytes at `offset`
    /// touch, if any (one load while nothing is frozen): senders refuse
    /// writes into it.
    #[inline]
    pub fn find(&self, offset: u64, len: u64) -> Option<Range<u64>> {
        if self.n.load(Ordering::Acquire) == 0 || len == 0 {
            return None;
        }
        self.find_slow(offset, len, false)
    }

    /// The sealed range that `len` bytes at `offset` touch, if any (one
    /// load while nothing is frozen): deposits into it are refused.
    #[inline]
    pub fn find_sealed(&self, offset: u64, len: u64) -> Option<Range<u64>> {
        if self.n.load(Ordering::Acquire) == 0 || len == 0 {
            return None;
        }
        self.find_slow(offset, len, true)
    }

    #[cold]
    #[inline(never)]
    fn find_slow(&self, offset: u64, len: u64, sealed: bool) -> Option<Range<u64>> {
        let end = offset.saturating_add(len);
        self.ranges
            .read()
            .iter()
            .find(|(r, s)| (*s || !sealed) && offset < r.end && r.start < end)
            .map(|(r, _)| r.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_find_remove() {
        let f = FrozenRanges::default();
        assert_eq!(f.find(0, 100), None);
        f.add(16, 16).unwrap();
        assert_eq!(f.find(0, 17), Some(16..32));
        assert_eq!(f.find_sealed(0, 17), None, "marked, not sealed");
        assert!(f.seal(16, 8).is_err());
        f.seal(16, 16).unwrap();
        assert_eq!(f.find_sealed(0, 17), Some(16..32));
        assert_eq!(f.find(32, 8), None);
        assert_eq!(f.find(20, 0), None);
        assert!(f.add(24, 16).is_err(), "overlap");
        assert!(f.remove(16, 8).is_err(), "not the range added");
        f.remove(16, 16).unwrap();
        assert_eq!(f.find(0, 100), None);
    }
}
