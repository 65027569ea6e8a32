//! What a rank says when `/dev/shm` runs out under a shared-memory file
//! whose pages are allocated on first touch.
//!
//! By default splitrt does not reserve its files' space at start-up (on a
//! host with more ranks than cores, zeroing every rank's 64 MiB segment up
//! front was most of the start-up time): it checks that `/dev/shm` has
//! room for every rank's file, and the kernel allocates a page when it is
//! first written. If another program fills `/dev/shm` in between, that
//! write raises `SIGBUS`. [`watch`] registers a mapping; the handler
//! installed with the first one writes a message naming the rank, the cause
//! and the remedies when the faulting address lies in a watched mapping,
//! then puts back the previous disposition, so the access faults again and
//! ends the process as it would have (killed by `SIGBUS`) or reaches a
//! handler the program installed first. `SPLITRT_SHM_RESERVE=1` reserves
//! the space at start-up instead (`posix_fallocate`), and then no `SIGBUS`
//! can happen.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Mappings watched at once (a rank maps its own file and its host peers').
const MAX_WATCHED: usize = 4096;

/// A watched address range; `end == 0`: free.
struct Range {
    start: AtomicUsize,
    end: AtomicUsize,
}

static RANGES: [Range; MAX_WATCHED] = [const {
    Range {
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
    }
}; MAX_WATCHED];

/// The rank named in the message (`usize::MAX`: not known yet).
static RANK: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The receive queue this process's host chose (`SPLITRT_SHM_QUEUE`, with
/// `auto` resolved), which decides the settings the message names:
/// [`QUEUE_UNKNOWN`], [`QUEUE_PAIRS`] or [`QUEUE_SHARED`].
static QUEUE: AtomicU8 = AtomicU8::new(QUEUE_UNKNOWN);
const QUEUE_UNKNOWN: u8 = 0;
const QUEUE_PAIRS: u8 = 1;
const QUEUE_SHARED: u8 = 2;

/// The disposition before ours, put back when a `SIGBUS` arrives.
static PREVIOUS: OnceLock<Previous> = OnceLock::new();

struct Previous(libc::sigaction);
// SAFETY: a plain C struct of a handler address, flags and a signal mask;
// written once before the handler can run, then only read.
unsafe impl Send for Previous {}
// SAFETY: as above.
unsafe impl Sync for Previous {}

/// A watched mapping; dropping it stops watching.
#[derive(Debug)]
pub struct Watch(Option<usize>);

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            RANGES[i].end.store(0, Ordering::Release);
        }
    }
}

/// Name this process's rank in the message.
pub fn name_rank(rank: usize) {
    RANK.store(rank, Ordering::Relaxed);
}

/// Name the receive queue this process's host uses (`shared`: the shared
/// receive queue, else the per-pair rings), chosen when its file is
/// made: the message names the settings that size that queue's file.
pub fn name_queue(shared: bool) {
    QUEUE.store(
        if shared { QUEUE_SHARED } else { QUEUE_PAIRS },
        Ordering::Relaxed,
    );
}

/// The message's remedies for a host of receive queue `queue`
/// ([`QUEUE`]'s values): the settings that size its files.
fn remedies(queue: u8) -> &'static [u8] {
    match queue {
        QUEUE_SHARED => {
            b"Free space in /dev/shm, run fewer ranks per node, lower SPLITRT_SEGMENT_SIZE, \
              SPLITRT_RING_LEN or SPLITRT_CELL_SIZE (this node's ranks use the shared receive \
              queue: SPLITRT_SHM_QUEUE=shared, or auto with 16 or more ranks on a node), or set \
              SPLITRT_SHM_RESERVE=1 to reserve every file's space at start-up.\n"
        }
        QUEUE_PAIRS => {
            b"Free space in /dev/shm, run fewer ranks per node, lower SPLITRT_SEGMENT_SIZE, \
              SPLITRT_RING_LEN, SPLITRT_CELL_SIZE or SPLITRT_MEDIUM_SLOTS (this node's ranks use \
              the per-pair rings: SPLITRT_SHM_QUEUE=pairs, or auto with fewer than 16 ranks on a \
              node; SPLITRT_SHM_QUEUE=shared keeps one receive queue per rank instead), or set \
              SPLITRT_SHM_RESERVE=1 to reserve every file's space at start-up.\n"
        }
        _ => {
            b"Free space in /dev/shm, run fewer ranks per node, lower SPLITRT_SEGMENT_SIZE, \
              SPLITRT_RING_LEN, SPLITRT_CELL_SIZE or (with the per-pair rings) \
              SPLITRT_MEDIUM_SLOTS, or set SPLITRT_SHM_RESERVE=1 to reserve every file's space \
              at start-up.\n"
        }
    }
}

