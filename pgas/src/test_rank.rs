//! Test support: a one-rank PGAS context over the verbs model (no
//! hardware, no files shared with other tests), for unit tests that need
//! a real context.

use crate::Pgas;

/// A one-rank context over the verbs model; `tag` names the job (with
/// this process's id), so tests running at once do not share one.
pub(crate) fn one_rank_over_model(tag: &str) -> Pgas {
    use splitrt_runtime::config::{Config, FabricKind};
    use splitrt_runtime::fabric::rdma::model::ModelNetwork;
    use splitrt_runtime::job::{JobInfo, JobSource};
    let job = JobInfo {
        rank: 0,
        size: 1,
        local_rank: 0,
        local_size: 1,
        node: 0,
        job_id: format!("{tag}-{}", std::process::id()),
        bootstrap: None,
        key: None,
        source: JobSource::Slurm,
    };
    let config = Config {
        fabric: FabricKind::Ibverbs,
        segment_size: 1 << 20,
        ibv_buffers: 4,
        bootstrap_timeout: std::time::Duration::from_secs(30),
        ..Config::default()
    };
    let dev = ModelNetwork::new(1).device("model0");
    Pgas::attach_over_verbs_model(splitrt_am::EndpointBuilder::new(), job, config, dev)
        .expect("a one-rank verbs-model context")
}
