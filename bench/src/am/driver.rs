//! The driver: launch two ranks of this binary (pinned, spin-only), read
//! rank 0's measurements, run UCX when it is installed, print the table and
//! write `OUT/am.csv` (rank 0's per-repetition rows stay in
//! `OUT/worker-rank0.csv`).

use super::measure::Bench;
use super::plan::Plan;
use super::rows::{self, Group, Rows};
use super::ucx::{self, Ucx};
use crate::harness::report::{self, Row, Section};
use crate::harness::results::Results;
use crate::harness::run::{wrote, Run, NO_ENV, PINNED};
use crate::harness::stats::Summary;

/// GASNet-EX AM Short round trip from the issue (reference, fixed; us).
pub const GASNET_SHORT_RTT_US: f64 = 0.26;
/// GASNet-EX 1 KiB Medium round trip from the issue (reference, fixed; us).
pub const GASNET_MEDIUM_1K_RTT_US: f64 = 0.45;
/// GASNet-EX Short AM flood rate from the issue (reference, fixed; M/s).
pub const GASNET_SHORT_RATE_M: f64 = 14.0;

/// Issue 25's target for the aggregated RPC rate, as a fraction of the AM
/// Short flood rate of the same run.
pub const RPC_RATE_TARGET: f64 = 0.5;

/// Source label of the fixed GASNet-EX numbers.
const GASNET: &str = "GASNet-EX (reference, fixed)";

/// Run the benchmark's groups of rows `rows` (`ucx`: run `ucx_perftest`
/// if installed, for a run of every group).
pub fn run(r: &Run, ucx: bool, rows: Rows) -> Result<(), String> {
    let plan = Plan::new(&r.common);
    let result = "worker-rank0.csv";
    eprintln!(
        "splitrt-bench: running 2 ranks ({} repetition(s){}{}) ...",
        plan.reps,
        if plan.quick { ", quick" } else { "" },
        if rows.is_all() {
            String::new()
        } else {
            format!(", rows {rows}")
        }
    );
    let res: Results<Bench> = if rows.is_all() {
        r.results("worker", result, NO_ENV)?
    } else {
        r.results("worker", result, &[(rows::ENV, rows.to_string())])?
    };
    let ucx = match (ucx, ucx::find()) {
        (false, _) => UcxOutcome::Disabled,
        (true, _) if !rows.is_all() => UcxOutcome::Disabled,
        (true, None) => UcxOutcome::Missing,
        (true, Some(exe)) => {
            eprintln!("splitrt-bench: running ucx_perftest (UCX_TLS=sm,self) ...");
            UcxOutcome::Ran(run_ucx(Ucx::new(exe, r.path("ucx.log")), &plan))
        }
    };
    let mut sections = build_sections(&res, &plan, &ucx);
    if !rows.is_all() {
        sections = selected_sections(sections, rows);
    }
    let csv = r.report(&header(r, &res, &plan), &sections, "am")?;
    match &ucx {
        UcxOutcome::Missing => println!("UCX: skipped (apt-get install ucx-utils)"),
        UcxOutcome::Disabled if !rows.is_all() => println!("UCX: skipped (--rows)"),
        UcxOutcome::Disabled => println!("UCX: skipped (--no-ucx)"),
        UcxOutcome::Ran(u) => {
            for e in &u.errors {
                println!("UCX: {e}");
            }
        }
    }
    let lat_svg = crate::plot::sections_by_size(
        &r.path("am-latency.svg"),
        "splitrt AM round-trip latency (2 pinned ranks, shm)",
        &sections,
        "us",
        "round trip (us)",
        true,
    )?;
    let bw_svg = crate::plot::sections_by_size(
        &r.path("am-bandwidth.svg"),
        "splitrt AM one-way throughput (2 pinned ranks, shm)",
        &sections,
        "MB/s",
        "MB/s (1 MB = 1e6 B)",
        true,
    )?;
    println!("{}", wrote(&[&lat_svg, &bw_svg]));
    println!(
        "wrote {} (per-repetition rows: {}{})",
        csv.display(),
        r.path(result).display(),
        match ucx {
            UcxOutcome::Ran(_) => format!("; UCX output: {}", r.path("ucx.log").display()),
            _ => String::new(),
        }
    );
    Ok(())
}

