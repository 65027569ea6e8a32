//! Spurious retransmission timeouts are undone, real losses are not: one
//! sender (rank 0) and one receiver (rank 1) driven by hand, 100 us each
//! way, two datagrams a round.

use super::{Proto, ProtoConfig};
use crate::fabric::frames::OutMsg;

const MTU: usize = 9000;

struct Pair {
    a: Proto,
    b: Proto,
    now: u64,
}

/// What becomes of the round's datagrams from the sender.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// They reach the receiver after 100 us, which handles them at once.
    Prompt,
    /// They reach the receiver's socket after 100 us; the receiver is
    /// descheduled and handles them 500 us later (a hold under 1 ms).
    Descheduled,
    /// A queue in the network holds them: they reach the receiver only
    /// 600 us after they left (after the timeout).
    Queued,
    /// They are lost.
    Lost,
    /// A short stall with a socket overflow: the first reaches the
    /// receiver's socket after 100 us, the rest (and the timeout's
    /// retransmission) is dropped there; the receiver is descheduled and
    /// handles what it kept 500 us later.
    TailLost,
}

/// A data datagram's sequence number.
fn seq(d: &[u8]) -> u32 {
    u32::from_le_bytes([d[16], d[17], d[18], d[19]])
}

impl Pair {
    fn new() -> Pair {
        let cfg = ProtoConfig {
            mtu: MTU,
            window: 16,
            cc: true,
            ..ProtoConfig::default()
        };
        let mut p = Pair {
            a: Proto::new(0, 2, cfg, [9; 32], 0),
            b: Proto::new(1, 2, cfg, [9; 32], 0),
            now: 1_000_000_000,
        };
        for _ in 0..30 {
            p.round(Fate::Prompt);
        }
        p
    }

    fn cc(&self) -> (u64, u64) {
        let c = &self.a.peers[1].cc;
        (c.cwnd, c.ssthresh)
    }

    /// What the sender sends now and, paced, within the next 100 us (as
    /// if it all left now).
    fn a_sends(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        self.a
            .poll_transmit(self.now, true, &mut |_, d| out.push(d.to_vec()));
        while let Some(t) = self.a.poll_pace().filter(|&t| t < self.now + 100_000) {
            self.a.handle_timeout(t);
            self.a
                .poll_transmit(t, true, &mut |_, d| out.push(d.to_vec()));
        }
        out
    }

    /// The receiver takes `ds` (arrived at its socket at `arrived`) now,
    /// hands them up and answers; the answers reach the sender 100 us
    /// later.
    fn b_handles(&mut self, ds: Vec<Vec<u8>>, arrived: u64) {
        for d in ds {
            if let Some(back) = self.b.handle_datagram_at(self.now, arrived, d) {
                self.b.recycle(back);
            }
        }
        while let Some((_, d)) = self.b.next_ready(0) {
            self.b.recycle(d);
        }
        // the delayed acknowledgement's time, if one waits
        self.b.handle_timeout(self.now + 50_000);
        let mut acks = Vec::new();
        self.b
            .poll_transmit(self.now + 50_000, true, &mut |_, d| acks.push(d.to_vec()));
        self.now += 150_000;
        for d in acks {
            if let Some(back) = self.a.handle_datagram_at(self.now, self.now, d) {
                self.a.recycle(back);
            }
        }
    }

    /// The receiver's delayed acknowledgement, if one waits: its timers
    /// run until it leaves, and it reaches the sender 100 us later.
    fn delayed_ack(&mut self) {
        let mut acks = Vec::new();
        let mut bt = self.now;
        for _ in 0..50 {
            if self.b.poll_timeout() > bt + 1_000_000 {
                break;
            }
            bt = bt.max(self.b.poll_timeout());
            self.b.handle_timeout(bt);
            self.b
                .poll_transmit(bt, true, &mut |_, d| acks.push(d.to_vec()));
            if !acks.is_empty() {
                break;
            }
            bt += 10_000;
        }
        if acks.is_empty() {
            return;
        }
        self.now = bt + 100_000;
        for d in acks {
            if let Some(back) = self.a.handle_datagram_at(self.now, self.now, d) {
                self.a.recycle(back);
            }
        }
    }

