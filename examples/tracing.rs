//! tracing: the `tracing` feature's spans, printed by `tracing-subscriber`.
//!
//!     cargo build --release --features tracing --example tracing
//!     splitrt-run -n 2 --rma am target/release/examples/tracing
//!
//! Each rank installs a formatting subscriber that prints every span as it
//! closes, with its fields and its busy / idle time: `am.send` (rank, peer,
//! handler, bytes) for each request and reply, `am.handler` (rank, peer,
//! handler, bytes) around each handler, `am.wait` (rank) around each wait
//! and `pgas.collective` (rank, op) around each collective. Over `--rma am`
//! (or UDP) a put is a request with its reply, so sends and handlers show;
//! on the native shared-memory path a put is a copy and only the waits and
//! collectives do. Without the feature splitrt has no probes at all.
//!
//! A real program would install the subscriber it already uses (a JSON
//! layer, OpenTelemetry, `tracing-chrome`) and filter by level: sends and
//! handlers are `TRACE`, waits and collectives `DEBUG`.

use splitrt::pgas::{Op, Pgas, SymArray};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::FmtSpan;

fn main() {
    if let Err(e) = run() {
        eprintln!("tracing: {e}");
        std::process::exit(1);
    }
}

fn run() -> splitrt::Result<()> {
    tracing_subscriber::fmt()
        .with_max_level(LevelFilter::TRACE)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(std::io::stdout)
        .init();
    let pg = Pgas::attach()?;
    let (me, size) = (pg.rank(), pg.size());
    let a: SymArray<u64> = pg.alloc_sym(64)?;
    // one put of 64 words to the right neighbour, made visible by sync
    let words: Vec<u64> = (0..64).map(|i| (me * 1000 + i) as u64).collect();
    pg.put(a.at((me + 1) % size, 0), &words)?;
    pg.sync()?;
    let mut total = [me as u64];
    pg.allreduce(&mut total, Op::Sum)?;
    pg.barrier()?;
    let left = (me + size - 1) % size;
    let mut got = [0u64; 64];
    pg.read_slice(a.at(me, 0), &mut got)?;
    let ok = got
        .iter()
        .enumerate()
        .all(|(i, &w)| w == (left * 1000 + i) as u64);
    println!(
        "rank {me}: sum of ranks {} ({}), words from rank {left} {}",
        total[0],
        if total[0] == (size * (size - 1) / 2) as u64 {
            "right"
        } else {
            "WRONG"
        },
        if ok { "right" } else { "WRONG" }
    );
    pg.finish()
}
