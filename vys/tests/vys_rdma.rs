//! vys reads by RDMA read over the verbs model (a named test double of RC
//! queue pairs; the real device path needs hardware).
//!
//! The reader as a component: a producer thread writes checkable spectra
//! into a tiny ring as fast as it can while a consumer reads what it
//! announced by ordered RDMA reads. Every spectrum taken as valid must be
//! exactly the one announced; the lapped ones are reported as overwritten.
//! Bounded in count and time. The end-to-end tests through the producer
//! and consumer APIs are in `vys_rdma_stream.rs`.

use splitrt_runtime::fabric::rdma::model::{ModelDevice, ModelNetwork};
use splitrt_vys::checkable::{fill, matches, Identity};
use splitrt_vys::rdma_export::{RingExport, RingOffer};
use splitrt_vys::rdma_read::RdmaReader;
use splitrt_vys::read_client::{Done, ReadResult};
use splitrt_vys::ring::{check_slot, slot_bytes, ReadOutcome, RingWriter, DATA_OFFSET};
use splitrt_vys::signal::{DigestKind, SpectrumInfo};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// A reader connected to `export` (one producer).
fn reader(
    net: &ModelNetwork,
    export: &mut RingExport<ModelDevice>,
    timeout: Duration,
) -> (RdmaReader<ModelDevice>, splitrt_vys::rdma_read::ProducerQp) {
    let mut r = RdmaReader::new(net.device("consumer"), 8, timeout);
    let (p, ep) = r.open(8).unwrap();
    let (_, offer) = export.accept(&ep).unwrap();
    // the offer travels as bytes
    let offer = RingOffer::decode(&offer.encode()).unwrap();
    r.connect(p, offer).unwrap();
    (r, p)
}

/// One read, waited for, checked; the data copied to `out`.
fn read_now(
    r: &mut RdmaReader<ModelDevice>,
    p: splitrt_vys::rdma_read::ProducerQp,
    info: &SpectrumInfo,
    bytes: usize,
    buf: &mut Option<Vec<u8>>,
    out: &mut [u8],
) -> ReadOutcome {
    let stride = slot_bytes(bytes);
    // SAFETY: the one buffer of this test, taken back and given again,
    // never freed while the reader lives.
    let id = unsafe { r.read(p, info.offset, stride, buf.take().unwrap()) }.unwrap();
    let mut done: Vec<Done> = Vec::new();
    let t = Instant::now();
    loop {
        r.progress(&mut done).unwrap();
        if let Some(d) = done.pop() {
            assert_eq!(d.id, id);
            let o = match d.result {
                ReadResult::Slot => check_slot(&d.buf[..stride], bytes, info, DigestKind::None),
                ReadResult::Failed(e) if e.contains("not a slot") => ReadOutcome::OutOfRing,
                other => panic!("{other:?}"),
            };
            if o == ReadOutcome::Valid {
                out.copy_from_slice(&d.buf[DATA_OFFSET..DATA_OFFSET + bytes]);
            }
            *buf = Some(d.buf);
            return o;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "read not done");
    }
}

const ID: Identity = ([1, 2], 3, 0);

#[test]
fn a_lapping_producer_never_yields_a_torn_spectrum() {
    let bytes = 2048;
    let slots = 4;
    let ring: Arc<Vec<AtomicU64>> = Arc::new(
        (0..slots * slot_bytes(bytes) / 8)
            .map(|_| AtomicU64::new(0))
            .collect(),
    );
    let net = ModelNetwork::new(21);
    // SAFETY: `export` is declared after `ring`, so dropped (deregistered)
    // before the ring's memory goes.
    let mut export = unsafe { RingExport::new(net.device("producer"), &ring) }.unwrap();
    // before the reader: it stays allocated while the reader lives
    let mut buf = Some(vec![0u8; slot_bytes(bytes)]);
    let (mut reader, p) = reader(&net, &mut export, Duration::from_secs(10));

    let (tx, rx) = mpsc::sync_channel::<SpectrumInfo>(64);
    // Every PACEd spectrum the writer waits until the reader has read it,
    // so some reads are valid however the two threads are scheduled.
    const PACE: u64 = 1024;
    let (ack_tx, ack_rx) = mpsc::channel::<()>();
    let stop = Arc::new(AtomicBool::new(false));
    let (r2, s2) = (ring.clone(), stop.clone());
    let writer = std::thread::spawn(move || {
        let mut w = RingWriter::new(&r2, bytes, slots, 1);
        let mut data = vec![0u8; bytes];
        let mut n = 0u64;
        while !s2.load(Ordering::Relaxed) && n < 2_000_000 {
            fill(ID, n, &mut data);
            let info = w.write(&data, n, DigestKind::None);
            if n.is_multiple_of(PACE) {
                if tx.send(info).is_err() || ack_rx.recv_timeout(Duration::from_secs(10)).is_err() {
                    break;
                }
            } else {
                // announce some; keep writing regardless (lapping the reader)
                let _ = tx.try_send(info);
            }
            n += 1;
        }
        n
    });
    let (mut valid, mut overwritten) = (0u64, 0u64);
    let mut out = vec![0u8; bytes];
    let start = Instant::now();
    while valid + overwritten < 200_000 && start.elapsed() < Duration::from_secs(60) {
        let Ok(info) = rx.recv_timeout(Duration::from_secs(5)) else {
            break;
        };
        match read_now(&mut reader, p, &info, bytes, &mut buf, &mut out) {
            ReadOutcome::Valid => {
                assert!(
                    matches(ID, info.timestamp, &out),
                    "spectrum {} taken as valid but torn",
                    info.timestamp
                );
                valid += 1;
            }
            ReadOutcome::Overwritten => overwritten += 1,
            other => panic!("{other:?} for {info:?}"),
        }
        if info.timestamp.is_multiple_of(PACE) {
            let _ = ack_tx.send(());
        }
    }
    stop.store(true, Ordering::Relaxed);
    drop(rx);
    drop(ack_tx);
    let written = writer.join().unwrap();
    assert!(valid > 100, "valid {valid}, overwritten {overwritten}");
    assert!(written > valid + overwritten);
    export.poll().unwrap();
    eprintln!("written {written}, valid {valid}, overwritten {overwritten}");
}

