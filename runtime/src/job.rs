//! Who am I: rank, size, node and local ranks, read from splitrt-run's
//! `SPLITRT_*` variables, or from Slurm, Open MPI or PMI, so one binary runs
//! under `splitrt-run`, `srun` or `mpirun`. `SPLITRT_*` wins; a process with
//! none of these variables is a 1-rank job.

use crate::key::{JobKey, ENV_JOB_KEY};
use crate::{Error, Result};

/// Global rank of this process.
pub const ENV_RANK: &str = "SPLITRT_RANK";
/// Number of ranks in the job.
pub const ENV_SIZE: &str = "SPLITRT_SIZE";
/// Rank among the ranks of this node.
pub const ENV_LOCAL_RANK: &str = "SPLITRT_LOCAL_RANK";
/// Number of ranks on this node.
pub const ENV_LOCAL_SIZE: &str = "SPLITRT_LOCAL_SIZE";
/// Node index of this process.
pub const ENV_NODE: &str = "SPLITRT_NODE";
/// Job identifier (names shared-memory files).
pub const ENV_JOB: &str = "SPLITRT_JOB";
/// `host:port` of the bootstrap rendezvous.
pub const ENV_BOOTSTRAP: &str = "SPLITRT_BOOTSTRAP";

/// Where the job description came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobSource {
    /// `splitrt-run` (or a user setting `SPLITRT_*` by hand).
    Splitrt,
    /// Slurm's `srun`.
    Slurm,
    /// Open MPI's `mpirun`.
    OpenMpi,
    /// A PMI launcher (MPICH hydra and friends).
    Pmi,
    /// A launcher that sets only `PMIX_*` variables (PRRTE's `prterun`);
    /// the job is read from PMIx (cargo feature `pmix`).
    Pmix,
    /// No launcher at all: a 1-rank job.
    Singleton,
}

/// This process's place in the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    /// Global rank, `0..size`.
    pub rank: usize,
    /// Number of ranks.
    pub size: usize,
    /// Rank among the ranks on this node.
    pub local_rank: usize,
    /// Number of ranks on this node.
    pub local_size: usize,
    /// Node index.
    pub node: usize,
    /// Job identifier; names shared-memory files, so it is kept to
    /// `[A-Za-z0-9_.-]`.
    pub job_id: String,
    /// Bootstrap rendezvous address, if a launcher published one.
    pub bootstrap: Option<String>,
    /// The job key from `SPLITRT_JOB_KEY`, if set (splitrt-run sets it).
    pub key: Option<JobKey>,
    /// Where this came from.
    pub source: JobSource,
}

