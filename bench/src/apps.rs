//! `apps`: whole-job wall-clock time of the example applications (em3d,
//! sample_sort, matmul, npb_is, npb_cg, npb_ft, npb_mg) at 1, 2, 4, 8 and 16 ranks, launched
//! through `splitrt-run -n N` (found next to this executable, as cargo lays
//! out `target/<profile>/`), repeated; speedup = t(1 rank) / t(N ranks),
//! and tN/t2 = t(N ranks) / t(2 ranks), what oversubscribing a 2-CPU host
//! costs. Every rank count solves the same problem (em3d and sample_sort,
//! whose arguments are per rank, get a fixed total split over the ranks).
//! NPB runs also report their own "Time in seconds" and "Mop/s total".
//! Runs with more ranks than CPUs are oversubscribed and flagged.

use crate::harness::report::{Row, Section};
use crate::harness::run::{wrote, Run};
use crate::harness::stats::{Summary, NOISY_RATIO};
use crate::plot::{self, Chart, Series};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// One application and its arguments.
struct App {
    name: &'static str,
    args: Vec<String>,
    npb: bool,
    /// For programs whose first argument is a per-rank size: the job's
    /// total, divided among the ranks (strong scaling, as the NPB classes
    /// and matmul are), so every rank count solves the same problem.
    total: Option<usize>,
}

impl App {
    /// The arguments of a run on `ranks` ranks.
    fn args_for(&self, ranks: usize) -> Vec<String> {
        let mut args = self.args.clone();
        if let Some(t) = self.total {
            args.insert(0, (t / ranks.max(1)).max(1).to_string());
        }
        args
    }
}

/// em3d's nodes and sample_sort's keys for the whole job (their defaults
/// per rank at 4 ranks).
const EM3D_NODES: usize = 16_000;
const SORT_KEYS: usize = 400_000;

fn apps(quick: bool, class: &str) -> Vec<App> {
    let a = |name, args: &[&str], npb, total| App {
        name,
        args: args.iter().map(|s| s.to_string()).collect(),
        npb,
        total,
    };
    if quick {
        vec![
            a("em3d", &["6", "0.25", "6"], false, Some(2400)),
            a("sample_sort", &[], false, Some(16_000)),
            a("matmul", &["100", "16"], false, None),
            a("npb_is", &["S"], true, None),
            a("npb_cg", &["S"], true, None),
            a("npb_ft", &["S"], true, None),
            a("npb_mg", &["S"], true, None),
        ]
    } else {
        vec![
            a("em3d", &[], false, Some(EM3D_NODES)),
            a("sample_sort", &[], false, Some(SORT_KEYS)),
            a("matmul", &[], false, None),
            a("npb_is", &[class], true, None),
            a("npb_cg", &[class], true, None),
            a("npb_ft", &[class], true, None),
            a("npb_mg", &[class], true, None),
        ]
    }
}

/// CPUs this process may run on.
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The directory holding this executable (`target/<profile>`).
fn bin_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    exe.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| "this executable has no parent directory".into())
}

/// One run's numbers.
struct Timing {
    wall: f64,
    npb_secs: Option<f64>,
    mops: Option<f64>,
}

fn field(out: &str, key: &str) -> Option<f64> {
    out.lines().find_map(|l| {
        let (_, rest) = l.split_once(key)?;
        rest.trim_start_matches([' ', '=']).trim().parse().ok()
    })
}

fn run_once(
    launcher: &Path,
    exe: &Path,
    ranks: usize,
    app: &App,
    timeout: f64,
) -> Result<Timing, String> {
    let t = Instant::now();
    let out = Command::new(launcher)
        .args(["-n", &ranks.to_string(), "--timeout", &format!("{timeout}")])
        .arg(exe)
        .args(app.args_for(ranks))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("starting {}: {e}", launcher.display()))?;
    let wall = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{} on {ranks} ranks failed ({}): {}",
            app.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    Ok(Timing {
        wall,
        npb_secs: app.npb.then(|| field(&stdout, "Time in seconds")).flatten(),
        mops: app.npb.then(|| field(&stdout, "Mop/s total")).flatten(),
    })
}

