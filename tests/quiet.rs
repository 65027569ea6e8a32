//! Per-peer quiet (`Pgas::quiet_peer`, `tests/progs/quiet.rs`): it waits
//! for the puts to one rank only, and they are visible there when it
//! returns; over shared memory and loopback UDP, both RMA paths. The
//! same program checks that `try_request` to a rank that does not poll
//! is refused with the fabric's reason (`WouldBlock`).

mod common;
use common::*;

fn quiet(n: usize, mode: &str, env: &[(&str, &str)]) -> Run {
    let dir = std::env::temp_dir();
    let dir = dir.to_str().expect("a UTF-8 temp dir");
    run_job(n, &example("t_quiet"), &[mode, dir], env, 90)
}

/// On 2, 3 and 4 ranks (rank 2, when there is one, does not serve its
/// traffic until rank 0's quiet_peer(1) returned).
#[test]
fn quiet_peer_waits_for_one_peer_only_shm_and_udp() {
    for fabric in ["shm", "udp"] {
        for rma in ["am", "native"] {
            for n in [2, 3, 4] {
                let r = quiet(
                    n,
                    "quiet",
                    &[("SPLITRT_FABRIC", fabric), ("SPLITRT_RMA", rma)],
                );
                r.ok();
                assert_eq!(r.stdout.matches("quiet ok").count(), n, "{}", r.stdout);
            }
        }
    }
}

/// `quiet_peer` covers strided puts (many messages) and `put_signal`:
/// rank 1 finds the data (and the signal) in place right after rank 0's
/// `quiet_peer(1)` returned, with no other sync. On the AM path, over
/// shared memory and loopback UDP (and UDP's native path).
#[test]
fn fixes_quiet_peer_covers_strided_and_put_signal() {
    for (fabric, rma) in [("shm", "am"), ("udp", "am"), ("udp", "native")] {
        for mode in ["strided", "put_signal"] {
            let r = quiet(2, mode, &[("SPLITRT_FABRIC", fabric), ("SPLITRT_RMA", rma)]);
            assert!(
                r.stdout.matches("quiet ok").count() == 2,
                "{fabric} {rma} {mode}: {}\n{}",
                r.stdout,
                r.stderr
            );
        }
    }
}
