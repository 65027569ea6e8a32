//! Waiting politely: spin for a short bounded time, then yield the core,
//! then sleep, so that more ranks than cores (8 ranks on 2 cores) still make
//! progress. A spin-only mode exists for benchmarks on dedicated cores.

use crate::config::Config;
use std::time::{Duration, Instant};

/// Under `SPLITRT_SPIN_ONLY` a wait still yields its core once every this
/// many polling rounds, busy rounds (`Backoff::reset`) included (see
/// `Backoff::snooze_with`).
const SPIN_ONLY_YIELD_EVERY: u32 = 1024;

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
    /// Polling rounds under spin-only, busy ones (`reset`) included and
    /// never reset: the yield cadence. Counted apart from `spins`, which
    /// every busy round resets, or a waiter under steady traffic never
    /// reached it and never yielded.
    rounds: u32,
    /// Yields offered under spin-only so far (for the tests).
    offered: u64,
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
            rounds: 0,
            offered: 0,
        }
    }

    /// Start over (progress was made).
    pub fn reset(&mut self) {
        if self.spin_only {
            // a busy round is a polling round too (see `rounds`)
            self.spin_only_round();
        }
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
                // Spin-only still offers the core now and then: a no-op
                // (one system call) on a dedicated core, but under a
                // real-time policy (`chrt -f`) a thread that never yields
                // keeps every thread of its priority off its core (the UDP
                // driver, the other rank pinned there) and the job hangs.
                if self.spin_only {
                    self.spin_only_round();
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

    /// Count one spin-only polling round; offer the core once every
    /// [`SPIN_ONLY_YIELD_EVERY`] of them.
    fn spin_only_round(&mut self) {
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds.is_multiple_of(SPIN_ONLY_YIELD_EVERY) {
            self.offered += 1;
            std::thread::yield_now();
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

    /// This thread at `SCHED_FIFO` priority 1 (`false` if not allowed).
    fn real_time() -> bool {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: pid 0 is the calling thread; `param` is a valid
        // sched_param that outlives the call.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
    }

    /// Pin this thread to `cpu`.
    fn pin(cpu: usize) {
        // SAFETY: a zeroed cpu_set_t is a valid empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `cpu` < CPU_SETSIZE (a CPU of this thread's mask), within
        // the set.
        unsafe { libc::CPU_SET(cpu, &mut set) };
        // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of
        // the size given.
        let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
        assert_eq!(r, 0, "pin to CPU {cpu}");
    }

    /// The CPUs this thread may run on.
    fn cpus() -> Vec<usize> {
        // SAFETY: a zeroed cpu_set_t is a valid empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of
        // the size given, written by the call.
        if unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `c` < CPU_SETSIZE, within the set.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect()
    }

    /// Session 10's real-time hang (`chrt -f` with `SPLITRT_SPIN_ONLY=1`):
    /// a spin-only waiter never yielded, so under `SCHED_FIFO` a thread of
    /// the same priority on its core (here the one that ends the wait; in
    /// a job the UDP driver, or the other rank) never ran. Both threads at
    /// FIFO priority 1 on one CPU; the main thread, on another, ends the
    /// wait itself after 5 s if the other thread never ran. Skipped where
    /// the policy cannot be set (no CAP_SYS_NICE) or on one CPU.
    #[test]
    fn defects_spin_only_lets_a_same_priority_thread_on_its_core_run() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let cpus = cpus();
        let Some(&cpu) = cpus.last().filter(|_| cpus.len() >= 2) else {
            eprintln!("skipped: one CPU");
            return;
        };
        let (done, spinning, rescued) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let waiter = {
            let (done, spinning) = (done.clone(), spinning.clone());
            std::thread::spawn(move || {
                if !real_time() {
                    spinning.store(true, Ordering::Release);
                    return false;
                }
                pin(cpu);
                let cfg = Config {
                    spin_only: true,
                    ..Default::default()
                };
                let mut b = Backoff::new(&cfg);
                spinning.store(true, Ordering::Release);
                while !done.load(Ordering::Acquire) {
                    b.snooze_with(&|| false);
                }
                true
            })
        };
        let t = Instant::now();
        while !spinning.load(Ordering::Acquire) {
            if t.elapsed() > Duration::from_secs(10) {
                // another real-time thread holds that CPU (not ours to judge)
                done.store(true, Ordering::Release);
                eprintln!("skipped: the waiter could not start on CPU {cpu} in 10 s");
                return;
            }
            std::thread::yield_now();
        }
        let setter = {
            let done = done.clone();
            std::thread::spawn(move || {
                if real_time() {
                    // from here on this thread runs only on the waiter's CPU
                    pin(cpu);
                }
                done.store(true, Ordering::Release);
            })
        };
        let t = Instant::now();
        while !waiter.is_finished() {
            if t.elapsed() > Duration::from_secs(5) {
                rescued.store(true, Ordering::Relaxed);
                done.store(true, Ordering::Release);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let ran = waiter.join().unwrap();
        setter.join().unwrap();
        if !ran {
            eprintln!("skipped: SCHED_FIFO not allowed here");
            return;
        }
        assert!(
            !rescued.load(Ordering::Relaxed),
            "a same-priority thread on the spin-only waiter's CPU did not run in 5 s"
        );
    }

    /// Review of session 11: a busy polling round resets the back-off, so
    /// under steady traffic (busy and idle rounds alternating, or busy
    /// only) a spin-only waiter's round count never reached the yield
    /// cadence and it never offered its core. 4096 rounds of each pattern
    /// must offer it at least twice.
    #[test]
    fn defects2_spin_only_yields_under_steady_traffic() {
        let cfg = Config {
            spin_only: true,
            ..Default::default()
        };
        let mut b = Backoff::new(&cfg);
        for _ in 0..4 * SPIN_ONLY_YIELD_EVERY {
            b.snooze_with(&|| false);
            b.reset();
        }
        assert!(
            b.offered >= 2,
            "busy/idle alternating: {} yields",
            b.offered
        );
        let mut b = Backoff::new(&cfg);
        for _ in 0..4 * SPIN_ONLY_YIELD_EVERY {
            b.reset();
        }
        assert!(b.offered >= 2, "busy only: {} yields", b.offered);
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
