//! `splitrt-bench vys`: the vys visibility stream library end to end.
//! One job of two ranks (`SPLITRT_FABRIC=udp`): rank 0 runs producers
//! writing checkable spectra flat out, rank 1 consumers taking every
//! spectrum, each consumer checked by an application thread that counts
//! what it is delivered.
//!
//! * On this host (no `--hosts`): delivered spectra/s and GB/s vs
//!   spectrum size for 1 producer + 1 consumer and for 2 + 2, reading
//!   through the ring's mapping and through the read server on loopback,
//!   digest none and CRC-32C, beside a memcpy of the same bytes and the
//!   fabric's get measured by the same process in the same repetition;
//!   then the fraction of spectra that fail verification as the ring
//!   shrinks.
//! * Across hosts (`--hosts a,b --rsh CMD`): producer on `a`, consumer on
//!   `b`, beside the UDP fabric's get between the same two processes.
//!
//! Every valid spectrum is checked against the producer's pattern
//! ([`splitrt::vys::checkable`]); a mismatch is printed and makes
//! the run fail after the report. Writes `DIR/vys.csv`, `DIR/vys.txt` and
//! rank 1's raw rows (`DIR/vys-host.raw` or `vys-across.raw`).

pub mod baseline;
pub mod consume;
pub mod coordination;
pub mod plan;
pub mod produce;
pub mod record;
pub mod spead2;
pub mod stream;
pub mod table;
pub mod worker;

use crate::harness::job::Place as RanksAt;
use crate::harness::run::Run;
use plan::{Place, Plan, Selection};
use std::path::{Path, PathBuf};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Two hosts (`a,b`): producers on `a`, consumers on `b`.
    pub hosts: Option<String>,
    /// Remote shell for `hosts`.
    pub rsh: Option<String>,
    /// The sizes, setups and scan to run.
    pub selection: Selection,
    /// Report this raw result file of an earlier run (same selection)
    /// instead of measuring.
    pub from_raw: Option<PathBuf>,
    /// Also measure spead2 (sender -> C++ chunk-stream receiver) beside
    /// vys's remote reads ([`spead2`]).
    pub spead2: bool,
}

/// Run the benchmark, print and write its report.
pub fn run(r: &Run, o: &Options) -> Result<(), String> {
    if let Some(raw) = &o.from_raw {
        return rerun_report(r, o, raw);
    }
    let ranks = RanksAt::new(o.hosts.as_deref(), o.rsh.clone())?;
    let place = if ranks.hosts.is_some() {
        Place::Across
    } else {
        Place::OneHost
    };
    let where_ = o.hosts.clone().unwrap_or_else(|| "this host".into());
    let plan = Plan::new(place, r.quick()).select(&o.selection)?;
    let result = format!("vys-{}.raw", place.id());
    let mut env = stream::env(place)?;
    env.push(("SPLITRT_FABRIC".into(), "udp".into()));
    env.extend(o.selection.env());
    eprintln!(
        "vys: {} rows x {} repetition(s) on {where_} (each about {:.1} s)",
        plan.rows().len(),
        r.common.reps,
        (plan.warmup + plan.window).as_secs_f64() + 0.3
    );
    let text = r.job_on("vys-worker", &result, &env, &ranks)?;
    let output = record::Output::parse(&text)?;
    let reported = report(r, &plan, &output, &where_);
    if o.spead2 {
        let hosts: Vec<&str> = o
            .hosts
            .as_deref()
            .map_or(Vec::new(), |h| h.split(',').collect());
        let across = match (hosts.as_slice(), o.rsh.as_deref()) {
            ([a, b], rsh) => Some((rsh.unwrap_or("ssh"), *a, *b)),
            _ => None,
        };
        spead2::compare(r, &plan, &output, &spead2::Hosts { across })?;
    }
    reported
}

/// The report of an earlier run's raw file (run with the same
/// selection), without measuring.
fn rerun_report(r: &Run, o: &Options, raw: &Path) -> Result<(), String> {
    let text =
        std::fs::read_to_string(raw).map_err(|e| format!("reading {}: {e}", raw.display()))?;
    let output = record::Output::parse(&text)?;
    let place = output
        .fact("place")
        .and_then(Place::from_id)
        .ok_or_else(|| format!("{}: no place recorded", raw.display()))?;
    let quick = output.fact("quick") == Some("true");
    let plan = Plan::new(place, quick).select(&o.selection)?;
    let where_ = match place {
        Place::OneHost => "this host".to_string(),
        Place::Across => o.hosts.clone().unwrap_or_else(|| "two hosts".into()),
    };
    report(r, &plan, &output, &where_)
}

/// Print and write the report of `output`; an error if any valid
/// spectrum held the wrong data.
fn report(r: &Run, plan: &Plan, output: &record::Output, where_: &str) -> Result<(), String> {
    let report = table::render(plan, output, where_);
    print!("{}", report.text);
    r.write("vys.csv", &report.csv)?;
    r.write("vys.txt", &report.text)?;
    if report.mismatched > 0 {
        return Err(format!(
            "{} of {} spectra delivered as valid did not hold the producer's data: a vys bug \
             (see the MISMATCH lines above)",
            report.mismatched, report.checked
        ));
    }
    Ok(())
}
