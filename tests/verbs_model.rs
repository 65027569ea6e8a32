//! The AM and PGAS layers over the ibverbs fabric, run here without RDMA
//! hardware: the ranks are threads of this test process, each with its
//! device of one verbs model (`ModelNetwork`, a **test double** of RC queue
//! pairs), joined through the real bootstrap (rank 0 hosts it) with their
//! cards in the hello, exactly as on a cluster. The programs are the same
//! `t_conformance` and `t_pgas_model` that the shm, udp and cluster tests
//! run as processes; only the attach differs. (The real device path needs
//! hardware; `tests/ibverbs.rs` checks its start-up error here.)

#[path = "progs/conformance.rs"]
mod conformance;
#[path = "progs/pgas_model.rs"]
mod pgas_model;

use splitrt::pgas::Pgas;
use splitrt::runtime::config::{Config, FabricKind, RmaPath};
use splitrt::runtime::fabric::rdma::model::{ModelDevice, ModelNetwork};
use splitrt::runtime::job::{JobInfo, JobSource};
use splitrt::EndpointBuilder;
use std::time::{Duration, Instant};

/// Rank `rank` of `size` threads of job `id` (rank 0 hosts the rendezvous,
/// the others find it in the private directory, as under srun on one node).
fn job(id: &str, rank: usize, size: usize) -> JobInfo {
    JobInfo {
        rank,
        size,
        local_rank: rank,
        local_size: size,
        node: 0,
        job_id: id.into(),
        bootstrap: None,
        key: None,
        source: JobSource::Slurm,
    }
}

fn config(segment: usize, buffers: usize) -> Config {
    Config {
        fabric: FabricKind::Ibverbs,
        segment_size: segment,
        ibv_buffers: buffers,
        bootstrap_timeout: Duration::from_secs(30),
        ..Config::default()
    }
}