/// Run every application at every rank count (NPB problem `class`) and
/// report.
pub fn run(r: &Run, class: &str) -> Result<(), String> {
    if !matches!(class, "S" | "W") {
        return Err(format!("--class {class:?}: expected S or W"));
    }
    let dir = bin_dir()?;
    let launcher = dir.join("splitrt-run");
    let list = apps(r.quick(), class);
    let missing: Vec<String> = std::iter::once(launcher.clone())
        .chain(list.iter().map(|a| dir.join("examples").join(a.name)))
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing {}; build with cargo build --release --examples --bins",
            missing.join(", ")
        ));
    }
    let ranks: &[usize] = if r.quick() {
        &[1, 2]
    } else {
        &[1, 2, 4, 8, 16]
    };
    let reps = r.common.reps as usize;
    let ncpu = cpus();
    let bar = r.progress("splitrt-bench apps", list.len() * ranks.len());
    let mut sections = Vec::new();
    let mut speedups = Vec::new();
    for app in &list {
        let exe = dir.join("examples").join(app.name);
        let mut rows = Vec::new();
        let (mut t1, mut t2, mut npb2) = (f64::NAN, f64::NAN, f64::NAN);
        let mut pts = Vec::new();
        for &n in ranks {
            bar.step(&format!("{} on {n} rank(s), {reps} run(s)", app.name));
            let mut runs = Vec::new();
            for _ in 0..reps {
                runs.push(run_once(&launcher, &exe, n, app, r.timeout)?);
            }
            bar.done();
            let wall = Summary::values(&runs.iter().map(|r| r.wall).collect::<Vec<_>>());
            if n == 1 {
                t1 = wall.median;
            }
            if n == 2 {
                t2 = wall.median;
            }
            let speedup = t1 / wall.median;
            pts.push((n as f64, speedup));
            let over = n > ncpu;
            let flag = |r: Row| {
                if over {
                    r.with_note(format!("OVERSUBSCRIBED ({n} ranks on {ncpu} CPUs)"))
                } else {
                    r
                }
            };
            rows.push(flag(
                Row::new(
                    "splitrt",
                    format!("{} wall clock, {n} rank(s)", app.name),
                    None,
                    "s",
                    wall,
                )
                .with_note(format!("speedup t1/t{n} = {speedup:.2}x"))
                .with_note(over_two(n, wall.median, t2)),
            ));
            let npb: Vec<f64> = runs.iter().filter_map(|r| r.npb_secs).collect();
            if !npb.is_empty() {
                let secs = Summary::values(&npb);
                if n == 2 {
                    npb2 = secs.median;
                }
                let note = over_two(n, secs.median, npb2);
                rows.push(flag(
                    Row::new(
                        "splitrt",
                        format!("{} \"Time in seconds\", {n} rank(s)", app.name),
                        None,
                        "s",
                        secs,
                    )
                    .with_note(note),
                ));
            }
            let mops: Vec<f64> = runs.iter().filter_map(|r| r.mops).collect();
            if !mops.is_empty() {
                rows.push(flag(Row::new(
                    "splitrt",
                    format!("{} \"Mop/s total\", {n} rank(s)", app.name),
                    None,
                    "Mop/s",
                    Summary::values(&mops),
                )));
            }
        }
        let args = match (app.total, app.args.is_empty()) {
            (Some(t), _) => format!("{t} in all, split over the ranks; {}", {
                let rest = app.args.join(" ");
                if rest.is_empty() {
                    "other arguments default".to_string()
                } else {
                    rest
                }
            }),
            (None, true) => "default arguments".to_string(),
            (None, false) => app.args.join(" "),
        };
        sections.push(Section {
            title: format!("{} ({args})", app.name),
            rows,
        });
        speedups.push(Series {
            name: app.name.to_string(),
            points: pts,
        });
    }
    bar.finish();
    speedups.push(Series {
        name: format!("ideal up to {ncpu} CPUs"),
        points: ranks
            .iter()
            .map(|&n| (n as f64, n.min(ncpu) as f64))
            .collect(),
    });
    let head = r.banner(
        "splitrt-bench apps",
        &format!("whole-job wall clock of `splitrt-run -n N EXAMPLE ARGS`, {reps} run(s) each"),
        &format!(" ({ncpu} CPUs)"),
    ) + &format!(
        "speedup = median t(1 rank) / median t(N ranks); tN/t2 = median t(N ranks) / median t(2 ranks) (the cost of\n\
         oversubscription when the host has 2 CPUs); runs with more ranks than CPUs are OVERSUBSCRIBED\n\
         (ranks time-share cores and back off to sleeping: such numbers measure scheduling, not scaling).\n\
         em3d (nodes) and sample_sort (keys) get the same total problem at every rank count (strong scaling).\n\
         NPB rows also show the benchmark's own \"Time in seconds\" and \"Mop/s total\". NOISY = max/min > {NOISY_RATIO}.\n",
    );
    let csv = r.report(&head, &sections, "apps")?;
    let svg = r.path("apps-speedup.svg");
    plot::draw(
        &svg,
        &Chart {
            title: "example applications: speedup t1 / tN (whole job)",
            x_label: "ranks",
            y_label: "speedup",
            log_x: true,
            log_y: false,
        },
        &speedups,
    )?;
    println!("{}", wrote(&[&csv, &svg]));
    Ok(())
}

/// The oversubscription cost beside a time at `n` ranks: t(n) / t(2),
/// the 2-rank time on the host's 2 CPUs (empty below 4 ranks).
fn over_two(n: usize, t: f64, t2: f64) -> String {
    if n > 2 && t2 > 0.0 {
        format!("t{n}/t2 = {:.2}x", t / t2)
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_npb_fields() {
        let out = "[0]  Time in seconds =                     0.42\n[0]  Mop/s total     =                   123.45\n";
        assert_eq!(super::field(out, "Time in seconds"), Some(0.42));
        assert_eq!(super::field(out, "Mop/s total"), Some(123.45));
        assert_eq!(super::field(out, "nope"), None);
    }
}
