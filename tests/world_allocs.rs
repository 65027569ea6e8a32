//! A world collective allocates nothing for the world team (issue 25
//! fixes, h9): `Pgas::barrier` and the other world collectives used to
//! make a fresh `Team` for the world on every call, an `Arc` and a
//! members `Vec` of every rank (O(n) per call). Counted here with a
//! counting allocator, per thread, on ranks that are threads over the
//! verbs model (so nothing else of the process is counted).

mod common;
use common::*;

use splitrt::pgas::Op;
use splitrt::runtime::config::RmaPath;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting this thread's allocations.
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; the
// count is a thread-local `Cell` with a const initializer (no lazy
// initialization, no destructor, no allocation).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

const ROUNDS: u64 = 200;

/// Allocations of this thread per call of `f`, over `ROUNDS` calls after
/// a warm-up.
fn per_call(mut f: impl FnMut() -> splitrt::Result<()>) -> splitrt::Result<f64> {
    for _ in 0..20 {
        f()?;
    }
    let before = allocs();
    for _ in 0..ROUNDS {
        f()?;
    }
    Ok((allocs() - before) as f64 / ROUNDS as f64)
}

/// World barriers and allreduces on 1 and 3 ranks over the verbs model:
/// the world team costs them no allocation. Before, each made two (the
/// team's `Arc` and its members `Vec`); the rest of a collective's path
/// may still allocate (its messages), so the check is against a world
/// team made by hand per call, as the old code did.
#[test]
fn fixes_a_world_collective_allocates_nothing_for_the_world_team() {
    for size in [3usize, 1] {
        verbs_model::pgas_on_threads("walloc", size, RmaPath::Native, 4 << 20, 5, move |pg| {
            let barrier = per_call(|| pg.barrier())?;
            let mut x = [1u64; 2];
            let allreduce = per_call(|| pg.allreduce(&mut x, Op::Sum))?;
            // the cost of making a world team, as every world collective did
            let make = per_call(|| {
                std::hint::black_box(pg.world());
                Ok(())
            })?;
            println!(
                "rank {} of {size}: allocations per call: barrier {barrier}, allreduce \
                 {allreduce}, world() {make}",
                pg.rank()
            );
            if size == 1 {
                // nothing travels: the barrier allocates nothing at all
                assert_eq!(barrier, 0.0, "barrier on 1 rank");
            }
            assert_eq!(make, 0.0, "Pgas::world() allocates");
            pg.barrier()
        });
    }
}