impl JobInfo {
    /// Read the job from the process environment.
    pub fn from_env() -> Result<Self> {
        #[cfg(feature = "pmix")]
        if Self::pmix_only(|k| std::env::var(k).ok()) {
            return Self::from_pmix(|k| std::env::var(k).ok());
        }
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Whether `get` shows only a PMIx launcher (`PMIX_RANK`) and none of
    /// the launchers [`from_lookup`](Self::from_lookup) reads.
    fn pmix_only(get: impl Fn(&str) -> Option<String>) -> bool {
        get("PMIX_RANK").is_some()
            && [ENV_RANK, "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"]
                .iter()
                .all(|k| get(k).is_none())
    }

    /// The job as PMIx tells it (rank, size, ranks on this node, the
    /// namespace as job id), under a launcher that sets only `PMIX_*`.
    #[cfg(feature = "pmix")]
    fn from_pmix(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let key = get(ENV_JOB_KEY).map(|k| JobKey::from_hex(&k)).transpose()?;
        let p = crate::pmix::Pmix::init()?;
        let (local_rank, local_size) = p.local()?;
        let job = JobInfo {
            rank: p.rank,
            size: p.size,
            local_rank,
            local_size,
            // as under Open MPI: the bootstrap groups ranks by host
            node: 0,
            job_id: format!("pmix{}", p.namespace()?),
            bootstrap: get(ENV_BOOTSTRAP),
            key,
            source: JobSource::Pmix,
        }
        .validate()?;
        // The bootstrap exchanges the address on this connection (a job of
        // one rank or with SPLITRT_BOOTSTRAP has no exchange: finalize now).
        if job.size > 1 && job.bootstrap.is_none() {
            p.keep();
        }
        Ok(job)
    }

    /// Read the job through `get` (unit tests pass a map).
    ///
    /// ```
    /// use splitrt_runtime::job::{JobInfo, JobSource};
    /// let env = [("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4"), ("SLURM_LOCALID", "1"),
    ///            ("SLURM_NODEID", "1"), ("SLURM_JOB_ID", "77"), ("SLURM_STEP_ID", "0"),
    ///            ("SLURM_STEP_TASKS_PER_NODE", "2(x2)")];
    /// let j = JobInfo::from_lookup(|k| env.iter().find(|e| e.0 == k).map(|e| e.1.to_string())).unwrap();
    /// assert_eq!((j.rank, j.size, j.local_rank, j.local_size, j.node), (3, 4, 1, 2, 1));
    /// assert_eq!(j.source, JobSource::Slurm);
    /// ```
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let num = |name: &str| -> Result<Option<usize>> {
            match get(name) {
                None => Ok(None),
                Some(v) => v.trim().parse().map(Some).map_err(|_| {
                    Error::config(format!("{name}={v:?} is not a non-negative integer"))
                }),
            }
        };
        let key = get(ENV_JOB_KEY).map(|k| JobKey::from_hex(&k)).transpose()?;
        let job = if let Some(rank) = num(ENV_RANK)? {
            let size = num(ENV_SIZE)?
                .ok_or_else(|| Error::config(format!("{ENV_RANK} is set but {ENV_SIZE} is not")))?;
            JobInfo {
                rank,
                size,
                local_rank: num(ENV_LOCAL_RANK)?.unwrap_or(rank),
                local_size: num(ENV_LOCAL_SIZE)?.unwrap_or(size),
                node: num(ENV_NODE)?.unwrap_or(0),
                job_id: get(ENV_JOB).unwrap_or_else(|| "job".into()),
                bootstrap: get(ENV_BOOTSTRAP),
                key: key.clone(),
                source: JobSource::Splitrt,
            }
        } else if let Some(rank) = num("SLURM_PROCID")? {
            let size = num("SLURM_NTASKS")?
                .or(num("SLURM_NPROCS")?)
                .ok_or_else(|| Error::config("SLURM_PROCID is set but SLURM_NTASKS is not"))?;
            let node = num("SLURM_NODEID")?.unwrap_or(0);
            let per_node = get("SLURM_STEP_TASKS_PER_NODE").or_else(|| get("SLURM_TASKS_PER_NODE"));
            let local_size = match per_node {
                Some(spec) => slurm_tasks_on_node(&spec, node).ok_or_else(|| {
                    Error::config(format!(
                        "cannot read node {node}'s task count from SLURM_STEP_TASKS_PER_NODE={spec:?}"
                    ))
                })?,
                None => size,
            };
            let id = format!(
                "slurm{}.{}",
                get("SLURM_JOB_ID").unwrap_or_else(|| "0".into()),
                get("SLURM_STEP_ID").unwrap_or_else(|| "0".into())
            );
            JobInfo {
                rank,
                size,
                local_rank: num("SLURM_LOCALID")?.unwrap_or(rank),
                local_size,
                node,
                job_id: id,
                bootstrap: get(ENV_BOOTSTRAP),
                key: key.clone(),
                source: JobSource::Slurm,
            }
        } else if let Some(rank) = num("OMPI_COMM_WORLD_RANK")? {
            let size = num("OMPI_COMM_WORLD_SIZE")?.ok_or_else(|| {
                Error::config("OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not")
            })?;
            let id = get("OMPI_MCA_ess_base_jobid")
                .or_else(|| get("OMPI_MCA_orte_ess_jobid"))
                .unwrap_or_else(|| "0".into());
            JobInfo {
                rank,
                size,
                local_rank: num("OMPI_COMM_WORLD_LOCAL_RANK")?.unwrap_or(rank),
                local_size: num("OMPI_COMM_WORLD_LOCAL_SIZE")?.unwrap_or(size),
                // Open MPI names no node index; the bootstrap groups ranks by host.
                node: 0,
                job_id: format!("ompi{id}"),
                bootstrap: get(ENV_BOOTSTRAP),
                key: key.clone(),
                source: JobSource::OpenMpi,
            }
        } else if let Some(rank) = num("PMI_RANK")? {
            let size = num("PMI_SIZE")?
                .ok_or_else(|| Error::config("PMI_RANK is set but PMI_SIZE is not"))?;
            let id = get("PMI_KVSNAME")
                .or_else(|| get("PMI_JOBID"))
                .unwrap_or_else(|| "0".into());
            JobInfo {
                rank,
                size,
                local_rank: num("MPI_LOCALRANKID")?.unwrap_or(rank),
                local_size: num("MPI_LOCALNRANKS")?.unwrap_or(size),
                node: 0,
                job_id: format!("pmi{id}"),
                bootstrap: get(ENV_BOOTSTRAP),
                key: key.clone(),
                source: JobSource::Pmi,
            }
        } else if Self::pmix_only(&get) {
            return Err(Error::config(format!(
                "started by a PMIx launcher that names no job size in the environment \
                 (PMIX_RANK={} and no OMPI_COMM_WORLD_SIZE, SLURM_NTASKS or PMI_SIZE; e.g. \
                 prterun): {}",
                get("PMIX_RANK").unwrap_or_default(),
                if cfg!(feature = "pmix") {
                    "JobInfo::from_env reads such a job from PMIx (cargo feature `pmix`)"
                } else {
                    "a build with the cargo feature `pmix` (`--features splitrt/pmix`, needs \
                     libpmix-dev) reads the job from PMIx"
                }
            )));
        } else {
            JobInfo {
                rank: 0,
                size: 1,
                local_rank: 0,
                local_size: 1,
                node: 0,
                job_id: format!("solo{}", std::process::id()),
                bootstrap: None,
                key: key.clone(),
                source: JobSource::Singleton,
            }
        };
        job.validate()
    }

