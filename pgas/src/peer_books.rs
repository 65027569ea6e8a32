//! Per-peer books of the puts that travel as messages (the AM path's
//! plain, strided and indexed puts, signals and `put_signal`, and
//! non-fetching atomics): how many this rank issued to each peer and how
//! many each peer acknowledged, for `Pgas::quiet_peer`. A leaf: the
//! state, the handlers and the send paths use it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Issued and acknowledged puts, per peer.
pub(crate) struct PeerBooks {
    issued: Box<[AtomicU64]>,
    done: Box<[AtomicU64]>,
}

impl PeerBooks {
    /// Books for a job of `n` ranks.
    pub(crate) fn new(n: usize) -> Self {
        let zeros = || (0..n).map(|_| AtomicU64::new(0)).collect();
        PeerBooks {
            issued: zeros(),
            done: zeros(),
        }
    }

    /// A put to `peer` goes out (a rank outside the job is ignored: the
    /// send refuses it).
    #[inline]
    pub(crate) fn issue(&self, peer: usize) {
        if let Some(c) = self.issued.get(peer) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `peer` acknowledged a put (or it was never sent). A rank outside
    /// the job (no fabric delivers one) is ignored, never a panic.
    #[inline]
    pub(crate) fn complete(&self, peer: usize) {
        if let Some(c) = self.done.get(peer) {
            c.fetch_add(1, Ordering::Release);
        }
    }

    /// Puts issued to `peer` so far.
    pub(crate) fn issued(&self, peer: usize) -> u64 {
        self.issued
            .get(peer)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Puts `peer` acknowledged so far.
    pub(crate) fn done(&self, peer: usize) -> u64 {
        self.done.get(peer).map_or(0, |c| c.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn books_are_kept_per_peer_and_ignore_strangers() {
        let b = PeerBooks::new(3);
        b.issue(1);
        b.issue(1);
        b.issue(2);
        b.issue(7); // not a rank: ignored
        b.complete(1);
        b.complete(9); // not a rank: ignored, no panic
        assert_eq!((b.issued(1), b.done(1)), (2, 1));
        assert_eq!((b.issued(2), b.done(2)), (1, 0));
        assert_eq!((b.issued(0), b.done(0), b.issued(7)), (0, 0, 0));
    }
}
