//! CI smoke tests: `splitrt-bench --quick` (the AM benchmark) and
//! `splitrt-bench pgas --quick` run end to end (two real ranks per job) and
//! write their CSV. No number is judged here: performance is measured, not
//! tested.

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
    ] {
        assert!(stdout.contains(row), "missing {row:?} in\n{stdout}");
    }
    let csv = std::fs::read_to_string(out.join("am.csv")).unwrap();
    assert!(csv.lines().count() > 10, "{csv}");
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
            "sync with nothing outstanding",
            "sync right after one 8 B put",
        ] {
            rows.push(format!("{what}, {path} "));
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
    for f in ["pgas-native-rank0.csv", "pgas-am-rank0.csv"] {
        let per_rep = std::fs::read_to_string(out.join(f)).unwrap();
        assert!(per_rep.contains("put_bw,"), "{f}: {per_rep}");
    }
}
