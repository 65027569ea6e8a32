//! async_get: `async fn` code issuing split-phase gets and awaiting them
//! under tokio, with a progress task that sleeps on the rank's doorbell
//! through `tokio::io::unix::AsyncFd` (no thread spins).
//!
//!     splitrt-run -n 4 --rma am target/release/examples/async_get
//!
//! Every rank fills its part of a symmetric array, then gathers every
//! rank's part with one get per rank, all in flight at once, and checks
//! them. Over `--rma am` (or UDP) each get is a request answered by the
//! owner's handler, so the awaiting task depends on progress: the
//! progress task arms the doorbell, polls the endpoint (running the reply
//! handlers, which wake the gets they complete) and waits until the
//! doorbell's descriptor is readable. The gets would also complete
//! without it (each pending get registers with the rank's doorbell
//! bridge, see `docs/safety.md` ("Futures")); the descriptor is how an
//! executor's reactor waits on splitrt along with its sockets and timers.

use splitrt::pgas::{Pgas, SymArray};
use splitrt::{Endpoint, Error};
use std::os::fd::OwnedFd;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

const N: usize = 1 << 14;

fn value(rank: usize, i: usize) -> u64 {
    (rank as u64) << 40 | i as u64
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::io(what, e)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("async_get: {e}");
        std::process::exit(1);
    }
}

async fn run() -> splitrt::Result<()> {
    let pg = Pgas::attach()?;
    let (me, size) = (pg.rank(), pg.size());
    let a: SymArray<u64> = pg.alloc_sym(N)?;
    let mine: Vec<u64> = (0..N).map(|i| value(me, i)).collect();
    pg.write_slice(a.at(me, 0), &mine)?;
    pg.barrier()?;

    let ep = pg.endpoint().clone();
    let fd: OwnedFd = ep
        .doorbell_fd()?
        .try_clone_to_owned()
        .map_err(io("duplicating the doorbell descriptor"))?;
    // SAFETY: an OwnedFd's descriptor is valid, open and the same for the
    // AsyncFd's whole life (it owns it and closes it only at drop).
    let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
        .map_err(|e| Error::io("registering the doorbell with tokio", e.into_parts().1))?;

    let gather = async {
        // issue every get, then await them: all in flight at once
        let gets = (0..size)
            .map(|r| pg.get(a.at(r, 0), N))
            .collect::<splitrt::Result<Vec<_>>>()?;
        let mut bad = 0;
        for (r, g) in gets.into_iter().enumerate() {
            let part = g.await?;
            bad += (0..N).filter(|&i| part[i] != value(r, i)).count();
        }
        Ok::<_, Error>(bad)
    };
    let bad = tokio::select! {
        bad = gather => bad?,
        r = progress(&ep, &fd) => match r? {},
    };
    println!(
        "rank {me}: gathered {size} x {N} words by async gets, {}",
        if bad == 0 {
            "all right".to_string()
        } else {
            format!("{bad} wrong")
        }
    );
    pg.barrier()?;
    if bad != 0 {
        return Err(Error::usage(format!("{bad} words wrong")));
    }
    pg.finish()
}

/// Drive the endpoint forever: arm the doorbell, run what has arrived,
/// sleep until the doorbell's descriptor is readable.
async fn progress(
    ep: &Endpoint,
    fd: &AsyncFd<OwnedFd>,
) -> splitrt::Result<std::convert::Infallible> {
    loop {
        ep.arm_doorbell()?; // before polling: what arrives after the poll fires it
        ep.poll()?;
        let mut ready = fd.readable().await.map_err(io("waiting on the doorbell"))?;
        ep.clear_doorbell();
        ready.clear_ready();
    }
}
