//! vys reads by RDMA read over the verbs model (a named test double of RC
//! queue pairs; the real device path needs hardware): a producer thread
//! writes checkable spectra into a tiny ring as fast as it can while a
//! consumer reads what it announced by ordered RDMA reads. Every spectrum
//! taken as valid must be exactly the one announced; the lapped ones are
//! reported as overwritten. Bounded in count and time.

use splitrt_pgas::vys::checkable::{fill, matches, Identity};
use splitrt_pgas::vys::rdma_read::{RdmaRingReader, RingExport, RingOffer};
use splitrt_pgas::vys::ring::{slot_bytes, ReadOutcome, RingWriter};
use splitrt_pgas::vys::signal::{DigestKind, SpectrumInfo};
use splitrt_runtime::fabric::rdma::model::ModelNetwork;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

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
    let mut export = RingExport::new(net.device("producer"), &ring).unwrap();
    let mut reader =
        RdmaRingReader::new(net.device("consumer"), bytes, Duration::from_secs(10)).unwrap();
    let offer = export.accept(&reader.endpoint()).unwrap();
    // the offer travels as bytes
    let offer = RingOffer::decode(&offer.encode()).unwrap();
    reader.connect(offer).unwrap();

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
        match reader
            .read(&info, bytes, DigestKind::None, &mut out)
            .unwrap()
        {
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
    let mut export = RingExport::new(net.device("p"), &ring).unwrap();
    let mut reader = RdmaRingReader::new(net.device("c"), bytes, Duration::from_secs(5)).unwrap();
    let offer = export.accept(&reader.endpoint()).unwrap();
    reader.connect(offer).unwrap();
    let mut out = vec![0u8; bytes];
    for offset in [2 * slot_bytes(bytes) as u64, 4, u64::MAX - 7] {
        let info = SpectrumInfo {
            offset,
            timestamp: 0,
            seq: 1,
            digest: 0,
        };
        let r = reader
            .read(&info, bytes, DigestKind::None, &mut out)
            .unwrap();
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
    let r = reader
        .read(&info, bytes, DigestKind::None, &mut out)
        .unwrap();
    assert_eq!(r, ReadOutcome::Overwritten);
    assert_eq!(net.stats().reads, 3, "tail, body, head");
    // garbage offers are refused
    assert!(RingOffer::decode(&[0u8; 3]).is_none());
    let mut b = offer.encode();
    b[RingOffer::LEN - 20..RingOffer::LEN - 12].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(RingOffer::decode(&b).is_none(), "address + length overflow");
}
