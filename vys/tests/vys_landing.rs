//! `Consumer::recv_into`: valid spectra read by the consumer's thread
//! straight into rows the caller offers (what Python's `recv_batch`
//! uses). The rows hold only spectra that validated, exactly as
//! `Message::Valid` ones do (a producer lapping its consumer, local and
//! remote, digest or not), in the order `recv` gives, and a spectrum of
//! another size is handed back, not lost.
use splitrt_vys::checkable;
use splitrt_vys::consumer::{Consumer, ConsumerConfig, Message, Product};
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use splitrt_vys::signal::{DigestKind, SpectrumInfo};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x43; 32];

fn group(n: u16) -> SocketAddrV4 {
    let port = 30_000 + ((std::process::id() as u16 % 5_000) * 4 + n);
    SocketAddrV4::new(Ipv4Addr::new(239, 255, 83, n as u8 + 1), port)
}

const PRODUCT: ProductId = ProductId {
    stations: [1, 1],
    spectral_window: 0,
    stokes: 0,
};

/// Bytes the test writes in rows before each call: rows past the filled
/// ones must still hold it (or zeros, the first of them).
const UNTOUCHED: u8 = 0xab;

/// A producer lapping its consumer on a tiny ring, flat out, checkable,
/// taken by `recv_into` only: every filled row has exactly its spectrum's
/// content; the row after the last filled one is untouched or zeroed,
/// never a torn spectrum; every chosen spectrum has one outcome.
/// Returns (rows filled, of which landed by the consumer's thread,
/// verification failures).
fn lap(local: bool, digest: DigestKind, total: u64, n: u16) -> (u64, u64, u64) {
    let bytes = 512;
    let g = group(n);
    let mut pc = ProducerConfig::new(KEY, g, Ipv4Addr::LOCALHOST, bytes);
    pc.slots = 8;
    pc.spectra_per_signal = 4;
    pc.digest = digest;
    let mut p = Producer::new(pc).unwrap();
    let mut cc = ConsumerConfig::new(KEY, g, Ipv4Addr::LOCALHOST);
    cc.local_reads = local;
    cc.max_spectrum_bytes = bytes;
    cc.queue_len = 1 << 16;
    let c = Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let seen_w = seen.clone();
    let writer = std::thread::spawn(move || {
        let mut d = vec![0u8; bytes];
        for t in 1..=total {
            checkable::fill((PRODUCT.stations, 0, 0), t, &mut d);
            p.write(PRODUCT, &d, t).unwrap();
            if t % 65_536 == 0 {
                // now and then one read at rest, so some are valid
                // whatever the scheduling (see vys_stream.rs)
                p.flush().unwrap();
                let until = Instant::now() + Duration::from_secs(1);
                while seen_w.load(Ordering::Relaxed) < t && Instant::now() < until {
                    std::thread::yield_now();
                }
            }
        }
        p.flush().unwrap();
        p
    });
    let cap = 64;
    let mut rows = vec![0u8; cap * bytes];
    let mut spectra: Vec<(Arc<Product>, SpectrumInfo)> = Vec::new();
    let (mut filled, mut landed, mut overwritten) = (0u64, 0u64, 0u64);
    let t = Instant::now();
    let mut asked = false;
    let mut end = None;
    while end.is_none() {
        assert!(t.elapsed() < Duration::from_secs(120), "no END");
        if !asked && writer.is_finished() {
            c.shutdown();
            asked = true;
        }
        rows.fill(UNTOUCHED);
        spectra.clear();
        let got = c.recv_into(
            &mut rows,
            bytes,
            Duration::from_millis(100),
            &mut spectra,
            |m| match m {
                Message::VerificationFailure { info, .. } => {
                    seen.fetch_max(info.timestamp, Ordering::Relaxed);
                    overwritten += 1;
                }
                Message::End { stats, .. } => end = Some(stats),
                _ => {}
            },
        );
        assert_eq!(spectra.len(), got.rows);
        assert!(got.left.is_none(), "one size only");
        for (i, (_, info)) in spectra.iter().enumerate() {
            assert!(
                checkable::matches(
                    (PRODUCT.stations, 0, 0),
                    info.timestamp,
                    &rows[i * bytes..(i + 1) * bytes]
                ),
                "a torn spectrum in a filled row: t={} (local {local}, {digest:?})",
                info.timestamp
            );
            seen.fetch_max(info.timestamp, Ordering::Relaxed);
        }
        let rest = &rows[got.rows * bytes..];
        if let Some(first) = rest.get(..bytes) {
            assert!(
                first.iter().all(|&b| b == UNTOUCHED) || first.iter().all(|&b| b == 0),
                "the first free row holds bytes of a failed read"
            );
            assert!(rest[bytes..].iter().all(|&b| b == UNTOUCHED));
        }
        filled += got.rows as u64;
        landed += (got.rows - got.copied) as u64;
    }
    let stats = end.unwrap();
    let written = writer.join().unwrap().stats().spectra;
    println!(
        "lapping into rows, local {local} {digest:?}: written {written}, chosen {}, rows filled \
         {filled} (landed {landed}), overwritten {overwritten}, starved {}",
        stats.chosen, stats.starved
    );
    assert_eq!(filled, stats.valid);
    assert_eq!(overwritten, stats.verification_failures);
    assert_eq!(stats.queue_dropped, 0, "{stats:?}");
    assert_eq!(
        stats.chosen,
        stats.valid + stats.verification_failures + stats.read_failures + stats.starved,
        "{stats:?}"
    );
    assert_eq!(stats.read_failures, 0, "{stats:?}");
    (filled, landed, overwritten)
}

