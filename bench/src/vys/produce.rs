//! The producer side of a measurement (rank 0): one thread per producer
//! writes checkable spectra flat out, no pacing, until the consumer rank
//! says stop. The data is made before the clock starts (a few distinct
//! timestamps per product, so writing costs what vys costs, not what
//! computing the test pattern costs); the timestamps cycle through 1..=7
//! so a slot that is overwritten holds another (product, timestamp)'s
//! data whatever the ring's length (powers of two are never multiples of
//! 4 products x 7 timestamps).

use super::plan::Row;
use super::stream::Stream;
use splitrt::vys::checkable;
use splitrt::vys::producer::{Producer, ProducerConfig, ProductId};
use std::io;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Distinct timestamps (and data) per product.
const TIMESTAMPS: u64 = 7;
/// A producer never runs longer than this, told to stop or not.
const LONGEST: Duration = Duration::from_secs(60);

/// The spectra one producer writes: 4 products (one station pair, two
/// spectral windows, two stokes products), [`TIMESTAMPS`] of each.
struct Spectra {
    products: Vec<ProductId>,
    /// `data[product][timestamp - 1]`.
    data: Vec<Vec<Vec<u8>>>,
}

impl Spectra {
    /// The spectra of producer number `index` (station pair
    /// `[index, index + 1]`, so producers never share an identity).
    fn new(index: usize, size: usize) -> Spectra {
        let mut products = Vec::new();
        for spectral_window in 0..2 {
            for stokes in 0..2 {
                products.push(ProductId {
                    stations: [index as u16, index as u16 + 1],
                    spectral_window,
                    stokes,
                });
            }
        }
        let data = products
            .iter()
            .map(|p| {
                (1..=TIMESTAMPS)
                    .map(|t| {
                        let mut d = vec![0u8; size];
                        checkable::fill((p.stations, p.spectral_window, p.stokes), t, &mut d);
                        d
                    })
                    .collect()
            })
            .collect();
        Spectra { products, data }
    }
}

/// What one producer did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Written {
    /// Spectra written.
    pub spectra: u64,
    /// Seconds it wrote.
    pub secs: f64,
    /// Signal messages the network refused.
    pub signal_errors: u64,
}

/// The producers of a row, created (rings, sockets, serving threads) but
/// not writing yet.
pub struct Producers {
    made: Vec<(Producer, Spectra)>,
}

/// Create the row's producers on `group`.
pub fn create(row: &Row, stream: &Stream, group: SocketAddrV4) -> io::Result<Producers> {
    let mut made = Vec::new();
    for i in 0..row.setup.producers {
        let mut cfg = ProducerConfig::new(stream.key, group, stream.interface, row.size);
        cfg.slots = row.slots;
        cfg.digest = row.setup.digest;
        cfg.apply_settings(|k| std::env::var(k).ok())?;
        made.push((Producer::new(cfg)?, Spectra::new(i, row.size)));
    }
    Ok(Producers { made })
}

/// Producers writing in their threads.
pub struct Running {
    threads: Vec<JoinHandle<io::Result<(Producer, Written)>>>,
    stop: Arc<AtomicBool>,
}

impl Producers {
    /// Start every producer writing flat out.
    pub fn start(self) -> io::Result<Running> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (i, (p, s)) in self.made.into_iter().enumerate() {
            let st = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("vys-bench-producer-{i}"))
                    .spawn(move || write_flat_out(p, &s, &st))?,
            );
        }
        Ok(Running { threads, stop })
    }
}

fn write_flat_out(
    mut p: Producer,
    s: &Spectra,
    stop: &AtomicBool,
) -> io::Result<(Producer, Written)> {
    let t = Instant::now();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) && t.elapsed() < LONGEST {
        for k in 0..TIMESTAMPS as usize {
            for (product, data) in s.products.iter().zip(&s.data) {
                p.write(*product, &data[k], k as u64 + 1)?;
            }
            n += s.products.len() as u64;
        }
    }
    p.flush()?;
    let w = Written {
        spectra: n,
        secs: t.elapsed().as_secs_f64(),
        signal_errors: p.stats().signal_errors,
    };
    Ok((p, w))
}

impl Running {
    /// Stop writing; the producers stay alive (their rings mapped, their
    /// read servers serving) until dropped.
    pub fn stop(self) -> io::Result<(Vec<Producer>, Vec<Written>)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut ps = Vec::new();
        let mut ws = Vec::new();
        for t in self.threads {
            let (p, w) = t
                .join()
                .map_err(|_| io::Error::other("a producer thread panicked"))??;
            ps.push(p);
            ws.push(w);
        }
        Ok((ps, ws))
    }
}
