//! Ranks that wait for something that does not come, for the hang-report
//! and collective-mismatch tests.
//!
//! Usage: t_hangs MODE RANK [SECS]
//!   barrier RANK SECS   every rank enters Endpoint::barrier, RANK only after
//!                       sleeping SECS (it never does if SECS is 0)
//!   vs_finish RANK      RANK calls finish while the others call barrier
//!   stuck_handler RANK  every other rank asks RANK for an answer whose
//!                       handler never returns
//!   allreduce RANK      every rank but RANK calls Pgas::allreduce
//!   ask_finishing RANK  RANK pokes every other rank, then calls finish;
//!                       each other rank, once poked, asks RANK for an
//!                       answer (its handler runs during RANK's finish) and
//!                       fails if none comes within 10 s
//! Every rank prints `done` when it finished cleanly.

use splitrt::{EndpointBuilder, Kind};
use std::time::Duration;

fn mode_is_stuck() -> bool {
    std::env::args().nth(1).as_deref() == Some("stuck_handler")
}

fn main() {
    let mut a = std::env::args().skip(1);
    let mode = a.next().unwrap_or_default();
    let target: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(usize::MAX);
    let secs: f64 = a.next().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let mut b = EndpointBuilder::new();
    let poked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let p = poked.clone();
    let noop = b
        .request("noop", Kind::Short, 0, move |_tok, _m| {
            p.store(true, std::sync::atomic::Ordering::Release)
        })
        .unwrap();
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let a = answered.clone();
    let answer = b
        .reply("answer", Kind::Short, 0, move |_m| {
            a.store(true, std::sync::atomic::Ordering::Release)
        })
        .unwrap();
    let ask = b
        .request("ask", Kind::Short, 0, move |tok, _m| {
            if mode_is_stuck() {
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
            tok.reply(answer, &[], splitrt::Payload::None)
                .expect("reply");
        })
        .unwrap();
    if mode == "allreduce" {
        let r = (|| -> splitrt::Result<()> {
            let pg = splitrt::pgas::Pgas::attach_with(b)?;
            if pg.rank() == target {
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
            let mut x = [1u64];
            pg.allreduce(&mut x, splitrt::pgas::Op::Sum)?;
            pg.finish()
        })();
        if let Err(e) = r {
            eprintln!("t_hangs: {e}");
            std::process::exit(1);
        }
        println!("done");
        return;
    }
    let run = || -> splitrt::Result<()> {
        let ep = b.attach()?;
        let me = ep.rank();
        match mode.as_str() {
            "barrier" => {
                if me == target {
                    if secs == 0.0 {
                        // never arrives, but stays alive
                        loop {
                            std::thread::sleep(Duration::from_secs(1));
                        }
                    }
                    std::thread::sleep(Duration::from_secs_f64(secs));
                }
                ep.barrier()?;
            }
            "vs_finish" if me != target => ep.barrier()?,
            "vs_finish" => {}
            "stuck_handler" if me != target => {
                ep.request(target, ask, &[], splitrt::Payload::None)?;
                ep.wait_until(|| answered.load(std::sync::atomic::Ordering::Acquire))?;
            }
            "stuck_handler" => ep.wait_until(|| false)?,
            // Nothing polls between the pokes and finish, so the asks can
            // only be handled inside finish.
            "ask_finishing" if me == target => {
                for peer in (0..ep.size()).filter(|&p| p != me) {
                    ep.request(peer, noop, &[], splitrt::Payload::None)?;
                }
            }
            "ask_finishing" => {
                ep.wait_until(|| poked.load(std::sync::atomic::Ordering::Acquire))?;
                ep.request(target, ask, &[], splitrt::Payload::None)?;
                let give_up = std::time::Instant::now() + Duration::from_secs(10);
                while !answered.load(std::sync::atomic::Ordering::Acquire) {
                    if std::time::Instant::now() > give_up {
                        return Err(splitrt::Error::usage(format!(
                            "rank {target}, in finish, did not answer within 10 s"
                        )));
                    }
                    ep.poll()?;
                    std::thread::yield_now();
                }
            }
            m => return Err(splitrt::Error::usage(format!("unknown mode {m}"))),
        }
        ep.finish()?;
        println!("done");
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("t_hangs: {e}");
        std::process::exit(1);
    }
}
