//! `splitrt-bench gasnet`: GASNet-EX's own microbenchmark methodology
//! (`testam`: AM Short / Medium / Long ping-pong and flood, see
//! [`testam`]; `testsmall` and `testlarge`: put / get latency and
//! throughput, see [`testrma`]) run by splitrt, and with `--gasnet DIR`
//! the user's own GASNet-EX smp-conduit `testam`, `testsmall` and
//! `testlarge` run back to back with it in the same invocation, round after
//! round, rows paired by test, round and description and shown with the
//! ratio. Every round also measures the raw cache-line round trip (the
//! floor of the moment). Nothing of GASNet-EX is downloaded or built
//! here.

pub mod testam;
pub mod testrma;

use crate::harness::report::{self, Row, Section};
use crate::harness::run::Run;
use crate::harness::stats::{p50_p99, Summary};
use splitrt::runtime::config::ENV_THREADS;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What to run (`--reps` is the number of rounds).
pub struct Options {
    /// A GASNet-EX tree configured with `--enable-smp` whose
    /// `smp-conduit/testam` was built (`make -C smp-conduit testam`).
    pub gasnet: Option<PathBuf>,
    /// Iterations per row (`testam`'s first argument; default 1000).
    pub iters: usize,
    /// Largest payload (`testam`'s second argument; default 2 MiB).
    pub max_size: usize,
}

/// Microseconds per row description: (round, value), one per round that
/// printed the row (a round whose GASNet-EX test failed has none, and the
/// ratios pair rounds by number, never by position).
type Rows = BTreeMap<String, Vec<(usize, f64)>>;

/// The values of one row, rounds dropped.
fn values(v: &[(usize, f64)]) -> Vec<f64> {
    v.iter().map(|&(_, x)| x).collect()
}

/// The largest size of `kind` (`AMMedium`, `AMLong`) among the rows.
fn max_size_of(rows: &Rows, kind: &str) -> Option<usize> {
    rows.keys()
        .filter(|k| k.contains(kind))
        .filter_map(|k| k.split(' ').next()?.parse().ok())
        .max()
}

