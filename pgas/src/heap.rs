//! Allocation in the segment: a symmetric heap growing up from the start
//! (every rank performs the same collective allocations in the same order,
//! so each gets the same offset everywhere) and a local heap growing down
//! from the end (first fit, coalescing frees).

use splitrt_am::{Error, Result};

/// Bytes at the start of every segment reserved for splitrt's own counters.
pub const RESERVED_BYTES: u64 = 4096;

/// Bytes of symmetric scratch used by broadcast and reductions (two
/// halves, one per step, alternating).
pub(crate) const SCRATCH: u64 = 256 << 10;

/// The lowest segment offset a user access may touch: below it lie
/// splitrt's reserved first bytes (counters, the shared-memory barrier's
/// words) and the collectives' scratch block, the first symmetric
/// allocation of every rank. Users neither read nor write them: the
/// counters and barrier words are atomics other threads use, and a write
/// into the scratch would forge a collective's data (the agreement of a
/// freeze among them).
pub(crate) const USER_BASE: u64 = RESERVED_BYTES + SCRATCH;

/// Alignment of every allocation (a cache line).
pub const ALIGN: u64 = 64;

/// The allocator state of one rank's segment.
#[derive(Debug)]
pub struct Heap {
    len: u64,
    /// Symmetric blocks (offset, len, freed), in allocation order.
    sym: Vec<(u64, u64, bool)>,
    sym_top: u64,
    /// Local blocks in use (offset -> len) and the free list below `local_bottom`.
    local_used: std::collections::BTreeMap<u64, u64>,
    local_free: std::collections::BTreeMap<u64, u64>,
    local_bottom: u64,
}

fn round_up(x: u64, a: u64) -> Option<u64> {
    x.checked_add(a - 1).map(|v| v / a * a)
}

impl Heap {
    /// A heap over a segment of `len` bytes.
    pub fn new(len: u64) -> Self {
        Heap {
            len,
            sym: Vec::new(),
            sym_top: RESERVED_BYTES,
            local_used: Default::default(),
            local_free: Default::default(),
            local_bottom: len / ALIGN * ALIGN,
        }
    }

    fn exhausted(&self, what: &str, bytes: u64) -> Error {
        Error::usage(format!(
            "{what} allocation of {bytes} B does not fit: {} B symmetric and {} B local in use of a {} B segment (raise SPLITRT_SEGMENT_SIZE)",
            self.sym_top - RESERVED_BYTES,
            self.len / ALIGN * ALIGN - self.local_bottom,
            self.len
        ))
    }

    /// Allocate `bytes` symmetrically; returns the offset.
    pub fn alloc_sym(&mut self, bytes: u64) -> Result<u64> {
        let size =
            round_up(bytes.max(1), ALIGN).ok_or_else(|| self.exhausted("symmetric", bytes))?;
        let off = self.sym_top;
        match off.checked_add(size) {
            Some(end) if end <= self.local_bottom => {
                self.sym_top = end;
                self.sym.push((off, size, false));
                Ok(off)
            }
            _ => Err(self.exhausted("symmetric", bytes)),
        }
    }

    /// Free a symmetric block; space returns once every block above it is
    /// freed too (stack discipline, like the allocations themselves).
    pub fn free_sym(&mut self, off: u64) -> Result<()> {
        let b = self
            .sym
            .iter_mut()
            .find(|b| b.0 == off && !b.2)
            .ok_or_else(|| Error::usage(format!("no symmetric allocation at {off:#x}")))?;
        b.2 = true;
        while let Some(&(o, _, true)) = self.sym.last() {
            self.sym.pop();
            self.sym_top = o;
        }
        Ok(())
    }

    /// Allocate `bytes` for this rank only; returns the offset.
    pub fn alloc_local(&mut self, bytes: u64) -> Result<u64> {
        let size = round_up(bytes.max(1), ALIGN).ok_or_else(|| self.exhausted("local", bytes))?;
        if let Some((&off, &len)) = self.local_free.iter().find(|(_, &l)| l >= size) {
            self.local_free.remove(&off);
            if len > size {
                self.local_free.insert(off + size, len - size);
            }
            self.local_used.insert(off, size);
            return Ok(off);
        }
        match self.local_bottom.checked_sub(size) {
            Some(off) if off >= self.sym_top => {
                self.local_bottom = off;
                self.local_used.insert(off, size);
                Ok(off)
            }
            _ => Err(self.exhausted("local", bytes)),
        }
    }

    /// Free a local block.
    pub fn free_local(&mut self, off: u64) -> Result<()> {
        let len = self
            .local_used
            .remove(&off)
            .ok_or_else(|| Error::usage(format!("no local allocation at {off:#x}")))?;
        let (mut off, mut len) = (off, len);
        // coalesce with the free neighbours
        if let Some((&po, &pl)) = self.local_free.range(..off).next_back() {
            if po + pl == off {
                self.local_free.remove(&po);
                off = po;
                len += pl;
            }
        }
        if let Some(&nl) = self.local_free.get(&(off + len)) {
            self.local_free.remove(&(off + len));
            len += nl;
        }
        if off == self.local_bottom {
            self.local_bottom += len;
            // the block just above may now touch the bottom too
            while let Some(&l) = self.local_free.get(&self.local_bottom) {
                self.local_free.remove(&self.local_bottom);
                self.local_bottom += l;
            }
        } else {
            self.local_free.insert(off, len);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_stack_and_local_first_fit() {
        let mut h = Heap::new(1 << 20);
        let a = h.alloc_sym(10).unwrap();
        let b = h.alloc_sym(100).unwrap();
        assert_eq!(a, RESERVED_BYTES);
        assert_eq!(b, RESERVED_BYTES + 64);
        h.free_sym(a).unwrap();
        assert_eq!(
            h.alloc_sym(1).unwrap(),
            b + 128,
            "a is below b: not reusable yet"
        );
        let l1 = h.alloc_local(1000).unwrap();
        let l2 = h.alloc_local(64).unwrap();
        assert!(l2 < l1 && l1 + 1024 <= 1 << 20);
        h.free_local(l1).unwrap();
        assert_eq!(h.alloc_local(500).unwrap(), l1, "first fit reuses the hole");
        h.free_local(l2).unwrap();
        assert!(h.free_local(l2).is_err());
        assert!(h.alloc_local(1 << 21).is_err());
        let e = h.alloc_sym(1 << 30).unwrap_err().to_string();
        assert!(e.contains("SPLITRT_SEGMENT_SIZE"), "{e}");
    }

    #[test]
    fn local_frees_coalesce_back_to_empty() {
        let mut h = Heap::new(1 << 16);
        let v: Vec<u64> = (0..10)
            .map(|i| h.alloc_local(64 * (i + 1)).unwrap())
            .collect();
        for &o in v
            .iter()
            .rev()
            .step_by(2)
            .chain(v.iter().rev().skip(1).step_by(2))
        {
            h.free_local(o).unwrap();
        }
        assert_eq!(h.local_bottom, 1 << 16);
        assert!(h.local_free.is_empty());
    }
}
