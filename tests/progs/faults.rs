//! Misbehaving ranks for the failure tests.
//!
//! Usage: t_faults MODE RANK
//!   panic RANK    that rank panics after start; the others wait forever
//!   exit RANK     that rank exits with code 3 after start; the others wait
//!   exit0 RANK    that rank exits with code 0 after start, without finishing
//!   mismatch RANK that rank registers one more handler than the others
//!   late RANK     that rank sleeps 30 s before joining the bootstrap
//!   hang          every rank waits forever (for the launcher's --timeout)
//!   compute RANK  every rank messages every rank, then that rank computes
//!                 for 3 s without polling while the others wait in a
//!                 barrier; exits 0 (a silent, busy rank is not dead)
//!   fill_shm RANK that rank fills /dev/shm with a file (run it in a
//!                 private mount namespace), then every rank allocates 3/4
//!                 of its segment, whose zeroing writes fresh pages
//! Every rank prints `ready` once it has started.

use splitrt::{EndpointBuilder, Kind};
use std::time::Duration;

fn main() {
    let mut a = std::env::args().skip(1);
    let mode = a.next().unwrap_or_default();
    let target: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(usize::MAX);
    // the rank however the job was launched (splitrt-run, srun, mpirun)
    let me = splitrt::runtime::job::JobInfo::from_env().map_or(0, |j| j.rank);
    if mode == "fill_shm" {
        fill_shm(me == target);
    }
    let mut b = EndpointBuilder::new();
    let noop = b.request("noop", Kind::Short, 0, |_tok, _m| {}).unwrap();
    if mode == "mismatch" && me == target {
        b.request("extra", Kind::Medium, 2, |_tok, _m| {}).unwrap();
    }
    if mode == "late" && me == target {
        std::thread::sleep(Duration::from_secs(30));
    }
    let ep = match b.attach() {
        Ok(ep) => ep,
        Err(e) => {
            eprintln!("t_faults: {e}");
            std::process::exit(1);
        }
    };
    println!("ready");
    match mode.as_str() {
        "panic" if me == target => panic!("rank {me} panics on purpose"),
        "exit" if me == target => std::process::exit(3),
        "exit0" if me == target => std::process::exit(0),
        "compute" => {
            let run = || -> splitrt::Result<()> {
                for peer in 0..ep.size() {
                    ep.request(peer, noop, &[], splitrt::Payload::None)?;
                }
                ep.barrier()?;
                if me == target {
                    std::thread::sleep(Duration::from_secs(3));
                }
                ep.barrier()?;
                ep.finish()
            };
            match run() {
                Ok(()) => {
                    println!("computed");
                    std::process::exit(0)
                }
                Err(e) => {
                    eprintln!("t_faults: {e}");
                    std::process::exit(1);
                }
            }
        }
        _ => {}
    }
    // Wait for something that never happens: only a peer failure (or the
    // launcher) ends this.
    match ep.wait_until(|| false) {
        Err(e) => {
            eprintln!("t_faults: {e}");
            std::process::exit(1);
        }
        Ok(()) => unreachable!(),
    }
}

/// The `fill_shm` mode (see the module docs).
fn fill_shm(filler: bool) -> ! {
    use std::io::Write;
    let run = || -> splitrt::Result<()> {
        let pg = splitrt::pgas::Pgas::attach()?;
        println!("ready");
        if filler {
            let path = format!("/dev/shm/t_faults-fill-{}", std::process::id());
            let mut f = std::fs::File::create(&path).expect("creating the filler");
            let chunk = vec![7u8; 1 << 20];
            let mut filled = 0;
            while filled < 1 << 14 && f.write_all(&chunk).and_then(|()| f.flush()).is_ok() {
                filled += 1;
            }
            println!("filled {filled} MiB");
        }
        pg.barrier()?;
        // zeroing the block writes pages never touched before
        let block = pg.alloc_sym::<u8>(pg.endpoint().segment_len() / 4 * 3)?;
        println!("allocated {} B", block.local().len());
        pg.finish()
    };
    match run() {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("t_faults: {e}");
            std::process::exit(1)
        }
    }
}
