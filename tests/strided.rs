//! Strided and indexed transfers (`t_strided`, see tests/progs/strided.rs)
//! on 1, 2, 3, 4 and 8 ranks, on shm and udp (processes under the
//! launcher) and on the verbs model (ranks as threads), on both RMA
//! paths: 1-/2-/3-D shapes, zero-length dimensions, overlapping source
//! runs, shapes and runs larger than one message, indexed lists, 3-D
//! faces, and misuse refused at the caller with nothing written.

mod common;
use common::*;

#[path = "progs/strided.rs"]
mod strided;

use splitrt::pgas::{Pgas, RmaPath};
use splitrt::runtime::config::{Config, FabricKind};
use splitrt::runtime::fabric::rdma::model::ModelNetwork;
use splitrt::runtime::job::{JobInfo, JobSource};
use splitrt::EndpointBuilder;
use std::time::{Duration, Instant};

fn job_on(n: usize, fabric: &str, rma: &str) {
    let r = run_job(
        n,
        &example("t_strided"),
        &[],
        &[("SPLITRT_RMA", rma), ("SPLITRT_FABRIC", fabric)],
        120,
    );
    r.ok();
    let path = if rma == "am" {
        "(Am path)"
    } else {
        "(Native path)"
    };
    let ok = r
        .stdout
        .lines()
        .filter(|l| l.contains("strided ok") && l.contains(path))
        .count();
    assert_eq!(
        ok, n,
        "every rank reports success on {fabric}, {rma} path:\n{}",
        r.stdout
    );
}

macro_rules! jobs {
    ($($name:ident: $n:expr, $fabric:expr, $rma:expr;)*) => {$(
        #[test]
        fn $name() {
            job_on($n, $fabric, $rma);
        }
    )*};
}

jobs! {
    strided_shm_native_1_rank: 1, "shm", "native";
    strided_shm_am_1_rank: 1, "shm", "am";
    strided_shm_native_2_ranks: 2, "shm", "native";
    strided_shm_am_2_ranks: 2, "shm", "am";
    strided_shm_native_3_ranks: 3, "shm", "native";
    strided_shm_am_3_ranks: 3, "shm", "am";
    strided_shm_native_4_ranks: 4, "shm", "native";
    strided_shm_am_4_ranks: 4, "shm", "am";
    strided_shm_native_8_ranks: 8, "shm", "native";
    strided_shm_am_8_ranks: 8, "shm", "am";
    strided_udp_native_1_rank: 1, "udp", "native";
    strided_udp_am_1_rank: 1, "udp", "am";
    strided_udp_native_2_ranks: 2, "udp", "native";
    strided_udp_am_2_ranks: 2, "udp", "am";
    strided_udp_native_3_ranks: 3, "udp", "native";
    strided_udp_am_3_ranks: 3, "udp", "am";
    strided_udp_native_4_ranks: 4, "udp", "native";
    strided_udp_am_4_ranks: 4, "udp", "am";
    strided_udp_native_8_ranks: 8, "udp", "native";
    strided_udp_am_8_ranks: 8, "udp", "am";
}

/// `size` ranks as threads over one verbs model network (as
/// tests/verbs_model.rs does), each running `t_strided`'s checks.
fn verbs_model(size: usize, rma: RmaPath, seed: u64) {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let id = format!(
        "vm-strided-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let net = ModelNetwork::new(seed);
    let (tx, rx) = std::sync::mpsc::channel();
    for r in 0..size {
        let dev = net.device(&format!("model{r}"));
        let (tx, id) = (tx.clone(), id.clone());
        std::thread::Builder::new()
            .name(format!("rank{r}"))
            .spawn(move || {
                let job = JobInfo {
                    rank: r,
                    size,
                    local_rank: r,
                    local_size: size,
                    node: 0,
                    job_id: id,
                    bootstrap: None,
                    key: None,
                    source: JobSource::Slurm,
                };
                let cfg = Config {
                    fabric: FabricKind::Ibverbs,
                    segment_size: 4 << 20,
                    ibv_buffers: 16,
                    rma,
                    bootstrap_timeout: Duration::from_secs(30),
                    ..Config::default()
                };
                let out = Pgas::attach_over_verbs_model(EndpointBuilder::new(), job, cfg, dev)
                    .and_then(strided::run_on)
                    .map_err(|e| e.to_string());
                let _ = tx.send((r, out));
            })
            .expect("spawn a rank thread");
    }
    drop(tx);
    let limit = Duration::from_secs(180);
    let end = Instant::now() + limit;
    let mut failed = Vec::new();
    for _ in 0..size {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok((_, Ok(()))) => {}
            Ok((r, Err(e))) => failed.push(format!("rank {r}: {e}")),
            Err(_) => panic!("ranks still running after {limit:?} (failed: {failed:?})"),
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

macro_rules! model_jobs {
    ($($name:ident: $n:expr, $rma:expr;)*) => {$(
        #[test]
        fn $name() {
            verbs_model($n, $rma, 40 + $n as u64);
        }
    )*};
}

model_jobs! {
    strided_verbs_model_native_1_rank: 1, RmaPath::Native;
    strided_verbs_model_am_1_rank: 1, RmaPath::Am;
    strided_verbs_model_native_2_ranks: 2, RmaPath::Native;
    strided_verbs_model_am_2_ranks: 2, RmaPath::Am;
    strided_verbs_model_native_3_ranks: 3, RmaPath::Native;
    strided_verbs_model_am_3_ranks: 3, RmaPath::Am;
    strided_verbs_model_native_4_ranks: 4, RmaPath::Native;
    strided_verbs_model_am_4_ranks: 4, RmaPath::Am;
    strided_verbs_model_native_8_ranks: 8, RmaPath::Native;
    strided_verbs_model_am_8_ranks: 8, RmaPath::Am;
}
