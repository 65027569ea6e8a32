//! `breakdown`: where the time of one AM round trip goes, from the
//! runtime's own probes (`splitrt::runtime::trace`, switched on with
//! `SPLITRT_TRACE=1`). Two 2-rank jobs: one with the switch off (the plain
//! round trip) and one with it on (per-stage means on both ranks, and the
//! round trip again, which then includes the probes' clock reads).
//!
//! Rank 0 sends pings and receives pongs; rank 1 receives pings and, inside
//! its request handler, sends pongs. So rank 0's send stages are the ping's
//! and its receive stages the pong's, and the other way round on rank 1;
//! rank 1's "handler" stage contains the whole reply send.

use crate::am::handlers::{self, Shared};
use crate::am::latency::Rounds;
use crate::am::pinger::Pinger;
use crate::harness::report::{size_label, Row, Section};
use crate::harness::run::{wrote, Run, PINNED};
use crate::harness::stats::{p50_p99, Summary, NOISY_RATIO};
use crate::harness::worker;
use crate::plot::{self, Chart, Series};
use crate::Common;
use splitrt::runtime::trace::{self, Stage, ENV_TRACE};
use splitrt::{EndpointBuilder, Kind, Payload, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The messages measured: (kind, payload bytes).
fn cases(max_medium: usize) -> Vec<(Kind, usize)> {
    vec![
        (Kind::Short, 0),
        (Kind::Medium, 8),
        (Kind::Medium, 1024),
        (Kind::Medium, max_medium),
        (Kind::Long, 65536),
    ]
}

fn rounds(quick: bool, size: usize) -> Rounds {
    let batch = if quick { 20 } else { 1000 }
        .min((1 << 20) / size.max(1))
        .max(1);
    let batches = if quick { 5 } else { 100 };
    Rounds {
        warm: (batch * batches / 10).max(1),
        batch,
        batches,
    }
}

/// One rank of a breakdown job. Rank 0 writes `result`; rank 1 writes its
/// stage totals to `result` + `.rank1`.
pub fn worker(common: Common, result: &Path) -> Result<()> {
    worker::pin();
    let shared = Arc::new(Shared::default());
    let mut b = EndpointBuilder::new();
    let h = handlers::register(&mut b, &shared, 32)?;
    let ep = b.attach()?;
    worker::two_ranks(ep.size())?;
    let cs = cases(ep.max_medium(1 - ep.rank())?);
    let data: Vec<u8> = (0..65536.max(ep.max_medium(1 - ep.rank())?))
        .map(|i| i as u8)
        .collect();
    let mut text = String::new();
    let mut k = 0u64;
    // Long pings land at LONG_OFFSET; no stream here
    let mut am = Pinger::new(&ep, &shared, h, 0);
    for rep in 0..common.reps as usize {
        for &(kind, size) in &cs {
            k += 1;
            let r = rounds(common.quick, size);
            let msgs = (r.warm + r.batch * r.batches) as f64;
            let row = |text: &mut String, rank: usize, t: trace::Totals| {
                for s in Stage::ALL {
                    let _ = writeln!(
                        text,
                        "{kind:?},{size},{rep},{rank},{},{:.1},{}",
                        s.name(),
                        t.sum_ns[s as usize] as f64 / msgs,
                        t.count[s as usize]
                    );
                }
            };
            if ep.rank() == 0 {
                ep.barrier()?;
                let _ = trace::take();
                let means = am.rtt(kind, &data[..size], r)?;
                let t = trace::take();
                let (p50, p99) = p50_p99(&means);
                let _ = writeln!(text, "{kind:?},{size},{rep},0,rtt_p50,{p50:.1},0");
                let _ = writeln!(text, "{kind:?},{size},{rep},0,rtt_p99,{p99:.1},0");
                row(&mut text, 0, t);
                ep.request(1, h.done, &[k], Payload::None)?;
            } else {
                ep.barrier()?;
                let _ = trace::take();
                ep.wait_until(|| shared.done.load(Ordering::Acquire) >= k)?;
                row(&mut text, 1, trace::take());
            }
        }
    }
    let path = if ep.rank() == 0 {
        result.to_path_buf()
    } else {
        rank1_path(result)
    };
    worker::write_result(&path, ep.rank(), &text)?;
    ep.finish()
}

fn rank1_path(result: &Path) -> PathBuf {
    let mut s = result.as_os_str().to_owned();
    s.push(".rank1");
    PathBuf::from(s)
}

/// Parsed rows: (kind, size, rep, rank, stage) -> ns per round trip.
type Rows = Vec<(String, usize, usize, usize, String, f64)>;

fn parse(text: &str) -> Result<Rows, String> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let bad = || format!("bad breakdown line {l:?}");
            if f.len() != 7 {
                return Err(bad());
            }
            Ok((
                f[0].to_string(),
                f[1].parse().map_err(|_| bad())?,
                f[2].parse().map_err(|_| bad())?,
                f[3].parse().map_err(|_| bad())?,
                f[4].to_string(),
                f[5].parse().map_err(|_| bad())?,
            ))
        })
        .collect()
}

