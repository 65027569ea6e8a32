//! Writers announce themselves to freezes: the asymmetric fence that lets
//! a freeze wait for every write into a segment that passed its check
//! before the range was marked frozen, at no locked instruction on the
//! writers' side.
//!
//! A thread that writes into a segment (a native put or store, an atomic,
//! `write_segment`, a Long handed to the fabric) runs its frozen-range
//! check and its write inside [`while_writing`] (a `Writing` guard, a
//! depth counter: those paths may nest, a blocking send runs handlers).
//! The native fast paths use [`while_writing_leaf`] (a `WritingLeaf`):
//! find the thread's slot, store `true` to its flag, and store `false` at
//! the end (no load, so no chain of dependent stores across back-to-back
//! puts). Plain instructions and a compiler fence: no `lock` prefix, no
//! `mfence`. A guard kept past its thread's release of its slot (in a
//! thread-local destroyed after the release, say) would end, when it
//! drops, the announcement of the slot's next thread while its write is
//! in flight; so the functions that hand out guards ([`writing`],
//! [`writing_leaf`]: the PGAS layer's hot paths, which hold them in one
//! stack frame) are `unsafe`, and safe code uses the scopes:
//!
//! ```compile_fail,E0133
//! let w = splitrt_am::writing();
//! ```
//!
//! The freeze ([`quiesce`]), having marked the range, pays for both
//! sides: `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` runs a full
//! memory barrier on every other running thread of the process, so each
//! writer is either past its announcement (the freeze sees its flag set
//! or its depth above 0 and waits for the clear flag and the 0 that its
//! `Release` stores publish after the write) or not yet at its check
//! (which then sees the mark).
//! This is the asymmetric fence of liburcu's "membarrier" flavour and of
//! folly's `asymmetricHeavyBarrier`.
//!
//! Slots are registered at a thread's first write (a mutex, once per
//! thread) and recycled when the thread exits; a freeze reads them all.

use parking_lot::Mutex;
use splitrt_runtime::hang::HangWatch;
use splitrt_runtime::{Error, Result};
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;

/// One thread's announcement. Only the owning thread stores; freezes
/// load.
#[repr(align(64))]
struct Slot {
    /// A leaf write is in flight ([`writing_leaf`]: the native fast
    /// paths). Set and cleared by plain stores of constants: no load, so
    /// back-to-back writes form no dependency chain through the slot.
    leaf: AtomicBool,
    /// Nested writes in flight ([`writing`]: the paths that may run other
    /// writes, handlers included, while they hold it).
    depth: AtomicU64,
    /// The slot's thread has exited: a new thread may take it over (its
    /// counters are reset then; a freeze skips a free slot, whatever a
    /// guard leaked on its thread left in them).
    free: AtomicBool,
    /// The OS thread id of the slot's thread (for hang reports).
    tid: AtomicI64,
}

/// Every slot ever handed out (never freed: a freed slot is reused).
static SLOTS: Mutex<Vec<&'static Slot>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's slot once it has written (`const`, no destructor:
    /// reading it is one thread-relative load).
    static MINE: Cell<Option<&'static Slot>> = const { Cell::new(None) };
    /// Gives this thread's slot back when the thread exits.
    static RELEASE: Release = const { Release };
}

/// Frees the thread's slot at thread exit.
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        if let Ok(Some(s)) = MINE.try_with(|m| m.replace(None)) {
            // No guard of this thread is alive now: guards live only
            // inside `while_writing` / `while_writing_leaf` (or the AM
            // layer's own scopes), never in a thread-local that could be
            // destroyed after this one.
            s.free.store(true, Ordering::Release);
        }
    }
}

/// A write in flight on this thread (see the module docs): held from
/// before the frozen-range check until the write is done. Guards nest. A
/// guard stays on its thread (only that thread stores to its slot):
///
/// ```compile_fail,E0277
/// // SAFETY: (a test that this does not compile)
/// let w = unsafe { splitrt_am::writing() };
/// std::thread::spawn(move || drop(w));
/// ```
#[must_use = "the write is announced only while the guard lives"]
pub struct Writing {
    slot: &'static Slot,
    /// Not `Send`: only the slot's own thread may store to it.
    _thread: PhantomData<*const ()>,
}

