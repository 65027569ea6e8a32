//! Drivers of `latency`, `throughput`, `ring-scan` and `cell-scan`: run the
//! sweep job(s), print the table, write `OUT/<name>.csv` and
//! `OUT/<name>*.svg`.

use super::{Bench, Mode, Plan, ENV_MODE};
use crate::harness::report::{size_label, Row, Section};
use crate::harness::results::Results;
use crate::harness::run::{wrote, Run, PINNED};
use crate::harness::stats::{Summary, NOISY_RATIO};
use crate::plot::{self, Chart, Series};
use splitrt::runtime::config::{ENV_CELL_SIZE, ENV_MAX_MEDIUM, ENV_RING_LEN, ENV_SEGMENT_SIZE};

/// Run one sweep job in `mode` with extra environment; rank 0's rows are
/// kept in `OUT/<tag>-rank0.csv`.
pub fn run_job(
    r: &Run,
    mode: Mode,
    tag: &str,
    extra: &[(&str, String)],
) -> Result<Results<Bench>, String> {
    let plan = Plan::new(mode, &r.common);
    let mut env = vec![
        (ENV_MODE, mode.name().to_string()),
        (ENV_SEGMENT_SIZE, plan.segment_size().to_string()),
    ];
    env.extend_from_slice(extra);
    r.results("sweep-worker", &format!("{tag}-rank0.csv"), &env)
        .map_err(|e| format!("{tag}: {e}"))
}

fn header(what: &str, res: &Results<Bench>, r: &Run) -> String {
    let c = |k: &str| res.config_value(k).unwrap_or("?").to_string();
    let sz = |k: &str| size_label(c(k).parse().ok());
    let setup = format!(
        "{PINNED}, {} repetition(s), one-sided path {}",
        r.common.reps,
        c("rma")
    );
    r.banner(&format!("splitrt-bench {what}"), &setup, "")
        + &format!(
            "shm fabric: cell {}, ring {} cells, max Medium {}, segment {}\n\
             NOISY = spread (min..max over repetitions) max/min > {NOISY_RATIO}.\n",
            sz("cell_size"),
            c("ring_len"),
            sz("max_medium"),
            sz("segment_size"),
        )
}

fn rows_of(res: &Results<Bench>, b: Bench, unit: &str, k: f64) -> Vec<Row> {
    res.sizes_of(b)
        .into_iter()
        .map(|s| {
            let size = (b != Bench::ShortRtt).then_some(s);
            Row::new(
                "splitrt",
                b.label(),
                size,
                unit,
                res.summary(b, s).scaled(k),
            )
        })
        .collect()
}

/// `latency`: round trips vs size (p50, p99), every kind.
pub fn latency(r: &Run) -> Result<(), String> {
    let bar = r.progress("splitrt-bench latency", 1);
    bar.step("running the latency sweep on 2 ranks");
    let res = run_job(r, Mode::Latency, "latency", &[])?;
    bar.done();
    bar.finish();
    let kinds = [
        Bench::ShortRtt,
        Bench::MediumRtt,
        Bench::LongRtt,
        Bench::GetRtt,
        Bench::PutRtt,
    ];
    // the raw cache-line round trip of the same job first: the floor of
    // the moment, which moves with the host's placement of the two ranks
    let sections: Vec<Section> = std::iter::once(Section {
        title: "raw cache-line ping-pong round trip (the floor, same job)".into(),
        rows: rows_of(&res, Bench::RawLineRtt, "us", 1.0),
    })
    .chain(kinds.iter().map(|&b| Section {
        title: format!("{} round trip by size", b.label()),
        rows: rows_of(&res, b, "us", 1.0),
    }))
    .collect();
    let head = header("latency", &res, r)
        + "\nlatency = full round trip in us: AM = request + reply of the same size (Long lands in the peer's\n\
         segment); get = blocking read_slice of SIZE bytes; put = put of SIZE bytes + sync. p50/p99 over\n\
         per-batch means (batches move <= 1 MiB); the row is the median over repetitions.\n";
    let csv = r.report(&head, &sections, "latency")?;
    let mut series = Vec::new();
    for &b in &kinds[1..] {
        let sizes = res.sizes_of(b);
        let pts = |p99: bool| -> Vec<(f64, f64)> {
            sizes
                .iter()
                .map(|&s| {
                    let m = res.summary(b, s);
                    (
                        s.max(1) as f64,
                        if p99 {
                            m.p99.unwrap_or(f64::NAN)
                        } else {
                            m.median
                        },
                    )
                })
                .collect()
        };
        series.push(Series {
            name: format!("{} p50", b.label()),
            points: pts(false),
        });
        series.push(Series {
            name: format!("{} p99", b.label()),
            points: pts(true),
        });
    }
    let svg = r.path("latency.svg");
    plot::draw(
        &svg,
        &Chart {
            title: "splitrt round-trip latency vs size (2 pinned ranks, shm)",
            x_label: "message size (bytes)",
            y_label: "round trip (us)",
            log_x: true,
            log_y: true,
        },
        &series,
    )?;
    println!("{}", wrote(&[&csv, &svg]));
    Ok(())
}

