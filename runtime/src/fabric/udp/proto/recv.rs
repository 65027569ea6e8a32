//! The receiving half of one stream from one peer: datagram slots from
//! `base` (the next to hand up) on, at most `window` of them, `next`
//! being the first one missing (what the cumulative acknowledgement says).
//! The slots grow with what is held (a stream that never carried data
//! holds none), up to the window.

use super::seq_lt;
use crate::fabric::udp::wire::Ack;
use std::collections::VecDeque;

/// What became of an arriving data datagram.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Arrival {
    /// Stored; `in_order` if it was the first missing one.
    Stored { in_order: bool },
    /// Seen before (a retransmission that crossed its acknowledgement).
    Duplicate,
    /// Past the window this side advertised.
    BeyondWindow,
}

/// One stream's receive state.
#[derive(Debug)]
pub(super) struct RecvStream {
    /// Next sequence number to hand to the upper layer.
    pub base: u32,
    /// First sequence number not yet arrived.
    pub next: u32,
    /// `slots[seq - base]` for `base <= seq < base + slots.len()`
    /// (`slots.len() <= window`).
    slots: VecDeque<Option<Vec<u8>>>,
    /// Datagrams accepted ahead of `base`.
    window: u32,
    /// Out-of-order datagrams held (past `next`).
    ooo: usize,
    /// In-order datagrams arrived since the last acknowledgement left.
    pub unacked: u32,
    /// The window last advertised (for window updates).
    pub advertised: u16,
}

impl RecvStream {
    pub fn new(window: u16) -> RecvStream {
        RecvStream {
            base: 0,
            next: 0,
            slots: VecDeque::new(),
            window: window as u32,
            ooo: 0,
            unacked: 0,
            advertised: window,
        }
    }

    fn window(&self) -> u32 {
        self.window
    }

    /// Whether datagram `seq` (in the window) is held.
    fn held(&self, seq: u32) -> bool {
        self.slots
            .get(seq.wrapping_sub(self.base) as usize)
            .is_some_and(|s| s.is_some())
    }

    /// Store datagram `seq`; the buffer comes back unless kept.
    pub fn arrive(&mut self, seq: u32, buf: Vec<u8>) -> (Arrival, Option<Vec<u8>>) {
        if seq_lt(seq, self.base) {
            return (Arrival::Duplicate, Some(buf));
        }
        if !seq_lt(seq, self.base.wrapping_add(self.window())) {
            return (Arrival::BeyondWindow, Some(buf));
        }
        let i = seq.wrapping_sub(self.base) as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        if self.slots[i].is_some() {
            return (Arrival::Duplicate, Some(buf));
        }
        self.slots[i] = Some(buf);
        let in_order = seq == self.next;
        if in_order {
            self.next = self.next.wrapping_add(1);
            while self.ooo > 0 {
                if self.next == self.base.wrapping_add(self.window()) || !self.held(self.next) {
                    break;
                }
                self.ooo -= 1;
                self.next = self.next.wrapping_add(1);
            }
        } else {
            self.ooo += 1;
        }
        (Arrival::Stored { in_order }, None)
    }

    /// Whether an in-order datagram waits for the upper layer.
    pub fn ready(&self) -> bool {
        self.base != self.next
    }

    /// Hand up the next in-order datagram.
    pub fn take(&mut self) -> Option<Vec<u8>> {
        if !self.ready() {
            return None;
        }
        self.base = self.base.wrapping_add(1);
        self.slots.pop_front().flatten()
    }

    /// Datagrams past `next` this side accepts now.
    pub fn win(&self) -> u16 {
        self.base
            .wrapping_add(self.window())
            .wrapping_sub(self.next) as u16
    }

    /// The acknowledgement to send now.
    pub fn ack(&self) -> Ack {
        let mut sack = 0u32;
        if self.ooo > 0 {
            for i in 0..32u32 {
                let s = self.next.wrapping_add(1 + i);
                if !seq_lt(s, self.base.wrapping_add(self.window())) {
                    break;
                }
                if self.held(s) {
                    sack |= 1 << i;
                }
            }
        }
        Ack {
            cum: self.next,
            sack,
            win: self.win(),
        }
    }

    /// Give every held buffer back.
    pub fn drain(&mut self, pool: &mut Vec<Vec<u8>>) {
        for b in self.slots.drain(..).flatten() {
            super::recycle(pool, b);
        }
    }
}
