//! A timeline of the shared-memory send and receive steps, for finding
//! where a flood's time goes (issue 28, session 13): with the
//! `shm-timeline` feature (off by default), each credit step, refusal and
//! poll is stamped with the cycle counter into a fixed array, between
//! `arm` and `disarm`, and `dump` writes the array out. Without the
//! feature every stamp is an empty inline function (nothing is compiled
//! in).
//!
//! One entry is two words: the cycle counter (`rdtsc` on x86-64, else
//! nanoseconds since the first stamp) and `kind << 56 | ch << 48 | arg`.
//! The array holds [`CAP`] entries; stamps past it are dropped (and
//! counted). A stamp is a `rdtsc` and plain stores (no locked
//! instruction, which would drain the store buffer and change what is
//! measured), so it is for one thread a process
//! (`SPLITRT_THREADS=single`): two threads' stamps may share an entry. The ranks of a host share the cycle counter, so their dumps
//! merge into one timeline.

/// What a stamp records (its `arg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Ev {
    /// Sends since the last stamp (arg: how many; counted, not stamped
    /// one by one: a stamp costs about what a send does), stamped before
    /// the next event.
    Sent = 1,
    /// A send refused for want of room (arg: 0 from the Short path, 1
    /// from the general one).
    Refused = 2,
    /// A shared queue sender's credit step at its quota (arg: credits
    /// it got back; 0 = none, it asked for a doorbell).
    Reclaim = 3,
    /// A shared queue looked full at `head` (arg: the ticket).
    Full = 4,
    /// A ring sender read the consumer's tail when its cached one said
    /// full (arg: free cells it found).
    RingTail = 5,
    /// A poll that delivered (arg: packets delivered; the empty polls
    /// since the last stamp are in the next `Empty`).
    Poll = 6,
    /// Empty polls since the last stamp (arg: how many), stamped before
    /// the next non-empty one.
    Empty = 7,
    /// The consumer rang the senders for `want` (arg: 0).
    Rung = 8,
    /// A mark from the caller (`arm` / `disarm`, channel 0 / 1, arg:
    /// its label).
    Mark = 9,
}

/// Entries the array holds.
pub const CAP: usize = 1 << 20;

#[cfg(feature = "shm-timeline")]
mod on {
    use super::{Ev, CAP};
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

    static ARMED: AtomicBool = AtomicBool::new(false);
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    static DROPPED: AtomicU64 = AtomicU64::new(0);
    static EMPTY: AtomicU64 = AtomicU64::new(0);
    static SENT: AtomicU64 = AtomicU64::new(0);
    static LOG: [[AtomicU64; 2]; CAP] = [const { [AtomicU64::new(0), AtomicU64::new(0)] }; CAP];