#[test]
fn lapping_producer_rows_hold_no_torn_spectrum_local_digest_none() {
    let (filled, landed, overwritten) = lap(true, DigestKind::None, 1_000_000, 1);
    assert!(filled > 0 && overwritten > 0, "{filled} {overwritten}");
    assert!(landed > 0, "no spectrum landed straight in a row");
}

#[test]
fn lapping_producer_rows_hold_no_torn_spectrum_local_crc32c() {
    let (filled, landed, overwritten) = lap(true, DigestKind::Crc32c, 1_000_000, 2);
    assert!(filled > 0 && overwritten > 0, "{filled} {overwritten}");
    assert!(landed > 0, "no spectrum landed straight in a row");
}

#[test]
fn lapping_producer_rows_hold_no_torn_spectrum_remote_digest_none() {
    let (filled, _, overwritten) = lap(false, DigestKind::None, 500_000, 3);
    assert!(filled > 0 && overwritten > 0, "{filled} {overwritten}");
}

/// Write checkable spectra `from..to` of 8 KiB (timestamp = number).
fn write(p: &mut Producer, from: u64, to: u64) {
    let mut d = vec![0u8; 8192];
    for t in from..to {
        checkable::fill((PRODUCT.stations, 0, 0), t, &mut d);
        p.write(PRODUCT, &d, t).unwrap();
    }
    p.flush().unwrap();
}

/// Check the filled rows against their records; their timestamps to `got`.
fn check(
    rows: &[u8],
    bytes: usize,
    spectra: &mut Vec<(Arc<Product>, SpectrumInfo)>,
    got: &mut Vec<u64>,
) {
    for (i, (_, info)) in spectra.drain(..).enumerate() {
        assert!(checkable::matches(
            (PRODUCT.stations, 0, 0),
            info.timestamp,
            &rows[i * bytes..(i + 1) * bytes]
        ));
        got.push(info.timestamp);
    }
}