    /// The sender takes one message of `bytes` bytes and sends its first
    /// flight: the time it left and its datagrams.
    fn send_message(&mut self, bytes: usize) -> (u64, Vec<Vec<u8>>) {
        let payload = vec![5u8; bytes];
        let m = OutMsg {
            tag: 1,
            words: &[1, 2],
            payload: &payload,
            deposit: None,
        };
        assert!(matches!(
            self.a.send(self.now, 1, 0, &m, 0),
            super::Sent::Upto(b) if b == bytes
        ));
        let t = self.now;
        (t, self.a_sends())
    }

    /// One message of two datagrams from the sender, the fate of its
    /// first transmission `fate`; a retransmission timeout 450 us after
    /// it left (if nothing came back by then) and what follows, until
    /// everything is acknowledged.
    fn round(&mut self, fate: Fate) {
        let (t, first) = self.send_message(12_000);
        assert_eq!(first.len(), 2, "the message left in two datagrams");
        match fate {
            Fate::Prompt => {
                self.now += 100_000;
                self.b_handles(first, self.now);
            }
            Fate::Descheduled | Fate::Queued | Fate::Lost | Fate::TailLost => {
                self.now = t + 450_000;
                let before = self.a.stats().timeouts;
                self.a.handle_timeout(self.now);
                assert_eq!(self.a.stats().timeouts, before + 1, "the timeout fired");
                let again = self.a_sends();
                assert!(!again.is_empty(), "a retransmission left");
                match fate {
                    Fate::Descheduled => {
                        // handled at t + 600 us: the originals arrived at
                        // t + 100 us, the retransmission at t + 550 us
                        self.now = t + 600_000;
                        let mut all = first;
                        all.extend(again);
                        self.b_handles(all, t + 100_000);
                    }
                    Fate::Queued => {
                        self.now = t + 600_000;
                        let mut all = first;
                        all.extend(again);
                        self.b_handles(all, self.now);
                    }
                    Fate::TailLost => {
                        self.now = t + 600_000;
                        let mut first = first;
                        first.sort_by_key(|d| seq(d));
                        first.truncate(1);
                        self.b_handles(first, t + 100_000);
                        self.delayed_ack();
                    }
                    _ => {
                        self.now = t + 550_000;
                        self.b_handles(again, self.now);
                    }
                }
            }
        }
        self.finish();
        self.now += 1_000_000;
    }

    /// What is left (the rest of a lost flight) leaves as a driver sends
    /// it: at once when acknowledgements allow, or at its timer, until
    /// everything is acknowledged.
    fn finish(&mut self) {
        for _ in 0..20 {
            if self.a.quiesced() {
                break;
            }
            let mut ds = self.a_sends();
            if ds.is_empty() {
                self.now = self.now.max(self.a.poll_timeout());
                self.a.handle_timeout(self.now);
                ds = self.a_sends();
            }
            self.now += 100_000;
            self.b_handles(ds, self.now);
        }
        assert!(self.a.quiesced(), "everything acknowledged");
    }
}

/// A timeout whose datagrams had reached the peer's socket 350 us before
/// it fired (the peer was descheduled for 500 us: a hold under the 1 ms
/// that counts as a host's delay) is spurious: the window and `ssthresh`
/// come back, and nothing is sent again but the one retransmission that
/// left before the acknowledgement came. (OLD: the window stayed at one
/// datagram and `ssthresh` at half.)
#[test]
#[cfg_attr(
    miri,
    ignore = "protocol simulation without unsafe code: minutes under Miri"
)]
fn ccundo_a_descheduled_receiver_gives_the_window_back() {
    let mut p = Pair::new();
    let before = p.cc();
    assert!(before.0 >= 2 * MTU as u64, "window {before:?}");
    p.round(Fate::Descheduled);
    assert_eq!(p.a.stats().spurious_timeouts, 1);
    assert_eq!(p.a.stats().retransmits, 1);
    let after = p.cc();
    assert!(
        after.0 >= before.0 && after.1 >= before.1,
        "window {after:?} after, {before:?} before"
    );
}

