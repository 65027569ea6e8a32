//! Which signals a consumer has taken already: per producer id, the
//! instances it has heard of (an instance is drawn at each producer start)
//! and, per instance, a sliding window of the signal sequence numbers
//! seen. A signal whose number was seen, or lies behind its instance's
//! window, or belongs to an instance older than every one remembered, is
//! a replay (or a duplicate of the network) and is dropped; so each
//! (instance, spectrum) is delivered at most once. Pure logic, no I/O:
//! the consumer asks it once per authentic signal.
//!
//! Bounded: [`MAX_INSTANCES`] instances per producer id (the oldest by
//! start time evicted, and every instance not newer than an evicted one
//! refused from then on) and [`MAX_PRODUCERS`] producer ids (the one
//! heard of least recently forgotten, whole).

use rustc_hash::FxHashMap;

/// Sequence numbers of one instance remembered behind the newest (a
/// signal reordered further back than this is taken for a replay).
pub const WINDOW: u64 = 1024;
/// Instances remembered per producer id.
pub const MAX_INSTANCES: usize = 4;
/// Producer ids remembered.
pub const MAX_PRODUCERS: usize = 4096;

const WORDS: usize = (WINDOW / 64) as usize;

/// An instance: its start, then its nonce (the order instances are
/// compared in: a later start is a newer instance).
type InstanceKey = (u64, u64);

struct Window {
    key: InstanceKey,
    /// The newest sequence number seen.
    top: u64,
    /// Bit `n % WINDOW` set: number `n` (within `WINDOW` of `top`) seen.
    bits: [u64; WORDS],
}

impl Window {
    fn new(key: InstanceKey) -> Window {
        Window {
            key,
            top: 0,
            bits: [0; WORDS],
        }
    }

    fn bit(n: u64) -> (usize, u64) {
        let i = n % WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Take number `n` if it is new (true), else false.
    fn take(&mut self, n: u64) -> bool {
        if n > self.top {
            // forget what slides out of the window
            if n - self.top >= WINDOW {
                self.bits = [0; WORDS];
            } else {
                for m in self.top + 1..n {
                    let (w, b) = Self::bit(m);
                    self.bits[w] &= !b;
                }
            }
            let (w, b) = Self::bit(n);
            self.bits[w] |= b;
            self.top = n;
            return true;
        }
        if self.top - n >= WINDOW {
            return false;
        }
        let (w, b) = Self::bit(n);
        if self.bits[w] & b != 0 {
            return false;
        }
        self.bits[w] |= b;
        true
    }
}

#[derive(Default)]
struct Producer {
    instances: Vec<Window>,
    /// The newest instance evicted: none at or before it is taken again.
    floor: Option<InstanceKey>,
    /// When it was last heard of ([`Replays::clock`]).
    used: u64,
}

/// The consumer's record of signals taken.
#[derive(Default)]
pub struct Replays {
    producers: FxHashMap<u64, Producer>,
    clock: u64,
}

impl Replays {
    /// Take signal `sequence` of instance (`started`, `instance`) of
    /// `producer`: true if it is new (now recorded), false if it is a
    /// replay or duplicate.
    pub fn take(&mut self, producer: u64, started: u64, instance: u64, sequence: u64) -> bool {
        self.clock += 1;
        if self.producers.len() >= MAX_PRODUCERS && !self.producers.contains_key(&producer) {
            let oldest = self
                .producers
                .iter()
                .min_by_key(|(_, p)| p.used)
                .map(|(id, _)| *id);
            if let Some(id) = oldest {
                self.producers.remove(&id);
            }
        }
        let p = self.producers.entry(producer).or_default();
        p.used = self.clock;
        let key = (started, instance);
        if let Some(w) = p.instances.iter_mut().find(|w| w.key == key) {
            return w.take(sequence);
        }
        if p.floor.is_some_and(|f| key <= f) {
            return false;
        }
        if p.instances.len() >= MAX_INSTANCES {
            let (i, oldest) = p
                .instances
                .iter()
                .enumerate()
                .map(|(i, w)| (i, w.key))
                .min_by_key(|(_, k)| *k)
                .expect("instances are remembered");
            if key < oldest {
                return false;
            }
            p.instances.swap_remove(i);
            p.floor = Some(p.floor.map_or(oldest, |f| f.max(oldest)));
        }
        let mut w = Window::new(key);
        let fresh = w.take(sequence);
        p.instances.push(w);
        fresh
    }

    /// Producer ids remembered.
    #[cfg(test)]
    pub fn producers(&self) -> usize {
        self.producers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_number_once_in_any_order_within_the_window() {
        let mut r = Replays::default();
        for n in 1..=3000 {
            assert!(r.take(1, 10, 77, n));
        }
        for n in 1..=3000 {
            assert!(!r.take(1, 10, 77, n), "{n} taken twice");
        }
        // reordered within the window: each once
        let mut r = Replays::default();
        let order: Vec<u64> = (1..=WINDOW).map(|i| (i * 7919) % WINDOW + 1).collect();
        for &n in &order {
            assert!(r.take(1, 10, 77, n), "{n}");
        }
        for &n in &order {
            assert!(!r.take(1, 10, 77, n));
        }
        // a jump past the window forgets, and refuses, what is behind it
        let mut r = Replays::default();
        assert!(r.take(1, 10, 77, 5));
        assert!(r.take(1, 10, 77, 5 + WINDOW));
        assert!(!r.take(1, 10, 77, 5));
        assert!(!r.take(1, 10, 77, 5 + WINDOW));
        assert!(r.take(1, 10, 77, 6 + WINDOW / 2));
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "4 106 producers through the bounded table: minutes under Miri, and the table has no unsafe code"
    )]
    fn instances_and_producers_are_bounded_and_old_ones_stay_refused() {
        let mut r = Replays::default();
        // the same numbers of other instances and producers are new
        assert!(r.take(1, 10, 1, 1));
        assert!(r.take(1, 11, 2, 1));
        assert!(r.take(2, 10, 1, 1));
        for i in 3..=6 {
            assert!(r.take(1, 10 + i, i, 1));
        }
        // instances (10, 1) and (11, 2) were evicted: refused from now on
        assert!(!r.take(1, 10, 1, 2));
        assert!(!r.take(1, 11, 2, 2));
        // so is any instance older than the oldest remembered
        assert!(!r.take(1, 12, 9, 1));
        // the newest ones are still told apart
        assert!(!r.take(1, 16, 6, 1));
        assert!(r.take(1, 16, 6, 2));
        // a newer instance still comes in
        assert!(r.take(1, 99, 7, 1));
        for id in 0..MAX_PRODUCERS as u64 + 10 {
            r.take(1000 + id, 1, 1, 1);
        }
        assert_eq!(r.producers(), MAX_PRODUCERS);
    }
}
