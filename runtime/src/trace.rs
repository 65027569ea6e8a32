//! Where the time of one message goes: per-stage timestamps taken inside
//! the runtime, for `splitrt-bench breakdown`.
//!
//! Off by default. `SPLITRT_TRACE=1` (read when a rank starts) or
//! [`set_enabled`] turns it on. The hot paths are generic over [`Clock`] and
//! check the switch once per operation: off, they run the [`Off`] copy whose
//! probes compile to nothing (a build with the probes deleted measured the
//! same AM Short round trip). On, each probe reads the monotonic clock
//! (~20 ns) and adds to a per-thread accumulator, so the numbers include
//! that overhead.
//!
//! ```
//! use splitrt_runtime::trace::{self, Clock, On, Stage};
//! let t = On::start();
//! let t = On::record(Stage::Enqueue, t);
//! On::record(Stage::Copy, t);
//! let totals = trace::take();
//! assert_eq!(totals.count[Stage::Copy as usize], 1);
//! ```

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// The switch's environment variable.
pub const ENV_TRACE: &str = "SPLITRT_TRACE";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// A stage of a message's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Send: from entering the fabric to holding a free cell (checks, the
    /// producer lock, the credit check).
    Enqueue = 0,
    /// Send: writing header, argument words and payload into the cell, or
    /// depositing a Long payload into the peer's segment.
    Copy = 1,
    /// Send: publishing the cell (the release store of its sequence word).
    Publish = 2,
    /// Receive: from finding the published cell to handing it up (header
    /// checks, payload slice or reassembly).
    Poll = 3,
    /// Receive: handler lookup and checks against the registration.
    Dispatch = 4,
    /// Receive: the handler itself (including any reply it sends).
    Handler = 5,
    /// Receive: handing the cell back (publishing the consumer's tail).
    Release = 6,
}

/// Number of stages.
pub const STAGES: usize = 7;

impl Stage {
    /// Every stage in order.
    pub const ALL: [Stage; STAGES] = [
        Stage::Enqueue,
        Stage::Copy,
        Stage::Publish,
        Stage::Poll,
        Stage::Dispatch,
        Stage::Handler,
        Stage::Release,
    ];

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Enqueue => "send: enqueue",
            Stage::Copy => "send: copy",
            Stage::Publish => "send: publish",
            Stage::Poll => "recv: poll",
            Stage::Dispatch => "recv: dispatch",
            Stage::Handler => "recv: handler",
            Stage::Release => "recv: release",
        }
    }
}

/// Accumulated time per stage on one thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Nanoseconds spent per stage.
    pub sum_ns: [u64; STAGES],
    /// Samples per stage.
    pub count: [u64; STAGES],
}

impl Totals {
    /// Mean nanoseconds of `s` (0 without samples).
    pub fn mean_ns(&self, s: Stage) -> f64 {
        let i = s as usize;
        if self.count[i] == 0 {
            0.0
        } else {
            self.sum_ns[i] as f64 / self.count[i] as f64
        }
    }
}

thread_local! {
    static ACC: RefCell<Totals> = RefCell::new(Totals::default());
}

/// Whether probes record.
#[inline(always)]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Turn recording on or off for the whole process.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// How hot paths take timestamps. Code is generic over it and checks
/// [`enabled`] once per operation to pick [`On`] or [`Off`]; with [`Off`]
/// every probe compiles to nothing, so the switch costs one predictable
/// branch per send, poll and dispatch, not one per probe.
pub trait Clock: Copy {
    /// A point in time (`()` when off).
    type Mark: Copy;
    /// Now.
    fn start() -> Self::Mark;
    /// Add the time since `since` to `stage`; returns now.
    fn record(stage: Stage, since: Self::Mark) -> Self::Mark;
}

/// Probes that do nothing.
#[derive(Clone, Copy, Debug)]
pub struct Off;

/// Probes that read the clock and accumulate per stage.
#[derive(Clone, Copy, Debug)]
pub struct On;

impl Clock for Off {
    type Mark = ();
    #[inline(always)]
    fn start() {}
    #[inline(always)]
    fn record(_: Stage, _: ()) {}
}

impl Clock for On {
    type Mark = Instant;
    #[inline]
    fn start() -> Instant {
        Instant::now()
    }
    #[inline]
    fn record(stage: Stage, since: Instant) -> Instant {
        record_slow(stage, since)
    }
}

#[cold]
#[inline(never)]
fn record_slow(stage: Stage, t0: Instant) -> Instant {
    let now = Instant::now();
    let ns = now.duration_since(t0).as_nanos() as u64;
    ACC.with(|a| {
        let mut a = a.borrow_mut();
        a.sum_ns[stage as usize] += ns;
        a.count[stage as usize] += 1;
    });
    now
}

/// This thread's totals since the last `take`, and reset them.
pub fn take() -> Totals {
    ACC.with(|a| std::mem::take(&mut *a.borrow_mut()))
}
