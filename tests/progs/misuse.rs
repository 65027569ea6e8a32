//! API misuse that must be refused at the caller with a clear error, while
//! the job goes on unharmed.
//!
//! Usage: t_misuse MODE
//!   foreign_handle  a handler handle of another EndpointBuilder
//!   far_pointers    a global pointer to rank 2^32, and one that overflows
//!   second_attach   a second attach in the same process
//!   reserved_long   user Long payloads into splitrt's reserved ranges
//!   bad_peer        max_medium / max_long of a rank that does not exist
//!   other_thread    (run with SPLITRT_THREADS=single) a second thread's
//!                   request and poll are refused, naming the setting
//!   after_finish    every operation on a finished endpoint
//!   pgas_vs_finish  rank 0 in Pgas::barrier while the others finish
//!   raw_unknown_id  rank 1 plays a broken peer and sends rank 0 a packet
//!                   with an unregistered handler id straight through the
//!                   fabric: rank 0 is told, naming rank 1, and its own
//!                   collectives keep working
//! Every rank prints `misuse ok MODE` when every check passed.

use splitrt::pgas::{GlobalPtr, Pgas};
use splitrt::{EndpointBuilder, Error, ErrorKind, Kind, Payload, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn expect_err<T>(what: &str, r: Result<T>, needle: &str) -> Result<()> {
    match r {
        Err(e) if e.to_string().contains(needle) => Ok(()),
        Err(e) => Err(Error::usage(format!(
            "{what}: expected an error containing {needle:?}, got: {e}"
        ))),
        Ok(_) => Err(Error::usage(format!(
            "{what}: expected an error containing {needle:?}, but it succeeded"
        ))),
    }
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    match run(&mode) {
        Ok(()) => println!("misuse ok {mode}"),
        Err(e) => {
            eprintln!("t_misuse: {e}");
            std::process::exit(1);
        }
    }
}

fn run(mode: &str) -> Result<()> {
    match mode {
        "foreign_handle" => {
            let got = Arc::new(AtomicU64::new(0));
            let g = got.clone();
            let mut b = EndpointBuilder::new();
            let mine = b.request("mine", Kind::Short, 1, move |_t, m| {
                g.fetch_add(m.arg(0), Ordering::AcqRel);
            })?;
            let mut other = EndpointBuilder::new();
            let foreign = other.request("foreign", Kind::Short, 1, |_t, _m| {})?;
            let ep = b.attach()?;
            let peer = (ep.rank() + 1) % ep.size();
            expect_err(
                "foreign handle",
                ep.request(peer, foreign, &[1], Payload::None),
                "comes from another EndpointBuilder",
            )?;
            // the job goes on: a real message and a barrier
            ep.request(peer, mine, &[5], Payload::None)?;
            ep.wait_until(|| got.load(Ordering::Acquire) == 5)?;
            ep.barrier()?;
            ep.finish()
        }
        "far_pointers" => {
            let pg = Pgas::attach()?;
            let a = pg.alloc_sym::<u64>(4)?;
            let mine = pg.alloc_sym::<u64>(1)?;
            mine.local().set(0, 7);
            pg.barrier()?;
            let far: GlobalPtr<u64> = GlobalPtr::new(1 << 32, a.ptr(0).offset());
            expect_err("rank 2^32", pg.put(far, &[1]), "does not exist")?;
            let wrapped = a.ptr(0).add(usize::MAX / 4);
            expect_err("overflowing add", pg.put(wrapped, &[1]), "is outside the")?;
            pg.sync()?;
            pg.barrier()?;
            if mine.local().get(0) != 7 {
                return Err(Error::usage("a refused put changed rank memory"));
            }
            pg.finish()
        }
        "second_attach" => {
            let pg = Pgas::attach()?;
            expect_err(
                "second endpoint",
                EndpointBuilder::new().attach(),
                "already attached",
            )?;
            expect_err("second pgas", Pgas::attach(), "already attached")?;
            let mut x = [pg.rank() as u64];
            pg.allreduce(&mut x, splitrt::pgas::Op::Sum)?;
            let n = pg.size() as u64;
            if x[0] != n * (n - 1) / 2 {
                return Err(Error::usage("allreduce after the refused attach is wrong"));
            }
            pg.finish()
        }
        "reserved_long" => {
            let mut b = EndpointBuilder::new();
            let long = b.request("long", Kind::Long, 0, |_t, _m| {})?;
            let pg = Pgas::attach_with(b)?;
            let ep = pg.endpoint().clone();
            let peer = (pg.rank() + 1) % pg.size();
            let data = [0xffu8; 64];
            expect_err(
                "Long onto the stored-bytes counter",
                ep.request(
                    peer,
                    long,
                    &[],
                    Payload::Long {
                        data: &data,
                        offset: 0,
                    },
                ),
                "reserved",
            )?;
            expect_err(
                "Long onto the collective scratch block",
                ep.request(
                    peer,
                    long,
                    &[],
                    Payload::Long {
                        data: &data,
                        offset: 4096 + 8,
                    },
                ),
                "reserved",
            )?;
            let area = pg.alloc_sym::<u8>(64)?;
            ep.request(
                peer,
                long,
                &[],
                Payload::Long {
                    data: &data,
                    offset: area.ptr(0).offset(),
                },
            )?;
            pg.barrier()?;
            pg.finish()
        }
        "bad_peer" => {
            let ep = EndpointBuilder::new().attach()?;
            let n = ep.size();
            expect_err("max_medium", ep.max_medium(n), "does not exist")?;
            expect_err("max_long", ep.max_long(n + 5), "does not exist")?;
            ep.max_medium(n - 1)?;
            expect_err(
                "max_medium_unsplit peer",
                ep.max_medium_unsplit(n, 3),
                "does not exist",
            )?;
            expect_err(
                "max_medium_unsplit nargs",
                ep.max_medium_unsplit(n - 1, usize::MAX),
                "argument words",
            )?;
            expect_err(
                "max_medium_unsplit nargs",
                ep.max_medium_unsplit(n - 1, splitrt::MAX_ARGS + 1),
                "argument words",
            )?;
            ep.max_medium_unsplit(n - 1, splitrt::MAX_ARGS)?;
            ep.finish()
        }
        "other_thread" => {
            let got = Arc::new(AtomicU64::new(0));
            let g = got.clone();
            let mut b = EndpointBuilder::new();
            let h = b.request("h", Kind::Short, 1, move |_t, m| {
                g.fetch_add(m.arg(0), Ordering::AcqRel);
            })?;
            let ep = b.attach()?;
            let peer = (ep.rank() + 1) % ep.size();
            let other = ep.clone();
            std::thread::spawn(move || -> Result<()> {
                let single = "SPLITRT_THREADS=single";
                expect_err(
                    "request from another thread",
                    other.request(peer, h, &[1], Payload::None),
                    single,
                )?;
                expect_err("poll from another thread", other.poll(), single)
            })
            .join()
            .expect("thread ran")?;
            // the attaching thread goes on
            ep.request(peer, h, &[5], Payload::None)?;
            ep.wait_until(|| got.load(Ordering::Acquire) == 5)?;
            ep.barrier()?;
            ep.finish()
        }
        "after_finish" => {
            let mut b = EndpointBuilder::new();
            let h = b.request("h", Kind::Short, 0, |_t, _m| {})?;
            let ep = b.attach()?;
            let keep = ep.clone();
            ep.finish()?;
            expect_err("barrier", keep.barrier(), "has finished")?;
            expect_err(
                "request",
                keep.request(0, h, &[], Payload::None),
                "has finished",
            )?;
            expect_err("poll", keep.poll(), "has finished")?;
            expect_err("wait", keep.wait_until(|| false), "has finished")?;
            Ok(())
        }
        "pgas_vs_finish" => {
            let pg = Pgas::attach()?;
            let r = if pg.rank() == 0 {
                pg.barrier().and_then(|()| pg.finish())
            } else {
                pg.finish()
            };
            match r {
                Err(e)
                    if e.to_string().contains("collective mismatch")
                        && matches!(e.kind(), ErrorKind::Usage(_) | ErrorKind::PeerFailed(_)) =>
                {
                    Err(e)
                }
                Err(e) => Err(Error::usage(format!("unexpected error: {e}"))),
                Ok(()) => Err(Error::usage("a barrier matched the exit barrier")),
            }
        }
        "raw_unknown_id" => {
            use splitrt::runtime::fabric::{Channel, Fabric, Packet};
            let pg = Pgas::attach()?;
            let ep = pg.endpoint().clone();
            if pg.rank() == 1 {
                let pkt = Packet {
                    tag: 999,
                    words: &[],
                    payload: &[],
                    deposit: None,
                };
                // a raw packet, as a broken peer would send it: only the
                // test-doubles feature (this program's build) reaches the fabric
                let sent =
                    ep.raw_fabric_for_tests()
                        .try_send(0, Channel::Request, &pkt, &mut |_| Ok(()))?;
                if !sent {
                    return Err(Error::usage("no room for the raw packet"));
                }
            }
            let mut told = Vec::new();
            // the barrier may meet the bad packet; a barrier that returned
            // an error is completed by the next call
            for _ in 0..3 {
                match pg.barrier() {
                    Ok(()) => break,
                    Err(e) => told.push(e.to_string()),
                }
            }
            for _ in 0..100 {
                if let Err(e) = ep.poll() {
                    told.push(e.to_string());
                }
            }
            let expected = usize::from(pg.rank() == 0);
            if told.len() != expected
                || told
                    .iter()
                    .any(|t| !(t.contains("from rank 1") && t.contains("unknown handler id 999")))
            {
                return Err(Error::usage(format!(
                    "rank {} was told {told:?}",
                    pg.rank()
                )));
            }
            pg.barrier()?;
            let mut x = [1u64];
            pg.allreduce(&mut x, splitrt::pgas::Op::Sum)?;
            if x[0] != pg.size() as u64 {
                return Err(Error::usage("allreduce wrong after a broken peer's packet"));
            }
            pg.finish()
        }
        m => Err(Error::usage(format!("unknown mode {m}"))),
    }
}
