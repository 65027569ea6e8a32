//! The sending half of one stream toward one peer: datagrams being
//! filled, sealed with sequence numbers, in flight, acknowledged.

use super::seq_lt;
use std::collections::VecDeque;

/// A sealed datagram kept until acknowledged.
#[derive(Debug)]
pub(super) struct TxSlot {
    /// The whole datagram (header, body, room for the tag).
    pub buf: Vec<u8>,
    /// When it last left (0: never).
    pub sent_at: u64,
    /// The receiver said it has it (selective acknowledgement).
    pub sacked: bool,
    /// Due for retransmission.
    pub again: bool,
    /// Counted in the congestion controller's bytes in flight.
    pub inflight: bool,
    /// Sent more than once (Karn's rule: its acknowledgement gives no RTT
    /// sample).
    pub retx: bool,
}

/// What an acknowledgement did to one stream.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Acked {
    /// Slots freed (cumulatively acknowledged).
    pub freed: usize,
    /// A duplicate acknowledgement reporting later data.
    pub dup: bool,
    /// Bytes newly acknowledged (cumulatively or selectively).
    pub bytes: u64,
    /// Of those, bytes still counted in flight.
    pub flight: u64,
    /// A datagram sent more than once was among them.
    pub retx: bool,
}

/// What [`SendStream::mark_lost`] marked.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Lost {
    /// Slots marked for retransmission.
    pub marked: usize,
    /// Of their bytes, those that were counted in flight.
    pub flight: u64,
    /// When the most recently sent of them last left.
    pub last_sent: u64,
}

/// One stream's send state.
#[derive(Debug)]
pub(super) struct SendStream {
    /// Sequence number the next sealed datagram gets.
    pub next_seq: u32,
    /// Oldest unacknowledged sequence number (the first slot's).
    pub una: u32,
    /// Sealed datagrams `una..next_seq`.
    pub slots: VecDeque<TxSlot>,
    /// First sequence number never transmitted.
    pub next_tx: u32,
    /// The receiver accepts sequence numbers below this.
    pub limit: u32,
    /// Body being filled (header space reserved), if any.
    pub open: Option<Vec<u8>>,
    /// Same cumulative acknowledgement seen again (with later data
    /// reported): the fast-retransmit trigger.
    pub dups: u32,
    /// Slots marked for retransmission.
    pub again: usize,
}

impl SendStream {
    pub fn new(window: u16) -> SendStream {
        SendStream {
            next_seq: 0,
            una: 0,
            // grown as datagrams are sealed (up to the window), not
            // reserved for a peer that may never get one
            slots: VecDeque::new(),
            next_tx: 0,
            limit: window as u32,
            open: None,
            dups: 0,
            again: 0,
        }
    }

    /// Datagrams sent but not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.next_tx.wrapping_sub(self.una) as usize
    }

    /// Whether anything is unacknowledged or unsent.
    pub fn busy(&self) -> bool {
        !self.slots.is_empty() || self.open.is_some()
    }

    /// Whether a new datagram may leave now.
    pub fn may_send_new(&self, window: u16) -> bool {
        self.next_tx != self.next_seq
            && seq_lt(self.next_tx, self.limit)
            && self.in_flight() < window as usize
    }

    /// Apply the receiver's acknowledgement: cumulative `cum`, selective
    /// `sack`, window `win`.
    pub fn on_ack(&mut self, cum: u32, sack: u32, win: u16, pool: &mut Vec<Vec<u8>>) -> Acked {
        let mut r = Acked::default();
        // Ignore acknowledgements of data never sent (forged or corrupt).
        if seq_lt(self.next_tx, cum) {
            return r;
        }
        let new_limit = cum.wrapping_add(win as u32);
        if seq_lt(self.limit, new_limit) {
            self.limit = new_limit;
        }
        let mut freed = 0;
        while seq_lt(self.una, cum) {
            let s = self.slots.pop_front().expect("slot per unacked seq");
            if s.again {
                self.again -= 1;
            }
            if !s.sacked {
                r.bytes += s.buf.len() as u64;
                r.retx |= s.retx;
                if s.inflight {
                    r.flight += s.buf.len() as u64;
                }
            }
            super::recycle(pool, s.buf);
            self.una = self.una.wrapping_add(1);
            freed += 1;
        }
        r.freed = freed;
        if freed > 0 {
            self.dups = 0;
        } else if sack != 0 && !self.slots.is_empty() {
            self.dups += 1;
            r.dup = true;
        }
        if sack != 0 {
            let flight = self.in_flight();
            for i in 0..32u32 {
                if sack & (1 << i) == 0 {
                    continue;
                }
                let idx = (cum.wrapping_add(1 + i)).wrapping_sub(self.una) as usize;
                if let Some(s) = self.slots.get_mut(idx) {
                    if idx < flight && !s.sacked {
                        s.sacked = true;
                        if s.again {
                            s.again = false;
                            self.again -= 1;
                        }
                        r.bytes += s.buf.len() as u64;
                        r.retx |= s.retx;
                        if s.inflight {
                            s.inflight = false;
                            r.flight += s.buf.len() as u64;
                        }
                    }
                }
            }
        }
        r
    }

    /// Mark sent, unacknowledged slots for retransmission: all of them
    /// (`all`, a retransmission timeout) or the holes below the highest
    /// selectively acknowledged one that last left before `before`.
    pub fn mark_lost(&mut self, all: bool, before: u64) -> Lost {
        let n = self.in_flight().min(self.slots.len());
        let top = if all {
            n
        } else {
            match self.slots.iter().take(n).rposition(|s| s.sacked) {
                Some(i) => i,
                None => 1.min(n),
            }
        };
        let mut l = Lost::default();
        for s in self.slots.iter_mut().take(top) {
            if !s.sacked && !s.again && (all || s.sent_at < before) {
                s.again = true;
                l.marked += 1;
                l.last_sent = l.last_sent.max(s.sent_at);
                if s.inflight {
                    s.inflight = false;
                    l.flight += s.buf.len() as u64;
                }
            }
        }
        self.again += l.marked;
        l
    }

    /// Whether a slot sent and neither acknowledged nor selectively
    /// acknowledged lies below one selectively acknowledged: a hole a
    /// later datagram overtook, taken for lost (the receiver holds the
    /// later one and not it). An acknowledgement that shows one after a
    /// retransmission timeout shows that a datagram of the flight was
    /// lost: the timeout was no spurious one and its reduction stands.
    pub fn hole_below_sack(&self) -> bool {
        let n = self.in_flight().min(self.slots.len());
        match self.slots.iter().take(n).rposition(|s| s.sacked) {
            Some(top) => self.slots.iter().take(top).any(|s| !s.sacked),
            None => false,
        }
    }
}
