//! The `tracing` feature (`cargo build --features tracing --example tracing`,
//! then `cargo test --features tracing --test tracing`):
//! `examples/tracing.rs` prints the spans of sends, handlers, waits and
//! collectives with their fields, on shared memory and UDP.

mod common;
use common::*;

fn spans(env: &[(&str, &str)]) -> String {
    let r = run_job(2, &example("tracing"), &[], env, 60);
    r.ok();
    assert_eq!(
        r.stdout.matches("right), words from rank").count(),
        2,
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("WRONG"), "{}", r.stdout);
    r.stdout
}

/// Every kind of span, with the fields a reader filters on.
#[test]
fn spans_name_rank_peer_handler_and_bytes() {
    for fabric in ["shm", "udp"] {
        let out = spans(&[("SPLITRT_FABRIC", fabric), ("SPLITRT_RMA", "am")]);
        for rank in [0, 1] {
            let peer = 1 - rank;
            let send = format!("am.send{{rank={rank} peer={peer} handler=");
            assert!(out.contains(&send), "{fabric}: no `{send}` span:\n{out}");
            let handler = format!("am.handler{{rank={rank} peer={peer} handler=");
            assert!(
                out.contains(&handler),
                "{fabric}: no `{handler}` span:\n{out}"
            );
            // the put's 64 words travel in one request of 512 bytes
            assert!(
                out.contains(&format!("am.send{{rank={rank} peer={peer} handler="))
                    && out
                        .lines()
                        .any(|l| l.contains(&format!("am.send{{rank={rank} "))
                            && l.contains("bytes=512")),
                "{fabric}: no 512-byte send from rank {rank}:\n{out}"
            );
            let wait = format!("am.wait{{rank={rank}}}");
            assert!(out.contains(&wait), "{fabric}: no `{wait}` span:\n{out}");
            let coll = format!("pgas.collective{{rank={rank} op=\"Pgas::allreduce\"");
            assert!(out.contains(&coll), "{fabric}: no `{coll}` span:\n{out}");
        }
    }
}