/// `throughput`: one-way bandwidth and message rate vs size.
pub fn throughput(r: &Run) -> Result<(), String> {
    let bar = r.progress("splitrt-bench throughput", 1);
    bar.step("running the throughput sweep on 2 ranks");
    let res = run_job(r, Mode::Throughput, "throughput", &[])?;
    bar.done();
    bar.finish();
    let plan = Plan::new(Mode::Throughput, &r.common);
    let kinds = [Bench::MediumBw, Bench::LongBw, Bench::PutBw, Bench::GetBw];
    let mut sections: Vec<Section> = kinds
        .iter()
        .map(|&b| Section {
            title: format!("{} bandwidth by size", b.label()),
            rows: rows_of(&res, b, "MB/s", 1.0),
        })
        .collect();
    let mut rate_rows = Vec::new();
    for &b in &kinds {
        for s in res.sizes_of(b) {
            let v: Vec<f64> = res.rates(b, s).iter().map(|x| x / s as f64).collect();
            rate_rows.push(Row::new(
                "splitrt",
                format!("{} rate", b.label()),
                Some(s),
                "Mmsg/s",
                Summary::values(&v),
            ));
        }
    }
    sections.push(Section {
        title: "message rate (= MB/s / size)".into(),
        rows: rate_rows,
    });
    let head = header("throughput", &res, r)
        + &format!(
            "\nthroughput = one-way, rank 0 -> rank 1: AM streams keep <= {} messages in flight (receiver acks every {}),\n\
             every payload is read by its handler; put = {} puts then sync; get = {} gets in one scope, then read.\n\
             MB/s with 1 MB = 1e6 B.\n",
            plan.window, plan.ack_every, plan.window, plan.window
        );
    let csv = r.report(&head, &sections, "throughput")?;
    let bw = plot::sections_by_size(
        &r.path("throughput.svg"),
        "splitrt one-way bandwidth vs size (2 pinned ranks, shm)",
        &sections,
        "MB/s",
        "MB/s (1 MB = 1e6 B)",
        true,
    )?;
    let rate = plot::sections_by_size(
        &r.path("throughput-rate.svg"),
        "splitrt message rate vs size (2 pinned ranks, shm)",
        &sections,
        "Mmsg/s",
        "million messages/s",
        true,
    )?;
    println!("{}", wrote(&[&csv, &bw, &rate]));
    Ok(())
}

