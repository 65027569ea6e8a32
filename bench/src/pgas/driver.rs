//! The PGAS driver: run one 2-rank job per one-sided path
//! (`SPLITRT_RMA=native`, then `am`), read rank 0's measurements of each,
//! print the table and write `OUT/pgas.csv` (rank 0's per-repetition rows
//! stay in `OUT/pgas-native-rank0.csv` and `OUT/pgas-am-rank0.csv`).

use super::measure::Bench;
use super::plan::Plan;
use super::table::{self, Runs};
use crate::harness::job::{self, Job};
use crate::harness::report;
use crate::harness::results::Results;
use crate::host::loadavg;
use crate::Common;
use splitrt::runtime::config::{ENV_RMA, ENV_SEGMENT_SIZE};
use std::path::PathBuf;

/// The one-sided paths, in the order their jobs run.
pub const PATHS: [&str; 2] = ["native", "am"];

/// What the user asked for.
#[derive(Clone, Debug)]
pub struct Options {
    /// Flags passed on to the ranks.
    pub common: Common,
    /// Output directory.
    pub out: PathBuf,
    /// Seconds before each job is killed.
    pub timeout: f64,
}

/// Run both jobs and report.
pub fn run(o: &Options) -> Result<(), String> {
    let plan = Plan::new(&o.common);
    job::check_timeout(o.timeout)?;
    std::fs::create_dir_all(&o.out).map_err(|e| format!("creating {}: {e}", o.out.display()))?;
    let load_before = loadavg();
    let mut done: Vec<(PathBuf, Results<Bench>)> = Vec::new();
    let bar =
        crate::harness::progress::Progress::new("splitrt-bench pgas", PATHS.len(), plan.quick);
    for path in PATHS {
        let result = o.out.join(format!("pgas-{path}-rank0.csv"));
        bar.step(&format!(
            "running 2 ranks with {ENV_RMA}={path} ({} repetition(s){})",
            plan.reps,
            if plan.quick { ", quick" } else { "" }
        ));
        let text = job::run(&Job {
            worker: "pgas-worker",
            common: o.common,
            result: &result,
            env: vec![
                (ENV_RMA.to_string(), path.to_string()),
                (ENV_SEGMENT_SIZE.to_string(), plan.segment_size.to_string()),
            ],
            timeout: o.timeout,
        })
        .map_err(|e| format!("{ENV_RMA}={path}: {e}"))?;
        let res: Results<Bench> =
            Results::parse(&text).map_err(|e| format!("{}: {e}", result.display()))?;
        if res.config_value("rma") != Some(path) {
            return Err(format!(
                "{}: the job ran on the {:?} path, not {path}",
                result.display(),
                res.config_value("rma")
            ));
        }
        done.push((result, res));
        bar.done();
    }
    bar.finish();
    let load_after = loadavg();

    let runs = Runs {
        native: &done[0].1,
        am: &done[1].1,
    };
    let sections = table::sections(&runs, &plan);
    println!("{}", table::header(&runs, &plan, &load_before, &load_after));
    print!("{}", report::table(&sections));
    let csv_path = o.out.join("pgas.csv");
    std::fs::write(&csv_path, report::csv(&sections))
        .map_err(|e| format!("writing {}: {e}", csv_path.display()))?;
    let svg = crate::plot::sections_by_size(
        &o.out.join("pgas-bandwidth.svg"),
        "splitrt one-sided bandwidth vs memcpy (2 pinned ranks, shm)",
        &sections,
        "MB/s",
        "MB/s (1 MB = 1e6 B)",
        true,
    )?;
    println!("wrote {}", svg.display());
    println!(
        "wrote {} (per-repetition rows: {}, {})",
        csv_path.display(),
        done[0].0.display(),
        done[1].0.display()
    );
    Ok(())
}
