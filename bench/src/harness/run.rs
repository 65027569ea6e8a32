//! The driver's side of a benchmark: one [`Run`] per invocation owns the
//! output directory and the timeout, launches worker jobs and reads back
//! their results, and prints and writes the report (banner, text table,
//! `DIR/<name>.csv`).

use super::job::{self, Job, Place};
use super::progress::Progress;
use super::report::{self, Section};
use super::results::{BenchId, Results};
use crate::host::{build, cpu_model, loadavg};
use crate::Common;
use std::path::{Path, PathBuf};

/// How the ranks of the shared-memory benchmarks run, for banners.
pub const PINNED: &str = "2 ranks pinned to CPUs 0 and 1, SPLITRT_SPIN_ONLY=1";

/// A job environment with nothing besides what the harness sets.
pub const NO_ENV: &[(&str, String)] = &[];

/// One invocation of a benchmark, on the driver's side.
#[derive(Clone, Debug)]
pub struct Run {
    /// Flags passed on to the ranks (`--quick`, `--reps`).
    pub common: Common,
    /// Output directory.
    pub out: PathBuf,
    /// Seconds before each job is killed.
    pub timeout: f64,
    /// The load average when the run started.
    load_before: String,
}

impl Run {
    /// A run writing into `out` (created) whose jobs are killed after
    /// `timeout` seconds (checked).
    pub fn new(common: Common, out: PathBuf, timeout: f64) -> Result<Run, String> {
        job::check_timeout(timeout)?;
        std::fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
        Ok(Run {
            common,
            out,
            timeout,
            load_before: loadavg(),
        })
    }

    /// `--quick`.
    pub fn quick(&self) -> bool {
        self.common.quick
    }

    /// The load average when the run started.
    pub fn load_before(&self) -> &str {
        &self.load_before
    }

    /// A progress line of `steps` steps (hidden with `--quick`).
    pub fn progress(&self, what: &str, steps: usize) -> Progress {
        Progress::new(what, steps, self.quick())
    }

    /// `file` in the output directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.out.join(file)
    }

    /// Run the hidden subcommand `worker` on 2 ranks of this host with
    /// `env`; the recording rank writes `DIR/file`, whose text is returned.
    pub fn job<K: AsRef<str>>(
        &self,
        worker: &str,
        file: &str,
        env: &[(K, String)],
    ) -> Result<String, String> {
        self.job_on(worker, file, env, &Place::default())
    }

    /// [`Run::job`] on the ranks of `place`.
    pub fn job_on<K: AsRef<str>>(
        &self,
        worker: &str,
        file: &str,
        env: &[(K, String)],
        place: &Place,
    ) -> Result<String, String> {
        let job = Job {
            worker,
            common: self.common,
            result: &self.path(file),
            env: env
                .iter()
                .map(|(k, v)| (k.as_ref().to_string(), v.clone()))
                .collect(),
            timeout: self.timeout,
        };
        job::run(&job, place)
    }

    /// [`Run::job`], rank 0's rows parsed.
    pub fn results<B: BenchId, K: AsRef<str>>(
        &self,
        worker: &str,
        file: &str,
        env: &[(K, String)],
    ) -> Result<Results<B>, String> {
        let text = self.job(worker, file, env)?;
        Results::parse(&text).map_err(|e| format!("{}: {e}", self.path(file).display()))
    }

    /// The first two lines of a report: `TITLE (BUILD build[, quick]):
    /// SETUP` and `cpu: MODEL[CPU_NOTE]; load average before: ..., after:
    /// ...`, each ending in a newline.
    pub fn banner(&self, title: &str, setup: &str, cpu_note: &str) -> String {
        format!(
            "{title} ({} build{}): {setup}\ncpu: {}{cpu_note}; load average before: {}, after: {}\n",
            build(),
            if self.quick() {
                ", --quick: smoke test only, numbers mean little"
            } else {
                ""
            },
            cpu_model(),
            self.load_before,
            loadavg(),
        )
    }

    /// Write `text` to `DIR/file`.
    pub fn write(&self, file: &str, text: &str) -> Result<PathBuf, String> {
        let p = self.path(file);
        std::fs::write(&p, text).map_err(|e| format!("writing {}: {e}", p.display()))?;
        Ok(p)
    }

    /// Print `head` and the table of `sections`, and write them as
    /// `DIR/<name>.csv`; returns the CSV's path.
    pub fn report(&self, head: &str, sections: &[Section], name: &str) -> Result<PathBuf, String> {
        println!("{head}");
        print!("{}", report::table(sections));
        self.write(&format!("{name}.csv"), &report::csv(sections))
    }
}

/// `wrote A, B and C`.
pub fn wrote(paths: &[&Path]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => format!("wrote {last}"),
        Some((last, rest)) => format!("wrote {} and {last}", rest.join(", ")),
    }
}
