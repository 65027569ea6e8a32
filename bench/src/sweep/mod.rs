//! Size sweeps on one 2-rank job that registers the AM benchmark's
//! handlers *and* attaches the PGAS layer, so AM Short / Medium / Long and
//! one-sided get / put are measured by the same pinned processes:
//!
//! * `latency`: round trips vs size, p50 and p99;
//! * `throughput`: one-way bandwidth and message rate vs size, a window of
//!   messages in flight;
//! * `ring-scan` / `cell-scan`: one job per ring length / cell size, each
//!   streaming maximum-size Medium messages;
//! * the splitrt side of `compare` (a few sizes, plus the raw cache-line
//!   ping-pong and memcpy).
//!
//! The driver picks the job's [`Mode`] through the `SPLITRT_BENCH_MODE`
//! variable of the job's environment.

pub mod driver;
pub mod worker;

use crate::am::plan::Effort;
use crate::harness::results::BenchId;
use crate::Common;

/// Variable carrying the job's [`Mode`] to the ranks.
pub const ENV_MODE: &str = "SPLITRT_BENCH_MODE";

/// What one sweep job measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Round-trip latency of every kind vs size.
    Latency,
    /// One-way bandwidth of every kind vs size.
    Throughput,
    /// A stream of maximum-size Medium messages only.
    Stream,
    /// The splitrt numbers `compare` sets against the peers.
    Compare,
}

impl Mode {
    /// Name in [`ENV_MODE`].
    pub fn name(self) -> &'static str {
        match self {
            Mode::Latency => "latency",
            Mode::Throughput => "throughput",
            Mode::Stream => "stream",
            Mode::Compare => "compare",
        }
    }

    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<Mode> {
        [Mode::Latency, Mode::Throughput, Mode::Stream, Mode::Compare]
            .into_iter()
            .find(|m| m.name() == s)
    }
}

/// The measured quantities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bench {
    /// Raw cache-line ping-pong round trip.
    RawLineRtt,
    /// AM Short round trip (no payload).
    ShortRtt,
    /// AM Medium round trip (same size each way).
    MediumRtt,
    /// AM Long round trip (same size each way).
    LongRtt,
    /// Blocking get (`read_slice`) of `size` bytes.
    GetRtt,
    /// `put` of `size` bytes then `sync`.
    PutRtt,
    /// AM Medium one-way stream (MB/s).
    MediumBw,
    /// AM Long one-way stream (MB/s).
    LongBw,
    /// Split-phase puts, `sync` per window (MB/s).
    PutBw,
    /// Split-phase gets, one scope per window (MB/s).
    GetBw,
    /// memcpy within rank 0 (MB/s).
    Memcpy,
}

impl BenchId for Bench {
    const ALL: &'static [Bench] = &[
        Bench::RawLineRtt,
        Bench::ShortRtt,
        Bench::MediumRtt,
        Bench::LongRtt,
        Bench::GetRtt,
        Bench::PutRtt,
        Bench::MediumBw,
        Bench::LongBw,
        Bench::PutBw,
        Bench::GetBw,
        Bench::Memcpy,
    ];

    fn id(self) -> &'static str {
        match self {
            Bench::RawLineRtt => "raw_line_rtt",
            Bench::ShortRtt => "am_short_rtt",
            Bench::MediumRtt => "am_medium_rtt",
            Bench::LongRtt => "am_long_rtt",
            Bench::GetRtt => "get_rtt",
            Bench::PutRtt => "put_sync_rtt",
            Bench::MediumBw => "am_medium_bw",
            Bench::LongBw => "am_long_bw",
            Bench::PutBw => "put_bw",
            Bench::GetBw => "get_bw",
            Bench::Memcpy => "memcpy_bw",
        }
    }
}

impl Bench {
    /// Name in tables and plot legends.
    pub fn label(self) -> &'static str {
        match self {
            Bench::RawLineRtt => "raw line ping-pong RTT",
            Bench::ShortRtt => "AM Short RTT",
            Bench::MediumRtt => "AM Medium RTT",
            Bench::LongRtt => "AM Long RTT",
            Bench::GetRtt => "get (blocking read_slice)",
            Bench::PutRtt => "put + sync",
            Bench::MediumBw => "AM Medium one-way",
            Bench::LongBw => "AM Long one-way",
            Bench::PutBw => "put one-way (sync per window)",
            Bench::GetBw => "get (window per scope)",
            Bench::Memcpy => "memcpy (rank 0)",
        }
    }
}

/// Largest Long / get / put size.
pub const MAX_SIZE: usize = 16 << 20;

/// The work of one sweep job; both ranks compute it from the same flags.
/// It derefs to its [`Effort`] (repetitions, batches, streams, window).
#[derive(Clone, Debug)]
pub struct Plan {
    /// What to measure.
    pub mode: Mode,
    /// Repetitions, batches, streams, window.
    pub effort: Effort,
    /// Bytes of the put / get / memcpy landing area.
    pub area: usize,
}

impl std::ops::Deref for Plan {
    type Target = Effort;

    fn deref(&self) -> &Effort {
        &self.effort
    }
}

