//! hello: every rank sends an Active Message to its right neighbour around
//! the ring and prints what it got back.
//!
//!     splitrt-run -n 4 target/release/examples/hello
//!     splitrt-run -n 4 target/release/examples/hello --spin 5   # keep the ring going 5 s
//!
//! `--spin S` prints a `ready` line (with the pid) and then keeps passing a
//! token around the ring for S seconds; the failure tests kill a rank then.

use splitrt::{EndpointBuilder, Kind, Payload};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    if let Err(e) = run() {
        eprintln!("hello: {e}");
        std::process::exit(1);
    }
}

fn run() -> splitrt::Result<()> {
    let spin: Option<f64> = match std::env::args().nth(1).as_deref() {
        Some("--spin") => Some(
            std::env::args()
                .nth(2)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| splitrt::Error::usage("--spin takes a number of seconds"))?,
        ),
        Some(other) => return Err(splitrt::Error::usage(format!("unknown argument {other}"))),
        None => None,
    };

    let greeted = Arc::new(AtomicU64::new(u64::MAX));
    let hops = Arc::new(AtomicU64::new(0));
    let mut b = EndpointBuilder::new();
    let g = greeted.clone();
    let hello_ack = b.reply("hello_ack", Kind::Short, 1, move |m| {
        g.store(m.arg(0), Ordering::Release);
    })?;
    let hello = b.request("hello", Kind::Medium, 0, move |tok, m| {
        println!(
            "rank got \"{}\" from rank {}",
            String::from_utf8_lossy(m.payload()),
            m.src()
        );
        let me = tok.src(); // reply with the sender's rank as we saw it
        tok.reply(hello_ack, &[me as u64], Payload::None)
            .expect("reply");
    })?;
    let h = hops.clone();
    let token = b.request("token", Kind::Short, 1, move |_tok, m| {
        h.store(m.arg(0), Ordering::Release);
    })?;
    let ep = b.attach()?;
    let (rank, size) = (ep.rank(), ep.size());
    let right = (rank + 1) % size;

    let text = format!("hello from rank {rank} of {size}");
    ep.request(right, hello, &[], Payload::Medium(text.as_bytes()))?;
    ep.wait_until(|| greeted.load(Ordering::Acquire) != u64::MAX)?;
    if greeted.load(Ordering::Acquire) != rank as u64 {
        return Err(splitrt::Error::usage(format!(
            "rank {rank}: wrong acknowledgement"
        )));
    }
    ep.barrier()?;

    if let Some(secs) = spin {
        println!("ready pid={}", std::process::id());
        // Pass a counter around the ring until rank 0 sees time is up and
        // sends the stop marker round once more.
        const STOP: u64 = u64::MAX;
        let end = Instant::now() + Duration::from_secs_f64(secs);
        let mut last = 0;
        if rank == 0 {
            ep.request(right, token, &[1], Payload::None)?;
        }
        loop {
            ep.wait_until(|| hops.load(Ordering::Acquire) > last)?;
            last = hops.load(Ordering::Acquire);
            if last == STOP {
                if right != 0 {
                    ep.request(right, token, &[STOP], Payload::None)?;
                }
                break;
            }
            let next = if rank == 0 && Instant::now() >= end {
                STOP
            } else {
                last + 1
            };
            ep.request(right, token, &[next], Payload::None)?;
            if next == STOP {
                break;
            }
        }
        if rank == 0 {
            println!("ring done after {last} hops");
        }
    }
    ep.finish()
}
