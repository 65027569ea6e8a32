//! Incast: every rank but the last puts `MSG` bytes again and again into
//! its own slot of the last rank's array (`ROUNDS` times), then all agree
//! the transfers are complete; the last rank checks every slot holds its
//! sender's last message and prints the goodput (payload bytes into it
//! over the time from the first barrier to the last). For the UDP
//! congestion controller on a shaped link (docs/networking.md,
//! `tests/cluster.rs`).
//!
//! Usage: t_incast [ROUNDS] [MSG]    (exit 0 = every slot right)

use splitrt::pgas::Pgas;
use splitrt::Error;
use std::time::Instant;

fn pattern(sender: usize, round: usize, i: usize) -> u8 {
    (sender * 131 + round * 29 + i * 7 + (i >> 9)) as u8
}

fn main() {
    if let Err(e) = run() {
        eprintln!("t_incast: {e}");
        std::process::exit(1);
    }
}

fn run() -> splitrt::Result<()> {
    let mut a = std::env::args().skip(1);
    let rounds: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(16);
    let msg: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let pg = Pgas::attach()?;
    let (me, n) = (pg.rank(), pg.size());
    if n < 2 || rounds == 0 || msg == 0 {
        return Err(Error::usage(
            "t_incast needs 2 ranks or more, ROUNDS and MSG > 0",
        ));
    }
    let last = n - 1;
    let arr = pg.alloc_sym::<u8>((n - 1) * msg)?;
    let mut buf = vec![0u8; msg];
    pg.barrier()?;
    let t0 = Instant::now();
    if me != last {
        for r in 0..rounds {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = pattern(me, r, i);
            }
            pg.put(arr.at(last, me * msg), &buf)?;
            // remote completion before the buffer is reused is not needed
            // (put copies), but one message in flight per sender at most
            // keeps the test about the network, not about memory
            pg.sync()?;
        }
    }
    pg.barrier()?;
    let secs = t0.elapsed().as_secs_f64();
    if me == last {
        let local = arr.local().to_vec();
        for s in 0..last {
            let slot = &local[s * msg..(s + 1) * msg];
            if let Some(i) = (0..msg).find(|&i| slot[i] != pattern(s, rounds - 1, i)) {
                return Err(Error::usage(format!(
                    "sender {s}'s slot is wrong at byte {i}"
                )));
            }
        }
        let bytes = (last * rounds * msg) as f64;
        println!(
            "incast: {last} senders x {rounds} x {msg} B into rank {last} in {secs:.3} s: {:.1} MB/s goodput",
            bytes / secs / 1e6
        );
    }
    pg.barrier()?;
    Ok(())
}
