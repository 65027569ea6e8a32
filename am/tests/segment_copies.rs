//! Review of h14-bounce, finding 2: a Medium sent from this rank's segment
//! (`Payload::FromSegment`) over a fabric that frames no segment source
//! itself (shm) is copied once per send, however many tries back-pressure
//! costs (it was copied again on every retry), and carries the bytes as
//! they were at the call even when a handler run while it waits overwrites
//! them (review of session 14).
//!
//! One test in this file: a 1-rank job on shared memory (a process joins
//! one job once).

use splitrt_am::{EndpointBuilder, Kind, Payload};
use splitrt_runtime::fabric::{bounce_copies, SegmentBytes};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn rvbounce2_a_blocked_segment_send_copies_once() {
    std::env::set_var("SPLITRT_PROGRESS", "poll");
    // shared memory whatever the caller's environment says (a fabric that
    // frames segment sources itself, UDP, makes no copy to count)
    std::env::set_var(splitrt_runtime::config::ENV_FABRIC, "shm");
    let got = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    // the segment's base and the payload's length, for the handler that
    // overwrites the source bytes (set once attached)
    let base = Arc::new(AtomicPtr::new(std::ptr::null_mut::<u8>()));
    let want = Arc::new(AtomicUsize::new(0));
    let mut b = EndpointBuilder::new();
    let (g, bd, bs, w) = (got.clone(), bad.clone(), base.clone(), want.clone());
    let sink = b
        .request("sink", Kind::Medium, 0, move |_tok, m| {
            let p = m.payload();
            let n = w.load(Ordering::Acquire);
            if p.len() != n || !p.iter().all(|&x| x == 0x5a) {
                bd.fetch_add(1, Ordering::AcqRel);
            }
            if g.fetch_add(1, Ordering::AcqRel) == 0 {
                // The first handler to run overwrites the source bytes
                // while the blocked send below still waits for room: off
                // UDP that send carries the bytes as they were at the call
                // (its one copy), so every delivery must still read 0x5a.
                let at = bs.load(Ordering::Acquire);
                // SAFETY: `at` is this rank's segment base, mapped while
                // the endpoint lives (it runs this handler); the job has
                // one thread and `n` is inside the segment (checked when
                // the sends below were built); no reference to these bytes
                // is held anywhere.
                unsafe { std::ptr::write_bytes(at, 0, n) };
            }
        })
        .expect("register");
    let ep = b.attach().expect("attach");
    // under the 4 KiB after which large sends serve their own traffic
    let len = ep.max_medium(0).expect("max").min(2000);
    ep.write_segment(0, &vec![0x5a; len]).expect("fill");
    let seg = ep.rma().local_segment();
    base.store(seg.base(), Ordering::Release);
    want.store(len, Ordering::Release);
    // SAFETY: `ep` keeps its segment mapped for the whole test; nothing
    // holds a `&mut` to these bytes.
    let src = unsafe { SegmentBytes::new(seg, 0, len) }.expect("inside");
    // fill the (own) queue: nothing polls in between, so sends stop at a
    // bounded count with back-pressure
    let mut accepted = 0u64;
    loop {
        assert!(accepted < 100_000, "the queue never filled");
        if ep
            .try_request(0, sink, &[], Payload::FromSegment(src))
            .expect("try_request")
            .is_err()
        {
            break;
        }
        accepted += 1;
    }
    assert_eq!(got.load(Ordering::Acquire), 0, "nothing ran yet");
    // the queue is full: this send waits (serving the queue) and retries
    let before = bounce_copies();
    ep.request(0, sink, &[], Payload::FromSegment(src))
        .expect("request");
    let copies = bounce_copies() - before;
    assert!(
        got.load(Ordering::Acquire) > 0,
        "the send had to wait for handlers"
    );
    assert_eq!(copies, 1, "one copy for all the tries");
    // every send's handler runs (bounded: a lost message fails here)
    let t0 = std::time::Instant::now();
    while got.load(Ordering::Acquire) < accepted + 1 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "{} of {} handlers ran in 10 s",
            got.load(Ordering::Acquire),
            accepted + 1
        );
        ep.poll().expect("poll");
    }
    assert_eq!(
        bad.load(Ordering::Acquire),
        0,
        "a delivery of the wrong length or of bytes written after its call"
    );
    ep.finish().expect("finish");
}
