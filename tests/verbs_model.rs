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

mod common;
use common::verbs_model::{config, job, on_threads, unique};

use splitrt::pgas::Pgas;
use splitrt::runtime::config::{Config, RmaPath};
use splitrt::runtime::fabric::rdma::model::ModelNetwork;
use splitrt::EndpointBuilder;
use std::time::Duration;

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

/// Start `size` ranks of one job on a fresh verbs model (seed `seed`),
/// each with `config(seg, 16)` changed by `tweak(rank, &mut cfg)` and a
/// 5 s bootstrap timeout, and return each rank's start error, if any.
fn start_errors(size: usize, seed: u64, tweak: fn(usize, &mut Config)) -> Vec<Option<String>> {
    let seg = 4 << 20;
    let id = unique("start");
    let net = ModelNetwork::new(seed);
    let (tx, rx) = std::sync::mpsc::channel();
    for r in 0..size {
        let dev = net.device(&format!("model{r}"));
        let (tx, id) = (tx.clone(), id.clone());
        std::thread::spawn(move || {
            let mut cfg = config(seg, 16);
            cfg.bootstrap_timeout = Duration::from_secs(5);
            tweak(r, &mut cfg);
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
    errs
}

#[test]
fn a_rank_that_fails_at_start_is_reported_by_the_others() {
    // Rank 1 asks for a buffer size out of range: its own start fails with
    // the reason, and the others hear of it from the bootstrap instead of
    // waiting for its card forever.
    let errs = start_errors(3, 14, |r, cfg| {
        if r == 1 {
            cfg.ibv_buffer_size = 16;
        }
    });
    let own = errs[1].clone().expect("rank 1 fails");
    assert!(
        own.contains("ibverbs buffer size 16 B out of range"),
        "{own}"
    );
    for (r, e) in errs.iter().enumerate() {
        assert!(e.is_some(), "rank {r} started without rank 1");
    }
}

/// Ranks disagreeing on the ibverbs buffers (a size or count exported on
/// one host only) are refused at start, every rank naming both ranks and
/// values: a rank fills buffers of its own size into the receive buffers
/// its peer posted at the peer's size, and counts credits by its own
/// number (before, the job started and its first larger send failed in
/// the fabric).
#[test]
fn ranks_disagreeing_on_the_ibverbs_buffers_are_refused_at_start() {
    let size: fn(usize, &mut Config) = |r, cfg| {
        if r == 1 {
            cfg.ibv_buffer_size = 4096;
        }
    };
    let count: fn(usize, &mut Config) = |r, cfg| {
        if r == 1 {
            cfg.ibv_buffers = 8;
        }
    };
    // the exact sentence (review of session 14: a rank's own validation
    // error relayed to the others also names the variable and both ranks)
    for (var, tweak, want) in [
        (
            "SPLITRT_IBV_BUFFER_SIZE",
            size,
            "rank 0 runs with SPLITRT_IBV_BUFFER_SIZE=8192, rank 1 with \
             SPLITRT_IBV_BUFFER_SIZE=4096",
        ),
        (
            "SPLITRT_IBV_BUFFERS",
            count,
            "rank 0 runs with SPLITRT_IBV_BUFFERS=16, rank 1 with SPLITRT_IBV_BUFFERS=8",
        ),
    ] {
        for (r, e) in start_errors(2, 15, tweak).into_iter().enumerate() {
            let e = e.unwrap_or_else(|| panic!("{var}: rank {r} started"));
            assert!(
                e.contains(want) && e.contains("same value of this setting"),
                "{var}: rank {r}: {e}"
            );
        }
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

#[path = "progs/progress.rs"]
mod progress_prog;

/// Progress without polling over the ibverbs fabric's model: ranks that
/// compute without calling into splitrt answer AM requests and serve
/// one-sided operations (both RMA paths) from their progress threads
/// (the program `tests/progress.rs` runs over shm and UDP).
#[test]
fn progress_thread_over_the_verbs_model() {
    use splitrt::runtime::config::RmaPath;
    let (size, seg) = (3, 8 << 20);
    for (mode, rma, seed) in [
        ("thread", RmaPath::Native, 21),
        ("thread-only", RmaPath::Am, 22),
    ] {
        let id = unique(&format!("progress{mode}"));
        on_threads(size, seed, Duration::from_secs(60), move |r, dev| {
            let j = job(&id, r, size);
            let cfg = Config {
                rma,
                ..config(seg, 16)
            };
            progress_prog::run_on(mode, move |b| Pgas::attach_over_verbs_model(b, j, cfg, dev))
        });
    }
}

#[path = "progs/quiet.rs"]
mod quiet_prog;

/// Per-peer quiet over the ibverbs fabric's model, both RMA paths (the
/// program `tests/quiet.rs` runs over shm and UDP).
#[test]
fn quiet_peer_over_the_verbs_model() {
    use splitrt::runtime::config::RmaPath;
    let (size, seg) = (3, 8 << 20);
    for (rma, seed) in [(RmaPath::Native, 23), (RmaPath::Am, 24)] {
        let id = unique("quiet");
        let dir = std::env::temp_dir();
        on_threads(size, seed, Duration::from_secs(60), move |r, dev| {
            let j = job(&id, r, size);
            let cfg = Config {
                rma,
                ..config(seg, 16)
            };
            quiet_prog::run_on("quiet", &dir, move |b| {
                Pgas::attach_over_verbs_model(b, j, cfg, dev)
            })
        });
    }
}

#[path = "progs/team_shm.rs"]
mod team_shm_prog;

/// The world collectives as the world team's, mixed across ranks, and
/// team collectives over more than one shared-memory step (`t_team_shm`,
/// as `tests/team_shm.rs` runs over shm and UDP) over the ibverbs
/// fabric's model, where they go by team messages: 3 ranks on both
/// one-sided paths, 1, 2, 4 and 8 on the native one.
#[test]
fn teamshm_over_the_verbs_model() {
    let seg = 8 << 20;
    let runs = [
        (3, RmaPath::Native, 41),
        (3, RmaPath::Am, 42),
        (4, RmaPath::Native, 43),
    ];
    let more = [1, 2, 8].map(|n| (n, RmaPath::Native, 44 + n as u64));
    for (size, rma, seed) in runs.into_iter().chain(more) {
        let id = unique(&format!("teamshm{size}{rma:?}"));
        on_threads(size, seed, Duration::from_secs(120), move |r, dev| {
            let cfg = Config {
                rma,
                ..config(seg, 16)
            };
            let pg =
                Pgas::attach_over_verbs_model(EndpointBuilder::new(), job(&id, r, size), cfg, dev)?;
            team_shm_prog::run_on(pg)
        });
    }
}

/// Over ibverbs the largest Medium that arrives in one piece is one
/// receive buffer less its 24 B header, the 24 B frame header and the
/// arguments (every message starts a buffer of its own), not the Medium
/// maximum (the trait's default, which the fabric kept before though it
/// cuts a larger Medium across buffers); and a Medium of that size, with
/// one byte more, both arrive intact.
#[test]
fn max_medium_unsplit_over_ibverbs_is_one_receive_buffer() {
    let (size, seg) = (2, 4 << 20);
    let id = unique("unsplit");
    on_threads(size, 19, Duration::from_secs(120), move |r, dev| {
        let cfg = Config {
            ibv_buffer_size: 1024,
            ..config(seg, 16)
        };
        let mut b = EndpointBuilder::new();
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let g = got.clone();
        let h = b.request("take", splitrt::Kind::Medium, 0, move |_, m| {
            g.lock().unwrap().push(m.payload().to_vec());
        })?;
        let ep = b.attach_over_verbs_model(job(&id, r, size), cfg, dev)?;
        let peer = 1 - r;
        for nargs in [0, 3] {
            let n = ep.max_medium_unsplit(peer, nargs)?;
            assert_eq!(n, 1024 - 24 - 24 - 8 * nargs, "rank {r}, {nargs} args");
            assert!(n < ep.max_medium(peer)?);
        }
        let n = ep.max_medium_unsplit(peer, 0)?;
        let want: Vec<Vec<u8>> = [n, n + 1]
            .iter()
            .map(|&len| (0..len).map(|i| (i * 7 + r) as u8).collect())
            .collect();
        for p in &want {
            ep.request(peer, h, &[], splitrt::Payload::Medium(p))?;
        }
        let t0 = std::time::Instant::now();
        while got.lock().unwrap().len() < 2 && t0.elapsed() < Duration::from_secs(30) {
            ep.poll()?;
        }
        let theirs: Vec<Vec<u8>> = [n, n + 1]
            .iter()
            .map(|&len| (0..len).map(|i| (i * 7 + peer) as u8).collect())
            .collect();
        assert_eq!(*got.lock().unwrap(), theirs, "rank {r}");
        ep.barrier()?;
        ep.finish()
    });
}
