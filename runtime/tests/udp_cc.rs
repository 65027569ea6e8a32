//! The UDP protocol's congestion control in the seeded network simulator
//! (a bottleneck link with a finite drop-tail queue in front of the
//! receiver). Properties of the protocol in simulated time; wall-clock
//! speed is never asserted. `--nocapture` prints the figures
//! (docs/networking.md quotes them).

use splitrt_runtime::fabric::udp::proto::ProtoConfig;
use splitrt_runtime::fabric::udp::sim::{
    run, run_incast, Bottleneck, IncastConfig, IncastReport, SimConfig, Stall,
};

/// 1 Gbit/s.
const RATE: u64 = 125_000_000;

fn incast(senders: usize, messages: usize, cc: bool) -> IncastReport {
    let cfg = IncastConfig {
        seed: 28,
        senders,
        messages,
        message_bytes: 1 << 20,
        bottleneck: Some(Bottleneck {
            rate: RATE,
            queue: 1 << 20,
            into: None,
        }),
        proto: ProtoConfig {
            mtu: 9000,
            cc,
            ..ProtoConfig::default()
        },
        // far more than either needs: the fixed window's storms are
        // reported, not waited out
        limit: 20_000_000_000,
        ..IncastConfig::default()
    };
    run_incast(&cfg).unwrap_or_else(|e| panic!("{e}"))
}

fn show(what: &str, r: &IncastReport) {
    println!(
        "{what}: done {} in {:.3} s simulated, goodput {:.1} MB/s = {:.3}x the link, \
         min share {:.3} of the mean at the first finish, queue drops {}, \
         retransmits {}, timeouts {} ({} spurious, undone), cwnd reductions {}, peak queue {} B",
        r.done,
        r.time as f64 / 1e9,
        r.goodput / 1e6,
        r.goodput / RATE as f64,
        r.min_share,
        r.queue_drops,
        r.stats.retransmits,
        r.stats.timeouts,
        r.stats.spurious_timeouts,
        r.stats.cwnd_reductions,
        r.peak_queue,
    );
}

/// 64 senders, 1 MiB messages, one 1 Gbit/s link with a 1 MiB queue in
/// front of the receiver: goodput at least 0.8x the link, no sender below
/// half its fair share. The fixed window (controller off) is run first
/// and only reported.
#[test]
fn cc_incast_64_to_1_keeps_goodput_and_fairness() {
    let old = incast(64, 2, false);
    show("incast 64-to-1, fixed window (cc off)", &old);
    let new = incast(64, 2, true);
    show("incast 64-to-1, congestion control", &new);
    assert!(new.done, "not every message delivered");
    assert!(
        new.goodput >= 0.8 * RATE as f64,
        "goodput {:.3}x the link",
        new.goodput / RATE as f64
    );
    assert!(
        new.min_share >= 0.5,
        "a sender got {:.3} of its fair share",
        new.min_share
    );
}

/// A lone flow through the same link reaches at least 0.9x its rate.
#[test]
fn cc_lone_flow_fills_the_link() {
    let r = incast(1, 16, true);
    show("lone flow, congestion control", &r);
    assert!(r.done);
    assert!(
        r.goodput >= 0.9 * RATE as f64,
        "goodput {:.3}x the link",
        r.goodput / RATE as f64
    );
}

