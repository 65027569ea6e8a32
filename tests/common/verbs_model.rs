//! Ranks as threads of the test process over one in-process model of the
//! verbs (the `test-doubles` feature): the job, the configuration and the
//! runner that the verbs-model tests share.

use splitrt::pgas::{Pgas, RmaPath};
use splitrt::runtime::config::{Config, FabricKind};
use splitrt::runtime::fabric::rdma::model::{ModelDevice, ModelNetwork};
use splitrt::runtime::job::{JobInfo, JobSource};
use splitrt::EndpointBuilder;
use std::time::{Duration, Instant};

/// Rank `rank` of `size` threads of job `id` (rank 0 hosts the rendezvous,
/// the others find it in the private directory, as under srun on one node).
pub fn job(id: &str, rank: usize, size: usize) -> JobInfo {
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

/// The ibverbs fabric over the model with a `segment`-byte segment and
/// `buffers` send / receive buffers per peer.
pub fn config(segment: usize, buffers: usize) -> Config {
    Config {
        fabric: FabricKind::Ibverbs,
        segment_size: segment,
        ibv_buffers: buffers,
        bootstrap_timeout: Duration::from_secs(30),
        ..Config::default()
    }
}

/// A job id no other test of this process uses.
pub fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "vm-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Run `body(rank, device)` on `size` threads over one model network
/// seeded `seed`; every rank must succeed within `limit`.
pub fn on_threads(
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

/// `size` PGAS ranks on `rma` over the model (segments of `segment`
/// bytes, 16 buffers per peer), each running `prog`; within 180 s.
pub fn pgas_on_threads(
    tag: &str,
    size: usize,
    rma: RmaPath,
    segment: usize,
    seed: u64,
    prog: impl Fn(Pgas) -> splitrt::Result<()> + Send + Sync + Clone + 'static,
) {
    let id = unique(tag);
    on_threads(size, seed, Duration::from_secs(180), move |r, dev| {
        let cfg = Config {
            rma,
            ..config(segment, 16)
        };
        let pg =
            Pgas::attach_over_verbs_model(EndpointBuilder::new(), job(&id, r, size), cfg, dev)?;
        assert_eq!(pg.rma_path(), rma, "rank {r}");
        prog(pg)
    });
}
