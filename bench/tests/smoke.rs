//! CI smoke test: `splitrt-bench --quick` runs end to end (two real ranks)
//! and writes its CSV. No number is judged here: performance is measured,
//! not tested.

use std::fs::File;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn quick_run_writes_its_table_and_csv() {
    // Same lock file as the facade's multi-process tests: one job at a time.
    let lock =
        File::create(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("splitrt-jobs.lock")).unwrap();
    lock.lock().unwrap();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-smoke");
    let _ = std::fs::remove_dir_all(&out);
    let r = Command::new(env!("CARGO_BIN_EXE_splitrt-bench"))
        .args([
            "--quick",
            "--reps",
            "1",
            "--no-ucx",
            "--timeout",
            "120",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(
        r.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&r.stderr)
    );
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