/// Announce a write on this thread until the returned guard drops. Every
/// path that checks a segment range against the frozen ranges and then
/// writes holds one (or a [`WritingLeaf`]) across both.
///
/// # Safety
///
/// The guard must be dropped on this thread before the thread's
/// thread-local destructors run (hold it in a stack frame; never in a
/// thread-local or a leaked box): after the thread gives its slot back, a
/// late drop would end another thread's announcement. Forgetting it is
/// not undefined behaviour (a freeze waits, then reports the thread as
/// stuck in a write), but do not. Safe code uses [`while_writing`].
#[inline]
pub unsafe fn writing() -> Writing {
    let slot = MINE.get().unwrap_or_else(register);
    let depth = slot.depth.load(Ordering::Relaxed);
    slot.depth.store(depth + 1, Ordering::Relaxed);
    // The check that follows must not be hoisted above the announcement
    // by the compiler; the CPU's reordering is the freeze's membarrier's
    // business.
    compiler_fence(Ordering::SeqCst);
    Writing {
        slot,
        _thread: PhantomData,
    }
}

impl Drop for Writing {
    #[inline]
    fn drop(&mut self) {
        // Release: the write happens-before the freeze's Acquire load that
        // sees the depth go back (nested guards restored theirs first).
        let depth = self.slot.depth.load(Ordering::Relaxed);
        self.slot.depth.store(depth - 1, Ordering::Release);
    }
}

/// [`Writing`] for a write that runs nothing else while it is held (a
/// check and a copy or an atomic update: the native fast paths): two
/// stores of constants to the thread's slot. Leaf guards do not nest with
/// each other (the inner one's drop would end the outer's announcement);
/// inside a [`Writing`] they may.
#[must_use = "the write is announced only while the guard lives"]
pub struct WritingLeaf {
    slot: &'static Slot,
    /// Not `Send`: only the slot's own thread may store to it.
    _thread: PhantomData<*const ()>,
}

/// Announce a leaf write (see [`WritingLeaf`]) until the guard drops.
///
/// # Safety
///
/// As for [`writing`]; and no other leaf guard of this thread is alive
/// (leaf guards do not nest). Safe code uses [`while_writing_leaf`].
#[inline(always)]
pub unsafe fn writing_leaf() -> WritingLeaf {
    let slot = MINE.get().unwrap_or_else(register);
    slot.leaf.store(true, Ordering::Relaxed);
    // As in `writing`: the check stays after the announcement.
    compiler_fence(Ordering::SeqCst);
    WritingLeaf {
        slot,
        _thread: PhantomData,
    }
}

impl Drop for WritingLeaf {
    #[inline(always)]
    fn drop(&mut self) {
        // Release: the write happens-before the freeze's Acquire load that
        // sees the flag clear.
        self.slot.leaf.store(false, Ordering::Release);
    }
}

/// Run `f` (a frozen-range check and the write it allows) announced as a
/// write in flight on this thread: a freeze on another thread waits for it
/// (see the module docs). Announcements nest; `f` may send messages and
/// run handlers. The announcement ends when `f` returns or unwinds.
///
/// ```
/// let n = splitrt_am::while_writing(|| 1 + 1);
/// assert_eq!(n, 2);
/// ```
#[inline]
pub fn while_writing<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the guard lives in this frame and drops before it returns.
    let _w = unsafe { writing() };
    f()
}

/// [`while_writing`] for a leaf write: `f` runs no other write and no
/// handler while announced (a check and a copy or an atomic update: the
/// native fast paths), and costs two stores of constants to the thread's
/// slot. Inside a [`while_writing`] it may nest; two leaf scopes must not
/// (the inner one's end would end the outer's announcement).
#[inline(always)]
pub fn while_writing_leaf<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the guard lives in this frame and drops before it returns.
    let _w = unsafe { writing_leaf() };
    f()
}

/// This thread's first write: take a free slot or make one.
#[cold]
#[inline(never)]
fn register() -> &'static Slot {
    let mut all = SLOTS.lock();
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = i64::from(unsafe { libc::gettid() });
    let reused = all.iter().copied().find(|s| {
        s.free
            .compare_exchange(true, false, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    });
    if let Some(s) = reused {
        // The last owner may have exited inside a write (a leaked guard):
        // this thread starts with none in flight.
        s.leaf.store(false, Ordering::Release);
        s.depth.store(0, Ordering::Release);
        s.tid.store(tid, Ordering::Relaxed);
    }
    let slot = reused.unwrap_or_else(|| {
        let s: &'static Slot = Box::leak(Box::new(Slot {
            leaf: AtomicBool::new(false),
            depth: AtomicU64::new(0),
            free: AtomicBool::new(false),
            tid: AtomicI64::new(tid),
        }));
        all.push(s);
        s
    });
    drop(all);
    MINE.set(Some(slot));
    // At thread exit the slot is given back; if this thread is already
    // past its thread-locals' destruction, the slot simply stays its own.
    let _ = RELEASE.try_with(|_| ());
    slot
}