/// The description with runs of spaces collapsed (both sides pad
/// differently).
fn key(desc: &str) -> String {
    desc.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Parse `desc \t us \t MB/s` rows (ours) of `round` into `rows`; the
/// extra lines (maxima, raw line) go to `extra`.
fn parse_ours(text: &str, round: usize, rows: &mut Rows, extra: &mut Rows) {
    for l in text.lines() {
        let mut f = l.split('\t');
        let (Some(d), Some(us)) = (f.next(), f.next().and_then(|v| v.parse::<f64>().ok())) else {
            continue;
        };
        let target = if d.starts_with("raw ") || d.starts_with("max ") {
            &mut *extra
        } else {
            &mut *rows
        };
        target.entry(key(d)).or_default().push((round, us));
    }
}

/// Parse `testam`'s report lines (`A: desc: 0.123 sec    0.456 us ...`)
/// of `round`.
fn parse_testam(text: &str, round: usize, rows: &mut Rows) -> usize {
    let mut n = 0;
    for l in text.lines() {
        let mut f = l.splitn(3, ": ");
        let (Some(sec), Some(desc), Some(rest)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if sec.len() != 1 {
            continue;
        }
        let mut w = rest.split_whitespace();
        let us = match (w.next(), w.next(), w.next(), w.next()) {
            (Some(_), Some("sec"), Some(us), Some("us")) => us.parse::<f64>().ok(),
            _ => None,
        };
        if let Some(us) = us {
            rows.entry(key(desc)).or_default().push((round, us));
            n += 1;
        }
    }
    n
}

/// Parse `testsmall` / `testlarge` report lines
/// (`A:  0 -  8 byte :  1000 iters, latency  4 us total,  0.004 us ave. (PutBlocking latency)`,
/// `... throughput 47407407.407 KB/sec (PutBlocking throughput)`) as
/// microseconds per operation, keyed `TEST: SIZE byte NAME` (`testsmall`
/// and `testlarge` print throughput rows of the same names and sizes, which
/// must not pair with each other); throughput rows reading 0 (below the
/// timer) are skipped.
fn parse_rma(text: &str, test: &str, round: usize, rows: &mut Rows) -> usize {
    let mut n = 0;
    for l in text.lines() {
        let Some((_, rest)) = l.split_once(" - ") else {
            continue;
        };
        let Some((size, rest)) = rest.split_once(" byte :") else {
            continue;
        };
        let Ok(size) = size.trim().parse::<usize>() else {
            continue;
        };
        let (Some(open), Some(close)) = (rest.rfind('('), rest.rfind(')')) else {
            continue;
        };
        if close <= open {
            continue;
        }
        let name = &rest[open + 1..close];
        let w: Vec<&str> = rest[..open].split_whitespace().collect();
        let us = if let Some(i) = w.iter().position(|x| *x == "ave.") {
            w.get(i.wrapping_sub(2)).and_then(|v| v.parse::<f64>().ok())
        } else if let Some(i) = w.iter().position(|x| *x == "KB/sec") {
            w.get(i.wrapping_sub(1))
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|kbs| *kbs > 0.0)
                .map(|kbs| size as f64 / (kbs * 1024.0) * 1e6)
        } else {
            None
        };
        if let Some(us) = us {
            rows.entry(key(&format!("{test}: {size} byte {name}")))
                .or_default()
                .push((round, us));
            n += 1;
        }
    }
    n
}

/// Run GASNet-EX's smp-conduit `test` on 2 processes of this host.
fn run_theirs(dir: &Path, test: &str, iters: usize, max: usize) -> Result<String, String> {
    let exe = dir.join("smp-conduit").join(test);
    if !exe.exists() {
        return Err(format!(
            "{} not found: configure GASNet-EX with --enable-smp, then `make -C smp-conduit {test}`",
            exe.display()
        ));
    }
    let out = std::process::Command::new(&exe)
        .args([iters.to_string(), max.to_string()])
        .env("GASNET_PSHM_NODES", "2")
        .env("GASNET_QUIET", "1")
        .output()
        .map_err(|e| format!("running {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// p50 and p99 (nearest rank), min and max over the rounds of a row.
fn summary(v: &[(usize, f64)]) -> Summary {
    let v = values(v);
    let (p50, p99) = p50_p99(&v);
    Summary {
        median: p50,
        p99: Some(p99),
        ..Summary::values(&v)
    }
}

/// `p50 p99 (min..max)` over rounds.
fn cell(v: Option<&Vec<(usize, f64)>>) -> String {
    match v {
        Some(v) if !v.is_empty() => {
            let s = summary(v);
            format!(
                "{:9.3} {:.3} ({:.3}..{:.3})",
                s.median,
                s.p99.unwrap_or(f64::NAN),
                s.min,
                s.max
            )
        }
        _ => format!("{:>9}", "-"),
    }
}

fn p50(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| p50_p99(v).0)
}

/// splitrt / GASNet-EX for each round both printed the row.
fn round_ratios(theirs: &[(usize, f64)], ours: &[(usize, f64)]) -> Vec<f64> {
    theirs
        .iter()
        .filter(|(_, t)| *t > 0.0)
        .filter_map(|&(r, t)| ours.iter().find(|&&(q, _)| q == r).map(|&(_, o)| o / t))
        .collect()
}

/// Run the comparison.
pub fn run(r: &Run, o: &Options) -> Result<(), String> {
    let (iters, max) = if r.quick() {
        (50, o.max_size.min(4096))
    } else {
        (o.iters, o.max_size)
    };
    // testsmall / testlarge: (iterations, largest size); their defaults
    let (small, large) = if r.quick() {
        ((50, 64), (10, 8192))
    } else {
        (testrma::SMALL_DEFAULT, testrma::LARGE_DEFAULT)
    };
    let mut ours = Rows::new();
    let mut order: Vec<String> = Vec::new();
    let mut theirs = Rows::new();
    let mut extra = Rows::new();
    let mut notes = String::new();
    let result = "gasnet-testam.raw";
    for round in 0..r.common.reps as usize {
        // theirs first: its maxima become ours, so the rows pair up
        if let Some(dir) = &o.gasnet {
            for (test, it, mx) in [
                ("testam", iters, max),
                ("testsmall", small.0, small.1),
                ("testlarge", large.0, large.1),
            ] {
                let parsed = run_theirs(dir, test, it, mx).map(|t| {
                    if test == "testam" {
                        parse_testam(&t, round, &mut theirs)
                    } else {
                        parse_rma(&t, test, round, &mut theirs)
                    }
                });
                match parsed {
                    Ok(0) => {
                        let _ = writeln!(notes, "round {round}: GASNet-EX {test} printed no rows");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let _ = writeln!(notes, "round {round}: {e}");
                    }
                }
            }
        }
        // GASNet-EX's tests link its SEQ (single-threaded) library: ours
        // run single-threaded too (no locks on the rings).
        let mut env = vec![
            (testam::ENV_ITERS, iters.to_string()),
            (testam::ENV_MAXSZ, max.to_string()),
            (ENV_THREADS, "single".into()),
        ];
        for (kind, var) in [
            ("AMMedium", testam::ENV_MAX_MEDIUM),
            ("AMLong", testam::ENV_MAX_LONG),
        ] {
            if let Some(m) = max_size_of(&theirs, kind) {
                env.push((var, m.to_string()));
            }
        }
        let text = r.job("gasnet-worker", result, &env)?;
        let rma_env = [
            (ENV_THREADS, "single".into()),
            (testrma::ENV_SMALL, format!("{},{}", small.0, small.1)),
            (testrma::ENV_LARGE, format!("{},{}", large.0, large.1)),
        ];
        let rma = r.job("gasnet-rma-worker", result, &rma_env)?;
        let text = text + &rma;
        if order.is_empty() {
            order = text
                .lines()
                .filter_map(|l| l.split('\t').next())
                .filter(|d| !d.starts_with("raw ") && !d.starts_with("max "))
                .map(key)
                .collect();
        }
        parse_ours(&text, round, &mut ours, &mut extra);
    }
    let mut t = String::new();
    let _ = writeln!(
        t,
        "testam methodology, {iters} iterations per row, sizes up to {max} B, {} round(s); \
         testsmall {} iterations up to {} B, testlarge {} iterations from {} B up to {} B; \
         microseconds per iteration (throughput rows: per operation): p50 p99 over rounds (min..max); \
         ratio: splitrt / GASNet-EX per round, p50; \
         both single-threaded (GASNet-EX's SEQ library, splitrt {ENV_THREADS}=single)",
        r.common.reps,
        small.0,
        small.1,
        large.0,
        testrma::LARGE_MIN,
        large.1
    );
    for (k, v) in &extra {
        let _ = writeln!(t, "{k}: {}", cell(Some(v)).trim());
    }
    let _ = writeln!(
        t,
        "{:<52} {:>34} {:>34} {:>8}",
        "row (the test's own description)", "GASNet-EX smp", "splitrt", "ratio"
    );
    // one section per row keeps the rows in table order
    let mut csv: Vec<Section> = Vec::new();
    let only_theirs: Vec<String> = theirs
        .keys()
        .filter(|k| !ours.contains_key(*k))
        .cloned()
        .collect();
    for k in order.iter().chain(&only_theirs) {
        let v = ours.get(k).cloned().unwrap_or_default();
        let v = &v;
        let g = theirs.get(k);
        // per round (theirs and ours ran back to back), then the p50: the
        // host's placement moves between rounds, not within one
        let ratios = g.map(|g| round_ratios(g, v)).unwrap_or_default();
        let ratio = p50(&ratios);
        let r = ratio.map_or("-".to_string(), |r| format!("{r:.2}x"));
        let _ = writeln!(t, "{k:<52} {:>34} {:>34} {r:>8}", cell(g), cell(Some(v)));
        let size = k.split(' ').find_map(|w| w.parse::<usize>().ok());
        for (source, vals, note) in [
            ("GASNet-EX smp", g, String::new()),
            (
                "splitrt",
                Some(v),
                ratio.map_or(String::new(), |r| format!("{r:.3}x GASNet-EX")),
            ),
        ] {
            let Some(vals) = vals.filter(|x| !x.is_empty()) else {
                continue;
            };
            csv.push(Section {
                title: k.split_once(": ").map_or("testam", |(t, _)| t).into(),
                rows: vec![Row::new(source, k.clone(), size, "us", summary(vals)).with_note(note)],
            });
        }
    }
    if o.gasnet.is_none() {
        t += "(no --gasnet DIR: GASNet-EX's own testam was not run)\n";
    }
    t += &notes;
    print!("{t}");
    r.write("gasnet.csv", &report::csv(&csv))?;
    r.write("gasnet.txt", &t)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn testam_lines_pair_with_ours() {
        let theirs = "A: AMShort     ping-pong roundtrip ReqRep  :  0.000 sec    0.135 us\n\
                      B:     512 AMMedium    flood     one-way   Req            :  0.001 sec    0.200 us   2441.406 MB/s\n\
                      Running 1000 iterations\n";
        let mut t = Rows::new();
        assert_eq!(parse_testam(theirs, 0, &mut t), 2);
        let mut o = Rows::new();
        let mut x = Rows::new();
        parse_ours(
            "        AMShort     ping-pong roundtrip ReqRep\t0.250\t0\n    512 AMMedium    flood     one-way   Req\t0.3\t1\nraw cache-line ping-pong roundtrip\t0.06\t0\n",
            0,
            &mut o,
            &mut x,
        );
        for k in o.keys() {
            assert!(t.contains_key(k), "{k} unpaired");
        }
        assert_eq!(x.len(), 1);
    }

    /// testsmall's and testlarge's throughput rows of one size stay apart,
    /// and a round GASNet-EX missed pairs with nothing.
    #[test]
    fn rma_rows_pair_by_test_and_round() {
        let line = |kbs: f64| {
            format!(
                "0:  0 -       1024 byte :    1000 iters, throughput {kbs:11.3} KB/sec (PutBlocking throughput)\n"
            )
        };
        let lat = "0:  0 -          8 byte :    1000 iters, latency          3 us total,   0.003 us ave. (PutBlocking latency)\n";
        let mut t = Rows::new();
        assert_eq!(parse_rma(&(line(1000.0) + lat), "testsmall", 0, &mut t), 2);
        assert_eq!(parse_rma(&line(2000.0), "testlarge", 0, &mut t), 1);
        assert_eq!(parse_rma(&line(4000.0), "testlarge", 2, &mut t), 1);
        // 1024 B at 1000 KB/s (KiB, as the tests count) is 1000 us per op
        let near = |v: &[(usize, f64)], want: &[(usize, f64)]| {
            v.len() == want.len()
                && v.iter()
                    .zip(want)
                    .all(|(a, b)| a.0 == b.0 && (a.1 - b.1).abs() < 1e-9 * b.1)
        };
        assert!(near(
            &t["testsmall: 1024 byte PutBlocking throughput"],
            &[(0, 1000.0)]
        ));
        assert!(near(
            &t["testlarge: 1024 byte PutBlocking throughput"],
            &[(0, 500.0), (2, 250.0)]
        ));
        assert!(near(
            &t["testsmall: 8 byte PutBlocking latency"],
            &[(0, 0.003)]
        ));
        let mut o = Rows::new();
        let mut x = Rows::new();
        for r in 0..3 {
            parse_ours(
                "testlarge: 1024 byte PutBlocking throughput\t500\t0\n",
                r,
                &mut o,
                &mut x,
            );
        }
        let k = "testlarge: 1024 byte PutBlocking throughput";
        let r = round_ratios(&t[k], &o[k]);
        assert!(
            r.len() == 2 && (r[0] - 1.0).abs() < 1e-9 && (r[1] - 2.0).abs() < 1e-9,
            "{r:?}"
        );
    }
}