/// Watch `len` bytes at `base` (a lazily allocated shared-memory mapping).
/// `Watch(None)` when the table is full (a fault there then ends the
/// process without the message).
pub fn watch(base: *const u8, len: usize) -> Watch {
    static CLAIM: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    install();
    let _claim = CLAIM.lock();
    let Some(i) = RANGES
        .iter()
        .position(|r| r.end.load(Ordering::Acquire) == 0)
    else {
        return Watch(None);
    };
    RANGES[i].start.store(base as usize, Ordering::Release);
    RANGES[i]
        .end
        .store(base as usize + len.max(1), Ordering::Release);
    Watch(Some(i))
}

fn watched(addr: usize) -> bool {
    RANGES.iter().any(|r| {
        let end = r.end.load(Ordering::Acquire);
        end != 0 && (r.start.load(Ordering::Acquire)..end).contains(&addr)
    })
}

fn install() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: `libc::sigaction` is integers and a signal set: all-zero
        // bytes are a valid value (no handler, no flags, empty mask).
        let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
        new.sa_sigaction = on_sigbus as *const () as usize;
        new.sa_flags = libc::SA_SIGINFO;
        // SAFETY: sigemptyset(3) writes only the signal set we pass, a
        // field of `new`, which we own.
        unsafe { libc::sigemptyset(&mut new.sa_mask) };
        // SAFETY: as for `new`: all-zero bytes are a valid sigaction.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: sigaction(2) with `new` naming our handler, an
        // `extern "C" fn(c_int, *mut siginfo_t, *mut c_void)` as SA_SIGINFO
        // requires (it gets the faulting address); the previous disposition
        // is written into `old`, which we own.
        if unsafe { libc::sigaction(libc::SIGBUS, &new, &mut old) } != 0 {
            old.sa_sigaction = libc::SIG_DFL;
        }
        Previous(old)
    });
}

/// Write `s` to stderr (async-signal-safe).
fn say(s: &[u8]) {
    // SAFETY: write(2) from a valid buffer; its result does not matter.
    unsafe { libc::write(2, s.as_ptr().cast(), s.len()) };
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t, alive for the handler's
    // run, to SA_SIGINFO handlers (`install` sets SA_SIGINFO).
    let info = unsafe { &*info };
    // SAFETY: `si_addr` reads the union member the kernel fills for
    // SIGBUS, the only signal this handler is installed for: the faulting
    // address.
    let addr = unsafe { info.si_addr() } as usize;
    if watched(addr) {
        say(b"splitrt: rank ");
        let rank = RANK.load(Ordering::Relaxed);
        if rank == usize::MAX {
            say(b"?");
        }
        let mut digits = [0u8; 20];
        let mut n = rank;
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 || i == 0 {
                break;
            }
        }
        if rank != usize::MAX {
            say(&digits[i..]);
        }
        say(
            b": SIGBUS writing its shared memory: /dev/shm ran out of space after start-up \
              (splitrt's files get their pages when first touched; this job's own use, or \
              another program or job, filled /dev/shm). ",
        );
        say(remedies(QUEUE.load(Ordering::Relaxed)));
    }
    if let Some(p) = PREVIOUS.get() {
        // SAFETY: sigaction(2) putting back the disposition saved at
        // install; returning re-runs the faulting access under it.
        unsafe { libc::sigaction(libc::SIGBUS, &p.0, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "installs a SIGBUS handler (sigaction: FFI)")]
    fn watched_ranges_come_and_go() {
        let a = watch(0x1000 as *const u8, 0x1000);
        let b = watch(0x10000 as *const u8, 0x100);
        assert!(watched(0x1000) && watched(0x1fff) && watched(0x100ff));
        assert!(!watched(0x2000) && !watched(0xfff));
        drop(a);
        assert!(!watched(0x1000));
        assert!(watched(0x10000));
        drop(b);
        assert!(!watched(0x10000));
    }

    /// The message names the settings that size the files of the queue
    /// this host chose: the landing zones only with the rings (which
    /// have them), the shared queue as the remedy there.
    #[test]
    fn the_remedies_follow_the_chosen_queue() {
        let text = |q| String::from_utf8_lossy(remedies(q)).into_owned();
        let shared = text(QUEUE_SHARED);
        assert!(
            !shared.contains("SPLITRT_MEDIUM_SLOTS") && shared.contains("shared receive queue"),
            "{shared}"
        );
        let from = crate::fabric::shm::queue_choice::SHARED_QUEUE_FROM;
        assert!(
            shared.contains(&format!("auto with {from} or more")),
            "{shared}"
        );
        let pairs = text(QUEUE_PAIRS);
        assert!(pairs.contains(&format!("fewer than {from}")), "{pairs}");
        assert!(
            pairs.contains("SPLITRT_MEDIUM_SLOTS") && pairs.contains("SPLITRT_SHM_QUEUE=shared"),
            "{pairs}"
        );
        for t in [shared, pairs, text(QUEUE_UNKNOWN)] {
            assert!(
                t.contains("SPLITRT_SEGMENT_SIZE") && t.contains("SPLITRT_SHM_RESERVE=1"),
                "{t}"
            );
        }
    }
}
