//! Small defects found in session 10 (issue 28), each reproduced here
//! before its fix: ranks as threads over the verbs model (the `test-doubles`
//! feature), as in `tests/verbs_model.rs`, so a rank can be made to fail in
//! one chosen place and every wait is bounded by the runner's limit.

mod common;
use common::verbs_model::{config, job, on_threads, unique};

use splitrt::pgas::{Cmp, GlobalPtr, Pgas};
use splitrt::runtime::config::{Config, RmaPath};
use splitrt::{EndpointBuilder, Error};
use std::sync::mpsc;
use std::time::Duration;

/// `size` PGAS ranks on `rma` over one verbs model, each running `prog`;
/// every rank must succeed within `limit`.
fn pgas_threads(
    tag: &str,
    size: usize,
    rma: RmaPath,
    limit: Duration,
    prog: impl Fn(Pgas) -> splitrt::Result<()> + Send + Sync + Clone + 'static,
) {
    let id = unique(tag);
    on_threads(size, 7, limit, move |r, dev| {
        let cfg = Config {
            rma,
            ..config(4 << 20, 16)
        };
        let pg =
            Pgas::attach_over_verbs_model(EndpointBuilder::new(), job(&id, r, size), cfg, dev)?;
        prog(pg)
    });
}

fn fail(why: String) -> Error {
    Error::usage(why)
}

/// Defect 1: rank 0's release of a world barrier (flat form: the AM
/// path) fails for one peer, rank 2. The error must name that rank, and
/// the retry (`barrier()` again) must finish the release: every rank
/// leaves the barrier and the next barriers run in step. (OLD: the loop
/// stopped at rank 2, so rank 3 was never released; the retry failed
/// with "barrier_notify twice without barrier_wait", and ranks 2 and 3
/// waited until the limit.)
#[test]
fn defects_a_failed_world_barrier_release_is_finished_by_the_retry() {
    pgas_threads(
        "defects-release",
        4,
        RmaPath::Am,
        Duration::from_secs(40),
        |pg| {
            pg.barrier()?;
            if pg.rank() == 0 {
                pg.fail_next_barrier_release_to(2);
                match pg.barrier() {
                    Err(e) if e.to_string().contains("rank 2") => {}
                    other => {
                        return Err(fail(format!(
                            "a release that could not be sent to rank 2 gave {other:?}, \
                             not an error naming rank 2"
                        )))
                    }
                }
                // the retry finishes that barrier's release
                pg.barrier()
                    .map_err(|e| fail(format!("the retried barrier: {e}")))?;
            } else {
                pg.barrier()?;
            }
            for k in 0..3 {
                pg.barrier()
                    .map_err(|e| fail(format!("barrier {k} after the retry: {e}")))?;
            }
            Ok(())
        },
    );
}

/// Defect 2: a blocking pointer-form vector wait
/// (`Pgas::wait_until_{all,any,some}_vector`) whose signal array another
/// thread frees while it waits ends with an error naming the rank ("not a
/// signal word"), as the futures do, rather than reading the freed words.
/// (OLD: the wait checked the pointers only when it started, then read the
/// freed words until the limit.)
///
/// The 200 ms before the free lets the waiter enter its wait; a waiter
/// that has not started by then finds the pointers already invalid, which
/// is the same error, so the pause decides only whether OLD shows the
/// defect, never the outcome of the fixed code.
#[test]
fn defects_a_blocking_pointer_vector_wait_sees_its_array_freed() {
    pgas_threads(
        "defects-sigvec",
        1,
        RmaPath::Native,
        Duration::from_secs(60),
        |pg| {
            type Wait = fn(&Pgas, &[GlobalPtr<u64>]) -> splitrt::Result<()>;
            let forms: [(&str, Wait); 3] = [
                ("all", |pg, w| {
                    pg.wait_until_all_vector(w, None, Cmp::Ge, &[1, 1])
                }),
                ("any", |pg, w| {
                    pg.wait_until_any_vector(w, None, Cmp::Ge, &[1, 1])
                        .map(drop)
                }),
                ("some", |pg, w| {
                    pg.wait_until_some_vector(w, Some(&[false, false]), Cmp::Ge, &[1, 1])
                        .map(drop)
                }),
            ];
            let me = pg.rank();
            for (name, wait) in forms {
                let sigs = pg.alloc_signals(2)?;
                let words = [sigs.at(me, 0), sigs.at(me, 1)];
                let (started, done) = (mpsc::channel(), mpsc::channel());
                let waiter = pg.clone();
                std::thread::spawn(move || {
                    let _ = started.0.send(());
                    let r = wait(&waiter, &words).map_err(|e| e.to_string());
                    let _ = done.0.send(r);
                });
                let _ = started.1.recv();
                std::thread::sleep(Duration::from_millis(200));
                pg.free_signals(sigs)?;
                match done.1.recv_timeout(Duration::from_secs(10)) {
                    Ok(Err(e)) if e.contains("not a signal word") && e.contains("rank 0") => {}
                    Ok(other) => {
                        return Err(fail(format!(
                            "{name}: a wait on a freed signal array gave {other:?}, not an \
                             error naming rank 0"
                        )))
                    }
                    Err(_) => {
                        return Err(fail(format!(
                            "{name}: a wait on a freed signal array still waits 10 s later \
                             (it reads the freed words)"
                        )))
                    }
                }
            }
            Ok(())
        },
    );
}

/// `Pgas::signal_wait_until` (one word named by a global pointer) while
/// another thread frees the word's array: as for the vector forms above,
/// the wait ends with an error naming the rank instead of reading the
/// freed word until the hang limit (or returning the value of a new array
/// placed at the same offset). The 200 ms pause only decides whether the
/// OLD code shows the defect; a waiter that starts late finds the pointer
/// already invalid, the same error.
#[test]
fn defects2_a_blocking_pointer_wait_until_sees_its_array_freed() {
    pgas_threads(
        "defects2-sigone",
        1,
        RmaPath::Native,
        Duration::from_secs(60),
        |pg| {
            let me = pg.rank();
            let sigs = pg.alloc_signals(2)?;
            let word = sigs.at(me, 0);
            let (started, done) = (mpsc::channel(), mpsc::channel());
            let waiter = pg.clone();
            std::thread::spawn(move || {
                let _ = started.0.send(());
                let r = waiter
                    .signal_wait_until(word, Cmp::Ge, 1)
                    .map_err(|e| e.to_string());
                let _ = done.0.send(r);
            });
            let _ = started.1.recv();
            std::thread::sleep(Duration::from_millis(200));
            pg.free_signals(sigs)?;
            match done.1.recv_timeout(Duration::from_secs(10)) {
                Ok(Err(e)) if e.contains("not a signal word") && e.contains("rank 0") => Ok(()),
                Ok(other) => Err(fail(format!(
                    "a wait on a freed signal word gave {other:?}, not an error naming rank 0"
                ))),
                Err(_) => Err(fail(
                    "a wait on a freed signal word still waits 10 s later (it reads the freed \
                     word)"
                        .into(),
                )),
            }
        },
    );
}
