//! The UDP protocol's timers, sans I/O: a peer that goes silent is pinged
//! and declared dead at the peer timeout, and waiting for that costs a
//! bounded number of timer wake-ups (a timer left in the past made a read
//! server spin on a CPU for the seconds between its consumer's keepalive
//! and peer timeouts).
use splitrt_runtime::fabric::frames::OutMsg;
use splitrt_runtime::fabric::udp::proto::{Event, Proto, ProtoConfig, Sent};

#[test]
fn a_silent_peer_costs_a_bounded_number_of_timer_wakeups() {
    let cfg = ProtoConfig {
        keepalive: 500_000_000,
        peer_timeout: 5_000_000_000,
        ..ProtoConfig::default()
    };
    let mut p = Proto::new(0, 2, cfg, [7; 32], 0);
    let m = OutMsg {
        tag: 1,
        words: &[1, 2],
        payload: &[],
        deposit: None,
    };
    assert_eq!(p.send(1_000, 1, 0, &m, 0), Sent::Upto(0), "taken whole");
    let (mut sent, mut wakeups) = (0u64, 0u64);
    p.poll_transmit(1_000, true, &mut |_, _| sent += 1);
    let dead_at = loop {
        let t = p.poll_timeout();
        assert!(t < 60_000_000_000, "no peer timeout in a minute");
        wakeups += 1;
        assert!(
            wakeups < 1_000,
            "{wakeups} timer wake-ups by {:.3} s: a timer in the past",
            t as f64 / 1e9
        );
        p.handle_timeout(t);
        p.poll_transmit(t, true, &mut |_, _| sent += 1);
        if let Some(Event::PeerDead { peer, .. }) = p.poll_event() {
            assert_eq!(peer, 1);
            break t;
        }
    };
    println!(
        "dead at {:.3} s after {wakeups} wake-ups, {sent} datagrams",
        dead_at as f64 / 1e9
    );
    assert!(
        (5_000_000_000..5_200_000_000).contains(&dead_at),
        "{dead_at}"
    );
}