/// One setting of a scan.
struct Setting {
    /// x value (ring length or cell size).
    x: usize,
    /// Label in the table.
    label: String,
    /// Job environment.
    env: Vec<(&'static str, String)>,
}

fn scan(
    r: &Run,
    name: &str,
    settings: &[Setting],
    x_label: &str,
    title: &str,
) -> Result<(), String> {
    let bar = r.progress(&format!("splitrt-bench {name}"), settings.len());
    let mut bw_rows = Vec::new();
    let mut lat_rows = Vec::new();
    let (mut bw_pts, mut lat_pts) = (Vec::new(), Vec::new());
    let mut first: Option<Results<Bench>> = None;
    for s in settings {
        bar.step(&format!("{}: one 2-rank job", s.label));
        let res = run_job(r, Mode::Stream, &format!("{name}-{}", s.x), &s.env)?;
        bar.done();
        let mm: usize = res
            .config_value("max_medium")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let cell = res.config_value("cell_size").unwrap_or("?");
        let ring = res.config_value("ring_len").unwrap_or("?");
        let bw = res.summary(Bench::MediumBw, mm);
        let lat = res.summary(Bench::ShortRtt, 0);
        let note = format!(
            "cell {}, ring {ring}, Medium of {} = {} cell(s)",
            size_label(cell.parse().ok()),
            size_label(Some(mm)),
            cell.parse::<usize>()
                .map_or("?".into(), |c| mm.div_ceil(c.max(1)).to_string())
        );
        bw_rows.push(
            Row::new(
                "splitrt",
                format!("max Medium stream, {}", s.label),
                Some(mm),
                "MB/s",
                bw,
            )
            .with_note(&note),
        );
        lat_rows.push(Row::new(
            "splitrt",
            format!("AM Short RTT, {}", s.label),
            None,
            "us",
            lat,
        ));
        bw_pts.push((s.x as f64, bw.median));
        lat_pts.push((s.x as f64, lat.median));
        first.get_or_insert(res);
    }
    bar.finish();
    let sections = vec![
        Section {
            title: format!("one-way stream of maximum-size Medium messages by {x_label}"),
            rows: bw_rows,
        },
        Section {
            title: format!("AM Short round trip by {x_label} (for reference)"),
            rows: lat_rows,
        },
    ];
    let head = first.map_or(String::new(), |res| header(name, &res, r) + "\n")
        + &format!(
            "one 2-rank job per setting; the stream keeps <= {} messages in flight; MB/s with 1 MB = 1e6 B.\n",
            Plan::new(Mode::Stream, &r.common).window
        );
    let csv = r.report(&head, &sections, name)?;
    let svg = r.path(&format!("{name}.svg"));
    plot::draw(
        &svg,
        &Chart {
            title,
            x_label,
            y_label: "MB/s (1 MB = 1e6 B)",
            log_x: true,
            log_y: false,
        },
        &[Series {
            name: "max-size Medium stream".into(),
            points: bw_pts,
        }],
    )?;
    println!("{}", wrote(&[&csv, &svg]));
    Ok(())
}

/// `ring-scan`: Medium streaming vs ring length.
pub fn ring_scan(r: &Run) -> Result<(), String> {
    let lens: &[usize] = if r.quick() {
        &[2, 8]
    } else {
        &[2, 4, 8, 16, 32, 64]
    };
    let settings: Vec<Setting> = lens
        .iter()
        .map(|&n| Setting {
            x: n,
            label: format!("ring {n} cells"),
            env: vec![(ENV_RING_LEN, n.to_string())],
        })
        .collect();
    scan(
        r,
        "ring-scan",
        &settings,
        "ring length (cells)",
        "max-size Medium stream vs ring length (default 4 KiB cells)",
    )
}

/// Ring length of `cell-scan`.
pub const CELL_SCAN_RING: usize = 4;

/// `cell-scan`: Medium streaming vs cell size at a short ring.
pub fn cell_scan(r: &Run) -> Result<(), String> {
    let cells: &[usize] = if r.quick() {
        &[256, 4096]
    } else {
        &[256, 1024, 4096, 16384, 65536, 262144, 1 << 20]
    };
    let settings: Vec<Setting> = cells
        .iter()
        .map(|&c| Setting {
            x: c,
            label: format!("cell {}", size_label(Some(c))),
            env: vec![
                (ENV_RING_LEN, CELL_SCAN_RING.to_string()),
                (ENV_CELL_SIZE, c.to_string()),
                (ENV_MAX_MEDIUM, c.max(65536).to_string()),
            ],
        })
        .collect();
    scan(
        r,
        "cell-scan",
        &settings,
        "cell size (bytes)",
        "max-size Medium stream vs cell size (ring of 4 cells)",
    )
}