/// Without a bottleneck and without loss the controller costs little
/// simulated time: the same run with it off and on (the cost is slow
/// start's first round trips, which a fixed window skips; the bulk row
/// over an unlimited network is printed, not asserted).
#[test]
fn cc_loss_free_runs_cost_little() {
    let time = |cc: bool| {
        let r = run(&SimConfig {
            seed: 3,
            ranks: 4,
            messages: 3000,
            proto: ProtoConfig {
                mtu: 9000,
                window: 32,
                cc,
                ..ProtoConfig::default()
            },
            ..SimConfig::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.stats.retransmits, 0);
        r.time
    };
    let (old, new) = (time(false), time(true));
    println!(
        "all-to-all loss-free (4 ranks): fixed window {:.3} ms, cc {:.3} ms, ratio {:.4}",
        old as f64 / 1e6,
        new as f64 / 1e6,
        new as f64 / old as f64
    );
    // bulk: one sender, no bottleneck (an idle network)
    let bulk = |cc: bool| {
        let r = run_incast(&IncastConfig {
            senders: 1,
            messages: 16,
            bottleneck: None,
            proto: ProtoConfig {
                mtu: 9000,
                cc,
                ..ProtoConfig::default()
            },
            ..IncastConfig::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(r.done);
        r.time
    };
    let (bold, bnew) = (bulk(false), bulk(true));
    println!(
        "bulk 16 x 1 MiB, no bottleneck: fixed window {:.3} ms, cc {:.3} ms, ratio {:.4}",
        bold as f64 / 1e6,
        bnew as f64 / 1e6,
        bnew as f64 / bold as f64
    );
    assert!(
        new as f64 <= old as f64 * 1.05,
        "all-to-all: {new} ns with cc, {old} ns without"
    );
}

/// With the controller on, every message still arrives once and in order
/// through loss, duplication, reordering, corruption and pauses, with and
/// without a bottleneck.
#[test]
fn cc_every_message_once_under_faults() {
    for seed in 1..=4u64 {
        let cfg = SimConfig {
            seed,
            ranks: 4,
            messages: 1000,
            loss: [0.001, 0.01, 0.05, 0.1][seed as usize - 1],
            dup: 0.01,
            reorder: 0.05,
            corrupt: 0.005,
            pause: 0.001,
            bottleneck: (seed % 2 == 0).then_some(Bottleneck {
                rate: RATE,
                queue: 256 << 10,
                into: Some(0),
            }),
            proto: ProtoConfig {
                mtu: [1500, 9000][seed as usize % 2],
                window: 16,
                cc: true,
                ..ProtoConfig::default()
            },
            ..SimConfig::default()
        };
        let r = run(&cfg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.delivered, 4 * 4 * 2 * 1000, "seed {seed}");
    }
}

/// A receiver that keeps being descheduled (2 ms running, then up to 8 ms
/// off, as on an oversubscribed host: what it receives meanwhile waits in
/// its socket, its acknowledgements wait for it) adds milliseconds to
/// every round trip that no network queue caused. The delay signal must
/// not take that for congestion: with the controller on, one flow through
/// a 1 Gbit/s link (1 MiB queue) to such a receiver still moves at least
/// 0.8x what the fixed window moves in the same run, and its window ends
/// at 16 datagrams or more (it collapsed to one when the receiver's hold
/// time counted as queueing and its late acknowledgements as losses).
#[test]
fn cc_slow_receiver_does_not_collapse_the_window() {
    let run_with = |cc: bool| {
        let cfg = IncastConfig {
            seed: 9,
            senders: 1,
            messages: 8,
            bottleneck: Some(Bottleneck {
                rate: RATE,
                queue: 1 << 20,
                into: None,
            }),
            proto: ProtoConfig {
                mtu: 9000,
                cc,
                ..ProtoConfig::default()
            },
            stall: Some(Stall {
                run: 2_000_000,
                off: 8_000_000,
            }),
            limit: 20_000_000_000,
            ..IncastConfig::default()
        };
        run_incast(&cfg).unwrap_or_else(|e| panic!("{e}"))
    };
    let off = run_with(false);
    show("slow receiver, fixed window (cc off)", &off);
    let on = run_with(true);
    show("slow receiver, congestion control", &on);
    let credit = 2 * 64 * 9000u64;
    println!(
        "slow receiver: goodput cc/fixed {:.3}, final cwnd {} B ({:.3} of the credit)",
        on.goodput / off.goodput,
        on.final_cwnd,
        on.final_cwnd as f64 / credit as f64
    );
    assert!(on.done && off.done);
    assert!(
        on.goodput >= 0.8 * off.goodput,
        "goodput with cc {:.3}x the fixed window's",
        on.goodput / off.goodput
    );
    assert!(
        on.final_cwnd >= 16 * 9000,
        "the window collapsed to {} B",
        on.final_cwnd
    );
}

/// The same slow receiver behind a real queue: 16 senders through a
/// 1 Gbit/s link with an 8 MiB queue. The fixed windows (16 x 64
/// datagrams) fill it; with the controller the delay signal still sees
/// the network's queueing (the receiver's own delay subtracted) and keeps
/// the queue under 2 MiB, with goodput at least 0.8x the link.
#[test]
fn cc_slow_receiver_behind_a_queue_still_backs_off() {
    let run_with = |cc: bool| {
        let cfg = IncastConfig {
            seed: 10,
            senders: 16,
            messages: 2,
            bottleneck: Some(Bottleneck {
                rate: RATE,
                queue: 8 << 20,
                into: None,
            }),
            proto: ProtoConfig {
                mtu: 9000,
                cc,
                ..ProtoConfig::default()
            },
            stall: Some(Stall {
                run: 2_000_000,
                off: 8_000_000,
            }),
            limit: 20_000_000_000,
            ..IncastConfig::default()
        };
        run_incast(&cfg).unwrap_or_else(|e| panic!("{e}"))
    };
    let off = run_with(false);
    show(
        "slow receiver behind an 8 MiB queue, fixed window (cc off)",
        &off,
    );
    let on = run_with(true);
    show(
        "slow receiver behind an 8 MiB queue, congestion control",
        &on,
    );
    assert!(on.done);
    assert!(
        on.peak_queue <= 2 << 20,
        "the queue reached {} B with cc",
        on.peak_queue
    );
    assert!(
        on.goodput >= 0.8 * RATE as f64,
        "goodput {:.3}x the link",
        on.goodput / RATE as f64
    );
}

/// Arrival stamps that seem to precede the transmission they time (a
/// driver that read its clock, was descheduled, then converted the
/// kernel's stamps against that old reading: on a loaded host the lossless
/// loopback Medium flood of `splitrt-bench net` ran at 0.1-0.5x its speed
/// with the controller off) are no delay sample. Before, such a round trip
/// wrapped around the wire's 32-bit microsecond clock into one of about
/// 71 minutes, read as a queue far above the target, and each halved the
/// window, down to its floor of a quarter datagram. One flow, 16 x 1 MiB
/// through the 1 Gbit/s link, every rank's stamps early by up to 2 ms:
/// goodput at least 0.9x the link, as with exact stamps, and the window
/// ends at 16 datagrams or more.
#[test]
fn cc_early_arrival_stamps_are_no_queue() {
    let run_with = |stale_clock: u64| {
        let cfg = IncastConfig {
            seed: 11,
            senders: 1,
            messages: 16,
            bottleneck: Some(Bottleneck {
                rate: RATE,
                queue: 1 << 20,
                into: None,
            }),
            proto: ProtoConfig {
                mtu: 9000,
                cc: true,
                ..ProtoConfig::default()
            },
            limit: 20_000_000_000,
            stale_clock,
            ..IncastConfig::default()
        };
        run_incast(&cfg).unwrap_or_else(|e| panic!("{e}"))
    };
    let exact = run_with(0);
    show("lone flow, exact stamps", &exact);
    let early = run_with(2_000_000);
    show("lone flow, stamps early by up to 2 ms", &early);
    println!(
        "early stamps: goodput {:.3}x the exact run's, final cwnd {} B",
        early.goodput / exact.goodput,
        early.final_cwnd
    );
    assert!(early.done);
    assert!(
        early.goodput >= 0.9 * RATE as f64,
        "goodput {:.3}x the link",
        early.goodput / RATE as f64
    );
    assert!(
        early.final_cwnd >= 16 * 9000,
        "the window collapsed to {} B",
        early.final_cwnd
    );
}

/// A receiver descheduled for less than a millisecond at a time (it runs
/// 1 ms, then is off for up to 0.95 ms: a loaded host) outlasts the
/// 200 us minimum retransmission timeout without losing anything, and its
/// hold times stay under the 1 ms that counts as the host's delay. Each
/// such timeout is spurious: the acknowledgement that ends it echoes a
/// transmission from before the timeout, and the peer's hold shows that
/// the datagram reached its socket before the timeout fired. It must give
/// the window back (Eifel): one flow of 64 x 1 MiB in 64 KiB datagrams
/// (window 16: a 2 MiB credit) through a 2.5 GB/s link with 100 us each
/// way (a loopback's rate and the round trip of a window of 64 KiB
/// datagrams, their copies and tags; the queue holds the whole credit, so
/// nothing is lost) moves at least 0.9x what the fixed window moves in the
/// same run, and its window ends at half the credit or more. (Before,
/// every such timeout left `ssthresh` at half, from where 64 KiB datagrams
/// grew by a quarter datagram per round trip.)
#[test]
fn cc_spurious_timeouts_are_undone() {
    let run_with = |cc: bool| {
        let cfg = IncastConfig {
            seed: 12,
            senders: 1,
            messages: 64,
            latency: 100_000,
            bottleneck: Some(Bottleneck {
                rate: 2_500_000_000,
                queue: 16 << 20,
                into: None,
            }),
            proto: ProtoConfig {
                window: 16,
                cc,
                ..ProtoConfig::default()
            },
            stall: Some(Stall {
                run: 1_000_000,
                off: 950_000,
            }),
            limit: 20_000_000_000,
            ..IncastConfig::default()
        };
        run_incast(&cfg).unwrap_or_else(|e| panic!("{e}"))
    };
    let off = run_with(false);
    show("sub-ms receiver stalls, fixed window (cc off)", &off);
    let on = run_with(true);
    show("sub-ms receiver stalls, congestion control", &on);
    let credit = 2 * 16 * ProtoConfig::default().mtu as u64;
    println!(
        "sub-ms stalls: goodput cc/fixed {:.3}, final cwnd {} B ({:.3} of the credit), \
         spurious timeouts undone {}",
        on.goodput / off.goodput,
        on.final_cwnd,
        on.final_cwnd as f64 / credit as f64,
        on.stats.spurious_timeouts,
    );
    assert!(on.done && off.done);
    assert_eq!(on.queue_drops + on.socket_drops, 0, "no loss in this run");
    assert!(
        on.goodput >= 0.9 * off.goodput,
        "goodput with cc {:.3}x the fixed window's",
        on.goodput / off.goodput
    );
    assert!(
        on.final_cwnd >= credit / 2,
        "the window ended at {} B",
        on.final_cwnd
    );
}
