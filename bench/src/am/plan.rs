//! How much each measurement does: sizes, batches, iteration counts, the
//! send window. Every rank computes the same plan from the same flags, so
//! the passive rank knows how many raw ping-pongs to answer and when a
//! stream ends without being told.

use super::latency::Rounds;
use crate::Common;

/// Round trips per timed batch of the raw ping-pong (as in
/// `shm_pingpong.c`).
pub const RAW_BATCH: usize = 1000;

/// Most round trips per timed batch of an AM latency measurement.
pub const MAX_BATCH: usize = 1000;

/// Segment offset of the Long landing zone in both ranks' segments (the raw
/// ping-pong line lives at offset 0 of rank 0's segment).
pub const LONG_OFFSET: u64 = 1 << 20;

/// Most bytes of landing slots a Long stream cycles through (from
/// [`LONG_OFFSET`]).
pub const LONG_STREAM_AREA: usize = 16 << 20;

/// Largest Long payload measured.
pub const MAX_LONG: usize = 4 << 20;

/// How much every AM measurement does, shared by the AM benchmark's
/// [`Plan`] and the sweeps' (which deref to it): repetitions, the raw
/// ping-pong, latency batches, stream lengths and the send window.
#[derive(Clone, Debug)]
pub struct Effort {
    /// Repetitions of every measurement.
    pub reps: usize,
    /// Smoke-test sizes and counts.
    pub quick: bool,
    /// Untimed raw round trips before the timed ones.
    pub raw_warm: usize,
    /// Timed raw batches of [`RAW_BATCH`] round trips.
    pub raw_batches: usize,
    /// Timed batches per AM latency measurement.
    pub batches: usize,
    /// Round trips per batch for small messages (capped by size, see
    /// [`Effort::batch_for`]).
    pub batch: usize,
    /// Bytes one throughput measurement moves (bounded by the message
    /// counts below).
    pub stream_bytes: usize,
    /// Fewest messages in one throughput measurement.
    pub stream_min_msgs: usize,
    /// Most messages in one throughput measurement.
    pub stream_max_msgs: usize,
    /// Most unacknowledged messages a streaming sender keeps in flight.
    pub window: usize,
    /// The receiver acknowledges every this many messages (and the last).
    pub ack_every: usize,
}

impl Effort {
    /// Round trips per timed batch for messages of `size` bytes: up to
    /// `batch`, fewer for large messages so a batch moves at most about
    /// 1 MiB each way (1 for messages of 1 MiB and more).
    pub fn batch_for(&self, size: usize) -> usize {
        (self.batch).min((1 << 20) / size.max(1)).max(1)
    }

    /// Untimed round trips before a latency measurement.
    pub fn warm_for(&self, size: usize) -> usize {
        (self.batch_for(size) * self.batches / 10).max(1)
    }

    /// The round trips of one latency measurement at `size` bytes.
    pub fn rounds(&self, size: usize) -> Rounds {
        Rounds {
            warm: self.warm_for(size),
            batch: self.batch_for(size),
            batches: self.batches,
        }
    }

    /// Messages in one throughput measurement of `size`-byte messages.
    pub fn stream_msgs(&self, size: usize) -> usize {
        (self.stream_bytes / size.max(1)).clamp(self.stream_min_msgs, self.stream_max_msgs)
    }

    /// Raw round trips per repetition (warm-up included).
    pub fn raw_round_trips(&self) -> u64 {
        (self.raw_warm + self.raw_batches * RAW_BATCH) as u64
    }

    /// The settings rank 0 records with its measurements.
    pub fn config(&self) -> [(&'static str, String); 7] {
        [
            ("window", self.window.to_string()),
            ("ack_every", self.ack_every.to_string()),
            ("batch", self.batch.to_string()),
            ("batches", self.batches.to_string()),
            ("raw_batches", self.raw_batches.to_string()),
            ("reps", self.reps.to_string()),
            ("quick", self.quick.to_string()),
        ]
    }
}

/// The work of one AM benchmark job.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Repetitions, batches, streams, window.
    pub effort: Effort,
    /// Short messages in one message-rate measurement, and calls in one
    /// aggregated RPC rate measurement (many times its window of 4096
    /// outstanding calls, even with `--quick`).
    pub rate_msgs: usize,
    /// `ucx_perftest -n` for `ucp_am_lat`.
    pub ucx_lat_iters: usize,
    /// `ucx_perftest -n` for the `ucp_am_bw` message rate.
    pub ucx_rate_iters: usize,
}

