//! The bootstrap connection's relay: small messages from one rank to
//! another through the rendezvous, sealed under the job key like every
//! bootstrap message. The ibverbs fabric connects its queue pairs through
//! it on first contact (`fabric::rdma::on_demand`).
//!
//! Bounded: a message is at most [`MAX_RELAY`](super::wire::MAX_RELAY)
//! bytes (the server refuses a longer one, and a relay to a rank outside
//! the job, as a failure of the rank that sent it), and a rank queues at
//! most [`RelayInbox::capacity`] messages until its fabric takes them
//! (further ones are dropped and counted: a peer's connection protocol
//! sends a handful per pair, so only a misbehaving peer fills it).

use super::auth::Sealer;
use super::wire::Msg;
use crate::{Error, Result};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Messages relayed to this rank, waiting for its fabric.
pub(super) struct RelayInbox {
    queue: Mutex<VecDeque<(usize, Vec<u8>)>>,
    pending: AtomicBool,
    dropped: AtomicU64,
    capacity: usize,
}

impl RelayInbox {
    /// An inbox for a job of `size` ranks.
    pub(super) fn new(size: usize) -> RelayInbox {
        RelayInbox {
            queue: Mutex::new(VecDeque::new()),
            pending: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            capacity: Self::capacity(size),
        }
    }

    /// Messages queued at most in a job of `size` ranks: four per peer and
    /// some (the connection protocol has at most three in flight per pair,
    /// when both ask at once; a REQUEST sent again after a loss replaces
    /// one that is gone).
    pub fn capacity(size: usize) -> usize {
        4 * size + 64
    }

    /// Queue a message from rank `from` (the reader thread).
    pub(super) fn push(&self, from: usize, msg: Vec<u8>) {
        let mut q = self.queue.lock();
        if q.len() >= self.capacity {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.push_back((from, msg));
        self.pending.store(true, Ordering::Release);
    }
}

/// A handle on this rank's relay (cheap to clone; usable from any thread).
#[derive(Clone)]
pub struct Relay {
    rank: usize,
    size: usize,
    writer: Arc<Mutex<(TcpStream, Sealer)>>,
    inbox: Arc<RelayInbox>,
}

impl Relay {
    pub(super) fn new(
        rank: usize,
        size: usize,
        writer: Arc<Mutex<(TcpStream, Sealer)>>,
        inbox: Arc<RelayInbox>,
    ) -> Relay {
        Relay {
            rank,
            size,
            writer,
            inbox,
        }
    }

    /// Send `msg` (at most [`MAX_RELAY`](super::wire::MAX_RELAY) bytes) to
    /// rank `to`.
    pub fn send(&self, to: usize, msg: &[u8]) -> Result<()> {
        if to >= self.size || msg.len() > super::wire::MAX_RELAY {
            return Err(Error::usage(format!(
                "a relay of {} B to rank {to} in a job of {} ranks (at most {} B)",
                msg.len(),
                self.size,
                super::wire::MAX_RELAY
            ))
            .at_rank(self.rank));
        }
        let mut w = self.writer.lock();
        let (stream, sealer) = &mut *w;
        sealer
            .send(stream, &Msg::Relay(to as u32, msg.to_vec()))
            .map_err(|e| Error::io("writing to bootstrap server", e).at_rank(self.rank))
    }

    /// Whether a message may be waiting (one load).
    #[inline]
    pub fn pending(&self) -> bool {
        self.inbox.pending.load(Ordering::Acquire)
    }

    /// The next message relayed to this rank: its sender and bytes.
    pub fn take(&self) -> Option<(usize, Vec<u8>)> {
        let mut q = self.inbox.queue.lock();
        let m = q.pop_front();
        if q.is_empty() {
            self.inbox.pending.store(false, Ordering::Release);
        }
        m
    }

    /// Messages dropped because the inbox was full.
    pub fn dropped(&self) -> u64 {
        self.inbox.dropped.load(Ordering::Relaxed)
    }
}
