//! Review 2, finding 1: under `SPLITRT_SPIN_ONLY=1` with the progress thread
//! running the handlers, a wait's back-off never gets slow; the handler
//! rounds the progress thread runs must still count as progress, so the
//! hang watch does not report (or, with `SPLITRT_HANG_ABORT=1`, fail) a wait
//! whose condition is moving.
//!
//! One test in this file: it sets the process environment before attaching
//! (a process joins one job once).

use splitrt_am::{EndpointBuilder, Kind, Payload};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn rv2fix_spin_only_progress_thread_ticks_are_progress() {
    std::env::set_var("SPLITRT_SPIN_ONLY", "1");
    std::env::set_var("SPLITRT_HANG_REPORT", "1");
    std::env::set_var("SPLITRT_HANG_ABORT", "1");
    std::env::set_var("SPLITRT_PROGRESS", "thread-only");
    let n = Arc::new(AtomicU64::new(0));
    let mut b = EndpointBuilder::new();
    let n2 = n.clone();
    let tick = b
        .request("tick", Kind::Short, 0, move |_tok, _m| {
            n2.fetch_add(1, Ordering::AcqRel);
        })
        .expect("register");
    let ep = b.attach().expect("attach");
    const TICKS: u64 = 60;
    std::thread::scope(|s| {
        let ep = &ep;
        s.spawn(move || {
            for _ in 0..TICKS {
                ep.request(0, tick, &[], Payload::None).expect("request");
                // paced on purpose: the ticks must span more than the
                // 1 s hang-report bound (this is the load, not a sync)
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        ep.wait_until_described(&|| "for ticks".into(), || {
            n.load(Ordering::Acquire) >= TICKS
        })
        .expect("the ticks are progress: no hang report");
    });
    assert_eq!(n.load(Ordering::Acquire), TICKS);
    ep.finish().expect("finish");
}
