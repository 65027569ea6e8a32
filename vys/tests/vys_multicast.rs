//! vys signals over real UDP multicast on loopback: two consumers joined
//! to one group both get every signal a producer sends; another version,
//! another stream's key and garbage are dropped and counted by kind.
use splitrt_vys::signal::{DigestKind, Signal, SignalError, SpectrumInfo, SIGNAL_TAG};
use splitrt_vys::transport::{SignalReceiver, SignalSender};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

fn signal(seq: u64) -> Signal {
    Signal {
        digest: DigestKind::Xxh3,
        channels: 64,
        producer: 7,
        address: "127.0.0.1:5000".parse().unwrap(),
        stations: [1, 2],
        spectral_window: 3,
        stokes: 0,
        config: 9,
        spectrum_bytes: 512,
        instance: 1,
        started: 1,
        sequence: seq,
        description_epoch: 0,
        description: None,
        entries: vec![SpectrumInfo {
            offset: 0,
            timestamp: seq,
            seq,
            digest: 0,
        }],
    }
}

#[test]
fn every_consumer_gets_every_signal_and_drops_the_rest() {
    // a group and port of our own (pid-derived), on loopback only
    let port = 40_000 + (std::process::id() % 20_000) as u16;
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 255, 77, 1), port);
    let key = [3u8; 32];
    let lo = Ipv4Addr::LOCALHOST;
    let mut a = SignalReceiver::join(group, lo, key).expect("join a");
    let mut b = SignalReceiver::join(group, lo, key).expect("join b");
    let tx = SignalSender::new(group, lo, key).unwrap();
    let stranger = SignalSender::new(group, lo, [4u8; 32]).unwrap();
    let n = 200u64;
    for seq in 1..=n {
        tx.send(&signal(seq)).unwrap();
        if seq % 50 == 0 {
            stranger.send(&signal(seq)).unwrap(); // foreign
            let mut v = signal(seq).encode(&key);
            v[0] = 9; // another version, signed with the key
            let end = v.len() - SIGNAL_TAG;
            let t = blake3::keyed_hash(&key, &v[..end]);
            v[end..].copy_from_slice(&t.as_bytes()[..SIGNAL_TAG]);
            tx.send_bytes(&v).unwrap();
            tx.send_bytes(&[1, 0, 1, 2, 3]).unwrap(); // malformed
        }
    }
    for rx in [&mut a, &mut b] {
        let mut seqs = Vec::new();
        while let Some(r) = rx.recv(Duration::from_millis(300)) {
            match r {
                Ok(s) => seqs.push(s.entries[0].seq),
                Err(SignalError::Version { got }) => assert_eq!(got, 9),
                Err(_) => {}
            }
        }
        assert_eq!(seqs, (1..=n).collect::<Vec<_>>(), "every signal, in order");
        assert_eq!(
            (rx.dropped.version, rx.dropped.foreign, rx.dropped.malformed),
            (4, 4, 4)
        );
    }
}
