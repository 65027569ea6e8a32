//! `compare`: splitrt next to the peers that are installed and the hardware
//! limits, in the same invocation and on the same pinned CPUs (0 and 1).
//!
//! * splitrt: one sweep job in compare mode (AM Medium 8 B RTT, put+sync,
//!   AM streams, put bandwidth), plus the raw cache-line ping-pong and
//!   memcpy measured by the same ranks;
//! * raw UDP over 127.0.0.1 ([`udp`]), threads of this process;
//! * UCX `ucx_perftest` (`ucx-utils`) over `UCX_TLS=sm,self` and `tcp`
//!   (`UCX_NET_DEVICES=lo`);
//! * libfabric `fi_pingpong` (`libfabric-bin`) with providers `shm`, `tcp`
//!   and `udp;ofi_rxd`.
//!
//! Peers not installed are reported as skipped, with the package to
//! install. UCX and libfabric report one-way latency (RTT/2); it is doubled
//! here, so every latency in the table is a full round trip.

mod fabric;
mod udp;

use crate::am::ucx::{self, Ucx};
use crate::harness::report::{size_label, Row, Section};
use crate::harness::run::{wrote, Run};
use crate::harness::stats::{Summary, NOISY_RATIO};
use crate::plot::{self, Chart, Series};
use crate::sweep::driver::run_job;
use crate::sweep::{Bench, Mode};
use std::path::PathBuf;

/// `name` on `PATH`, if installed.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A number of ours a peer row is compared with.
#[derive(Clone, Copy)]
struct Ours {
    name: &'static str,
    value: f64,
    /// Lower is better (latency).
    latency: bool,
}

/// Collects the table.
struct Table {
    sections: Vec<Section>,
    ratios: Vec<Row>,
}

impl Table {
    fn section(&mut self, title: impl Into<String>, rows: Vec<Row>) {
        self.sections.push(Section {
            title: title.into(),
            rows,
        });
    }

    /// A peer/limit row, its note giving each of `ours` as a ratio to it,
    /// and one ratio row per pair.
    fn peer(
        &mut self,
        source: &str,
        label: String,
        size: Option<usize>,
        unit: &str,
        s: Summary,
        ours: &[Ours],
    ) -> Row {
        let mut row = Row::new(source, label.clone(), size, unit, s);
        for o in ours {
            if !(s.median.is_finite() && s.median > 0.0 && o.value.is_finite()) {
                continue;
            }
            let r = o.value / s.median;
            let better = if o.latency { r < 1.0 } else { r > 1.0 };
            row = row.with_note(format!("{} / this = {r:.2}x", o.name));
            self.ratios.push(
                Row::new(
                    "ratio",
                    format!("{} / {label}", o.name),
                    None,
                    "x",
                    Summary::single(r),
                )
                .with_note(if better {
                    "splitrt better"
                } else {
                    "splitrt worse"
                }),
            );
        }
        row
    }
}

fn skipped(what: &str, why: &str) -> Row {
    Row::new(
        "-",
        format!("{what}: {why}"),
        None,
        "-",
        Summary::values(&[]),
    )
}

/// Peer sizes and iteration counts.
struct Counts {
    lat: usize,
    bw64k: usize,
    bw1m: usize,
    rate: usize,
    fi_lat: usize,
    fi_bw: usize,
    udp_batches: usize,
    udp_stream: usize,
}

fn counts(quick: bool) -> Counts {
    if quick {
        Counts {
            lat: 2000,
            bw64k: 200,
            bw1m: 20,
            rate: 20_000,
            fi_lat: 1000,
            fi_bw: 100,
            udp_batches: 5,
            udp_stream: 2000,
        }
    } else {
        Counts {
            lat: 100_000,
            bw64k: 10_000,
            bw1m: 1000,
            rate: 1_000_000,
            fi_lat: 50_000,
            fi_bw: 5000,
            udp_batches: 100,
            udp_stream: 200_000,
        }
    }
}