impl Plan {
    /// The plan for `mode` and the given flags.
    pub fn new(mode: Mode, c: &Common) -> Plan {
        let reps = c.reps as usize;
        if c.quick {
            Plan {
                mode,
                effort: Effort {
                    reps,
                    quick: true,
                    batches: 5,
                    batch: 20,
                    stream_bytes: 1 << 20,
                    stream_min_msgs: 16,
                    stream_max_msgs: 2000,
                    window: 64,
                    ack_every: 16,
                    raw_warm: 1000,
                    raw_batches: 3,
                },
                area: 2 << 20,
            }
        } else {
            Plan {
                mode,
                effort: Effort {
                    reps,
                    quick: false,
                    batches: 100,
                    batch: 1000,
                    stream_bytes: 128 << 20,
                    stream_min_msgs: 32,
                    stream_max_msgs: 300_000,
                    window: 256,
                    ack_every: 32,
                    raw_warm: 100_000,
                    raw_batches: 300,
                },
                area: 32 << 20,
            }
        }
    }

    /// `SPLITRT_SEGMENT_SIZE` of the job (Long landing zone, put/get area).
    pub fn segment_size(&self) -> &'static str {
        if self.quick {
            "32M"
        } else {
            "128M"
        }
    }

    /// Whether this job runs the raw ping-pong (both ranks must agree):
    /// every latency table shows the floor of its own moment.
    pub fn raw(&self) -> bool {
        matches!(self.mode, Mode::Compare | Mode::Latency)
    }

    /// Sizes of `bench` in this job, given the largest Medium and the
    /// largest Long / get / put.
    pub fn sizes(&self, bench: Bench, max_medium: usize, max_long: usize) -> Vec<usize> {
        let max_for = |b: Bench| match b {
            Bench::MediumRtt | Bench::MediumBw => max_medium,
            _ => max_long.min(MAX_SIZE),
        };
        let max = max_for(bench);
        let upto = |step: usize, max: usize| -> Vec<usize> {
            let mut v: Vec<usize> = std::iter::successors(Some(1usize), |s| s.checked_mul(step))
                .take_while(|&s| s <= max)
                .collect();
            v.push(max);
            v.sort_unstable();
            v.dedup();
            v
        };
        let pick =
            |v: &[usize]| -> Vec<usize> { v.iter().copied().filter(|&s| s <= max).collect() };
        match (self.mode, bench) {
            (_, Bench::ShortRtt) => vec![0],
            (Mode::Stream, Bench::MediumBw) => vec![max_medium],
            (Mode::Stream, _) => Vec::new(),
            (_, Bench::RawLineRtt) if self.raw() => vec![64],
            (_, Bench::RawLineRtt) => Vec::new(),
            (Mode::Compare, Bench::MediumRtt | Bench::GetRtt | Bench::PutRtt) => pick(&[8]),
            (Mode::Compare, Bench::LongRtt) => Vec::new(),
            (Mode::Compare, Bench::MediumBw) => {
                let mut v = pick(&[8, 1024, 8192, 65536]);
                v.push(max_medium.min(65536));
                v.sort_unstable();
                v.dedup();
                v
            }
            (Mode::Compare, _) => pick(&[65536, 1 << 20]),
            (Mode::Latency, Bench::MediumRtt | Bench::LongRtt | Bench::GetRtt | Bench::PutRtt)
                if self.quick =>
            {
                pick(&[1, 64, 4096, max_medium, 1 << 20])
            }
            (Mode::Latency, Bench::MediumRtt | Bench::LongRtt | Bench::GetRtt | Bench::PutRtt) => {
                upto(2, max)
            }
            (Mode::Latency, _) => Vec::new(),
            (Mode::Throughput, Bench::MediumBw | Bench::LongBw | Bench::PutBw | Bench::GetBw)
                if self.quick =>
            {
                pick(&[8, 4096, max_medium, 1 << 20])
            }
            (Mode::Throughput, Bench::MediumBw | Bench::LongBw | Bench::PutBw | Bench::GetBw) => {
                upto(4, max)
            }
            (Mode::Throughput, _) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_per_mode() {
        let c = Common {
            quick: false,
            reps: 1,
        };
        let p = Plan::new(Mode::Latency, &c);
        let m = p.sizes(Bench::MediumRtt, 65536, 128 << 20);
        assert_eq!((m[0], *m.last().unwrap(), m.len()), (1, 65536, 17));
        assert_eq!(
            p.sizes(Bench::LongRtt, 65536, 128 << 20).last(),
            Some(&MAX_SIZE)
        );
        assert!(p.sizes(Bench::MediumBw, 65536, 1 << 20).is_empty());
        let s = Plan::new(Mode::Stream, &c);
        assert_eq!(s.sizes(Bench::MediumBw, 1 << 20, 1 << 20), [1 << 20]);
        assert_eq!(Mode::parse("compare"), Some(Mode::Compare));
        assert!(Plan::new(Mode::Compare, &c).raw());
        assert!(Plan::new(Mode::Latency, &c).raw());
        assert!(!Plan::new(Mode::Throughput, &c).raw());
    }
}