/// A timeout whose datagrams a network queue held past it is congestion:
/// it stands (the window starts again from one datagram, `ssthresh` at
/// half).
#[test]
#[cfg_attr(
    miri,
    ignore = "protocol simulation without unsafe code: minutes under Miri"
)]
fn ccundo_a_queue_past_the_timeout_is_no_spurious_timeout() {
    let mut p = Pair::new();
    let before = p.cc();
    p.round(Fate::Queued);
    assert_eq!(p.a.stats().spurious_timeouts, 0);
    let after = p.cc();
    assert_eq!(after.1, (before.0 / 2).max(2 * MTU as u64), "ssthresh");
    assert!(
        after.0 <= after.1,
        "window {after:?} after, {before:?} before"
    );
}

/// Real loss: the whole flight is lost, the timeout's retransmission is
/// what arrives, and its acknowledgement echoes the retransmission: the
/// window halves and stays halved through the next round trips.
#[test]
#[cfg_attr(
    miri,
    ignore = "protocol simulation without unsafe code: minutes under Miri"
)]
fn ccundo_a_real_loss_halves_the_window_and_it_stays_halved() {
    let mut p = Pair::new();
    let before = p.cc();
    p.round(Fate::Lost);
    assert_eq!(p.a.stats().spurious_timeouts, 0);
    let half = (before.0 / 2).max(2 * MTU as u64);
    let after = p.cc();
    assert_eq!(after.1, half, "ssthresh {after:?}, before {before:?}");
    assert!(after.0 <= half, "window {after:?}, before {before:?}");
    for _ in 0..3 {
        p.round(Fate::Prompt);
        let (cwnd, ssthresh) = p.cc();
        assert_eq!(ssthresh, half);
        assert!(cwnd <= half + MTU as u64, "window {cwnd} grew back");
    }
}

/// A short stall with a socket overflow (h13-ccundo, leftover of issue 28
/// point 2): the receiver, descheduled for 500 us, kept the flight's first
/// datagram and dropped the second and the timeout's retransmission. Its
/// acknowledgement echoes the first (sent before the timeout) with a hold
/// that places its arrival before the timeout, and no selective
/// acknowledgement (nothing above the hole arrived): it shows that the
/// delay was the host's, not that nothing was lost. The verdict waits for
/// the acknowledgement that covers the flight, which echoes the second's
/// retransmission: a loss, the reduction stands. (OLD: the first
/// acknowledgement undid it, 1 spurious timeout and `ssthresh` back to
/// where it was.)
#[test]
#[cfg_attr(
    miri,
    ignore = "protocol simulation without unsafe code: minutes under Miri"
)]
fn ccundo_a_short_stall_with_a_lost_tail_keeps_the_reduction() {
    let mut p = Pair::new();
    let before = p.cc();
    p.round(Fate::TailLost);
    assert!(p.a.stats().retransmits >= 2, "the tail was resent");
    assert_eq!(p.a.stats().spurious_timeouts, 0, "the tail loss undone");
    let after = p.cc();
    assert_eq!(
        after.1,
        (before.0 / 2).max(2 * MTU as u64),
        "ssthresh {after:?}, before {before:?}"
    );
}

/// What a spurious timeout marked stays marked (the acknowledgement that
/// shows it spurious proves nothing of the rest of the flight), and a
/// hole below a selectively acknowledged slot is found (a loss: the
/// timeout's reduction stands).
#[test]
#[cfg_attr(
    miri,
    ignore = "protocol simulation without unsafe code: minutes under Miri"
)]
fn ccundo_holes_below_a_sack_are_losses() {
    use super::send::{SendStream, TxSlot};
    let mut s = SendStream::new(16);
    for i in 0..4u32 {
        s.slots.push_back(TxSlot {
            buf: vec![0; 1000],
            sent_at: 10 + i as u64,
            sacked: false,
            again: false,
            inflight: true,
            retx: false,
        });
    }
    s.next_seq = 4;
    s.next_tx = 4;
    let lost = s.mark_lost(true, 100);
    assert_eq!((lost.marked, lost.flight), (4, 4000));
    assert!(!s.hole_below_sack(), "nothing selectively acknowledged");
    // slot 3 selectively acknowledged: slots 0..3 are holes below it
    s.slots[3].sacked = true;
    assert!(s.hole_below_sack());
    s.slots[0].sacked = true;
    s.slots[1].sacked = true;
    s.slots[2].sacked = true;
    assert!(!s.hole_below_sack(), "no hole left");
}