fn values(rows: &Rows, kind: &str, size: usize, rank: usize, stage: &str) -> Vec<f64> {
    rows.iter()
        .filter(|r| r.0 == kind && r.1 == size && r.3 == rank && r.4 == stage)
        .map(|r| r.5)
        .collect()
}

/// Run both jobs and report.
pub fn run(r: &Run) -> Result<(), String> {
    let bar = r.progress("splitrt-bench breakdown", 2);
    let mut runs = Vec::new();
    for on in [false, true] {
        let tag = if on { "trace-on" } else { "trace-off" };
        bar.step(&format!("2-rank job, {ENV_TRACE}={}", u8::from(on)));
        let result = format!("breakdown-{tag}-rank0.csv");
        let _ = std::fs::remove_file(rank1_path(&r.path(&result)));
        let env = [(ENV_TRACE, if on { "1" } else { "0" }.to_string())];
        let mut rows = parse(&r.job("breakdown-worker", &result, &env)?)?;
        let r1 = std::fs::read_to_string(rank1_path(&r.path(&result)))
            .map_err(|e| format!("reading rank 1's totals: {e}"))?;
        rows.extend(parse(&r1)?);
        runs.push(rows);
        bar.done();
    }
    bar.finish();
    let (off, on) = (&runs[0], &runs[1]);
    let mut keys: Vec<(String, usize)> = Vec::new();
    for r in on {
        if !keys.iter().any(|k| k.0 == r.0 && k.1 == r.1) {
            keys.push((r.0.clone(), r.1));
        }
    }
    let mut sections = Vec::new();
    let mut series: Vec<Series> = Vec::new();
    for (kind, size) in &keys {
        let us =
            |rows: &Rows, what| Summary::values(&values(rows, kind, *size, 0, what)).scaled(1e-3);
        let rtt_off = us(off, "rtt_p50");
        let rtt_on = us(on, "rtt_p50");
        let mut rows = vec![
            Row::new(
                "splitrt",
                "round trip, trace off",
                Some(*size),
                "us",
                rtt_off,
            ),
            Row::new("splitrt", "round trip, trace on", Some(*size), "us", rtt_on).with_note(
                format!("probe overhead {:+.3} us", rtt_on.median - rtt_off.median),
            ),
        ];
        let mut sum = 0.0;
        for rank in [0, 1] {
            for s in Stage::ALL {
                let v = Summary::values(&values(on, kind, *size, rank, s.name()));
                if !v.median.is_finite() || v.median == 0.0 {
                    continue;
                }
                // Rank 1's send stages run inside its handler stage.
                if !(rank == 1 && (s as usize) <= 2) {
                    sum += v.median;
                }
                let dir = match (rank, s as usize) {
                    (0, 0..=2) => "ping",
                    (0, _) => "pong",
                    (_, 0..=2) => "pong",
                    _ => "ping",
                };
                let name = format!("rank {rank} {} ({dir})", s.name());
                rows.push(Row::new("splitrt", name.clone(), Some(*size), "ns", v));
                let x = (*size).max(1) as f64;
                match series.iter_mut().find(|se| se.name == name) {
                    Some(se) => se.points.push((x, v.median)),
                    None => series.push(Series {
                        name,
                        points: vec![(x, v.median)],
                    }),
                }
            }
        }
        rows.push(
            Row::new(
                "splitrt",
                "sum of stages (rank 1's sends counted in its handler)",
                Some(*size),
                "ns",
                Summary::single(sum),
            )
            .with_note(
                "the rest of the round trip is waiting: cache-line transfers between the cores",
            ),
        );
        sections.push(Section {
            title: format!("AM {kind} {} round trip", size_label(Some(*size))),
            rows,
        });
    }
    let head = r.banner(
        "splitrt-bench breakdown",
        &format!("{PINNED}, {} repetition(s)", r.common.reps),
        "",
    ) + &format!(
        "per-stage time in ns per round trip (a streamed Medium has one sample per cell) from the runtime's probes ({ENV_TRACE}=1); each probe reads the clock,\n\
         so traced numbers include that cost (see the trace-off / trace-on round trips). Rank 0 sends the ping\n\
         and receives the pong; rank 1 the reverse, its handler stage includes sending the pong. NOISY = max/min > {NOISY_RATIO}.\n",
    );
    let csv = r.report(&head, &sections, "breakdown")?;
    for s in &mut series {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let svg = r.path("breakdown.svg");
    plot::draw(
        &svg,
        &Chart {
            title: "AM round trip: mean time per stage (SPLITRT_TRACE=1)",
            x_label: "payload (bytes; Short plotted at 1)",
            y_label: "ns per message",
            log_x: true,
            log_y: true,
        },
        &series,
    )?;
    println!("{}", wrote(&[&csv, &svg]));
    Ok(())
}
