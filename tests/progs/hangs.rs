//! Ranks that wait for something that does not come, for the hang-report
//! and collective-mismatch tests.
//!
//! Usage: t_hangs MODE RANK [SECS]
//!   barrier RANK SECS   every rank enters Endpoint::barrier, RANK only after
//!                       sleeping SECS (it never does if SECS is 0)
//!   vs_finish RANK      RANK calls finish while the others call barrier
//! Every rank prints `done` when it finished cleanly.

use splitrt::{EndpointBuilder, Kind};
use std::time::Duration;

fn main() {
    let mut a = std::env::args().skip(1);
    let mode = a.next().unwrap_or_default();
    let target: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(usize::MAX);
    let secs: f64 = a.next().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let mut b = EndpointBuilder::new();
    b.request("noop", Kind::Short, 0, |_tok, _m| {}).unwrap();
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