    fn validate(mut self) -> Result<Self> {
        self.job_id = sanitize_job_id(&self.job_id);
        if self.size == 0 || self.rank >= self.size {
            return Err(Error::config(format!(
                "rank {} is not in a job of {} ranks (from {:?} variables)",
                self.rank, self.size, self.source
            )));
        }
        if self.local_size == 0 || self.local_rank >= self.local_size || self.local_size > self.size
        {
            return Err(Error::config(format!(
                "local rank {} of {} local ranks does not fit a job of {} (from {:?} variables)",
                self.local_rank, self.local_size, self.size, self.source
            ))
            .at_rank(self.rank));
        }
        Ok(self)
    }
}

/// Keep a job id usable in a file name: anything outside `[A-Za-z0-9_.-]`
/// becomes `_`, and it is cut to 48 characters.
pub fn sanitize_job_id(id: &str) -> String {
    id.chars()
        .take(48)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Task count of `node` in Slurm's compressed per-node list, e.g.
/// `"2(x3),1"` = three nodes with 2 tasks, then one with 1.
///
/// ```
/// use splitrt_runtime::job::slurm_tasks_on_node;
/// assert_eq!(slurm_tasks_on_node("2(x3),1", 2), Some(2));
/// assert_eq!(slurm_tasks_on_node("2(x3),1", 3), Some(1));
/// assert_eq!(slurm_tasks_on_node("4", 1), None);
/// ```
pub fn slurm_tasks_on_node(spec: &str, node: usize) -> Option<usize> {
    let mut seen = 0usize;
    for part in spec.split(',') {
        let part = part.trim();
        let (count, reps) = match part.split_once("(x") {
            Some((c, r)) => (c.parse().ok()?, r.strip_suffix(')')?.parse::<usize>().ok()?),
            None => (part.parse().ok()?, 1),
        };
        if node < seen + reps {
            return Some(count);
        }
        seen += reps;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn job(vars: &[(&str, &str)]) -> Result<JobInfo> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        JobInfo::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn singleton_without_variables() {
        let j = job(&[]).unwrap();
        assert_eq!((j.rank, j.size, j.source), (0, 1, JobSource::Singleton));
    }

    #[test]
    fn splitrt_wins_over_slurm() {
        let j = job(&[
            ("SPLITRT_RANK", "1"),
            ("SPLITRT_SIZE", "2"),
            ("SPLITRT_JOB", "abc/def"),
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
        ])
        .unwrap();
        assert_eq!((j.rank, j.size, j.source), (1, 2, JobSource::Splitrt));
        assert_eq!(j.job_id, "abc_def");
    }

    #[test]
    fn open_mpi_variables() {
        let j = job(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("OMPI_MCA_ess_base_jobid", "123"),
        ])
        .unwrap();
        assert_eq!((j.rank, j.size, j.local_rank, j.local_size), (2, 4, 0, 2));
        assert_eq!(j.job_id, "ompi123");
        assert_eq!(j.source, JobSource::OpenMpi);
    }

    #[test]
    fn pmi_variables() {
        let j = job(&[
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "3"),
            ("PMI_KVSNAME", "kvs_9"),
        ])
        .unwrap();
        assert_eq!((j.rank, j.size, j.source), (0, 3, JobSource::Pmi));
        assert_eq!(j.job_id, "pmikvs_9");
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let e = job(&[("SPLITRT_RANK", "x"), ("SPLITRT_SIZE", "2")]).unwrap_err();
        assert!(e.to_string().contains("SPLITRT_RANK"), "{e}");
        let e = job(&[("SPLITRT_RANK", "2"), ("SPLITRT_SIZE", "2")]).unwrap_err();
        assert!(e.to_string().contains("not in a job of 2"), "{e}");
        let e = job(&[("SLURM_PROCID", "0")]).unwrap_err();
        assert!(e.to_string().contains("SLURM_NTASKS"), "{e}");
        let e = job(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_TASKS_PER_NODE", "garbage"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("SLURM_STEP_TASKS_PER_NODE"), "{e}");
    }

    /// A launcher that sets only `PMIX_*` variables (prterun) is not taken
    /// for a 1-rank job (every rank would run alone): `from_lookup`
    /// refuses it naming the `pmix` feature; `from_env` of a build with
    /// the feature reads the job from PMIx instead. Open MPI's and Slurm's
    /// variables still win when a PMIx launcher sets them too.
    #[test]
    fn pmix_only_launcher_is_not_a_singleton() {
        let e = job(&[("PMIX_RANK", "1"), ("PMIX_NAMESPACE", "prte-x-1@1")]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("PMIx launcher") && msg.contains("pmix"),
            "{msg}"
        );
        let j = job(&[
            ("PMIX_RANK", "2"),
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
        ])
        .unwrap();
        assert_eq!((j.rank, j.size, j.source), (2, 4, JobSource::OpenMpi));
    }
}
