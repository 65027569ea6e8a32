//! Failure paths: a rank that panics, exits or is killed ends the job with a
//! non-zero exit and a message naming the rank; a handler-table mismatch and
//! a missing rank are refused with clear errors; nothing is left in /dev/shm.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

fn faults(mode: &str, rank: &str, job: &str, extra: &[(&str, &str)]) -> Run {
    let mut env = vec![("SPLITRT_JOB", job)];
    env.extend_from_slice(extra);
    run_job(4, &example("t_faults"), &[mode, rank], &env, 60)
}

#[test]
fn panicking_rank_ends_the_job() {
    let job = job_id("panic");
    let r = faults("panic", "2", &job, &[]);
    assert_eq!(r.code, 101, "exit code of the panicking rank: {r:?}");
    assert!(
        r.stderr.contains("rank 2 exited with code 101"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("[2] ") && r.stderr.contains("panics on purpose"),
        "{}",
        r.stderr
    );
    // the others were told who failed
    assert!(
        r.stderr.contains("rank 2 failed: the rank panicked"),
        "{}",
        r.stderr
    );
    assert!(shm_leftovers(&job).is_empty());
}

#[test]
fn exit_code_of_first_failing_rank() {
    let job = job_id("exit");
    let r = faults("exit", "1", &job, &[]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("rank 1 exited with code 3"),
        "{}",
        r.stderr
    );
    assert!(shm_leftovers(&job).is_empty());
}

#[test]
fn handler_table_mismatch_is_refused() {
    let job = job_id("mismatch");
    let r = faults("mismatch", "1", &job, &[]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("registration tables differ at entry 1")
            && r.stderr
                .contains("rank 1 has '#65 extra (Medium request, 2 args)'"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stdout.contains("ready"),
        "no rank may start: {}",
        r.stdout
    );
    assert!(shm_leftovers(&job).is_empty());
}

/// Two ranks, rank 1 registering one handler more, on each fabric: the
/// error names the first differing handler entry, never a setting (on udp
/// the table ends with the settings every rank must share, which used to
/// be blamed instead: "SPLITRT_UDP_AUTH ... same value of this setting").
#[test]
fn an_extra_handler_is_named_on_every_fabric() {
    for fabric in ["shm", "udp"] {
        let job = job_id(&format!("extra-{fabric}"));
        let r = run_job(
            2,
            &example("t_faults"),
            &["mismatch", "1"],
            &[("SPLITRT_JOB", &job), ("SPLITRT_FABRIC", fabric)],
            60,
        );
        assert_ne!(r.code, 0, "{fabric}: {r:?}");
        assert!(
            r.stderr.contains("registration tables differ at entry 1")
                && r.stderr
                    .contains("rank 1 has '#65 extra (Medium request, 2 args)'")
                && r.stderr.contains("same handlers in the same order")
                && !r.stderr.contains("setting"),
            "{fabric}: {}",
            r.stderr
        );
        assert!(shm_leftovers(&job).is_empty());
    }
}

#[test]
fn missing_rank_times_out_with_its_name() {
    let job = job_id("late");
    let t = Instant::now();
    let r = faults("late", "3", &job, &[("SPLITRT_BOOTSTRAP_TIMEOUT", "1.5")]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr
            .contains("rank 3 never arrived at the bootstrap within 1.5 s"),
        "{}",
        r.stderr
    );
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t.elapsed()
    );
    assert!(shm_leftovers(&job).is_empty());
}

#[test]
fn launcher_timeout_kills_a_hung_job() {
    let job = job_id("hang");
    let _lock = job_lock();
    let mut c = launch(
        2,
        &example("t_faults"),
        &["hang"],
        &[("SPLITRT_JOB", &job)],
        2,
    );
    let r = finish(c.spawn().unwrap(), Duration::from_secs(30));
    assert_eq!(r.code, 124, "{r:?}");
    assert!(
        r.stderr.contains("job timed out after 2.0 s"),
        "{}",
        r.stderr
    );
    assert!(shm_leftovers(&job).is_empty());
}

/// `kill -9` of one rank mid-run (hello --spin keeps the ring busy).
#[test]
fn killed_rank_ends_the_job_and_leaves_nothing() {
    let job = job_id("kill");
    let _lock = job_lock();
    let mut child = launch(
        4,
        &example("hello"),
        &["--spin", "30"],
        &[("SPLITRT_JOB", &job)],
        60,
    )
    .spawn()
    .unwrap();
    // Wait for every rank's ready line, then kill rank 1.
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut pids = std::collections::BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut line = String::new();
    while pids.len() < 4 && Instant::now() < deadline {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some((r, pid)) = line
            .strip_prefix('[')
            .and_then(|l| l.split_once("] ready pid="))
        {
            pids.insert(
                r.parse::<usize>().unwrap(),
                pid.trim().parse::<i32>().unwrap(),
            );
        }
    }
    assert_eq!(pids.len(), 4, "ranks did not all get ready");
    // SAFETY: sending a signal to a process we started; no memory effects.
    unsafe { libc::kill(pids[&1], libc::SIGKILL) };
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let r = finish(child, Duration::from_secs(40));
    assert_eq!(r.code, 128 + 9, "{r:?}");
    assert!(
        r.stderr.contains("rank 1 was killed by signal 9 (SIGKILL)"),
        "{}",
        r.stderr
    );
    assert!(shm_leftovers(&job).is_empty(), "{:?}", shm_leftovers(&job));
}

/// A rank that exits with 0 without finishing is the one blamed (the
/// bootstrap saw its connection close before its goodbye), not a rank that
/// merely noticed; the job fails.
#[test]
fn a_rank_exiting_0_before_finish_is_blamed() {
    let job = job_id("exit0");
    let r = faults("exit0", "1", &job, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("splitrt-run: rank 1 exited (code 0) before finishing the job"),
        "{}",
        r.stderr
    );
}

/// When one rank fails, every survivor's last error line is relayed (they
/// get a moment to end on their own before SIGTERM).
#[test]
fn survivors_last_lines_are_kept() {
    // Without a backtrace the failing rank exits at once, which is when the
    // old launcher cut the survivors off; and a rank that simply exits.
    for (mode, code) in [("panic", 101), ("exit", 3), ("panic", 101), ("exit", 3)] {
        let job = job_id("lastwords");
        let r = faults(mode, "2", &job, &[("RUST_BACKTRACE", "0")]);
        assert_eq!(r.code, code, "{r:?}");
        for rank in [0, 1, 3] {
            let line = format!("[{rank}] t_faults: rank {rank}: job aborted: rank 2 failed");
            assert!(
                r.stderr.contains(&line),
                "{mode}: missing {line:?}:\n{}",
                r.stderr
            );
        }
    }
}
