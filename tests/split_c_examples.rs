//! The Split-C example programs (`examples/em3d.rs`, `sample_sort.rs`,
//! `matmul.rs`) as real multi-process jobs at small sizes on 1, 2, 4 and 8
//! ranks, on both one-sided paths, plus once at their default sizes. Each
//! example checks its own result and exits non-zero when the check fails;
//! rank 0 prints a `<name> OK` line on success.

mod common;
use common::*;

/// Small problem sizes: each job takes well under a second.
fn args(name: &str) -> &'static [&'static str] {
    match name {
        // nodes per rank, degree, remote fraction, iterations
        "em3d" => &["600", "6", "0.25", "6"],
        // keys per rank; all five distributions
        "sample_sort" => &["4000"],
        // N, block size (100 is not a multiple of 16: padded blocks)
        "matmul" => &["100", "16"],
        _ => unreachable!("unknown example {name}"),
    }
}

fn check(name: &str, n: usize, rma: &str) {
    let r = run_job(n, &example(name), args(name), &[("SPLITRT_RMA", rma)], 60);
    r.ok();
    let path = if rma == "am" {
        "Am path"
    } else {
        "Native path"
    };
    assert!(
        r.stdout.lines().any(|l| l.contains(path)),
        "{name} did not run on the {rma} path:\n{}",
        r.stdout
    );
    let ok = format!("[0] {name} OK");
    assert!(
        r.stdout.lines().any(|l| l.starts_with(&ok)),
        "{name} on {n} ranks ({rma}) printed no success line:\n--- stdout\n{}\n--- stderr\n{}",
        r.stdout,
        r.stderr
    );
}

macro_rules! cases {
    ($($test:ident: $name:literal, $n:literal, $rma:literal;)*) => {$(
        #[test]
        fn $test() {
            check($name, $n, $rma);
        }
    )*};
}

cases! {
    em3d_1_native: "em3d", 1, "native";
    em3d_1_am: "em3d", 1, "am";
    em3d_2_native: "em3d", 2, "native";
    em3d_2_am: "em3d", 2, "am";
    em3d_4_native: "em3d", 4, "native";
    em3d_4_am: "em3d", 4, "am";
    em3d_8_native: "em3d", 8, "native";
    em3d_8_am: "em3d", 8, "am";
    sample_sort_1_native: "sample_sort", 1, "native";
    sample_sort_1_am: "sample_sort", 1, "am";
    sample_sort_2_native: "sample_sort", 2, "native";
    sample_sort_2_am: "sample_sort", 2, "am";
    sample_sort_4_native: "sample_sort", 4, "native";
    sample_sort_4_am: "sample_sort", 4, "am";
    matmul_1_native: "matmul", 1, "native";
    matmul_1_am: "matmul", 1, "am";
    matmul_2_native: "matmul", 2, "native";
    matmul_2_am: "matmul", 2, "am";
    matmul_4_native: "matmul", 4, "native";
    matmul_4_am: "matmul", 4, "am";
    sample_sort_8_native: "sample_sort", 8, "native";
    sample_sort_8_am: "sample_sort", 8, "am";
    matmul_8_native: "matmul", 8, "native";
    matmul_8_am: "matmul", 8, "am";
}

/// The examples as a user first runs them: no arguments, default sizes.
#[test]
fn default_sizes_3_ranks() {
    for name in ["em3d", "sample_sort", "matmul"] {
        for rma in ["native", "am"] {
            let r = run_job(3, &example(name), &[], &[("SPLITRT_RMA", rma)], 60);
            r.ok();
            assert!(
                r.stdout.contains(&format!("[0] {name} OK")),
                "{name} ({rma}):\n{}",
                r.stdout
            );
        }
    }
}

/// A program that fails its own check must exit non-zero: a bad argument
/// is the one failure reachable from outside.
#[test]
fn bad_arguments_fail_the_job() {
    for name in ["em3d", "sample_sort", "matmul"] {
        let r = run_job(2, &example(name), &["nonsense"], &[], 60);
        assert_ne!(r.code, 0, "{name} accepted a bad argument:\n{}", r.stdout);
        assert!(
            r.stderr.contains("usage error"),
            "{name}: no usage message:\n{}",
            r.stderr
        );
    }
}
