//! A realtime clock step between a send and the arrival of its
//! acknowledgement (the arrival stamp is of the realtime clock) must not
//! reach the congestion controller as a round trip of hours.

use super::{Proto, ProtoConfig};
use crate::fabric::frames::OutMsg;

/// Rank 0 sends `rounds` messages to rank 1, one round trip each (100 us
/// each way), the last acknowledgement stamped as arriving `step_back`
/// ns (if any) before it was sent (a realtime clock stepped back); rank 0's
/// congestion window after it.
fn window_after(rounds: u64, step_back: Option<u64>) -> u64 {
    let cfg = ProtoConfig {
        cc: true,
        ..ProtoConfig::default()
    };
    let mut a = Proto::new(0, 2, cfg, [7; 32], 0);
    let mut b = Proto::new(1, 2, cfg, [7; 32], 0);
    let mut now = 1_000_000_000u64;
    for r in 0..rounds {
        let m = OutMsg {
            tag: 1,
            words: &[r, 2],
            payload: &[],
            deposit: None,
        };
        let sent_at = now;
        let _ = a.send(now, 1, 0, &m, 0);
        let mut out = Vec::new();
        a.poll_transmit(now, true, &mut |_, d| out.push(d.to_vec()));
        now += 100_000;
        for d in out.drain(..) {
            if let Some(back) = b.handle_datagram_at(now, now, d) {
                b.recycle(back);
            }
        }
        while b.next_ready(0).is_some() {}
        b.poll_transmit(now, true, &mut |_, d| out.push(d.to_vec()));
        now += 100_000;
        let arrived = match step_back {
            Some(back) if r + 1 == rounds => sent_at - back,
            _ => now,
        };
        for d in out.drain(..) {
            if let Some(back) = a.handle_datagram_at(now, arrived, d) {
                a.recycle(back);
            }
        }
        now += 1_000_000;
    }
    a.congestion_window(1).0
}

/// OLD: the wrapped difference (~4.3e12 ns) went into `on_rtt` as the
/// network's delay and halved the window; NEW: an arrival before the send
/// gives no delay sample (`hold::network_rtt`), and the window is the same
/// as without the step.
#[test]
fn a_realtime_clock_step_does_not_cut_the_window() {
    let steady = window_after(20, None);
    let stepped = window_after(20, Some(50_000_000));
    assert!(steady > 0);
    assert_eq!(stepped, steady, "a clock step cut the window");
}
