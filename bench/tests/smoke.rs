//! CI smoke tests: every `splitrt-bench` subcommand runs end to end with
//! `--quick --reps 1` (two real ranks per job) and writes its CSV and SVG.
//! No number is judged here: performance is measured, not tested.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Run `splitrt-bench ARGS --quick --reps 1 --timeout 120 --out OUT`, one
/// job at a time (the same lock file as the facade's multi-process tests);
/// returns stdout, having checked the exit status.
fn quick_run(args: &[&str], out: &Path) -> String {
    let lock =
        File::create(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("splitrt-jobs.lock")).unwrap();
    lock.lock().unwrap();
    let _ = std::fs::remove_dir_all(out);
    let r = Command::new(env!("CARGO_BIN_EXE_splitrt-bench"))
        .args(args)
        .args(["--quick", "--reps", "1", "--timeout", "120", "--out"])
        .arg(out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&r.stdout).into_owned();
    assert!(
        r.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&r.stderr)
    );
    stdout
}

#[test]
fn quick_run_writes_its_table_and_csv() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-smoke");
    let stdout = quick_run(&["--no-ucx"], &out);
    for row in [
        "raw line ping-pong RTT",
        "AM Short RTT",
        "AM Medium RTT",
        "AM Long one-way",
        "AM Short flood rate",
        "RPC RTT",
        "RPC RTT / AM Short RTT",
        "RPC aggregated rate",
        "RPC aggregated rate / AM Short flood rate",
    ] {
        assert!(stdout.contains(row), "missing {row:?} in\n{stdout}");
    }
    let csv = std::fs::read_to_string(out.join("am.csv")).unwrap();
    assert!(csv.lines().count() > 10, "{csv}");
    assert_outputs(&out, &["am.csv", "am-latency.svg", "am-bandwidth.svg"]);
}

#[test]
fn quick_pgas_run_writes_its_table_and_csv() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-smoke-pgas");
    let stdout = quick_run(&["pgas"], &out);
    let mut rows = Vec::new();
    for path in ["native", "am"] {
        for what in [
            "put 8 B + sync",
            "read 8 B (blocking get)",
            "read 8 B of a line the peer just wrote",
            "put ping-pong RTT (put+sync, peer puts back)",
            "put_signal ping-pong RTT (peer waits, put_signals back)",
            "sync with nothing outstanding",
            "sync right after one 8 B put",
        ] {
            rows.push(format!("{what}, {path} "));
        }
        rows.push(format!("put_signal / put ping-pong ({path}) = "));
        for what in [
            "alltoall / by hand",
            "allgather / Pgas::allreduce",
            "Team / Pgas allreduce",
            "scan / Team::allreduce",
        ] {
            rows.push(format!("{what} ({path}) = "));
        }
        for what in ["put", "get", "store"] {
            rows.push(format!("{what} {path} "));
            rows.push(format!("{what} {path} / memcpy = "));
        }
    }
    rows.push("memcpy (rank 0, same pattern)".into());
    for row in &rows {
        assert!(
            stdout.contains(row.as_str()),
            "missing {row:?} in\n{stdout}"
        );
    }
    let csv = std::fs::read_to_string(out.join("pgas.csv")).unwrap();
    assert!(csv.starts_with("section,source,measurement,"), "{csv}");
    // 12 latency and sync rows, 4 sizes x 5 bandwidth rows, 3 x 2 stores.
    assert!(csv.lines().count() > 12 + 4 * 5 + 3 * 2, "{csv}");
    assert_outputs(&out, &["pgas.csv", "pgas-bandwidth.svg"]);
    for f in ["pgas-native-rank0.csv", "pgas-am-rank0.csv"] {
        let per_rep = std::fs::read_to_string(out.join(f)).unwrap();
        assert!(per_rep.contains("put_bw,"), "{f}: {per_rep}");
    }
}

/// Every file in `files` exists in `out`, non-empty; SVGs are SVG.
fn assert_outputs(out: &Path, files: &[&str]) {
    for f in files {
        let p = out.join(f);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(!text.is_empty(), "{} is empty", p.display());
        if f.ends_with(".svg") {
            assert!(text.contains("<svg"), "{} is not SVG", p.display());
        } else {
            assert!(
                text.starts_with("section,source,measurement,"),
                "{}",
                p.display()
            );
        }
    }
}

/// Run one subcommand quickly; check its rows and files.
fn sub(name: &str, extra: &[&str], rows: &[&str], files: &[&str]) {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-smoke-{name}"));
    let mut args = vec![name];
    args.extend_from_slice(extra);
    let stdout = quick_run(&args, &out);
    for row in rows {
        assert!(stdout.contains(row), "missing {row:?} in\n{stdout}");
    }
    assert_outputs(&out, files);
}

#[test]
fn quick_latency() {
    sub(
        "latency",
        &[],
        &[
            "AM Short RTT",
            "AM Medium RTT",
            "AM Long RTT",
            "get (blocking read_slice)",
            "put + sync",
        ],
        &["latency.csv", "latency.svg"],
    );
}

