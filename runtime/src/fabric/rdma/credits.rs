//! Send credits of one queue pair, per channel, as a state machine without
//! I/O.
//!
//! A queue pair has one receive queue. The receiver posts `per_channel`
//! buffers for each channel (requests, replies), so a sender may have at
//! most that many buffers of a channel unconsumed at the peer: replies
//! never wait behind requests, which is what keeps request handlers that
//! reply free of deadlock. The receiver counts the buffers of each channel
//! it has consumed and posted again (cumulative, so reports can be lost,
//! repeated or reordered without harm) and reports the counts: piggy-
//! backed on every buffer it sends the other way, and by a small RDMA
//! write into the sender's mailbox once a quarter of a channel's credits
//! are unreported, so a one-way stream never stalls and credit return
//! costs one write per several messages, not one per message.

/// Credit state toward one peer (as sender) and from it (as receiver).
#[derive(Clone, Debug)]
pub struct Credits {
    per_channel: u64,
    /// Buffers sent per channel (cumulative).
    sent: [u64; 2],
    /// Buffers the peer has consumed and posted again (cumulative, the
    /// largest report heard).
    freed_by_peer: [u64; 2],
    /// Buffers of the peer's this side has consumed and posted again.
    freed_here: [u64; 2],
    /// The largest `freed_here` reported to the peer.
    reported: [u64; 2],
}

impl Credits {
    /// `per_channel` receive buffers posted per channel at each side.
    pub fn new(per_channel: u32) -> Credits {
        Credits {
            per_channel: per_channel.max(1) as u64,
            sent: [0; 2],
            freed_by_peer: [0; 2],
            freed_here: [0; 2],
            reported: [0; 2],
        }
    }

    /// Buffers of channel `ch` this side may still send.
    pub fn available(&self, ch: usize) -> u64 {
        (self.per_channel + self.freed_by_peer[ch]).saturating_sub(self.sent[ch])
    }

    /// Take one credit of `ch`; `false` if none is left.
    pub fn take(&mut self, ch: usize) -> bool {
        if self.available(ch) == 0 {
            return false;
        }
        self.sent[ch] += 1;
        true
    }

    /// A report from the peer: it has consumed `freed` buffers of `ch`
    /// (cumulative). Stale and repeated reports change nothing; a report
    /// of more than was sent is refused (returns `false`): a confused or
    /// hostile peer must not be able to grant unlimited credit.
    pub fn heard(&mut self, ch: usize, freed: u64) -> bool {
        if freed > self.sent[ch] {
            return false;
        }
        self.freed_by_peer[ch] = self.freed_by_peer[ch].max(freed);
        true
    }

    /// This side consumed a buffer of `ch` and posted it again.
    pub fn consumed(&mut self, ch: usize) {
        self.freed_here[ch] += 1;
    }

    /// The counts to piggy-back on a buffer going to the peer (marks them
    /// reported).
    pub fn piggyback(&mut self) -> [u64; 2] {
        self.reported = self.freed_here;
        self.freed_here
    }

    /// Whether `ch`'s unreported count calls for a report of its own (a
    /// quarter of the channel's buffers, at least one); if so marks it
    /// reported and returns the count to write.
    pub fn due_report(&mut self, ch: usize) -> Option<u64> {
        let threshold = (self.per_channel / 4).max(1);
        if self.freed_here[ch] - self.reported[ch] >= threshold {
            self.reported[ch] = self.freed_here[ch];
            Some(self.freed_here[ch])
        } else {
            None
        }
    }

    /// (free, total) credits of `ch`, for hang reports.
    pub fn report(&self, ch: usize) -> (usize, usize) {
        (self.available(ch) as usize, self.per_channel as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn channels_are_independent_and_bounded() {
        let mut c = Credits::new(4);
        for _ in 0..4 {
            assert!(c.take(0));
        }
        assert!(!c.take(0));
        assert!(c.take(1), "replies do not wait behind requests");
        assert!(c.heard(0, 2));
        assert_eq!(c.available(0), 2);
        assert!(c.heard(0, 1), "a stale report changes nothing");
        assert_eq!(c.available(0), 2);
        assert!(!c.heard(0, 99), "more than was sent is refused");
        assert_eq!(c.available(0), 2);
    }

    /// Two sides exchanging buffers over a simulated queue pair whose
    /// reports arrive late, out of order or not at all: the receiver never
    /// has more unconsumed buffers of a channel than it posted, and the
    /// stream never stalls for good. Seeded; a million buffers per seed.
    #[test]
    fn a_seeded_exchange_never_overruns_and_never_stalls() {
        // (Miri interprets every step: fewer seeds and buffers there)
        let (seeds, buffers) = if cfg!(miri) {
            (2, 1_000)
        } else {
            (4, 1_000_000)
        };
        for seed in 0..seeds {
            let mut rng = SmallRng::seed_from_u64(seed);
            let per = rng.gen_range(1..=16u32);
            let (mut a, mut b) = (Credits::new(per), Credits::new(per));
            // buffers in flight a -> b per channel, and b's unconsumed ones
            let mut queued = [0u64; 2];
            // reports b -> a in flight (channel, count), possibly reordered
            let mut reports: Vec<(usize, u64)> = Vec::new();
            let mut delivered = 0u64;
            let mut idle = 0;
            while delivered < buffers {
                let ch = rng.gen_range(0..2);
                let mut moved = false;
                if rng.gen_bool(0.6) && a.take(ch) {
                    queued[ch] += 1;
                    assert!(queued[ch] <= per as u64, "seed {seed}: overrun on {ch}");
                    moved = true;
                }
                if queued[ch] > 0 && rng.gen_bool(0.5) {
                    queued[ch] -= 1;
                    b.consumed(ch);
                    delivered += 1;
                    moved = true;
                    if let Some(n) = b.due_report(ch) {
                        reports.push((ch, n));
                    }
                    if rng.gen_bool(0.1) {
                        // b sends something back: piggy-backed counts
                        let p = b.piggyback();
                        reports.push((0, p[0]));
                        reports.push((1, p[1]));
                    }
                }
                if !reports.is_empty() && rng.gen_bool(0.3) {
                    let i = rng.gen_range(0..reports.len());
                    let (c, n) = reports.swap_remove(i);
                    if rng.gen_bool(0.95) {
                        assert!(a.heard(c, n), "seed {seed}: honest report refused");
                    }
                    moved = true;
                }
                idle = if moved { 0 } else { idle + 1 };
                if idle > 1000 {
                    // everything lost: the receiver's next report restores
                    let p = b.piggyback();
                    a.heard(0, p[0]);
                    a.heard(1, p[1]);
                    assert!(
                        a.available(0) + a.available(1) + queued[0] + queued[1] > 0,
                        "seed {seed}: stalled"
                    );
                    idle = 0;
                }
            }
        }
    }
}