    #[inline(always)]
    fn now() -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `rdtsc` reads the time-stamp counter; every x86-64
            // processor has it, and it touches no memory.
            unsafe { core::arch::x86_64::_rdtsc() }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            T0.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
        }
    }

    #[inline(always)]
    fn put(ev: Ev, ch: u8, arg: u64) {
        // a load and a store, no read-modify-write (a locked instruction
        // would drain the store buffer at every stamp and change what is
        // measured): stamps of two threads at once may share an entry
        let i = NEXT.load(Ordering::Relaxed);
        if i >= CAP {
            DROPPED.store(DROPPED.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            return;
        }
        NEXT.store(i + 1, Ordering::Relaxed);
        LOG[i][0].store(now(), Ordering::Relaxed);
        LOG[i][1].store(
            (ev as u64) << 56 | (ch as u64) << 48 | (arg & ((1 << 48) - 1)),
            Ordering::Relaxed,
        );
    }

    #[inline(always)]
    pub(crate) fn stamp(ev: Ev, ch: u8, arg: u64) {
        if !ARMED.load(Ordering::Relaxed) {
            return;
        }
        let e = EMPTY.load(Ordering::Relaxed);
        if e != 0 {
            EMPTY.store(0, Ordering::Relaxed);
            put(Ev::Empty, ch, e);
        }
        let n = SENT.load(Ordering::Relaxed);
        if n != 0 {
            SENT.store(0, Ordering::Relaxed);
            put(Ev::Sent, ch, n);
        }
        put(ev, ch, arg);
    }

    #[inline(always)]
    pub(crate) fn sent() {
        if ARMED.load(Ordering::Relaxed) {
            SENT.store(SENT.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }

    #[inline(always)]
    pub(crate) fn empty_poll() {
        if ARMED.load(Ordering::Relaxed) {
            EMPTY.store(EMPTY.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }

    /// Start recording (a [`Ev::Mark`] with `label` first).
    pub fn arm(label: u64) {
        ARMED.store(true, Ordering::Relaxed);
        put(Ev::Mark, 0, label);
    }

    /// Stop recording (a [`Ev::Mark`] with `label` last).
    pub fn disarm(label: u64) {
        put(Ev::Mark, 1, label);
        ARMED.store(false, Ordering::Relaxed);
    }

    /// Write the entries recorded so far to `path`, one a line: `cycles
    /// kind ch arg` (after a `# dropped N` line).
    pub fn dump(path: &std::path::Path) -> std::io::Result<()> {
        use std::io::Write;
        let n = NEXT.load(Ordering::Relaxed).min(CAP);
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(f, "# dropped {}", DROPPED.load(Ordering::Relaxed))?;
        for e in &LOG[..n] {
            let (t, w) = (e[0].load(Ordering::Relaxed), e[1].load(Ordering::Relaxed));
            writeln!(
                f,
                "{t} {} {} {}",
                w >> 56,
                (w >> 48) & 0xff,
                w & ((1 << 48) - 1)
            )?;
        }
        f.flush()
    }
}

#[cfg(feature = "shm-timeline")]
pub use on::{arm, disarm, dump};
#[cfg(feature = "shm-timeline")]
pub(crate) use on::{empty_poll, sent, stamp};

/// Stamp `ev` on channel `ch` (nothing: the feature is off).
#[cfg(not(feature = "shm-timeline"))]
#[inline(always)]
pub(crate) fn stamp(_ev: Ev, _ch: u8, _arg: u64) {}

/// Count an empty poll (nothing: the feature is off).
#[cfg(not(feature = "shm-timeline"))]
#[inline(always)]
pub(crate) fn empty_poll() {}

/// Count a send (nothing: the feature is off).
#[cfg(not(feature = "shm-timeline"))]
#[inline(always)]
pub(crate) fn sent() {}

#[cfg(all(test, feature = "shm-timeline"))]
mod tests {
    use super::*;

    /// Stamps between `arm` and `disarm` are dumped in order, with the
    /// sends and empty polls counted before the next stamp; stamps
    /// outside are not recorded. (Other tests of this binary may stamp
    /// meanwhile: only the lines of this test's channel are checked.)
    #[test]
    #[cfg_attr(miri, ignore = "writes a file")]
    fn stamps_between_arm_and_disarm_are_dumped_in_order() {
        const CH: u8 = 0x7e;
        stamp(Ev::Poll, CH, 99);
        arm(5);
        sent();
        sent();
        stamp(Ev::Reclaim, CH, 3);
        stamp(Ev::Poll, CH, 7);
        disarm(5);
        stamp(Ev::Poll, CH, 98);
        let path = std::env::temp_dir().join(format!("shm-timeline-{}", std::process::id()));
        dump(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let mine: Vec<(u64, u64)> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                l.split(' ')
                    .map(|w| w.parse().unwrap())
                    .collect::<Vec<u64>>()
            })
            .filter(|w| w[2] == CH as u64)
            .map(|w| (w[1], w[3]))
            .collect();
        assert_eq!(
            mine,
            vec![
                (Ev::Sent as u64, 2),
                (Ev::Reclaim as u64, 3),
                (Ev::Poll as u64, 7)
            ]
        );
    }
}