/// Run `body(rank, device)` on `size` threads over one model network
/// seeded `seed`; every rank must succeed within `limit`.
fn on_threads(
    size: usize,
    seed: u64,
    limit: Duration,
    body: impl Fn(usize, ModelDevice) -> splitrt::Result<()> + Send + Sync + Clone + 'static,
) {
    let net = ModelNetwork::new(seed);
    let (tx, rx) = std::sync::mpsc::channel();
    for r in 0..size {
        let dev = net.device(&format!("model{r}"));
        let (tx, body) = (tx.clone(), body.clone());
        std::thread::Builder::new()
            .name(format!("rank{r}"))
            .spawn(move || {
                let out = body(r, dev).map_err(|e| e.to_string());
                let _ = tx.send((r, out));
            })
            .expect("spawn a rank thread");
    }
    drop(tx);
    let end = Instant::now() + limit;
    let mut failed = Vec::new();
    for _ in 0..size {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((_, Ok(()))) => {}
            Ok((r, Err(e))) => failed.push(format!("rank {r}: {e}")),
            Err(_) => {
                panic!("ranks still running after {limit:?} (finished with errors: {failed:?})")
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "vm-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[test]
fn am_conformance_over_the_verbs_model() {
    let (size, seg) = (3, 8 << 20);
    let id = unique("conf");
    on_threads(size, 11, Duration::from_secs(120), move |r, dev| {
        let j = job(&id, r, size);
        let cfg = config(seg, 16);
        conformance::run_on(1, &j.clone(), seg, move |b: EndpointBuilder| {
            let ep = b.attach_over_verbs_model(j, cfg, dev)?;
            assert!(
                matches!(
                    ep.raw_fabric_for_tests(),
                    splitrt::runtime::fabric::AnyFabric::RdmaModel(_)
                ),
                "not on the model"
            );
            Ok(ep)
        })
    });
}

#[test]
fn am_conformance_with_few_buffers_and_small_ones() {
    // 2 buffers of 1 KiB per channel: every Medium spans buffers, every
    // sender runs out of credit and waits for the returns.
    let (size, seg) = (2, 4 << 20);
    let id = unique("tight");
    on_threads(size, 12, Duration::from_secs(120), move |r, dev| {
        let j = job(&id, r, size);
        let cfg = Config {
            ibv_buffer_size: 1024,
            ..config(seg, 2)
        };
        conformance::run_on(1, &j.clone(), seg, move |b| {
            b.attach_over_verbs_model(j, cfg, dev)
        })
    });
}

#[test]
fn pgas_model_over_the_verbs_model() {
    let (size, seg) = (3, 8 << 20);
    let id = unique("pgas");
    on_threads(size, 13, Duration::from_secs(180), move |r, dev| {
        let pg = Pgas::attach_over_verbs_model(
            EndpointBuilder::new(),
            job(&id, r, size),
            config(seg, 16),
            dev,
        )?;
        // get/put on the native path go by RDMA read / write here
        assert_eq!(
            pg.rma_path(),
            splitrt::runtime::config::RmaPath::Native,
            "rank {r}"
        );
        pgas_model::run_on(2, 100, pg)
    });
}

/// The ibverbs fabric lends the PGAS layer the one-sided capability and
/// no load/store one: a put and a get to the neighbour go by RDMA write
/// and read, and arrive.
#[test]
fn ibverbs_lends_pgas_one_sided_access_not_load_store() {
    let (size, seg) = (2, 4 << 20);
    let id = unique("caps");
    on_threads(size, 17, Duration::from_secs(120), move |r, dev| {
        let pg = Pgas::attach_over_verbs_model(
            EndpointBuilder::new(),
            job(&id, r, size),
            config(seg, 16),
            dev,
        )?;
        let rma = pg.endpoint().rma();
        assert!(rma.load_store().is_none(), "rank {r}: nothing is mapped");
        assert!(rma.one_sided().is_some(), "rank {r}: RDMA read / write");
        let a = pg.alloc_sym::<u64>(4)?;
        pg.barrier()?;
        let right = (r + 1) % size;
        pg.put(a.ptr(right), &[r as u64 + 1; 4])?;
        pg.sync()?;
        pg.barrier()?;
        let left = (r + size - 1) % size;
        let here: Vec<u64> = (0..4).map(|i| a.local().get(i)).collect();
        assert_eq!(here, [left as u64 + 1; 4], "rank {r}");
        assert_eq!(pg.get(a.ptr(right), 4)?.wait()?, [r as u64 + 1; 4]);
        pg.barrier()?;
        pg.finish()
    });
}

#[test]
fn a_rank_that_fails_at_start_is_reported_by_the_others() {
    // Rank 1 asks for a buffer size out of range: its own start fails with
    // the reason, and the others hear of it from the bootstrap instead of
    // waiting for its card forever.
    let (size, seg) = (3, 4 << 20);
    let id = unique("bad");
    let net = ModelNetwork::new(14);
    let (tx, rx) = std::sync::mpsc::channel();
    for r in 0..size {
        let dev = net.device(&format!("model{r}"));
        let (tx, id) = (tx.clone(), id.clone());
        std::thread::spawn(move || {
            let mut cfg = config(seg, 16);
            cfg.bootstrap_timeout = Duration::from_secs(5);
            if r == 1 {
                cfg.ibv_buffer_size = 16;
            }
            let out = EndpointBuilder::new()
                .attach_over_verbs_model(job(&id, r, size), cfg, dev)
                .map(|ep| ep.finish());
            let _ = tx.send((r, out.err().map(|e| e.to_string())));
        });
    }
    drop(tx);
    let mut errs = vec![None; size];
    for _ in 0..size {
        let (r, e) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("every rank returns");
        errs[r] = e;
    }
    let own = errs[1].clone().expect("rank 1 fails");
    assert!(
        own.contains("ibverbs buffer size 16 B out of range"),
        "{own}"
    );
    for (r, e) in errs.iter().enumerate() {
        assert!(e.is_some(), "rank {r} started without rank 1");
    }
}

/// A direct put (RDMA write) into a frozen range is refused at the sender,
/// naming the range and the peer, and writes nothing: the peer may hold a
/// `FrozenArray::local()` slice over those bytes (issue 23). It checked
/// only the reserved ranges, so the write landed under the reference.
#[test]
fn a_direct_put_into_a_frozen_range_is_refused() {
    let (size, seg) = (2, 4 << 20);
    let id = unique("frozen");
    on_threads(size, 14, Duration::from_secs(60), move |r, dev| {
        let ep = EndpointBuilder::new().attach_over_verbs_model(
            job(&id, r, size),
            config(seg, 16),
            dev,
        )?;
        let off = (seg / 2) as u64;
        ep.write_segment(off, &[7; 64])?;
        // SAFETY: the test plays the freeze protocol: every rank freezes the
        // same range before the barrier below, no reference over it is
        // made, and nobody thaws it.
        unsafe { ep.freeze_segment_range(off, 64)? };
        ep.barrier()?;
        if r == 0 {
            let rma = ep.rma();
            for (at, len) in [(off, 64), (off - 8, 16), (off + 63, 1)] {
                let b = vec![9u8; len];
                for nb in [false, true] {
                    let res = if nb {
                        rma.put_direct_nb(1, at, &b)
                    } else {
                        rma.put_direct(1, at, &b)
                    };
                    let e = res.expect("a one-sided path").unwrap_err();
                    let s = e.to_string();
                    assert!(s.contains("frozen") && s.contains("rank 1"), "{s}");
                    assert!(s.contains(&format!("{off:#x}..{:#x}", off + 64)), "{s}");
                    assert_eq!(e.peer(), Some(1));
                }
            }
            rma.quiet()?;
            // outside the frozen range, a direct put still goes through
            rma.put_direct(1, off + 64, &[5; 8]).expect("one-sided")?;
        }
        ep.barrier()?;
        if r == 1 {
            let mut got = [0u8; 72];
            ep.read_segment(off, &mut got)?;
            assert_eq!(&got[..64], &[7; 64][..], "a frozen byte changed");
            assert_eq!(&got[64..], &[5; 8][..]);
        }
        ep.barrier()?;
        ep.finish()
    });
}

#[path = "progs/rpc.rs"]
mod rpc_prog;

/// Typed RPC (`splitrt::rpc`) over the ibverbs fabric's model: the same
/// program as `tests/rpc.rs` runs over shm and UDP (round trips, 4000
/// outstanding calls aggregated, held results, too-large values; then
/// undecodable arguments and a panicking function).
#[test]
fn rpc_over_the_verbs_model() {
    let (size, seg) = (3, 8 << 20);
    for (mode, seed) in [("basic", 15), ("bad", 16)] {
        let id = unique(&format!("rpc{mode}"));
        on_threads(size, seed, Duration::from_secs(120), move |r, dev| {
            let j = job(&id, r, size);
            let cfg = config(seg, 16);
            rpc_prog::run_on(mode, r, move |b| b.attach_over_verbs_model(j, cfg, dev))
        });
    }
}

#[path = "progs/teams.rs"]
mod teams_prog;

/// Teams and team collectives (`t_teams`, as `tests/teams.rs` runs over
/// shm and UDP) over the ibverbs fabric's model: 3 ranks on both
/// one-sided paths, 1, 2, 4 and 8 on the native one (team messages are
/// AMs either way); odd-size, size-1 and nested teams, zero-length and
/// chunked data.
#[test]
fn teams_over_the_verbs_model() {
    let seg = 8 << 20;
    let runs = [(3, RmaPath::Native, 18), (3, RmaPath::Am, 19)];
    let more = [1, 2, 4, 8].map(|n| (n, RmaPath::Native, 20 + n as u64));
    for (size, rma, seed) in runs.into_iter().chain(more) {
        let id = unique(&format!("teams{size}{rma:?}"));
        on_threads(size, seed, Duration::from_secs(120), move |r, dev| {
            let cfg = Config {
                rma,
                ..config(seg, 16)
            };
            let pg =
                Pgas::attach_over_verbs_model(EndpointBuilder::new(), job(&id, r, size), cfg, dev)?;
            assert_eq!(pg.rma_path(), rma, "rank {r}");
            teams_prog::run_on(pg)
        });
    }
}
