//! How much each PGAS measurement does: sizes, batches, operation counts,
//! the landing area. Both ranks compute the same plan from the same flags,
//! so the passive rank knows how many ping-pongs to answer and how many
//! bytes a store round brings without being told.

use crate::Common;

/// Bytes between two lines of the "read a line the peer just wrote" test:
/// one line per 4 KiB page (plus one line, to spread cache sets), so no
/// hardware prefetcher pulls the next line along with the current one.
pub const DIRTY_STRIDE: usize = 4096 + 64;

/// Largest bandwidth size.
pub const MAX_SIZE: usize = 16 << 20;

/// The work of one PGAS benchmark job.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Repetitions of every measurement.
    pub reps: usize,
    /// Smoke-test sizes and counts.
    pub quick: bool,
    /// Operations per timed latency batch.
    pub batch: usize,
    /// Timed latency batches per measurement.
    pub batches: usize,
    /// Lines read per batch of the peer-written-line test.
    pub dirty_lines: usize,
    /// Bandwidth sizes, ascending.
    pub sizes: Vec<usize>,
    /// Store throughput sizes, ascending.
    pub store_sizes: Vec<usize>,
    /// Bytes of the landing area in every rank's segment (and of rank 0's
    /// private get destination buffer).
    pub area: usize,
    /// Most operations in flight before one completion (`sync` / end of
    /// scope).
    pub window: usize,
    /// Bytes one bandwidth measurement moves (bounded by the operation
    /// counts below).
    pub stream_bytes: usize,
    /// Fewest operations in one bandwidth measurement.
    pub min_ops: usize,
    /// Most operations in one bandwidth or store measurement.
    pub max_ops: usize,
    /// `SPLITRT_SEGMENT_SIZE` of the jobs.
    pub segment_size: &'static str,
}

/// How one bandwidth measurement at one size is cut into rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rounds {
    /// Operations per round (in flight before the round's completion).
    pub per_round: usize,
    /// Landing slots of `size` bytes the rounds cycle through (a multiple
    /// of `per_round`, so no round wraps).
    pub slots: usize,
    /// Untimed rounds first.
    pub warm: usize,
    /// Timed rounds.
    pub timed: usize,
}

impl Plan {
    /// The plan for the given flags.
    pub fn new(c: &Common) -> Plan {
        let reps = c.reps as usize;
        if c.quick {
            Plan {
                reps,
                quick: true,
                batch: 100,
                batches: 5,
                dirty_lines: 16,
                sizes: vec![8, 1024, 65536, 1 << 20],
                store_sizes: vec![8, 1024, 65536],
                area: 4 << 20,
                window: 64,
                stream_bytes: 1 << 20,
                min_ops: 4,
                max_ops: 2000,
                segment_size: "16M",
            }
        } else {
            let mut sizes: Vec<usize> = std::iter::successors(Some(8usize), |s| s.checked_mul(4))
                .take_while(|&s| s <= MAX_SIZE)
                .collect();
            sizes.extend([1024, 65536, MAX_SIZE]);
            sizes.sort_unstable();
            sizes.dedup();
            Plan {
                reps,
                quick: false,
                batch: 1000,
                batches: 200,
                dirty_lines: 64,
                sizes,
                store_sizes: vec![8, 1024, 65536],
                area: 64 << 20,
                window: 256,
                stream_bytes: 256 << 20,
                min_ops: 16,
                max_ops: 500_000,
                segment_size: "128M",
            }
        }
    }

    /// Untimed operations before a latency measurement.
    pub fn warm(&self) -> usize {
        (self.batch * self.batches / 10).max(1)
    }

    /// Operations of one latency measurement, warm-up included (the
    /// passive side of the ping-pong answers exactly this many).
    pub fn latency_ops(&self) -> u64 {
        (self.warm() + self.batch * self.batches) as u64
    }

    /// Batches of the peer-written-line test, one untimed first.
    pub fn dirty_batches(&self) -> usize {
        self.batches + 1
    }

    /// The rounds of a bandwidth measurement of `size`-byte operations:
    /// up to [`window`](Plan::window) per round, as many as the landing
    /// area holds.
    pub fn rounds(&self, size: usize) -> Rounds {
        let fit = (self.area / size.max(1)).max(1);
        let per_round = self.window.min(fit).max(1);
        let ops = (self.stream_bytes / size.max(1)).clamp(self.min_ops, self.max_ops);
        let timed = ops.div_ceil(per_round);
        Rounds {
            per_round,
            slots: fit / per_round * per_round,
            warm: (timed / 10).max(1),
            timed,
        }
    }

    /// Stores of `size` bytes in one store measurement: consecutive
    /// addresses in the landing area, never overwriting each other.
    pub fn store_msgs(&self, size: usize) -> usize {
        (self.area / size.max(1)).min(self.max_ops).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(quick: bool) -> Plan {
        Plan::new(&Common { quick, reps: 3 })
    }

    #[test]
    fn sizes_and_rounds() {
        let p = plan(false);
        assert_eq!(p.sizes.first(), Some(&8));
        assert_eq!(p.sizes.last(), Some(&MAX_SIZE));
        assert!(p.sizes.contains(&1024) && p.sizes.contains(&65536));
        assert!(p.store_sizes.iter().all(|s| p.sizes.contains(s)));
        let r = p.rounds(8);
        assert_eq!(r.per_round, p.window);
        assert_eq!(
            r.timed * r.per_round,
            p.max_ops.div_ceil(p.window) * p.window
        );
        let big = p.rounds(MAX_SIZE);
        assert_eq!((big.per_round, big.slots), (4, 4));
        assert_eq!(big.timed, 4);
        for &s in &p.sizes {
            let r = p.rounds(s);
            assert!(
                r.slots * s <= p.area && r.slots.is_multiple_of(r.per_round),
                "{s}"
            );
        }
        assert_eq!(p.store_msgs(65536) * 65536, p.area);
        assert!(plan(true).sizes.iter().all(|&s| s <= plan(true).area));
    }
}