/// UCX per-repetition results.
struct UcxRuns {
    /// `ucp_am_lat` 8 B RTT = 2 x one-way p50 (us), one per repetition.
    rtt_us: Vec<f64>,
    /// `ucp_am_bw` 8 B overall message rate (M/s), one per repetition.
    rate_m: Vec<f64>,
    /// Runs that failed.
    errors: Vec<String>,
}

enum UcxOutcome {
    Disabled,
    Missing,
    Ran(UcxRuns),
}

fn run_ucx(mut u: Ucx, plan: &Plan) -> UcxRuns {
    let mut r = UcxRuns {
        rtt_us: Vec::new(),
        rate_m: Vec::new(),
        errors: Vec::new(),
    };
    for _ in 0..plan.reps {
        match u.run("ucp_am_lat", 8, plan.ucx_lat_iters) {
            Ok(f) => r.rtt_us.push(2.0 * f.p50_us),
            Err(e) => r.errors.push(e),
        }
        match u.run("ucp_am_bw", 8, plan.ucx_rate_iters) {
            Ok(f) => r.rate_m.push(f.rate_overall / 1e6),
            Err(e) => r.errors.push(e),
        }
    }
    r
}

fn header(r: &Run, res: &Results<Bench>, plan: &Plan) -> String {
    let c = |k: &str| res.config_value(k).unwrap_or("?").to_string();
    let seg = c("segment_size").parse::<usize>().ok();
    let max_medium = c("max_medium").parse::<usize>().ok();
    r.banner(
        "splitrt-bench",
        &format!("{PINNED}, {} repetition(s)", plan.reps),
        "",
    ) + &format!(
        "shm fabric: cell {} B, ring {} cells, max Medium {}, segment {}\n\
         latency = full round trip (request + reply carrying the same payload size); p50/p99 are over\n\
         per-batch means (batches of up to {} round trips, fewer for big payloads so a batch moves <= 1 MiB\n\
         each way); a row shows the median over repetitions; spread = min..max over repetitions (of the\n\
         p50s for latencies). Every payload received is read (1 byte per 64 B line) by its handler.\n\
         throughput = one-way, <= {} messages in flight, receiver acks every {}; MB/s with 1 MB = 1e6 B.\n\
         NOISY = spread max/min > {}.\n",
        c("cell_size"),
        c("ring_len"),
        report::size_label(max_medium),
        report::size_label(seg),
        c("batch"),
        c("window"),
        c("ack_every"),
        crate::harness::stats::NOISY_RATIO,
    )
}

/// Summary (us, Mmsg/s or MB/s as printed) of `bench` at `size`.
fn summary(res: &Results<Bench>, bench: Bench, size: usize) -> Summary {
    let s = res.summary(bench, size);
    if matches!(bench, Bench::ShortRate | Bench::RpcRate) {
        s.scaled(1e-6)
    } else {
        s
    }
}

fn unit(bench: Bench) -> &'static str {
    if matches!(bench, Bench::ShortRate | Bench::RpcRate) {
        "Mmsg/s"
    } else {
        bench.unit()
    }
}

fn bench_row(res: &Results<Bench>, bench: Bench, size: usize) -> Row {
    let shown = match bench {
        Bench::ShortRtt
        | Bench::ShortRate
        | Bench::RpcRtt
        | Bench::RpcRate
        | Bench::ShortRttProgress => None,
        _ => Some(size),
    };
    let label = match bench {
        Bench::RawLineRtt => "raw line ping-pong RTT (both flags on 1 line)".to_string(),
        Bench::ShortRtt => "AM Short RTT (1 arg)".to_string(),
        Bench::ShortRate => "AM Short flood rate (1 arg)".to_string(),
        Bench::RpcRtt => "RPC RTT (u64 -> u64, call + wait)".to_string(),
        Bench::RpcRate => "RPC aggregated rate (u64 -> u64, 4096 outstanding)".to_string(),
        Bench::ShortRttProgress => {
            "AM Short RTT, peer's handlers on its progress thread (thread-only)".to_string()
        }
        b => b.label().to_string(),
    };
    let source = if bench == Bench::RawLineRtt {
        "raw"
    } else {
        "splitrt"
    };
    Row::new(source, label, shown, unit(bench), summary(res, bench, size))
}

/// `a[i] / b[i]` for each repetition.
fn per_rep_ratio(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(a, b)| a / b).collect()
}