/// `membarrier(2)` commands (linux/membarrier.h).
const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

fn membarrier(cmd: libc::c_long) -> libc::c_long {
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    }
}

/// The barrier command this kernel serves (registered once), or why none.
fn barrier_cmd() -> std::result::Result<libc::c_long, String> {
    static CMD: OnceLock<std::result::Result<libc::c_long, String>> = OnceLock::new();
    CMD.get_or_init(|| {
        let supported = membarrier(MEMBARRIER_CMD_QUERY);
        if supported < 0 {
            return Err(format!(
                "membarrier(2) is not available ({})",
                std::io::Error::last_os_error()
            ));
        }
        if supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED != 0
            && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0
        {
            Ok(MEMBARRIER_CMD_PRIVATE_EXPEDITED)
        } else if supported & MEMBARRIER_CMD_GLOBAL != 0 {
            Ok(MEMBARRIER_CMD_GLOBAL)
        } else {
            Err(format!(
                "membarrier(2) offers neither PRIVATE_EXPEDITED nor GLOBAL (mask {supported:#x})"
            ))
        }
    })
    .clone()
}

/// Whether this thread may freeze: the kernel offers a process-wide
/// barrier, and the thread holds no write announcement (a freeze inside a
/// write, e.g. in a handler, would wait for itself). Every rank asks this
/// before it freezes anything, and the ranks agree on the answer, so they
/// fail together.
pub fn can_freeze() -> Result<()> {
    barrier_cmd().map_err(|why| {
        Error::usage(format!(
            "cannot freeze: {why}; a freeze needs it to wait for other threads' writes"
        ))
    })?;
    if let Some(s) = MINE.get() {
        let depth = s.depth.load(Ordering::Relaxed);
        if depth != 0 || s.leaf.load(Ordering::Relaxed) {
            return Err(Error::usage(format!(
                "freeze called inside a write (a handler?): this thread holds {} write \
                 announcement(s), and a freeze waits for every write in flight",
                depth + u64::from(s.leaf.load(Ordering::Relaxed))
            )));
        }
    }
    Ok(())
}

