//! Segment ranges frozen read-only: the one set that both the AM layer
//! (refusing its own sends and writes) and the fabrics (refusing a peer's
//! deposit as it is written, see [`SegmentSink`](crate::fabric::frames))
//! consult. The [`World`](crate::world::World) makes it and hands it to
//! its fabrics; every rank freezes the same ranges (the PGAS layer's
//! `Pgas::freeze` does).
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
    ranges: parking_lot::RwLock<Vec<Range<u64>>>,
}

impl FrozenRanges {
    /// Mark `offset..offset + len` frozen; an error if it overflows or
    /// overlaps a frozen range.
    pub fn add(&self, offset: u64, len: u64) -> Result<()> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| Error::usage("frozen range overflows"))?;
        let mut r = self.ranges.write();
        if let Some(o) = r.iter().find(|o| offset < o.end && o.start < end) {
            return Err(Error::usage(format!(
                "segment bytes {offset:#x}..{end:#x} overlap bytes {:#x}..{:#x}, frozen already",
                o.start, o.end
            )));
        }
        r.push(offset..end);
        self.n.store(r.len(), Ordering::Release);
        Ok(())
    }

    /// Unmark the range `offset..offset + len` (exactly as added); an
    /// error if it is not frozen.
    pub fn remove(&self, offset: u64, len: u64) -> Result<()> {
        let end = offset.saturating_add(len);
        let mut r = self.ranges.write();
        let Some(i) = r.iter().position(|o| *o == (offset..end)) else {
            return Err(Error::usage(format!(
                "segment bytes {offset:#x}..{end:#x} are not frozen"
            )));
        };
        r.swap_remove(i);
        self.n.store(r.len(), Ordering::Release);
        Ok(())
    }

    /// The frozen range that `len` bytes at `offset` touch, if any (one
    /// load while nothing is frozen).
    #[inline]
    pub fn find(&self, offset: u64, len: u64) -> Option<Range<u64>> {
        if self.n.load(Ordering::Acquire) == 0 || len == 0 {
            return None;
        }
        self.find_slow(offset, len)
    }

    #[cold]
    #[inline(never)]
    fn find_slow(&self, offset: u64, len: u64) -> Option<Range<u64>> {
        let end = offset.saturating_add(len);
        self.ranges
            .read()
            .iter()
            .find(|r| offset < r.end && r.start < end)
            .cloned()
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
        assert_eq!(f.find(32, 8), None);
        assert_eq!(f.find(20, 0), None);
        assert!(f.add(24, 16).is_err(), "overlap");
        assert!(f.remove(16, 8).is_err(), "not the range added");
        f.remove(16, 16).unwrap();
        assert_eq!(f.find(0, 100), None);
    }
}
