//! Hang reports. A peer that is alive but stuck (stopped, in an endless
//! handler, missing from a collective) cannot be told apart from a slow one,
//! so instead of guessing, a wait that makes no progress for
//! `SPLITRT_HANG_REPORT` seconds prints once what this rank waits for, and
//! keeps waiting; with `SPLITRT_HANG_ABORT=1` it ends the job instead,
//! naming what everyone waited for.
//!
//! Every waiting loop owns a [`HangWatch`]; it reads the clock on rounds
//! that have stopped spinning and on every 64th round otherwise
//! ([`HangWatch::due_on_round`]; never when it is made), so it costs next
//! to nothing while messages flow, and a wait that never stops spinning
//! (`SPLITRT_SPIN_ONLY=1`) is still watched.

use crate::config::Config;
use crate::{Error, ErrorKind};
use std::time::{Duration, Instant};

// The settings' names and default live with the other settings (config
// reads them; this module reads only the `Config`).
pub use crate::config::{DEFAULT_HANG_REPORT, ENV_HANG_ABORT, ENV_HANG_REPORT};

/// The hang watch of one wait.
///
/// ```
/// use splitrt_runtime::{config::Config, hang::HangWatch};
/// let mut w = HangWatch::new(&Config::default());
/// assert!(!w.due()); // the clock starts now; 30 s have not passed
/// ```
pub struct HangWatch {
    /// When the wait stopped making progress (set at the first idle check).
    since: Option<Instant>,
    limit: Option<Duration>,
    abort: bool,
    reported: bool,
    /// Rounds seen by [`due_on_round`](Self::due_on_round).
    rounds: u32,
}

impl HangWatch {
    /// A watch that starts now, with the configured limit.
    pub fn new(cfg: &Config) -> Self {
        HangWatch {
            since: None,
            limit: cfg.hang_report,
            abort: cfg.hang_abort,
            reported: false,
            rounds: 0,
        }
    }

    /// Wait `extra` longer than configured before reporting (a waiter that
    /// knows less than another, so the better-informed one reports first).
    pub fn patient(mut self, extra: Duration) -> Self {
        self.limit = self.limit.map(|l| l.saturating_add(extra));
        self
    }

    /// Something moved: start counting again.
    pub fn progress(&mut self) {
        if !self.reported {
            self.since = None;
        }
    }

    /// Whether this wait has gone without progress for the limit and has
    /// not reported yet. The first call starts the clock; a wait calls it
    /// on its rounds whether or not they served traffic for others (only
    /// [`progress`](Self::progress) restarts it).
    pub fn due(&mut self) -> bool {
        let Some(limit) = self.limit.filter(|_| !self.reported) else {
            return false;
        };
        let since = *self.since.get_or_insert_with(Instant::now);
        since.elapsed() >= limit
    }

    /// [`due`](Self::due), looked at cheaply on a wait's rounds: on
    /// every round once the wait's back-off is `slow` (past spinning),
    /// else on every 64th (the clock costs ~20 ns). A wait whose back-off
    /// never gets slow (`SPLITRT_SPIN_ONLY=1`, or traffic that keeps
    /// resetting it) is still watched.
    #[inline]
    pub fn due_on_round(&mut self, slow: bool) -> bool {
        self.rounds = self.rounds.wrapping_add(1);
        (slow || self.rounds.is_multiple_of(64)) && self.due()
    }

    /// Report what this wait waits for (`what`, a sentence fragment such as
    /// "in Endpoint::barrier #3 for ranks 1, 2"). Prints once to stderr.
    /// With `SPLITRT_HANG_ABORT=1` returns why the job should end (for the
    /// caller to tell the other ranks, see [`abort_error`]).
    pub fn report(&mut self, rank: usize, what: &str) -> std::result::Result<(), String> {
        self.reported = true;
        let secs = self.since.map_or(0.0, |t| t.elapsed().as_secs_f64());
        if self.abort {
            let why =
                format!("gave up after {secs:.1} s without progress {what} ({ENV_HANG_ABORT}=1)");
            eprintln!("splitrt: rank {rank}: {why}");
            return Err(why);
        }
        eprintln!(
            "splitrt: rank {rank}: no progress for {secs:.1} s {what}; still waiting \
             ({ENV_HANG_REPORT}=off silences this, {ENV_HANG_ABORT}=1 ends the job instead)"
        );
        Ok(())
    }
}

/// The error a wait returns when its hang report ended the job.
pub fn abort_error(rank: usize, why: String) -> Error {
    Error::new(ErrorKind::Timeout(why)).at_rank(rank)
}

/// A list of ranks as "1, 3, 4" (long lists shortened).
pub fn rank_list<T: std::fmt::Display>(ranks: &[T]) -> String {
    const SHOWN: usize = 32;
    let mut s: Vec<String> = ranks.iter().take(SHOWN).map(|r| r.to_string()).collect();
    if ranks.len() > SHOWN {
        s.push(format!("and {} more", ranks.len() - SHOWN));
    }
    s.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_after_the_limit_once_and_abort_is_an_error() {
        let cfg = Config {
            hang_report: Some(Duration::from_millis(20)),
            ..Config::default()
        };
        let mut w = HangWatch::new(&cfg);
        assert!(!w.due(), "the first idle check starts the clock");
        std::thread::sleep(Duration::from_millis(30));
        assert!(w.due());
        w.report(3, "in a test").unwrap();
        assert!(!w.due(), "reports once");
        let cfg = Config {
            hang_report: Some(Duration::ZERO),
            hang_abort: true,
            ..Config::default()
        };
        let mut w = HangWatch::new(&cfg);
        assert!(w.due());
        let e = w.report(1, "in a test").unwrap_err();
        assert!(e.contains("gave up"), "{e}");
        let mut off = HangWatch::new(&Config {
            hang_report: None,
            ..Config::default()
        });
        assert!(!off.due());
        assert_eq!(rank_list(&[1, 2]), "1, 2");
        assert!(rank_list(&(0..40).collect::<Vec<_>>()).ends_with("and 8 more"));
    }
}