fn ratio(a: f64, b: f64) -> String {
    format!("{:.2}x", a / b)
}

fn build_sections(res: &Results<Bench>, plan: &Plan, ucx: &UcxOutcome) -> Vec<Section> {
    let mut out = Vec::new();

    // 1. Baseline and AM Short, back to back.
    let per_rep: Vec<f64> = res
        .p50s_us(Bench::ShortRtt, 0)
        .iter()
        .zip(res.p50s_us(Bench::RawLineRtt, 64))
        .map(|(s, r)| s / r)
        .collect();
    out.push(Section {
        title: "baseline vs AM Short, back to back in the same two pinned processes".into(),
        rows: vec![
            bench_row(res, Bench::RawLineRtt, 64),
            bench_row(res, Bench::ShortRtt, 0),
            Row::new(
                "ratio",
                "AM Short RTT / raw line RTT",
                None,
                "x",
                Summary::values(&per_rep),
            )
            .with_note("per repetition, p50 over p50"),
            bench_row(res, Bench::RpcRtt, 8),
            Row::new(
                "ratio",
                "RPC RTT / AM Short RTT",
                None,
                "x",
                Summary::values(&per_rep_ratio(
                    &res.p50s_us(Bench::RpcRtt, 8),
                    &res.p50s_us(Bench::ShortRtt, 0),
                )),
            )
            .with_note("per repetition, p50 over p50; target <= 1.5x"),
            bench_row(res, Bench::ShortRttProgress, 0),
            Row::new(
                "ratio",
                "AM Short RTT with the peer's progress thread / without",
                None,
                "x",
                Summary::values(&per_rep_ratio(
                    &res.p50s_us(Bench::ShortRttProgress, 0),
                    &res.p50s_us(Bench::ShortRtt, 0),
                )),
            )
            .with_note("per repetition, p50 over p50: the progress thread's added latency"),
        ],
    });

    // 2. Round trips by size.
    let mut rows = Vec::new();
    for b in [Bench::MediumRtt, Bench::LongRtt] {
        rows.extend(res.sizes_of(b).into_iter().map(|s| bench_row(res, b, s)));
    }
    out.push(Section {
        title:
            "AM round-trip latency by size (same size each way; Long lands in the peer's segment)"
                .into(),
        rows,
    });

    // 3. One-way throughput.
    let mut rows = Vec::new();
    for b in [Bench::MediumBw, Bench::LongBw] {
        rows.extend(res.sizes_of(b).into_iter().map(|s| bench_row(res, b, s)));
    }
    out.push(Section {
        title: format!(
            "AM one-way throughput (<= {} in flight, ack every {})",
            plan.window, plan.ack_every
        ),
        rows,
    });

    // 4. Message rate (and the aggregated RPC rate beside it).
    out.push(Section {
        title: "AM Short message rate (one-way flood), aggregated RPC rate".into(),
        rows: vec![
            bench_row(res, Bench::ShortRate, 0),
            bench_row(res, Bench::RpcRate, 8),
            Row::new(
                "ratio",
                "RPC aggregated rate / AM Short flood rate",
                None,
                "x",
                Summary::values(&per_rep_ratio(
                    &res.rates(Bench::RpcRate, 8),
                    &res.rates(Bench::ShortRate, 0),
                )),
            )
            .with_note(format!(
                "per repetition; target >= {RPC_RATE_TARGET}x: {} (median)",
                verdict_at_least(
                    median_of(&per_rep_ratio(
                        &res.rates(Bench::RpcRate, 8),
                        &res.rates(Bench::ShortRate, 0),
                    )),
                    RPC_RATE_TARGET
                )
            )),
        ],
    });

    // 5. Comparisons.
    let our_rtt = summary(res, Bench::ShortRtt, 0).median;
    let our_1k = res
        .sizes_of(Bench::MediumRtt)
        .contains(&1024)
        .then(|| summary(res, Bench::MediumRtt, 1024).median);
    let our_rate = summary(res, Bench::ShortRate, 0).median;
    let mut rows = Vec::new();
    match ucx {
        UcxOutcome::Ran(u) => {
            if !u.rtt_us.is_empty() {
                let s = Summary::values(&u.rtt_us);
                rows.push(
                    Row::new(
                        "UCX",
                        "UCX ucp_am_lat RTT (2 x one-way p50), UCX_TLS=sm,self",
                        Some(8),
                        "us",
                        s,
                    )
                    .with_note(format!(
                        "splitrt AM Short RTT / UCX = {}",
                        ratio(our_rtt, s.median)
                    )),
                );
                rows.push(Row::new(
                    "ratio",
                    "AM Short RTT / UCX ucp_am_lat RTT",
                    None,
                    "x",
                    Summary::single(our_rtt / s.median),
                ));
            }
            if !u.rate_m.is_empty() {
                let s = Summary::values(&u.rate_m);
                rows.push(
                    Row::new(
                        "UCX",
                        "UCX ucp_am_bw 8 B message rate, UCX_TLS=sm,self",
                        Some(8),
                        "Mmsg/s",
                        s,
                    )
                    .with_note(format!(
                        "splitrt Short rate / UCX = {}",
                        ratio(our_rate, s.median)
                    )),
                );
                rows.push(Row::new(
                    "ratio",
                    "AM Short flood rate / UCX ucp_am_bw rate",
                    None,
                    "x",
                    Summary::single(our_rate / s.median),
                ));
            }
        }
        UcxOutcome::Missing | UcxOutcome::Disabled => {
            let why = if matches!(ucx, UcxOutcome::Missing) {
                "skipped (apt-get install ucx-utils)"
            } else {
                "skipped (--no-ucx)"
            };
            rows.push(Row::new(
                "UCX",
                format!("UCX: {why}"),
                None,
                "-",
                Summary::values(&[]),
            ));
        }
    }
    rows.push(
        Row::new(
            GASNET,
            "GASNet-EX AM Short RTT (reference, fixed)",
            None,
            "us",
            Summary::single(GASNET_SHORT_RTT_US),
        )
        .with_note(format!(
            "splitrt {:.3} us = {} of it",
            our_rtt,
            ratio(our_rtt, GASNET_SHORT_RTT_US)
        )),
    );
    let mut r = Row::new(
        GASNET,
        "GASNet-EX Medium RTT (reference, fixed)",
        Some(1024),
        "us",
        Summary::single(GASNET_MEDIUM_1K_RTT_US),
    );
    if let Some(m) = our_1k {
        r = r.with_note(format!(
            "splitrt {m:.3} us = {} of it",
            ratio(m, GASNET_MEDIUM_1K_RTT_US)
        ));
    }
    rows.push(r);
    rows.push(
        Row::new(
            GASNET,
            "GASNet-EX Short AM flood rate (reference, fixed)",
            None,
            "Mmsg/s",
            Summary::single(GASNET_SHORT_RATE_M),
        )
        .with_note(format!(
            "splitrt {:.2} M/s = {} of it",
            our_rate,
            ratio(our_rate, GASNET_SHORT_RATE_M)
        )),
    );
    out.push(Section {
        title: "comparisons (UCX measured now on the same CPUs; GASNet-EX not measured here)"
            .into(),
        rows,
    });
    out
}