/// Run a memory barrier on every thread of this process and wait until
/// every write announced (by [`writing`]) before it has finished. Call it
/// after marking a range frozen: every write into the range from this
/// process is then done or refused. Errors if the kernel offers no
/// process-wide barrier (the freeze cannot be made sound without it), or
/// if this thread holds an announcement itself ([`can_freeze`]). A wait
/// that makes no progress for the hang-report time calls `hang` with the
/// watch and what it waits for (which may end the wait with an error).
pub(crate) fn quiesce(
    watch: &mut HangWatch,
    hang: &mut dyn FnMut(&mut HangWatch, &str) -> Result<()>,
) -> Result<()> {
    can_freeze()?;
    let cmd = barrier_cmd().map_err(Error::usage)?;
    if membarrier(cmd) != 0 {
        return Err(Error::usage(format!(
            "cannot freeze: membarrier(2) failed ({})",
            std::io::Error::last_os_error()
        )));
    }
    let mine = MINE.get();
    let slots: Vec<&'static Slot> = SLOTS.lock().clone();
    for (i, s) in slots.into_iter().enumerate() {
        if mine.is_some_and(|m| std::ptr::eq(m, s)) {
            // this thread holds nothing (checked above)
            continue;
        }
        // Wait until the thread has no write in flight, or has exited (a
        // free slot: whatever it left is no write). A thread between two
        // writes has neither a leaf nor a nested one, so a writer in a
        // loop is seen idle within a few tries.
        let mut spins = 0u32;
        while !s.free.load(Ordering::Acquire)
            && (s.leaf.load(Ordering::Acquire) || s.depth.load(Ordering::Acquire) != 0)
        {
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
                if spins.is_multiple_of(1024) && watch.due() {
                    let what = format!(
                        "in a freeze, waiting for thread {} (writer slot {i}) to finish a \
                         write it announced ({}nested depth {}): a thread stuck in a \
                         handler",
                        s.tid.load(Ordering::Relaxed),
                        if s.leaf.load(Ordering::Relaxed) {
                            "a leaf write, "
                        } else {
                            ""
                        },
                        s.depth.load(Ordering::Relaxed)
                    );
                    hang(watch, &what)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// A writer that passed its check before the mark is waited for; one
    /// after the mark sees it.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "quiesce calls membarrier(2), a system call Miri does not emulate"
    )]
    fn quiesce_waits_for_writes_in_flight() {
        let mark = Arc::new(AtomicBool::new(false));
        let data = Arc::new(AtomicUsize::new(0));
        let in_check = Arc::new(AtomicBool::new(false));
        let (m, d, c) = (mark.clone(), data.clone(), in_check.clone());
        let t = std::thread::spawn(move || {
            // SAFETY: a test; the guard drops in this frame.
            let w = unsafe { writing() };
            if !m.load(Ordering::Relaxed) {
                c.store(true, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(50));
                d.store(1, Ordering::Relaxed);
            }
            drop(w);
        });
        while !in_check.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
        mark.store(true, Ordering::Relaxed);
        quiesce(&mut HangWatch::new(&Default::default()), &mut |_, w| {
            panic!("hang: {w}")
        })
        .unwrap();
        assert_eq!(
            data.load(Ordering::Relaxed),
            1,
            "the write in flight finished"
        );
        t.join().unwrap();
    }

    /// A guard leaked on a thread that then exited, or leaked on a thread
    /// whose slot a new thread took over, does not hang a freeze (before:
    /// `quiesce` spun forever on the dead thread's depth).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "quiesce calls membarrier(2), a system call Miri does not emulate"
    )]
    fn a_leaked_guard_of_an_exited_thread_does_not_hang_a_freeze() {
        // SAFETY: a test of a forgotten guard (not UB: a freeze waits, then reports).
        std::thread::spawn(|| std::mem::forget(unsafe { writing() }))
            .join()
            .unwrap();
        // and a thread that reuses that slot starts with nothing in flight
        std::thread::spawn(|| {
            let s = MINE.get().unwrap_or_else(register);
            assert_eq!(s.depth.load(Ordering::Relaxed), 0);
            assert!(!s.leaf.load(Ordering::Relaxed));
        })
        .join()
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = quiesce(&mut HangWatch::new(&Default::default()), &mut |_, w| {
                panic!("hang: {w}")
            });
            tx.send(r.is_ok()).unwrap();
        });
        let ok = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the freeze hung on a leaked guard of an exited thread");
        assert!(ok);
    }

    /// A live thread's leaked guard is reported as a hang naming the
    /// thread (and, with SPLITRT_HANG_ABORT, ends the wait); a freeze from
    /// inside a write is refused.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "quiesce calls membarrier(2), a system call Miri does not emulate"
    )]
    fn a_live_leaked_guard_is_reported_and_a_freeze_inside_a_write_refused() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: a test of a forgotten guard (not UB: a freeze waits, then reports).
            std::mem::forget(unsafe { writing() });
            tx.send(()).unwrap();
            let _ = stop_rx.recv();
            // give the leaked announcement back before exiting, for the
            // other tests of this process
            let s = MINE.get().unwrap();
            s.depth.store(0, Ordering::Release);
        });
        rx.recv().unwrap();
        let cfg = splitrt_runtime::config::Config {
            hang_report: Some(std::time::Duration::from_millis(50)),
            ..Default::default()
        };
        let mut said = String::new();
        let r = quiesce(&mut HangWatch::new(&cfg), &mut |_, what| {
            said = what.to_string();
            Err(Error::usage("gave up"))
        });
        stop_tx.send(()).unwrap();
        t.join().unwrap();
        assert!(r.is_err());
        assert!(
            said.contains("writer slot") && said.contains("stuck in a handler"),
            "{said}"
        );
        // SAFETY: a test; the guard drops in this frame.
        let w = unsafe { writing() };
        let e = can_freeze().unwrap_err().to_string();
        assert!(e.contains("inside a write"), "{e}");
        drop(w);
    }

    #[test]
    fn guards_nest() {
        // SAFETY: a test; the guards drop in this frame.
        let a = unsafe { writing() };
        // SAFETY: as above.
        let b = unsafe { writing() };
        let slot = MINE.get().unwrap();
        // SAFETY: as above; no other leaf guard.
        let c = unsafe { writing_leaf() };
        assert!(slot.leaf.load(Ordering::Relaxed));
        drop(c);
        assert_eq!(slot.depth.load(Ordering::Relaxed), 2);
        drop(b);
        assert_eq!(
            slot.depth.load(Ordering::Relaxed),
            1,
            "outer still in flight"
        );
        drop(a);
        assert_eq!(slot.depth.load(Ordering::Relaxed), 0);
    }
}