#[test]
fn places_outside_the_offered_ring_are_refused_before_any_read() {
    let bytes = 64;
    let ring: Vec<AtomicU64> = (0..2 * slot_bytes(bytes) / 8)
        .map(|_| AtomicU64::new(0))
        .collect();
    let net = ModelNetwork::new(3);
    // SAFETY: `export` is declared after `ring`, so dropped (deregistered)
    // before the ring's memory goes.
    let mut export = unsafe { RingExport::new(net.device("p"), &ring) }.unwrap();
    let mut buf = Some(vec![0u8; slot_bytes(bytes)]);
    let (mut reader, p) = reader(&net, &mut export, Duration::from_secs(5));
    let mut out = vec![0u8; bytes];
    for offset in [2 * slot_bytes(bytes) as u64, 4, u64::MAX - 7] {
        let info = SpectrumInfo {
            offset,
            timestamp: 0,
            seq: 1,
            digest: 0,
        };
        let r = read_now(&mut reader, p, &info, bytes, &mut buf, &mut out);
        assert_eq!(r, ReadOutcome::OutOfRing, "offset {offset}");
    }
    assert_eq!(net.stats().reads, 0, "nothing was posted");
    // a slot never written: head and tail do not match the announced seq
    let info = SpectrumInfo {
        offset: 0,
        timestamp: 0,
        seq: 7,
        digest: 0,
    };
    let r = read_now(&mut reader, p, &info, bytes, &mut buf, &mut out);
    assert_eq!(r, ReadOutcome::Overwritten);
    assert_eq!(net.stats().reads, 3, "tail, body, head");
    let offer = export.accept(&reader.open(1).unwrap().1).unwrap().1;
    // garbage offers are refused
    assert!(RingOffer::decode(&[0u8; 3]).is_none());
    let mut b = offer.encode();
    b[RingOffer::LEN - 20..RingOffer::LEN - 12].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(RingOffer::decode(&b).is_none(), "address + length overflow");
}

/// A read that never completes (the link is down): past the read timeout
/// the producer's queue pair is destroyed first, then the read fails and
/// its buffer comes back; when the link comes back nothing is written
/// into that buffer any more.
#[test]
fn a_read_that_never_completes_fails_and_its_buffer_is_never_written_later() {
    let bytes = 256;
    let ring: Vec<AtomicU64> = (0..4 * slot_bytes(bytes) / 8)
        .map(|_| AtomicU64::new(0x77))
        .collect();
    let net = ModelNetwork::new(5);
    // SAFETY: `export` is declared after `ring`, so dropped (deregistered)
    // before the ring's memory goes.
    let mut export = unsafe { RingExport::new(net.device("p"), &ring) }.unwrap();
    let buf = vec![0u8; slot_bytes(bytes)];
    let (mut reader, p) = reader(&net, &mut export, Duration::from_millis(100));
    assert_eq!(net.live_qps(), 2);
    net.hold(true);
    // SAFETY: `buf`'s allocation comes back in `d`, dropped only after
    // the reader at the end.
    let id = unsafe { reader.read(p, 0, slot_bytes(bytes), buf) }.unwrap();
    let mut done: Vec<Done> = Vec::new();
    let t = Instant::now();
    while done.is_empty() {
        reader.progress(&mut done).unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the read never failed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut d = done.pop().unwrap();
    assert_eq!(d.id, id);
    match &d.result {
        ReadResult::Failed(e) => assert!(e.contains("not completed within"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert!(t.elapsed() >= Duration::from_millis(100));
    assert_eq!(
        net.live_qps(),
        1,
        "the consumer's queue pair was destroyed first"
    );
    assert!(reader.failed(p).is_some());
    d.buf.fill(0xab);
    net.hold(false);
    for _ in 0..10 {
        reader.progress(&mut done).unwrap();
        export.poll().unwrap();
    }
    assert!(done.is_empty(), "a late completion was taken for a read");
    assert!(
        d.buf.iter().all(|&b| b == 0xab),
        "the buffer was written after the read failed"
    );
    assert_eq!(net.stats().reads, 0);
    // the buffer stays registered with the reader: the reader goes first
    drop(reader);
    drop(d);
}
