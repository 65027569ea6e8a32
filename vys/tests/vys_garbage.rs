//! A stranger flooding a stream's multicast group with garbage: the
//! consumer counts every datagram, but reports them in at most one
//! `SignalReceiveFailure` per `BAD_SIGNAL_REPORT_EVERY` (carrying how many
//! since the last), so the flood cannot fill the application's queue with
//! reports.
use splitrt_vys::consumer::{Consumer, ConsumerConfig, Message};
use splitrt_vys::transport::SignalSender;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x3c; 32];

fn group() -> SocketAddrV4 {
    let port = 41_000 + (std::process::id() as u16 % 5_000) * 2;
    SocketAddrV4::new(Ipv4Addr::new(239, 255, 82, 1), port)
}

/// 5000 garbage datagrams (paced by the consumer's own count, so the
/// kernel drops none) yield a few reports, not 5000, whose counts add up
/// to 5000 before the consumer is shut down.
#[test]
fn a_garbage_flood_is_reported_in_bounded_counted_messages() {
    let g = group();
    let c = Consumer::start(
        ConsumerConfig::new(KEY, g, Ipv4Addr::LOCALHOST),
        |_, _, pass| pass.fill(true),
    )
    .unwrap();
    let tx = SignalSender::new(g, Ipv4Addr::LOCALHOST, [0; 32]).unwrap();
    let n: u64 = 5_000;
    let t0 = Instant::now();
    for i in 0..n {
        // no tag of the key: any bytes will do (lengths 1..=200)
        let len = 1 + (i as usize * 37) % 200;
        let b: Vec<u8> = (0..len).map(|j| (i as usize * 131 + j) as u8).collect();
        tx.send_bytes(&b).unwrap();
        if i % 250 == 249 || i == n - 1 {
            // wait (bounded) until the consumer has counted what was sent
            let until = Instant::now() + Duration::from_secs(20);
            loop {
                let s = c.stats();
                if s.bad_signals + s.signals_lost > i {
                    break;
                }
                assert!(Instant::now() < until, "the consumer stalled: {s:?}");
                std::thread::yield_now();
            }
        }
    }
    // the reports carry every datagram before the end (the folded count
    // comes within BAD_SIGNAL_REPORT_EVERY), then shut down
    let (mut reports, mut counted, mut queue_alerts) = (0u64, 0u64, 0u64);
    let stats = loop {
        let m = c.recv(Duration::from_secs(10)).unwrap_or_else(|| {
            panic!(
                "no message within 10 s: {reports} reports counting {counted}; {:?}",
                c.stats()
            )
        });
        match m {
            Message::SignalReceiveFailure { count, .. } => {
                reports += 1;
                counted += count;
                if counted == n {
                    c.shutdown();
                }
            }
            Message::QueueAlert { .. } => queue_alerts += 1,
            Message::End { stats, .. } => break stats,
            m => panic!("unexpected {m}"),
        }
    };
    let secs = t0.elapsed().as_secs();
    println!("{n} garbage datagrams in {secs} s: {reports} reports counting {counted}; {stats:?}");
    assert_eq!(stats.signals_lost, 0, "the test lost datagrams: {stats:?}");
    assert_eq!(stats.bad_signals, n, "every datagram counted: {stats:?}");
    assert_eq!(counted, n, "the reports carry every datagram");
    assert_eq!(queue_alerts, 0, "the reports overflowed the queue");
    // one at once, then at most one per second, and one at the end
    assert!(
        reports <= secs + 2,
        "{reports} reports of {n} garbage datagrams in {secs} s"
    );
}