/// The sections of a `--rows` run: those of the groups measured (the
/// comparisons only with every group).
fn selected_sections(all: Vec<Section>, rows: Rows) -> Vec<Section> {
    // build_sections' order: rtt (with progress), sizes, bw, rate, comparisons
    let groups = [
        Some(Group::Rtt),
        Some(Group::Sizes),
        Some(Group::Bw),
        Some(Group::Rate),
        None,
    ];
    all.into_iter()
        .zip(groups)
        .filter_map(|(mut s, g)| match g {
            Some(Group::Rtt) if !rows.has(Group::Rtt) => rows.has(Group::Progress).then(|| {
                // only the progress thread's row
                s.rows.retain(|r| r.measurement.contains("progress thread"));
                s
            }),
            Some(Group::Rtt) if !rows.has(Group::Progress) => {
                s.rows
                    .retain(|r| !r.measurement.contains("progress thread"));
                Some(s)
            }
            Some(g) => rows.has(g).then_some(s),
            None => None,
        })
        .collect()
}

/// `met` or `MISSED` for a median ratio against a floor.
fn verdict_at_least(median: f64, floor: f64) -> &'static str {
    if median >= floor {
        "met"
    } else {
        "MISSED"
    }
}

fn median_of(v: &[f64]) -> f64 {
    crate::harness::stats::median(v)
}
