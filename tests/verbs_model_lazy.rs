//! Connections made on first contact over the ibverbs fabric's verbs model
//! (a **test double**; ranks are threads, joined through the real
//! bootstrap, whose relay carries the connection messages): what a rank
//! holds toward its peers after start and after talking to some of them.

mod common;
use common::verbs_model::{config, job, on_threads, unique};

use splitrt::runtime::fabric::AnyFabric;
use splitrt::{Endpoint, EndpointBuilder, Kind, Payload};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// (queue pairs, pools, pinned bytes besides the segment) of this rank.
fn held(ep: &Endpoint) -> (usize, usize, u64) {
    match ep.raw_fabric_for_tests() {
        AnyFabric::RdmaModel(f) => {
            let s = f.peer_state();
            (s.queue_pairs, s.pools, s.pinned_bytes)
        }
        _ => panic!("not the verbs model"),
    }
}

/// `size` ranks; rank r sends one Short to each rank of `to(r)` and waits
/// for those sent to it; returns each rank's (queue pairs, pools, pinned
/// bytes) at start and after.
fn talk(
    size: usize,
    to: fn(usize, usize) -> Vec<usize>,
    seed: u64,
) -> Vec<[(usize, usize, u64); 2]> {
    let id = unique(&format!("lazy{size}"));
    let out = Arc::new(std::sync::Mutex::new(vec![[(0, 0, 0); 2]; size]));
    let o = out.clone();
    on_threads(size, seed, Duration::from_secs(120), move |r, dev| {
        let mut b = EndpointBuilder::new();
        let got = Arc::new(AtomicUsize::new(0));
        let g = got.clone();
        let h = b.request("lazy_hello", Kind::Short, 1, move |_tok, _m| {
            g.fetch_add(1, Ordering::Release);
        })?;
        let ep = b.attach_over_verbs_model(job(&id, r, size), config(1 << 20, 16), dev)?;
        let at_start = held(&ep);
        ep.barrier()?;
        for p in to(r, size) {
            ep.request(p, h, &[r as u64], Payload::None)?;
        }
        let expect = (0..size).filter(|&q| to(q, size).contains(&r)).count();
        ep.wait_until(|| got.load(Ordering::Acquire) == expect)?;
        ep.barrier()?;
        o.lock().unwrap()[r] = [at_start, held(&ep)];
        ep.finish()
    });
    let v = out.lock().unwrap().clone();
    v
}

#[test]
fn lazyrdma_a_rank_that_talks_to_one_of_n_peers_holds_one_queue_pair_and_one_pool() {
    let size = 6;
    let cfg = config(1 << 20, 16).rdma();
    let mail = size as u64 * 16;
    // rank 0 sends to rank 1; nobody else sends anything
    let rows = talk(size, |r, _| if r == 0 { vec![1] } else { vec![] }, 61);
    for (r, [start, after]) in rows.iter().enumerate() {
        assert_eq!(*start, (0, 0, mail), "rank {r} at start");
        let want = if r < 2 {
            (1, 1, cfg.pool_bytes() as u64 + mail)
        } else {
            (0, 0, mail)
        };
        assert_eq!(*after, want, "rank {r} after rank 0 talked to rank 1");
    }
    eprintln!("lazyrdma: {size} ranks, rank 0 sent to rank 1: {rows:?}");
}

#[test]
fn lazyrdma_every_rank_to_every_rank_holds_a_queue_pair_per_peer() {
    let size = 4;
    // every rank to every rank, itself included
    let rows = talk(size, |_, n| (0..n).collect(), 62);
    for (r, [start, after]) in rows.iter().enumerate() {
        assert_eq!(start.0, 0, "rank {r}");
        assert_eq!((after.0, after.1), (size, size), "rank {r}");
    }
}

/// The model's numbers for docs/scale.md: per rank, queue pairs, pools and
/// pinned bytes at start and after each rank talked to k of its N - 1
/// peers (rank r with r xor 1 ..= r xor k: every rank exactly k, both ways
/// on the same pair). Counts are checked; bytes printed
/// (`cargo test -p splitrt --test verbs_model_lazy scale -- --nocapture`).
#[test]
fn lazyrdma_scale_per_rank_state_after_k_of_n_peers() {
    let pool = config(1 << 20, 16).rdma().pool_bytes() as u64;
    for (size, ks) in [
        (16usize, &[0usize, 1, 4, 15][..]),
        (64, &[0, 1, 4, 16, 63][..]),
    ] {
        for (i, &k) in ks.iter().enumerate() {
            // `to` is a fn pointer: k goes through a table of them
            let to: fn(usize, usize) -> Vec<usize> = match k {
                0 => |_, _| vec![],
                1 => |r, _| vec![r ^ 1],
                4 => |r, _| (1..=4).map(|j| r ^ j).collect(),
                16 => |r, _| (1..=16).map(|j| r ^ j).collect(),
                _ => |r, n| (1..n).map(|j| r ^ j).collect(),
            };
            let rows = talk(size, to, 70 + i as u64);
            let [start, after] = rows[0];
            for (r, [s, a]) in rows.iter().enumerate() {
                assert_eq!((s.0, s.1), (0, 0), "rank {r} of {size} at start");
                assert_eq!((a.0, a.1), (k, k), "rank {r} of {size} after {k} peers");
                assert_eq!(a.2, k as u64 * pool + size as u64 * 16, "rank {r}");
            }
            eprintln!(
                "lazyrdma scale: N {size:3} k {k:3}: at start {} QPs {} B pinned; after {} QPs {} pools {} B pinned (eager: {size} QPs, {} B)",
                start.0,
                start.2,
                after.0,
                after.1,
                after.2,
                size as u64 * (pool + 16)
            );
        }
    }
}
