//! The bootstrap connection's relay (what the ibverbs fabric connects its
//! queue pairs through): a message goes from one rank to another through
//! the rendezvous, naming its sender; a rank's inbox is bounded.

use splitrt_runtime::bootstrap::{Client, Hello, Server};
use splitrt_runtime::key::JobKey;
use std::time::{Duration, Instant};

fn hello(rank: u32, size: u32) -> Hello {
    Hello {
        rank,
        size,
        job: "relay".into(),
        host: "h".into(),
        pid: std::process::id(),
        table: vec!["t".into()],
        endpoint: vec![],
    }
}

/// A 2-rank job: the server on a thread, both clients joined.
fn two_ranks() -> (Client, Client, std::thread::JoinHandle<()>) {
    let key = JobKey::generate().unwrap();
    let server = Server::bind("127.0.0.1:0", key.clone()).unwrap();
    let addr = server.local_addr().unwrap().to_string();
    let srv = std::thread::spawn(move || {
        let _ = server.run(2, Duration::from_secs(20));
    });
    let (a, k) = (addr.clone(), key.clone());
    let one =
        std::thread::spawn(move || Client::join(&a, &k, hello(1, 2), Duration::from_secs(20)));
    let (c0, _) = Client::join(&addr, &key, hello(0, 2), Duration::from_secs(20)).unwrap();
    let (c1, _) = one.join().unwrap().unwrap();
    (c0, c1, srv)
}

#[test]
fn lazyrdma_a_relay_reaches_its_rank_naming_the_sender_and_the_inbox_is_bounded() {
    let (c0, c1, srv) = two_ranks();
    let (r0, r1) = (c0.relay(), c1.relay());
    r0.send(1, b"hi").unwrap();
    let t = Instant::now() + Duration::from_secs(10);
    let got = loop {
        if let Some(m) = r1.take() {
            break m;
        }
        assert!(Instant::now() < t, "the relay did not arrive");
        std::thread::yield_now();
    };
    assert_eq!(got, (0, b"hi".to_vec()));
    assert!(!r1.pending());
    // refused before sending: outside the job, or over the bound
    assert!(r0.send(2, b"x").is_err());
    assert!(r0.send(1, &[0; 257]).is_err());
    // more than the inbox holds (4 x 2 + 64 = 72) while nobody takes them:
    // the rest dropped and counted, nothing grows past the bound
    for i in 0..100u8 {
        r0.send(1, &[i]).unwrap();
    }
    let t = Instant::now() + Duration::from_secs(10);
    while r1.dropped() < 28 {
        assert!(Instant::now() < t, "dropped {}", r1.dropped());
        std::thread::yield_now();
    }
    let mut n = 0;
    while let Some((from, b)) = r1.take() {
        assert_eq!((from, b), (0, vec![n]));
        n += 1;
    }
    assert_eq!((n, r1.dropped()), (72, 28));
    c0.bye();
    c1.bye();
    srv.join().unwrap();
}
