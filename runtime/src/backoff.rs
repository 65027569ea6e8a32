//! Waiting politely: spin for a short bounded time, then yield the core,
//! then sleep, so that more ranks than cores (8 ranks on 2 cores) still make
//! progress. A spin-only mode exists for benchmarks on dedicated cores.

use crate::config::Config;
use std::time::{Duration, Instant};

/// The back-off state of one wait.
///
/// ```
/// use splitrt_runtime::{backoff::Backoff, config::Config};
/// let mut b = Backoff::new(&Config::default());
/// for _ in 0..3 { b.snooze(); }
/// ```
pub struct Backoff {
    start: Option<Instant>,
    spins: u32,
    phase: Phase,
    spin: Duration,
    yield_time: Duration,
    sleep: Duration,
    spin_only: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Spin,
    Yield,
    Sleep,
}

impl Backoff {
    /// A fresh back-off using the configured spin and sleep times.
    pub fn new(cfg: &Config) -> Self {
        Backoff {
            start: None,
            spins: 0,
            phase: Phase::Spin,
            spin: cfg.spin,
            yield_time: cfg.yield_time,
            sleep: cfg.sleep,
            spin_only: cfg.spin_only,
        }
    }

    /// Start over (progress was made).
    pub fn reset(&mut self) {
        self.start = None;
        self.spins = 0;
        self.phase = Phase::Spin;
    }

    /// Whether the waiter has moved past spinning (a good moment to check
    /// for slow events such as a failed peer).
    pub fn is_slow(&self) -> bool {
        self.phase != Phase::Spin
    }

    /// Wait a little; each call waits at least as long as the previous one.
    pub fn snooze(&mut self) {
        let sleep = self.sleep;
        self.snooze_with(&|| std::thread::sleep(sleep));
    }

    /// [`snooze`](Self::snooze), with `idle` instead of the timed sleep
    /// once the waiter has spun and yielded (a fabric's
    /// [`idle_wait`](crate::fabric::Fabric::idle_wait): a doorbell).
    pub fn snooze_with(&mut self, idle: &dyn Fn()) {
        let start = *self.start.get_or_insert_with(Instant::now);
        if self.phase == Phase::Spin {
            self.spins = self.spins.wrapping_add(1);
            // Reading the clock costs ~20 ns: look at it once every 64 rounds.
            // (No spin time: yield at once; more ranks than cores.)
            if self.spin_only
                || (!self.spin.is_zero()
                    && (!self.spins.is_multiple_of(64) || start.elapsed() < self.spin))
            {
                // A polling round is itself some hundred instructions; a
                // `pause` after every one (tens of cycles on this EPYC)
                // delayed noticing a message by about that much: an AM
                // round trip 0.22 -> 0.19 us with one every 8th round.
                if self.spins.is_multiple_of(8) {
                    std::hint::spin_loop();
                }
                return;
            }
            self.phase = Phase::Yield;
        }
        if self.phase == Phase::Yield {
            if start.elapsed() < self.spin + self.yield_time {
                std::thread::yield_now();
                return;
            }
            self.phase = Phase::Sleep;
        }
        idle();
    }

    /// The configured timed sleep (`SPLITRT_SLEEP_US`).
    pub fn sleep_time(&self) -> std::time::Duration {
        self.sleep
    }
}
