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
        self.snooze_with(&|| {
            std::thread::sleep(sleep);
            false
        });
    }

    /// [`snooze`](Self::snooze), with `idle` instead of the timed sleep
    /// once the waiter has spun and yielded (a fabric's
    /// [`idle_wait`](crate::fabric::Wakeup::idle_wait): a doorbell).
    /// `idle` returns whether a peer's ring woke it: the peer is active
    /// (say, putting into this rank's segment), so the waiter spins again
    /// (with a spin time; an oversubscribed host has none) instead of
    /// going straight back to sleep, where each of the peer's next writes
    /// would cost the peer a wake-up system call (a small put into a rank
    /// waiting in a barrier took 0.1-0.4 us instead of 6-10 ns).
    pub fn snooze_with(&mut self, idle: &dyn Fn() -> bool) {
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
        if idle() && !self.spin.is_zero() {
            self.reset();
        }
    }

    /// The configured timed sleep (`SPLITRT_SLEEP_US`).
    pub fn sleep_time(&self) -> std::time::Duration {
        self.sleep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Snooze with nothing to do until the waiter is asleep (bounded).
    fn to_sleep(b: &mut Backoff) {
        let t = Instant::now();
        while b.phase != Phase::Sleep {
            assert!(t.elapsed() < Duration::from_secs(5), "never reached sleep");
            b.snooze_with(&|| false);
        }
    }

    /// A waiter woken by a peer's ring spins again (the peer is active)
    /// unless its host is oversubscribed (no spin time): then it goes
    /// back to sleep as before.
    #[test]
    fn a_ring_sends_a_sleeper_back_to_spinning_unless_oversubscribed() {
        let mut cfg = Config {
            spin: Duration::from_micros(200),
            yield_time: Duration::from_micros(200),
            spin_only: false,
            ..Default::default()
        };
        let mut b = Backoff::new(&cfg);
        to_sleep(&mut b);
        b.snooze_with(&|| false);
        assert!(b.is_slow(), "a timed-out wait stays asleep");
        b.snooze_with(&|| true);
        assert!(!b.is_slow(), "rung: spinning again");
        cfg.spin = Duration::ZERO;
        let mut b = Backoff::new(&cfg);
        to_sleep(&mut b);
        b.snooze_with(&|| true);
        assert!(b.is_slow(), "no spin time: back to sleep");
    }
}