impl std::ops::Deref for Plan {
    type Target = Effort;

    fn deref(&self) -> &Effort {
        &self.effort
    }
}

impl Plan {
    /// The plan for the given flags.
    pub fn new(c: &Common) -> Plan {
        let reps = c.reps as usize;
        if c.quick {
            Plan {
                effort: Effort {
                    reps,
                    quick: true,
                    raw_warm: 1000,
                    raw_batches: 5,
                    batches: 5,
                    batch: 100,
                    stream_bytes: 1 << 20,
                    stream_min_msgs: 16,
                    stream_max_msgs: 2000,
                    window: 256,
                    ack_every: 32,
                },
                // ~50 RPC windows: well past the first batch's fill and
                // drain; tens of milliseconds at a few M/s
                rate_msgs: 200_000,
                ucx_lat_iters: 10_000,
                ucx_rate_iters: 50_000,
            }
        } else {
            Plan {
                effort: Effort {
                    reps,
                    quick: false,
                    raw_warm: 100_000,
                    raw_batches: 1000,
                    batches: 200,
                    batch: MAX_BATCH,
                    stream_bytes: 256 << 20,
                    stream_min_msgs: 64,
                    stream_max_msgs: 500_000,
                    window: 256,
                    ack_every: 32,
                },
                rate_msgs: 2_000_000,
                ucx_lat_iters: 200_000,
                ucx_rate_iters: 1_000_000,
            }
        }
    }

    /// Medium sizes: 8 B times powers of 4, plus 1 KiB (the GASNet-EX
    /// reference point) and `max_medium` itself.
    pub fn medium_sizes(&self, max_medium: usize) -> Vec<usize> {
        if self.quick {
            return dedup(vec![8, 1024.min(max_medium), max_medium]);
        }
        let mut v: Vec<usize> = powers_of_4(max_medium);
        v.push(1024.min(max_medium));
        v.push(max_medium);
        dedup(v)
    }

    /// Long sizes: 8 B times powers of 4 up to `max` (at most [`MAX_LONG`]),
    /// plus `max_medium` (to compare with the largest Medium) and `max`.
    pub fn long_sizes(&self, max_medium: usize, max: usize) -> Vec<usize> {
        let max = max.min(MAX_LONG);
        if self.quick {
            return dedup(vec![8, max_medium.min(max)]);
        }
        let mut v = powers_of_4(max);
        v.push(max_medium.min(max));
        v.push(max);
        dedup(v)
    }
}

fn powers_of_4(max: usize) -> Vec<usize> {
    std::iter::successors(Some(8usize), |s| s.checked_mul(4))
        .take_while(|&s| s <= max)
        .collect()
}

fn dedup(mut v: Vec<usize>) -> Vec<usize> {
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Plan {
        Plan::new(&Common {
            quick: false,
            reps: 3,
        })
    }

    #[test]
    fn sizes_cover_the_range() {
        let p = full();
        assert_eq!(
            p.medium_sizes(65536),
            [8, 32, 128, 512, 1024, 2048, 8192, 32768, 65536]
        );
        let l = p.long_sizes(65536, 64 << 20);
        assert_eq!(l.first(), Some(&8));
        assert_eq!(l.last(), Some(&MAX_LONG));
        assert!(l.contains(&65536));
    }

    #[test]
    fn rate_rows_measure_many_rpc_windows_even_quick() {
        for quick in [false, true] {
            let p = Plan::new(&Common { quick, reps: 1 });
            assert!(p.rate_msgs >= 40 * super::super::worker::RPC_WINDOW);
        }
    }

    #[test]
    fn batches_shrink_with_size() {
        let p = full();
        assert_eq!(p.batch_for(8), MAX_BATCH);
        assert_eq!(p.batch_for(65536), 16);
        assert_eq!(p.batch_for(4 << 20), 1);
        assert_eq!(p.stream_msgs(8), p.stream_max_msgs);
        assert_eq!(p.stream_msgs(4 << 20), p.stream_min_msgs);
    }
}