/// REVIEW (rev3): the first datagram of a flight reaches the descheduled
/// peer before the timeout, the second is really lost. The acknowledgement
/// of the first shows only that the delay was the peer's (its datagram
/// arrived in time); it proves nothing of the second, which must stay
/// marked and leave at that acknowledgement, and (since h13-ccundo) no
/// undo comes before the acknowledgement that covers the whole flight,
/// which echoes the second's retransmission: no spurious timeout at all.
/// (OLD, rev3: the undo put the second back in flight unmarked, nothing
/// left at the acknowledgement, and it waited 925 us for a second
/// timeout.)
#[test]
#[cfg_attr(
    miri,
    ignore = "protocol simulation without unsafe code: minutes under Miri"
)]
fn rv3fix_a_timely_first_ack_keeps_the_rest_of_the_flight_marked() {
    let mut p = Pair::new();
    let (t, first) = p.send_message(12_000);
    assert_eq!(first.len(), 2);
    p.now = t + 450_000;
    p.a.handle_timeout(p.now);
    let again = p.a_sends();
    eprintln!("retransmissions after the timeout: {}", again.len());
    // the peer handles only the first original (arrived at t + 100 us),
    // the second original was lost; the retransmissions are lost too
    p.now = t + 600_000;
    let rb = p.b.stats().received;
    let ra = p.a.stats().received;
    // which of the two is the first in sequence: deliver the one with the lower seq
    let seq = |d: &Vec<u8>| u32::from_le_bytes([d[16], d[17], d[18], d[19]]);
    eprintln!("seqs {} {}", seq(&first[0]), seq(&first[1]));
    let lo = if seq(&first[0]) < seq(&first[1]) {
        first[0].clone()
    } else {
        first[1].clone()
    };
    p.b_handles(vec![lo], t + 100_000);
    if p.a.stats().received == ra {
        // the receiver's delayed acknowledgement: run its timers until it leaves
        let mut acks = Vec::new();
        let mut bt = p.now;
        for _ in 0..50 {
            bt = bt.max(p.b.poll_timeout());
            p.b.handle_timeout(bt);
            p.b.poll_transmit(bt, true, &mut |_, d| acks.push(d.to_vec()));
            if !acks.is_empty() {
                break;
            }
            bt += 10_000;
        }
        eprintln!(
            "b's ack left {} us after the datagram reached it",
            (bt - (t + 100_000)) / 1000
        );
        p.now = bt + 100_000;
        for d in acks {
            if let Some(back) = p.a.handle_datagram_at(p.now, p.now, d) {
                p.a.recycle(back);
            }
        }
    }
    eprintln!(
        "b received +{} a received +{}",
        p.b.stats().received - rb,
        p.a.stats().received - ra
    );
    let st = &p.a.peers[1].tx[0];
    eprintln!(
        "spurious={} again={} in_flight={} now={} poll_timeout={} (in {} us)",
        p.a.stats().spurious_timeouts,
        st.again,
        st.in_flight(),
        p.now,
        p.a.poll_timeout(),
        (p.a.poll_timeout().saturating_sub(p.now)) / 1000
    );
    let resent = p.a_sends();
    eprintln!("sent at once after the ack: {}", resent.len());
    // the ack shows only that the delay was the peer's; whether the
    // flight lost anything waits for the ack that covers it (h13-ccundo:
    // it used to be undone here, `ccundo_a_short_stall_with_a_lost_tail_…`)
    assert_eq!(
        p.a.stats().spurious_timeouts,
        0,
        "the timeout was taken for spurious before the flight was covered"
    );
    assert_eq!(
        resent.len(),
        1,
        "the really lost datagram is resent at the acknowledgement"
    );
    let hi = first.iter().map(seq).max().unwrap();
    assert_eq!(
        seq(&resent[0]),
        hi,
        "what left at the ack is the lost datagram"
    );
    // the acknowledgement that covers the flight echoes its
    // retransmission: a loss, the reduction stands
    p.now += 100_000;
    p.b_handles(resent, p.now);
    p.finish();
    assert_eq!(p.a.stats().spurious_timeouts, 0);
    assert!(!p.a.peers[1].cc.episode_open());
}

