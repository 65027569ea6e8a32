//! Loss reports are never the messages dropped (issue 27, part 2): an
//! application that does not take its messages during a burst still gets
//! every `DataBufferStarvation` and `SignalBufferStarvation` count, and
//! the `QueueAlert`s say how many messages of which kind were dropped.
use splitrt_vys::consumer::{Consumer, ConsumerConfig, ConsumerStats, DroppedKinds, Message};
use splitrt_vys::producer::{Producer, ProducerConfig, ProductId};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x63; 32];
const BYTES: usize = 1024;

/// What the application got once it looked, after the burst.
#[derive(Debug, Default)]
struct Got {
    valid: u64,
    starved: u64,
    signals_lost: u64,
    queue_dropped: u64,
    /// The alerts' kinds, summed.
    kinds: DroppedKinds,
    other: u64,
    end: Option<ConsumerStats>,
}

/// Bursts of one-spectrum signals (`signals` in all, 1000 at a time) into
/// a consumer whose application takes nothing until they are over: its
/// queue holds `queue_len` messages, and only 4 reads may be outstanding,
/// so most chosen spectra starve; the injector's queue may overflow too.
fn burst(signals: usize, queue_len: usize) -> Got {
    let mut pc = ProducerConfig::new(
        KEY,
        "239.255.63.1:1".parse().unwrap(),
        Ipv4Addr::LOCALHOST,
        BYTES,
    );
    pc.group = None;
    pc.queue_signals = true;
    pc.slots = signals + 64;
    pc.spectra_per_signal = 1;
    pc.heartbeat = None;
    let mut p = Producer::new(pc).unwrap();
    let mut cc = ConsumerConfig::without_multicast(KEY);
    cc.local_reads = false;
    cc.max_spectrum_bytes = BYTES;
    cc.max_outstanding_reads = 4;
    cc.queue_len = queue_len;
    let c = Consumer::start(cc, |_, _, pass| pass.fill(true)).unwrap();
    let inject = c.injector();
    let d = vec![7u8; BYTES];
    let product = ProductId {
        stations: [0, 1],
        spectral_window: 0,
        stokes: 0,
    };
    for t in 1..=signals as u64 {
        p.write(product, &d, t).unwrap();
    }
    p.flush().unwrap();
    let sent = p.take_signals();
    assert_eq!(sent.len(), signals);
    // in waves: each floods the injector's queue and the read slots, then
    // its reads finish (so spectra keep arriving for the full queue)
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut given = 0u64;
    for wave in sent.chunks(1000) {
        for s in wave {
            inject.inject(s);
        }
        given += wave.len() as u64;
        // the consumer took (or lost) every signal and finished its reads;
        // nobody looked at its queue
        loop {
            let s = c.stats();
            let settled = s.valid + s.verification_failures + s.read_failures + s.starved;
            if s.signals + s.signals_lost >= given && s.chosen == s.signals && settled == s.chosen {
                break;
            }
            assert!(Instant::now() < deadline, "signals not taken: {s:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    c.shutdown();
    let mut got = Got::default();
    while let Some(m) = c.recv(Duration::from_secs(30)) {
        match m {
            Message::Valid(_) => got.valid += 1,
            Message::DataBufferStarvation { spectra } => got.starved += spectra,
            Message::SignalBufferStarvation { signals } => got.signals_lost += signals,
            Message::QueueAlert { dropped, kinds } => {
                got.queue_dropped += dropped;
                got.kinds.valid += kinds.valid;
                got.kinds.verification_failures += kinds.verification_failures;
                got.kinds.read_failures += kinds.read_failures;
                got.kinds.signal_receive_failures += kinds.signal_receive_failures;
                got.kinds.version_mismatches += kinds.version_mismatches;
                got.kinds.producers_gone += kinds.producers_gone;
                got.kinds.mapped_bytes_limits += kinds.mapped_bytes_limits;
            }
            Message::End { stats, .. } => {
                got.end = Some(stats);
                break;
            }
            _ => got.other += 1,
        }
    }
    got
}

/// Every starvation and loss count reaches the application, and the
/// alerts account for every message dropped (before: the starvation
/// reports were among the dropped).
#[test]
fn loss_reports_survive_a_burst_into_a_full_queue() {
    let got = burst(4000, 4);
    println!("{got:?}");
    let end = got.end.expect("END");
    assert!(end.starved > 0, "the burst starved nothing: {got:?}");
    assert!(end.queue_dropped > 0, "the queue never overflowed: {got:?}");
    assert_eq!(got.starved, end.starved, "starvation reports lost: {got:?}");
    assert_eq!(
        got.signals_lost, end.signals_lost,
        "signal loss reports lost: {got:?}"
    );
    assert_eq!(
        got.queue_dropped, end.queue_dropped,
        "alerts do not account for the dropped: {got:?}"
    );
    // what was dropped: spectra and their outcomes, no report
    let k = got.kinds;
    assert_eq!(
        k.valid + k.verification_failures + k.read_failures,
        end.queue_dropped,
        "{got:?}"
    );
    assert_eq!(k.producers_gone + k.mapped_bytes_limits, 0, "{got:?}");
}