#[test]
fn quick_throughput() {
    sub(
        "throughput",
        &[],
        &[
            "AM Medium one-way",
            "AM Long one-way",
            "put one-way",
            "message rate",
        ],
        &["throughput.csv", "throughput.svg", "throughput-rate.svg"],
    );
}

#[test]
fn quick_ring_and_cell_scans() {
    sub(
        "ring-scan",
        &[],
        &[
            "max Medium stream, ring 2 cells",
            "max Medium stream, ring 8 cells",
        ],
        &["ring-scan.csv", "ring-scan.svg"],
    );
    sub(
        "cell-scan",
        &[],
        &[
            "max Medium stream, cell 256 B",
            "max Medium stream, cell 4 KiB",
        ],
        &["cell-scan.csv", "cell-scan.svg"],
    );
}

#[test]
fn quick_compare_without_peers() {
    sub(
        "compare",
        &["--no-peers"],
        &[
            "raw cache-line ping-pong RTT",
            "memcpy 1 MiB",
            "UDP 127.0.0.1 ping-pong RTT",
            "UCX: skipped",
            "libfabric: skipped",
            "ratios: splitrt / peer",
        ],
        &["compare.csv", "compare.svg"],
    );
}

#[test]
fn quick_apps() {
    // The examples are built by `cargo test --workspace` (or `cargo build
    // --examples`), next to this crate's binary.
    let dir = Path::new(env!("CARGO_BIN_EXE_splitrt-bench"))
        .parent()
        .unwrap();
    let missing: Vec<_> = [
        "em3d",
        "sample_sort",
        "matmul",
        "npb_is",
        "npb_cg",
        "npb_ft",
        "npb_mg",
    ]
    .iter()
    .map(|e| dir.join("examples").join(e))
    .filter(|p| !p.is_file())
    .collect();
    if !missing.is_empty() || !dir.join("splitrt-run").is_file() {
        eprintln!("skipping apps smoke test: examples not built (cargo test --workspace builds them): {missing:?}");
        return;
    }
    sub(
        "apps",
        &[],
        &[
            "em3d wall clock, 2 rank(s)",
            "npb_cg \"Mop/s total\"",
            "speedup t1/t2",
        ],
        &["apps.csv", "apps-speedup.svg"],
    );
}

#[test]
fn quick_breakdown() {
    sub(
        "breakdown",
        &[],
        &[
            "round trip, trace off",
            "round trip, trace on",
            "rank 0 send: copy (ping)",
            "rank 1 recv: handler (ping)",
        ],
        &["breakdown.csv", "breakdown.svg"],
    );
}

#[test]
fn quick_vys() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-smoke-vys");
    let stdout = quick_run(&["vys"], &out);
    for row in [
        "1x1 local none",
        "1x1 local crc32c",
        "1x1 remote none",
        "2x2 local none",
        "2x2 remote none",
        "verification failures vs ring length",
        "targets",
        "content check:",
    ] {
        assert!(stdout.contains(row), "missing {row:?} in\n{stdout}");
    }
    let csv = std::fs::read_to_string(out.join("vys.csv")).unwrap();
    assert!(csv.starts_with("section,place,setup,"), "{csv}");
    // 5 setups x 2 sizes, 3 scan rows, the header
    assert_eq!(csv.lines().count(), 1 + 5 * 2 + 3, "{csv}");
    let txt = std::fs::read_to_string(out.join("vys.txt")).unwrap();
    assert!(txt.contains("1x1 local none"), "{txt}");
}

#[test]
fn quick_gasnet_testam_rows() {
    // without --gasnet: our side of the testam methodology, every row kind
    sub(
        "gasnet",
        &[],
        &[
            "raw cache-line ping-pong roundtrip",
            "AMShort ping-pong roundtrip ReqRep",
            "AMShort flood one-way Req",
            "4096 AMMedium ping-pong roundtrip ReqReq",
            "4096 AMLong flood two-way Req",
            "(no --gasnet DIR",
        ],
        &["gasnet.csv"],
    );
}

#[test]
fn quick_rate_rows_alone() {
    // `--rows rate`: the AM Short flood and the aggregated RPC rate with
    // their ratio and target, nothing else
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-smoke-rows-rate");
    let stdout = quick_run(&["am", "--no-ucx", "--rows", "rate"], &out);
    for row in [
        "AM Short flood rate",
        "RPC aggregated rate",
        "RPC aggregated rate / AM Short flood rate",
        "target >= 0.5x",
    ] {
        assert!(stdout.contains(row), "missing {row:?} in\n{stdout}");
    }
    for row in ["raw line ping-pong RTT", "AM Medium RTT", "AM Long one-way"] {
        assert!(!stdout.contains(row), "{row:?} measured in\n{stdout}");
    }
    assert_outputs(&out, &["am.csv"]);
}