/// A flight of three datagrams: the first and third reach the descheduled
/// peer in time, the second is lost. The first acknowledgement after the
/// timeout echoes a transmission from before it, but it selectively
/// acknowledges the third above a hole: a loss, decided at that
/// acknowledgement (`Cc::on_hole`: the episode ends there, its reduction
/// standing), and the lost datagram leaves at it. Without the hole the
/// acknowledgement that covers the flight would decide the same later:
/// the datagram that fills the hole is a retransmission, whose echo is
/// from after the timeout (on one FIFO path the hole only decides
/// earlier; the covering acknowledgement is checked here too).
#[test]
#[cfg_attr(
    miri,
    ignore = "protocol simulation without unsafe code: minutes under Miri"
)]
fn rv3fix_a_hole_below_a_sack_is_no_spurious_timeout() {
    let mut p = Pair::new();
    let before = p.cc();
    let (t, mut first) = p.send_message(20_000);
    assert_eq!(first.len(), 3, "the message left in three datagrams");
    let seq = |d: &Vec<u8>| u32::from_le_bytes([d[16], d[17], d[18], d[19]]);
    first.sort_by_key(seq);
    p.now = t + 450_000;
    p.a.handle_timeout(p.now);
    assert_eq!(p.a.stats().timeouts, 1);
    let _lost_again = p.a_sends();
    p.now = t + 600_000;
    let lost = first.remove(1);
    let ra = p.a.stats().received;
    p.b_handles(first, t + 100_000);
    assert!(p.a.stats().received > ra, "an acknowledgement came back");
    assert_eq!(p.a.stats().spurious_timeouts, 0, "a loss in the flight");
    let after = p.cc();
    assert_eq!(
        after.1,
        (before.0 / 2).max(2 * MTU as u64),
        "ssthresh {after:?}"
    );
    assert!(
        !p.a.peers[1].cc.episode_open(),
        "the hole decided at the first acknowledgement"
    );
    let resent = p.a_sends();
    assert_eq!(resent.len(), 1, "the lost datagram leaves at the ack");
    assert_eq!(seq(&resent[0]), seq(&lost));
    // its acknowledgement covers the flight: still no spurious timeout
    p.now += 100_000;
    p.b_handles(resent, p.now);
    p.finish();
    assert_eq!(p.a.stats().spurious_timeouts, 0);
    assert!(p.cc().1 <= after.1, "ssthresh {:?}, {after:?}", p.cc());
}

/// h13-ccundofix2 (review nit 6): a peer's episode bounds are 16 maximal
/// RTOs after the latest timeout (the peer timeout when that is shorter)
/// and the peer timeout after the first, capped below the stamps' wrap.
#[test]
fn ccundofix2_the_episode_bounds_follow_the_configuration() {
    use super::congestion::EPISODE_MAX;
    use super::Peer;
    let cfg = ProtoConfig::default();
    assert_eq!(
        Peer::new(&cfg, 0).cc.episode_bounds(),
        (16 * cfg.max_rto, cfg.peer_timeout)
    );
    let short = ProtoConfig {
        peer_timeout: 10 * cfg.max_rto,
        ..cfg
    };
    assert_eq!(
        Peer::new(&short, 0).cc.episode_bounds(),
        (short.peer_timeout, short.peer_timeout)
    );
    let long = ProtoConfig {
        max_rto: EPISODE_MAX,
        peer_timeout: u64::MAX,
        ..cfg
    };
    assert_eq!(
        Peer::new(&long, 0).cc.episode_bounds(),
        (EPISODE_MAX, EPISODE_MAX)
    );
}
