//! Collectives over the PGAS layer: barrier (also split-phase
//! notify/wait), broadcast, reduce and allreduce. Data moves with the
//! job's one-sided path (native or AM) through a symmetric scratch block,
//! so both paths are exercised; reductions combine in rank order, so every
//! rank gets bit-identical floating-point results.

use crate::context::{Pgas, SCRATCH};
use crate::reduce::{Op, Reduce};
use bytemuck::Pod;
use splitrt_am::{Error, Payload, Result};
use std::sync::atomic::Ordering;

impl Pgas {
    /// Wait until every rank has entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        self.barrier_notify()?;
        self.barrier_wait()
    }

    /// Split-phase barrier, first half: announce arrival and return.
    pub fn barrier_notify(&self) -> Result<()> {
        let i = &self.inner;
        if i.notified.load(Ordering::Relaxed) != i.waited.load(Ordering::Relaxed) {
            return Err(Error::usage("barrier_notify twice without barrier_wait").at_rank(i.rank));
        }
        let e = i.notified.fetch_add(1, Ordering::Relaxed) + 1;
        if i.rank == 0 {
            i.st.arrivals[(e % 2) as usize].fetch_add(1, Ordering::AcqRel);
            Ok(())
        } else {
            i.ep.request(0, i.h.arrive, &[e], Payload::None)
        }
    }

    /// Split-phase barrier, second half: wait until every rank notified.
    pub fn barrier_wait(&self) -> Result<()> {
        let i = &self.inner;
        let e = i.notified.load(Ordering::Relaxed);
        if e == i.waited.load(Ordering::Relaxed) {
            return Err(Error::usage("barrier_wait without barrier_notify").at_rank(i.rank));
        }
        let st = &i.st;
        if i.rank == 0 {
            let a = &st.arrivals[(e % 2) as usize];
            i.ep.wait_until(|| a.load(Ordering::Acquire) == i.size as u64)?;
            a.store(0, Ordering::Release);
            for r in 1..i.size {
                i.ep.request(r, i.h.release, &[e], Payload::None)?;
            }
        } else {
            i.ep.wait_until(|| st.released.load(Ordering::Acquire) >= e)?;
        }
        i.waited.store(e, Ordering::Relaxed);
        Ok(())
    }

    /// Copy `data` from `root` to every rank.
    pub fn broadcast<T: Pod>(&self, root: usize, data: &mut [T]) -> Result<()> {
        let i = &self.inner;
        if root >= i.size {
            return Err(
                Error::usage(format!("broadcast root {root} does not exist")).at_rank(i.rank),
            );
        }
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(data);
        for chunk in bytes.chunks_mut(SCRATCH as usize) {
            if i.rank == root {
                self.write_scratch(chunk);
            }
            self.barrier()?;
            if i.rank != root {
                i.get_blocking(root, i.scratch, chunk)?;
            }
            self.barrier()?;
        }
        Ok(())
    }

    /// Combine every rank's `data` element-wise with `op`; every rank gets
    /// the result.
    pub fn allreduce<T: Reduce>(&self, data: &mut [T], op: Op) -> Result<()> {
        self.reduce_to(None, data, op)
    }

    /// Combine every rank's `data` with `op` into `root`'s `data` (other
    /// ranks' `data` is left unchanged).
    pub fn reduce<T: Reduce>(&self, root: usize, data: &mut [T], op: Op) -> Result<()> {
        if root >= self.size() {
            return Err(
                Error::usage(format!("reduce root {root} does not exist")).at_rank(self.rank())
            );
        }
        self.reduce_to(Some(root), data, op)
    }

    fn reduce_to<T: Reduce>(&self, root: Option<usize>, data: &mut [T], op: Op) -> Result<()> {
        let i = &self.inner;
        if T::combine(op, T::zeroed(), T::zeroed()).is_none() {
            return Err(Error::usage(format!(
                "{op:?} does not apply to {}",
                std::any::type_name::<T>()
            ))
            .at_rank(i.rank));
        }
        let per = (SCRATCH as usize / std::mem::size_of::<T>().max(1)).max(1);
        let mut acc = vec![T::zeroed(); per.min(data.len())];
        let mut tmp = vec![T::zeroed(); per.min(data.len())];
        for chunk in data.chunks_mut(per) {
            self.write_scratch(bytemuck::cast_slice(chunk));
            self.barrier()?;
            if root.is_none_or(|r| r == i.rank) {
                let n = chunk.len();
                for r in 0..i.size {
                    let dst = if r == 0 { &mut acc[..n] } else { &mut tmp[..n] };
                    i.get_blocking(r, i.scratch, bytemuck::cast_slice_mut(dst))?;
                    if r > 0 {
                        for (a, b) in acc[..n].iter_mut().zip(&tmp[..n]) {
                            *a = T::combine(op, *a, *b).expect("op checked above");
                        }
                    }
                }
            }
            self.barrier()?;
            if root.is_none_or(|r| r == i.rank) {
                chunk.copy_from_slice(&acc[..chunk.len()]);
            }
        }
        Ok(())
    }

    /// Copy bytes into this rank's own scratch block.
    fn write_scratch(&self, bytes: &[u8]) {
        let i = &self.inner;
        let seg = i.st.seg();
        debug_assert!(bytes.len() as u64 <= SCRATCH);
        // SAFETY: the scratch block is a symmetric allocation of SCRATCH
        // bytes in our own segment; chunks never exceed it.
        unsafe {
            std::ptr::copy(
                bytes.as_ptr(),
                seg.base.add(i.scratch as usize),
                bytes.len(),
            )
        };
    }
}