/// Spectra queued before the rows were offered come first, and rows
/// taken in several calls (single messages in between) give every
/// spectrum once, in the order written; a spectrum of another size comes
/// back as `left`; no whole row: nothing taken; the end message ends it.
#[test]
fn rows_keep_the_order_of_recv_and_another_size_is_handed_back() {
    let bytes = 8192;
    let g = group(0);
    let mut pc = ProducerConfig::new(KEY, g, Ipv4Addr::LOCALHOST, bytes);
    pc.slots = 8192;
    pc.spectra_per_signal = 8;
    pc.digest = DigestKind::Crc32c;
    let mut p = Producer::new(pc).unwrap();
    let mut small = Producer::new(ProducerConfig::new(KEY, g, Ipv4Addr::LOCALHOST, 512)).unwrap();
    let c = Consumer::start(
        ConsumerConfig::new(KEY, g, Ipv4Addr::LOCALHOST),
        |_, _, pass| pass.fill(true),
    )
    .unwrap();
    let total = 3000u64;
    // the first 1000 queue in pool buffers (no rows offered yet)
    write(&mut p, 0, 1000);
    let until = Instant::now() + Duration::from_secs(10);
    while c.stats().valid < 1000 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(c.stats().valid, 1000);
    let mut got: Vec<u64> = Vec::new();
    // a few one at a time
    for _ in 0..10 {
        match c.recv(Duration::from_secs(5)) {
            Some(Message::Valid(s)) => got.push(s.info.timestamp),
            other => panic!("{other:?}"),
        }
    }
    let mut rows = vec![0u8; 700 * bytes];
    let mut spectra = Vec::new();
    let (mut copied, mut landed) = (0, 0);
    // the rest written meanwhile, paced, so most arrive while rows are
    // on offer
    let writer = std::thread::spawn(move || {
        for k in 0..20 {
            std::thread::sleep(Duration::from_millis(10));
            write(&mut p, 1000 + k * 100, 1000 + (k + 1) * 100);
        }
        p
    });
    let t = Instant::now();
    while (got.len() as u64) < total {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{} of {total}",
            got.len()
        );
        let l = c.recv_into(
            &mut rows,
            bytes,
            Duration::from_secs(1),
            &mut spectra,
            |m| panic!("{m}"),
        );
        check(&rows, bytes, &mut spectra, &mut got);
        copied += l.copied;
        landed += l.rows - l.copied;
    }
    let mut p = writer.join().unwrap();
    assert_eq!(
        got,
        (0..total).collect::<Vec<_>>(),
        "every spectrum once, in order"
    );
    assert!(copied >= 990, "the queued ones copied: {copied}");
    assert!(landed > 0, "none landed straight in a row");
    println!("rows: {copied} copied from the queue, {landed} landed");
    // another size: handed back, then the rows go on
    small.write(PRODUCT, &[7u8; 512], 5).unwrap();
    small.flush().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while c.stats().valid < total + 1 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    write(&mut p, total, total + 1);
    let l = c.recv_into(
        &mut rows,
        bytes,
        Duration::from_secs(5),
        &mut spectra,
        |m| panic!("{m}"),
    );
    assert_eq!(l.rows, 0);
    let s = l.left.expect("the 512 B spectrum handed back");
    assert_eq!((s.data().len(), s.info.timestamp), (512, 5));
    let l = c.recv_into(
        &mut rows,
        bytes,
        Duration::from_secs(5),
        &mut spectra,
        |m| panic!("{m}"),
    );
    assert_eq!(l.rows, 1);
    check(&rows, bytes, &mut spectra, &mut got);
    assert_eq!(got.last(), Some(&total));
    // no whole row: nothing taken
    let l = c.recv_into(
        &mut rows[..100],
        bytes,
        Duration::from_secs(1),
        &mut spectra,
        |m| panic!("{m}"),
    );
    assert_eq!((l.rows, l.left.is_none(), l.ended), (0, true, false));
    c.shutdown();
    let mut ended = false;
    let l = c.recv_into(
        &mut rows,
        bytes,
        Duration::from_secs(10),
        &mut spectra,
        |m| ended |= matches!(m, Message::End { .. }),
    );
    assert!(l.ended && ended);
}
