//! The PGAS driver: run one 2-rank job per one-sided path
//! (`SPLITRT_RMA=native`, then `am`), read rank 0's measurements of each,
//! print the table and write `OUT/pgas.csv` (rank 0's per-repetition rows
//! stay in `OUT/pgas-native-rank0.csv` and `OUT/pgas-am-rank0.csv`).

use super::measure::Bench;
use super::plan::Plan;
use super::table::{self, Runs};
use crate::harness::results::Results;
use crate::harness::run::{wrote, Run};
use crate::host::loadavg;
use splitrt::runtime::config::{ENV_RMA, ENV_SEGMENT_SIZE};

/// The one-sided paths, in the order their jobs run.
pub const PATHS: [&str; 2] = ["native", "am"];

/// Run both jobs and report.
pub fn run(r: &Run) -> Result<(), String> {
    let plan = Plan::new(&r.common);
    let mut done: Vec<(String, Results<Bench>)> = Vec::new();
    let bar = r.progress("splitrt-bench pgas", PATHS.len());
    for path in PATHS {
        let result = format!("pgas-{path}-rank0.csv");
        bar.step(&format!(
            "running 2 ranks with {ENV_RMA}={path} ({} repetition(s){})",
            plan.reps,
            if plan.quick { ", quick" } else { "" }
        ));
        let env = [
            (ENV_RMA, path.to_string()),
            (ENV_SEGMENT_SIZE, plan.segment_size.to_string()),
        ];
        let res: Results<Bench> = r
            .results("pgas-worker", &result, &env)
            .map_err(|e| format!("{ENV_RMA}={path}: {e}"))?;
        if res.config_value("rma") != Some(path) {
            return Err(format!(
                "{}: the job ran on the {:?} path, not {path}",
                r.path(&result).display(),
                res.config_value("rma")
            ));
        }
        done.push((result, res));
        bar.done();
    }
    bar.finish();
    let runs = Runs {
        native: &done[0].1,
        am: &done[1].1,
    };
    let sections = table::sections(&runs, &plan);
    let head = table::header(&runs, &plan, r.load_before(), &loadavg());
    let csv = r.report(&head, &sections, "pgas")?;
    let svg = crate::plot::sections_by_size(
        &r.path("pgas-bandwidth.svg"),
        "splitrt one-sided bandwidth vs memcpy (2 pinned ranks, shm)",
        &sections,
        "MB/s",
        "MB/s (1 MB = 1e6 B)",
        true,
    )?;
    println!("{}", wrote(&[&svg]));
    println!(
        "wrote {} (per-repetition rows: {}, {})",
        csv.display(),
        r.path(&done[0].0).display(),
        r.path(&done[1].0).display()
    );
    Ok(())
}
