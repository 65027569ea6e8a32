//! vys_am: vys inside a splitrt job. Rank 0 is a producer whose signals go
//! by Active Message (not multicast) to every other rank; each other rank
//! runs a consumer, fed by its AM handler through the consumer's
//! injector, with a filter of its own (stokes product = rank % 2), reads
//! the spectra it chose from rank 0's ring and checks their content.
//!
//!     export SPLITRT_VYS_KEY=$(head -c 32 /dev/urandom | xxd -p -c 64)
//!     splitrt-run -n 3 target/release/examples/vys_am [INTEGRATIONS]
//!
//! Each consumer rank prints `rank R valid=N mismatched=M expected=E`.

use splitrt_am::{EndpointBuilder, Kind, Payload};
use splitrt_vys::checkable;
use splitrt_vys::consumer::{Consumer, ConsumerConfig, Message, SignalInjector};
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use splitrt_vys::stream_key;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const ANTENNAS: u16 = 3;
const STOKES: u16 = 2;

fn main() {
    if let Err(e) = run() {
        eprintln!("vys_am: {e}");
        std::process::exit(1);
    }
}

fn products() -> Vec<ProductId> {
    let mut v = Vec::new();
    for i in 0..ANTENNAS {
        for j in i..ANTENNAS {
            for stokes in 0..STOKES {
                v.push(ProductId {
                    stations: [i, j],
                    spectral_window: 0,
                    stokes,
                });
            }
        }
    }
    v
}

fn run() -> Result<(), String> {
    let integrations: u64 = match std::env::args().nth(1) {
        Some(s) => s
            .parse()
            .map_err(|_| format!("integrations: '{s}' is not a number"))?,
        None => 200,
    };
    let key = stream_key::from_file_or_env(None)?;
    let inject: Arc<OnceLock<SignalInjector>> = Arc::new(OnceLock::new());
    let mut b = EndpointBuilder::new();
    let inj = inject.clone();
    // a signal arrives as an Active Message and goes to the consumer
    let signal = b
        .request("vys_signal", Kind::Medium, 0, move |_tok, m| {
            if let Some(i) = inj.get() {
                i.inject(m.payload());
            }
        })
        .map_err(|e| e.to_string())?;
    let ep = b.attach().map_err(|e| e.to_string())?;
    let (me, n) = (ep.rank(), ep.size());
    let bytes = 4096;
    if me == 0 {
        let mut cfg = ProducerConfig::new(
            key,
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            Ipv4Addr::LOCALHOST,
            bytes,
        );
        cfg.group = None; // signals by Active Message only
        cfg.queue_signals = true;
        // room for every integration of the run (up to 1024): a consumer
        // descheduled for a while on a loaded host still finds every
        // spectrum (with a smaller ring it would be told `Overwritten`,
        // correctly, and the run's count would depend on the load)
        cfg.slots = (integrations as usize).clamp(64, 1024) * products().len();
        let mut p = Producer::new(cfg).map_err(|e| e.to_string())?;
        ep.barrier().map_err(|e| e.to_string())?; // consumers are ready
        let mut d = vec![0u8; bytes];
        for t in 1..=integrations {
            for pr in products() {
                checkable::fill((pr.stations, 0, pr.stokes), t, &mut d);
                p.write(pr, &d, t).map_err(|e| e.to_string())?;
            }
            if t == integrations {
                p.flush().map_err(|e| e.to_string())?;
            }
            for s in p.take_signals() {
                for r in 1..n {
                    ep.request(r, signal, &[], Payload::Medium(&s))
                        .map_err(|e| e.to_string())?;
                }
            }
            // one integration per millisecond: the consumers keep up
            let until = Instant::now() + Duration::from_millis(1);
            while Instant::now() < until {
                ep.poll().map_err(|e| e.to_string())?;
                std::thread::yield_now();
            }
        }
        ep.barrier().map_err(|e| e.to_string())?; // all signals sent
        ep.barrier().map_err(|e| e.to_string())?; // all consumers done reading
        drop(p);
    } else {
        let mine = (me % 2) as u16;
        let c = Consumer::start(ConsumerConfig::without_multicast(key), move |p, _, pass| {
            pass.fill(p.stokes == mine)
        })
        .map_err(|e| e.to_string())?;
        let _ = inject.set(c.injector());
        ep.barrier().map_err(|e| e.to_string())?;
        let expected = integrations * products().iter().filter(|p| p.stokes == mine).count() as u64;
        let (mut valid, mut mismatched, mut other) = (0u64, 0u64, 0u64);
        let mut take = |m: Message, valid: &mut u64| match m {
            Message::Valid(s) => {
                let p = &s.product;
                if !checkable::matches((p.stations, 0, p.stokes), s.info.timestamp, s.data())
                    || p.stokes != mine
                {
                    mismatched += 1;
                }
                *valid += 1;
            }
            m => {
                other += 1;
                eprintln!("rank {me}: {m}");
            }
        };
        // take messages until every chosen spectrum is here (bounded)
        let t = Instant::now();
        while valid < expected && t.elapsed() < Duration::from_secs(30) {
            ep.poll().map_err(|e| e.to_string())?;
            while let Some(m) = c.try_recv() {
                take(m, &mut valid);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        ep.barrier().map_err(|e| e.to_string())?;
        c.shutdown();
        while let Some(m) = c.recv(Duration::from_secs(5)) {
            if matches!(m, Message::End { .. }) {
                break;
            }
            take(m, &mut valid);
        }
        println!(
            "rank {me} valid={valid} mismatched={mismatched} expected={expected} other={other}"
        );
        ep.barrier().map_err(|e| e.to_string())?;
    }
    ep.finish().map_err(|e| e.to_string())
}
