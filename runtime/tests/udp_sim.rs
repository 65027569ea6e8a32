//! The UDP protocol under the seeded network simulator (a test double of
//! the network; the real sockets are tested by the multi-process tests).
//! Any failure prints its seed and configuration; rerun one with
//! `SPLITRT_SIM_SEED=<seed> cargo test -p splitrt-runtime --test udp_sim`.

use splitrt_runtime::fabric::udp::proto::ProtoConfig;
use splitrt_runtime::fabric::udp::sim::{run, SimConfig};

/// The simulation for one seed: every parameter drawn from the seed.
fn config(seed: u64) -> SimConfig {
    let pick = |k: u64, n: u64| (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (k * 5)) % n;
    let lossy = pick(0, 4) != 0;
    SimConfig {
        seed,
        ranks: 2 + pick(1, 5) as usize,
        messages: 3000,
        loss: if lossy {
            [0.001, 0.01, 0.05, 0.1][pick(2, 4) as usize]
        } else {
            0.0
        },
        dup: if lossy { 0.01 } else { 0.0 },
        reorder: if lossy { 0.05 } else { 0.0 },
        corrupt: if lossy { 0.005 } else { 0.0 },
        pause: if pick(3, 3) == 0 { 0.001 } else { 0.0 },
        proto: ProtoConfig {
            mtu: [512, 1500, 9000, 65_507][pick(4, 4) as usize],
            window: [2, 4, 16, 64][pick(5, 4) as usize],
            ..ProtoConfig::default()
        },
        ..SimConfig::default()
    }
}

#[test]
fn every_message_once_and_in_order_across_seeds() {
    if let Some(s) = std::env::var("SPLITRT_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        let c = config(s);
        let r = run(&c).unwrap_or_else(|e| panic!("{e}\nconfig: {c:?}"));
        println!("seed {s}: {r:?}");
        return;
    }
    let target = 10_000_000u64;
    let mut total = 0u64;
    let mut seed = 0u64;
    let (mut lost, mut corrupted, mut retx) = (0, 0, 0);
    while total < target {
        seed += 1;
        let c = config(seed);
        let r = run(&c).unwrap_or_else(|e| panic!("{e}\nconfig: {c:?}"));
        total += r.delivered;
        lost += r.lost;
        corrupted += r.corrupted;
        retx += r.stats.retransmits;
    }
    println!(
        "{total} messages over {seed} seeds delivered exactly once and in order \
         ({lost} datagrams lost, {corrupted} corrupted, {retx} retransmitted)"
    );
}

#[test]
fn corrupted_datagrams_are_dropped_by_their_tag() {
    let r = run(&SimConfig {
        seed: 11,
        ranks: 3,
        messages: 3000,
        corrupt: 0.05,
        ..SimConfig::default()
    })
    .unwrap();
    assert!(r.corrupted > 50, "{r:?}");
    // every corrupted datagram was caught by its tag, none got through
    assert_eq!(r.stats.bad_tag, r.corrupted, "{r:?}");
}

#[test]
fn a_partition_heals_and_traffic_resumes_within_two_timeouts() {
    let proto = ProtoConfig {
        mtu: 9000,
        window: 16,
        ..ProtoConfig::default()
    };
    let max_rto = proto.max_rto;
    let r = run(&SimConfig {
        seed: 5,
        ranks: 4,
        messages: 20_000,
        partition: Some((5_000_000, 1_000_000_000)),
        proto,
        ..SimConfig::default()
    })
    .unwrap();
    let resumed = r
        .resumed_after_heal
        .expect("traffic crossed after the heal");
    assert!(
        resumed <= 2 * max_rto,
        "resumed {resumed} ns after the heal: {r:?}"
    );
    assert!(r.dead.is_empty(), "{r:?}");
    println!(
        "resumed {:.1} ms after a 1 s partition",
        resumed as f64 / 1e6
    );
}

#[test]
fn a_silent_peer_is_declared_dead() {
    let proto = ProtoConfig {
        keepalive: 200_000_000,
        peer_timeout: 2_000_000_000,
        ..ProtoConfig::default()
    };
    let r = run(&SimConfig {
        seed: 9,
        ranks: 4,
        messages: 2_000,
        crash: Some((2, 3_000_000)),
        proto,
        ..SimConfig::default()
    })
    .unwrap();
    let mut by: Vec<u32> = r.dead.iter().filter(|d| d.1 == 2).map(|d| d.0).collect();
    by.sort();
    assert_eq!(by, vec![0, 1, 3], "{r:?}");
    assert!(r.dead.iter().all(|d| d.1 == 2), "{r:?}");
    // declared within the timeout plus one keepalive of the crash
    assert!(r.time <= 3_000_000 + 2_200_000_000 + 10_000_000, "{r:?}");
}

/// Issue 24 item 2: a rank crashes and an on-path attacker replays every
/// datagram it captured from it at 200 per second. Replays are authentic
/// but not new: they must not refresh the crashed rank's liveness, so its
/// peers still declare it dead within the peer timeout (plus a keepalive).
#[test]
fn replayed_datagrams_do_not_keep_a_crashed_peer_alive() {
    let proto = ProtoConfig {
        keepalive: 200_000_000,
        peer_timeout: 2_000_000_000,
        ..ProtoConfig::default()
    };
    let crash_at = 3_000_000;
    let r = run(&SimConfig {
        seed: 13,
        ranks: 3,
        messages: 2_000,
        crash: Some((2, crash_at)),
        replay_rate: 200,
        proto,
        limit: 30_000_000_000,
        ..SimConfig::default()
    })
    .unwrap_or_else(|e| panic!("the crashed rank was never declared dead: {e}"));
    let mut by: Vec<u32> = r.dead.iter().filter(|d| d.1 == 2).map(|d| d.0).collect();
    by.sort();
    assert_eq!(by, vec![0, 1], "{r:?}");
    let latest = r.dead_at.iter().copied().max().unwrap_or(0);
    assert!(
        latest <= crash_at + proto.peer_timeout + proto.keepalive + 10_000_000,
        "declared dead {:.2} s after the crash: {r:?}",
        (latest - crash_at) as f64 / 1e9
    );
    assert!(r.replayed >= 300, "the attacker replayed: {r:?}");
    println!(
        "declared dead {:.2} s after the crash, {} datagrams replayed",
        (latest - crash_at) as f64 / 1e9,
        r.replayed
    );
}
