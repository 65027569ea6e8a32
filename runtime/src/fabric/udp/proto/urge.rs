//! Immediate acknowledgements for a waiting sender (TCP's PSH, QUIC's
//! IMMEDIATE_ACK): a rank that is about to wait for its data to be
//! acknowledged (`sync`, `quiet`, `finish`: the driver's `quiesced`) asks
//! its peers to acknowledge at once instead of after `ack_delay`.
//!
//! [`Proto::urge_acks`] marks every peer with unacknowledged data. The
//! next transmit to it sets [`F_ACK_NOW`](super::super::wire::F_ACK_NOW)
//! on the datagram that ends each stream's queue, or, when all its data
//! already left, sends one ping (a control datagram with that flag, the
//! keepalive's question). A peer is asked once per datagram sent: asking
//! again while waiting sends nothing until more data leaves (a retransmit
//! included), so a polling wait does not flood the peer. The receiver
//! already answers `F_ACK_NOW` at once (wire version 3), so no wire change.

use super::Proto;

impl Proto {
    /// The caller is about to wait until everything it sent is
    /// acknowledged ([`quiesced`](Self::quiesced)): ask every peer with
    /// unacknowledged data to acknowledge at once. What to send leaves at
    /// the next [`poll_transmit`](Self::poll_transmit).
    pub fn urge_acks(&mut self) {
        for k in 0..self.peers.contacted() {
            let i = self.peers.contacted_at(k);
            let p = &mut self.peers[i as usize];
            // asked already, unless data not yet sent follows
            let unsent =
                p.tx.iter()
                    .any(|s| s.open.is_some() || s.next_tx != s.next_seq);
            if p.dead || !p.tx.iter().any(|s| s.busy()) || (p.asked && !unsent) {
                continue;
            }
            p.urgent = true;
            self.mark_dirty(i);
        }
    }
}
