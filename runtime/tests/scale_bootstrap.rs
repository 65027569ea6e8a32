//! The bootstrap's share of docs/scale.md's model: the bytes of the
//! rendezvous messages as the model counts them, checked against the real
//! encoding, and the largest job whose Welcome fits one frame.
//! `--nocapture` prints the model's figures for 10^2..10^4 nodes.

use splitrt_runtime::bootstrap::wire::{Msg, Peer, MAX_FRAME};

/// The model: a Welcome body to a job of `n` ranks is a tag, a count and
/// per rank a length-prefixed host name, a pid and a length-prefixed
/// endpoint.
fn welcome_bytes(n: u64, host: u64, endpoint: u64) -> u64 {
    1 + 4 + n * (4 + host + 4 + 4 + endpoint)
}

/// A cluster's names and a UDP endpoint as `PendingUdp::endpoint` writes
/// it (`address:port`).
fn peers(n: usize, nodes: usize) -> Vec<Peer> {
    (0..n)
        .map(|r| Peer {
            host: format!("node{:05}", r % nodes),
            pid: 100_000 + r as u32,
            endpoint: format!(
                "10.{}.{}.{}:{}",
                r >> 16 & 255,
                r >> 8 & 255,
                r & 255,
                40_000 + r % 20_000
            )
            .into_bytes(),
        })
        .collect()
}

#[test]
fn scalemodel_welcome_bytes_match_the_model() {
    for (n, nodes) in [(1usize, 1usize), (64, 8), (4096, 32), (12_800, 100)] {
        let p = peers(n, nodes);
        let body = Msg::Welcome(p.clone()).encode_body();
        let model: u64 = 5 + p
            .iter()
            .map(|q| 12 + q.host.len() as u64 + q.endpoint.len() as u64)
            .sum::<u64>();
        assert_eq!(body.len() as u64, model, "{n} ranks");
        assert_eq!(Msg::decode(&body).unwrap(), Msg::Welcome(p));
    }
    // the model's figures: host names of 9 bytes, endpoints of 18
    let per_rank = welcome_bytes(1, 9, 18) - 5;
    let largest = (MAX_FRAME as u64 - 5) / per_rank;
    println!("Welcome: {per_rank} B per rank of the job; the largest job whose Welcome fits one frame ({MAX_FRAME} B): {largest} ranks");
    for nodes in [100u64, 1_000, 10_000] {
        let n = nodes * 128;
        let w = welcome_bytes(n, 9, 18);
        println!(
            "{nodes} nodes x 128: {n} ranks, Welcome {:.1} MB each, {:.2} TB from the rendezvous in all{}",
            w as f64 / 1e6,
            (w * n) as f64 / 1e12,
            if w > MAX_FRAME as u64 { " (over MAX_FRAME: refused)" } else { "" }
        );
    }
    assert!(largest >= 400_000, "{largest}");
    assert!(welcome_bytes(10_000 * 128, 9, 18) > MAX_FRAME as u64);
}