/// Run everything and report (`no_peers`: not UCX nor libfabric even if
/// installed).
pub fn run(r: &Run, no_peers: bool) -> Result<(), String> {
    let reps = r.common.reps as usize;
    let n = counts(r.quick());
    let ucx_exe = (!no_peers).then(ucx::find).flatten();
    let fi_exe = (!no_peers).then(fabric::find).flatten();
    let steps = 2 + ucx_exe.as_ref().map_or(0, |_| 2) + fi_exe.as_ref().map_or(0, |_| 3);
    let bar = r.progress("splitrt-bench compare", steps);

    // 1. splitrt (and the raw line ping-pong and memcpy, same ranks).
    bar.step("splitrt: one 2-rank job");
    let res = run_job(r, Mode::Compare, "compare", &[])?;
    bar.done();
    let med = |b: Bench, s: usize| res.summary(b, s).median;
    let lat = |name, value| Ours {
        name,
        value,
        latency: true,
    };
    let bw = |name, value| Ours {
        name,
        value,
        latency: false,
    };
    let o_med8 = lat("splitrt AM Medium 8 B RTT", med(Bench::MediumRtt, 8));
    let o_short = lat("splitrt AM Short RTT", med(Bench::ShortRtt, 0));
    let o_put8 = lat("splitrt put+sync 8 B", med(Bench::PutRtt, 8));
    let o_rate8 = bw("splitrt AM Medium 8 B rate", med(Bench::MediumBw, 8) / 8.0);
    let o_med1k = bw("splitrt AM Medium 1 KiB", med(Bench::MediumBw, 1024));
    let o_med8k = bw("splitrt AM Medium 8 KiB", med(Bench::MediumBw, 8192));
    let o_med64k = bw("splitrt AM Medium 64 KiB", med(Bench::MediumBw, 65536));
    let o_long1m = bw("splitrt AM Long 1 MiB", med(Bench::LongBw, 1 << 20));
    let o_put64k = bw("splitrt put 64 KiB", med(Bench::PutBw, 65536));
    let o_put1m = bw("splitrt put 1 MiB", med(Bench::PutBw, 1 << 20));

    let mut t = Table {
        sections: Vec::new(),
        ratios: Vec::new(),
    };
    let mut rows = vec![
        Row::new(
            "splitrt",
            "AM Short RTT",
            None,
            "us",
            res.summary(Bench::ShortRtt, 0),
        ),
        Row::new(
            "splitrt",
            "AM Medium RTT",
            Some(8),
            "us",
            res.summary(Bench::MediumRtt, 8),
        ),
        Row::new(
            "splitrt",
            "get (blocking) RTT",
            Some(8),
            "us",
            res.summary(Bench::GetRtt, 8),
        ),
        Row::new(
            "splitrt",
            "put + sync",
            Some(8),
            "us",
            res.summary(Bench::PutRtt, 8),
        ),
        Row::new(
            "splitrt",
            "AM Medium one-way rate",
            Some(8),
            "Mmsg/s",
            res.summary(Bench::MediumBw, 8).scaled(1.0 / 8.0),
        ),
    ];
    for (b, label) in [
        (Bench::MediumBw, "AM Medium one-way"),
        (Bench::LongBw, "AM Long one-way"),
        (Bench::PutBw, "put one-way"),
        (Bench::GetBw, "get"),
    ] {
        for s in res.sizes_of(b) {
            rows.push(Row::new(
                "splitrt",
                label,
                Some(s),
                "MB/s",
                res.summary(b, s),
            ));
        }
    }
    t.section(
        format!(
            "splitrt (one 2-rank job, path {})",
            res.config_value("rma").unwrap_or("?")
        ),
        rows,
    );

    // 2. Hardware limits.
    bar.step("raw UDP over 127.0.0.1");
    let mut rows = Vec::new();
    let raw = res.summary(Bench::RawLineRtt, 64);
    rows.push(t.peer(
        "raw",
        "raw cache-line ping-pong RTT (same ranks)".into(),
        Some(64),
        "us",
        raw,
        &[o_short, o_med8],
    ));
    for (s, ours) in [
        (65536, vec![o_med64k, o_put64k]),
        (1 << 20, vec![o_long1m, o_put1m]),
    ] {
        rows.push(t.peer(
            "raw",
            format!("memcpy {} (rank 0)", size_label(Some(s))),
            Some(s),
            "MB/s",
            res.summary(Bench::Memcpy, s),
            &ours,
        ));
    }
    let mut rtts = Vec::new();
    let mut errors = Vec::new();
    let batch = if r.quick() { 100 } else { 1000 };
    for _ in 0..reps {
        match udp::ping_pong(batch, batch, n.udp_batches) {
            Ok((p50, _)) => rtts.push(p50),
            Err(e) => errors.push(e),
        }
    }
    rows.push(t.peer(
        "raw",
        "UDP 127.0.0.1 ping-pong RTT (blocking recv)".into(),
        Some(8),
        "us",
        Summary::values(&rtts),
        &[o_med8],
    ));
    for (size, ours) in [(1024, o_med1k), (8192, o_med8k)] {
        let (mut v, mut loss) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            match udp::stream(size, n.udp_stream) {
                Ok((mbs, l)) => {
                    v.push(mbs);
                    loss.push(l);
                }
                Err(e) => errors.push(e),
            }
        }
        let worst = loss.iter().copied().fold(0.0, f64::max);
        rows.push(
            t.peer(
                "raw",
                "UDP 127.0.0.1 one-way stream (received)".into(),
                Some(size),
                "MB/s",
                Summary::values(&v),
                &[ours],
            )
            .with_note(format!("loss <= {worst:.1}%")),
        );
    }
    for e in &errors {
        rows.push(skipped("raw UDP", &format!("failed: {e}")));
    }
    bar.done();
    t.section("hardware / OS limits (same CPUs)", rows);

    // 3. UCX.
    match &ucx_exe {
        None => {
            let why = if no_peers {
                "skipped (--no-peers)"
            } else {
                "skipped: not installed (apt-get install ucx-utils)"
            };
            t.section("UCX ucx_perftest", vec![skipped("UCX", why)]);
        }
        Some(exe) => {
            for (tls, label, div) in [
                ("sm,self", "UCX_TLS=sm,self", 1),
                ("tcp", "UCX_TLS=tcp, lo", 5),
            ] {
                bar.step(&format!("ucx_perftest {label}"));
                let mut u = Ucx::new(
                    exe.clone(),
                    r.path(&format!("ucx-{}.log", tls.replace(',', "-"))),
                )
                .with_tls(tls);
                let mut rows = Vec::new();
                let tests: [(&str, usize, usize, &str); 7] = [
                    ("ucp_am_lat", 8, n.lat / div, "lat"),
                    ("ucp_put_lat", 8, n.lat / div, "lat"),
                    ("ucp_am_bw", 8, n.rate / div, "rate"),
                    ("ucp_am_bw", 65536, n.bw64k / div, "bw"),
                    ("ucp_am_bw", 1 << 20, n.bw1m / div, "bw"),
                    ("ucp_put_bw", 65536, n.bw64k / div, "bw"),
                    ("ucp_put_bw", 1 << 20, n.bw1m / div, "bw"),
                ];
                for (test, size, iters, kind) in tests {
                    let mut v = Vec::new();
                    let mut err = None;
                    for _ in 0..reps {
                        match u.run(test, size, iters.max(10)) {
                            Ok(f) => v.push(match kind {
                                "lat" => 2.0 * f.p50_us,
                                "rate" => f.rate_overall / 1e6,
                                _ => f.bw_overall * 1.048576,
                            }),
                            Err(e) => err = Some(e),
                        }
                    }
                    if v.is_empty() {
                        rows.push(skipped(
                            &format!("UCX {test} {}", size_label(Some(size))),
                            &format!("failed: {}", err.unwrap_or_default()),
                        ));
                        continue;
                    }
                    let s = Summary::values(&v);
                    let (label, unit, ours) = match (test, size, kind) {
                        ("ucp_am_lat", ..) => {
                            ("ucp_am_lat RTT (2 x one-way p50)", "us", vec![o_med8])
                        }
                        ("ucp_put_lat", ..) => {
                            ("ucp_put_lat RTT (2 x one-way p50)", "us", vec![o_put8])
                        }
                        (_, _, "rate") => ("ucp_am_bw message rate", "Mmsg/s", vec![o_rate8]),
                        ("ucp_am_bw", 65536, _) => ("ucp_am_bw", "MB/s", vec![o_med64k]),
                        ("ucp_am_bw", _, _) => ("ucp_am_bw", "MB/s", vec![o_long1m]),
                        (_, 65536, _) => ("ucp_put_bw", "MB/s", vec![o_put64k]),
                        _ => ("ucp_put_bw", "MB/s", vec![o_put1m]),
                    };
                    rows.push(t.peer(
                        "UCX",
                        format!("UCX {label}, {tls}"),
                        Some(size),
                        unit,
                        s,
                        &ours,
                    ));
                }
                bar.done();
                t.section(
                    format!("UCX ucx_perftest, {label} (taskset -c 0 / -c 1)"),
                    rows,
                );
            }
        }
    }

    // 4. libfabric.
    match &fi_exe {
        None => {
            let why = if no_peers {
                "skipped (--no-peers)"
            } else {
                "skipped: not installed (apt-get install libfabric-bin)"
            };
            t.section("libfabric fi_pingpong", vec![skipped("libfabric", why)]);
        }
        Some(exe) => {
            let mut f = fabric::FiPingpong::new(exe.clone(), r.path("fi_pingpong.log"));
            let mut rows = Vec::new();
            for (prov, div) in [("shm", 1), ("tcp", 5), ("udp;ofi_rxd", 10)] {
                bar.step(&format!("fi_pingpong -p '{prov}'"));
                for (size, iters) in [(8, n.fi_lat / div), (65536, n.fi_bw / div)] {
                    let mut v = Vec::new();
                    let mut err = None;
                    for _ in 0..reps {
                        match f.run(prov, "rdm", size, iters.max(10)) {
                            Ok(l) => v.push(if size == 8 {
                                2.0 * l.usec_per_xfer
                            } else {
                                l.mbs
                            }),
                            Err(e) => err = Some(e),
                        }
                    }
                    if v.is_empty() {
                        rows.push(skipped(
                            &format!("fi_pingpong {prov} {}", size_label(Some(size))),
                            &format!("failed: {}", err.unwrap_or_default()),
                        ));
                        continue;
                    }
                    let s = Summary::values(&v);
                    rows.push(if size == 8 {
                        t.peer(
                            "libfabric",
                            format!("fi_pingpong {prov} rdm RTT (2 x usec/xfer)"),
                            Some(8),
                            "us",
                            s,
                            &[o_med8],
                        )
                    } else {
                        t.peer(
                            "libfabric",
                            format!("fi_pingpong {prov} rdm ping-pong MB/s"),
                            Some(size),
                            "MB/s",
                            s,
                            &[o_med64k],
                        )
                    });
                }
                bar.done();
            }
            t.section("libfabric fi_pingpong (taskset -c 0 / -c 1)", rows);
        }
    }
    bar.finish();
    let ratios = std::mem::take(&mut t.ratios);
    t.section("ratios: splitrt / peer or limit (latency: < 1 = splitrt faster; MB/s, msgs/s: > 1 = splitrt faster)", ratios);

    let head = r.banner(
        "splitrt-bench compare",
        &format!("every side pinned to CPUs 0 and 1, {reps} repetition(s)"),
        "",
    ) + &format!(
        "shm fabric: cell {}, ring {}, max Medium {}\n\
         ALL latencies are full round trips (RTT): ucx_perftest and fi_pingpong print one-way latency (RTT/2),\n\
         doubled here. MB/s with 1 MB = 1e6 B (UCX's MiB/s converted). fi_pingpong MB/s is its ping-pong figure.\n\
         Each peer row's note gives every comparable splitrt number as a ratio to it. NOISY = max/min > {NOISY_RATIO}.\n",
        size_label(res.config_value("cell_size").and_then(|v| v.parse().ok())),
        res.config_value("ring_len").unwrap_or("?"),
        size_label(res.config_value("max_medium").and_then(|v| v.parse().ok())),
    );
    let csv = r.report(&head, &t.sections, "compare")?;
    let svg = r.path("compare.svg");
    draw(&svg, &t.sections)?;
    println!("{}", wrote(&[&csv, &svg]));
    Ok(())
}

/// The round-trip latencies (8 B, or 64 B for the raw line) as one point
/// per source on a log axis: x = position, so the chart reads as a ranked
/// dot plot.
fn draw(path: &std::path::Path, sections: &[Section]) -> Result<(), String> {
    let mut pts: Vec<(String, f64)> = sections
        .iter()
        .flat_map(|s| &s.rows)
        .filter(|r| r.unit == "us" && r.summary.median.is_finite() && r.summary.median > 0.0)
        .map(|r| (r.measurement.clone(), r.summary.median))
        .collect();
    pts.sort_by(|a, b| a.1.total_cmp(&b.1));
    let series: Vec<Series> = pts
        .iter()
        .enumerate()
        .map(|(i, (name, v))| Series {
            name: format!("{name}: {v:.2} us"),
            points: vec![((i + 1) as f64, *v)],
        })
        .collect();
    plot::draw(
        path,
        &Chart {
            title: "round-trip latency, small messages (lower is better)",
            x_label: "rank (sorted)",
            y_label: "RTT (us)",
            log_x: false,
            log_y: true,
        },
        &series,
    )
}
