//! The ibverbs fabric's connections made on first contact
//! (`fabric::rdma::on_demand`) over the verbs model (a test double): each
//! rank's fabric on a thread of its own, connection messages carried by an
//! in-process side channel (in a job, the bootstrap's relay carries them).

use parking_lot::Mutex;
use splitrt_runtime::fabric::rdma::model::{ModelDevice, ModelNetwork};
use splitrt_runtime::fabric::rdma::on_demand::{ConnectMsg, SideChannel};
use splitrt_runtime::fabric::rdma::{PendingRdma, RdmaConfig, RdmaFabric};
use splitrt_runtime::fabric::{Channel, Fabric, Packet};
use splitrt_runtime::{ErrorKind, Result};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use std::time::{Duration, Instant};

/// A rank's inbox: (sender, bytes).
type Inbox = Mutex<VecDeque<(usize, Vec<u8>)>>;

/// Every rank's inbox; messages to a rank marked deaf are lost, and
/// while `parked` is on, messages wait in `parked` (as `(to, from, bytes)`)
/// until [`Wires::release`].
struct Wires {
    inboxes: Vec<Inbox>,
    deaf: Vec<AtomicBool>,
    park: AtomicBool,
    parked: Mutex<Vec<(usize, usize, Vec<u8>)>>,
    /// A rank whose sends block while on (a backed-up bootstrap socket),
    /// and whether one is blocked now.
    stall: Vec<AtomicBool>,
    stalled: AtomicBool,
}

impl Wires {
    fn release(&self) {
        let mut p = self.parked.lock();
        self.park.store(false, Ordering::Release);
        for (to, from, b) in p.drain(..) {
            self.inboxes[to].lock().push_back((from, b));
        }
    }
}

struct Side {
    rank: usize,
    wires: Arc<Wires>,
}

impl SideChannel for Side {
    fn send(&self, to: usize, msg: &[u8]) -> Result<()> {
        let t = Instant::now() + Duration::from_secs(20);
        while self.wires.stall[self.rank].load(Ordering::Acquire) && Instant::now() < t {
            self.wires.stalled.store(true, Ordering::Release);
            std::thread::yield_now();
        }
        if self.wires.park.load(Ordering::Acquire) {
            let mut p = self.wires.parked.lock();
            if self.wires.park.load(Ordering::Acquire) {
                p.push((to, self.rank, msg.to_vec()));
                return Ok(());
            }
        }
        if !self.wires.deaf[to].load(Ordering::Relaxed) {
            self.wires.inboxes[to]
                .lock()
                .push_back((self.rank, msg.to_vec()));
        }
        Ok(())
    }
    fn pending(&self) -> bool {
        !self.wires.inboxes[self.rank].lock().is_empty()
    }
    fn take(&self) -> Option<(usize, Vec<u8>)> {
        self.wires.inboxes[self.rank].lock().pop_front()
    }
}

type Fab = RdmaFabric<ModelDevice>;

fn lazy_job(size: usize, cfg: RdmaConfig, seed: u64) -> (Vec<Fab>, ModelNetwork, Arc<Wires>) {
    let net = ModelNetwork::new(seed);
    let wires = Arc::new(Wires {
        inboxes: (0..size).map(|_| Mutex::new(VecDeque::new())).collect(),
        deaf: (0..size).map(|_| AtomicBool::new(false)).collect(),
        park: AtomicBool::new(false),
        parked: Mutex::new(Vec::new()),
        stall: (0..size).map(|_| AtomicBool::new(false)).collect(),
        stalled: AtomicBool::new(false),
    });
    let pending: Vec<PendingRdma<ModelDevice>> = (0..size)
        .map(|r| {
            PendingRdma::with_own_segment_lazy(
                net.device(&format!("rank{r}")),
                r,
                size,
                1 << 16,
                cfg,
            )
            .unwrap()
        })
        .collect();
    let cards: Vec<_> = pending.iter().map(|p| p.card()).collect();
    assert!(
        cards.iter().all(|c| c.qps.is_empty()),
        "a lazy card lists no queue pair"
    );
    let fabrics = pending
        .into_iter()
        .enumerate()
        .map(|(r, p)| {
            let side = Side {
                rank: r,
                wires: wires.clone(),
            };
            p.connect_lazy(&cards, Some(Box::new(side))).unwrap()
        })
        .collect();
    (fabrics, net, wires)
}

type Got = Vec<(usize, Vec<u64>)>;

/// Send one Short of `words` to `peer`, polling this rank meanwhile (what
/// arrives goes into `got`).
fn send_short_into(f: &Fab, peer: usize, words: &[u64], got: &mut Got) -> Result<()> {
    let pkt = Packet {
        tag: 7,
        words,
        payload: &[],
        deposit: None,
    };
    let got = std::cell::RefCell::new(got);
    let mut deliver = |d: &splitrt_runtime::fabric::Delivery<'_>| {
        got.borrow_mut().push((d.src, d.words.to_vec()))
    };
    let mut stall = |_: u32| -> Result<()> {
        f.poll(Channel::Request, &mut deliver)?;
        Ok(())
    };
    let t = Instant::now() + Duration::from_secs(20);
    while !f.try_send(peer, Channel::Request, &pkt, &mut stall)? {
        assert!(Instant::now() < t, "no credit toward rank {peer}");
        f.poll(Channel::Request, &mut |d| {
            got.borrow_mut().push((d.src, d.words.to_vec()))
        })?;
    }
    Ok(())
}

/// [`send_short_into`] from a rank that expects nothing meanwhile.
fn send_short(f: &Fab, peer: usize, words: &[u64]) -> Result<()> {
    let mut got = Vec::new();
    send_short_into(f, peer, words, &mut got)?;
    assert!(got.is_empty(), "{got:?}");
    Ok(())
}

/// Poll until `want` messages arrived (bounded).
fn receive(f: &Fab, want: usize) -> Got {
    receive_into(f, want, Vec::new())
}

/// Poll until `got` holds `want` messages (bounded).
fn receive_into(f: &Fab, want: usize, mut got: Got) -> Got {
    let t = Instant::now() + Duration::from_secs(20);
    while got.len() < want {
        assert!(
            Instant::now() < t,
            "{} of {want} messages arrived at rank {}: {:?}",
            got.len(),
            f.rank(),
            f.peer_state()
        );
        f.poll(Channel::Request, &mut |d| {
            got.push((d.src, d.words.to_vec()))
        })
        .unwrap();
    }
    got
}

#[test]
fn lazyrdma_a_rank_talking_to_one_of_n_peers_holds_one_queue_pair_and_one_pool() {
    let size = 8;
    let cfg = RdmaConfig::default();
    let (fabrics, net, _w) = lazy_job(size, cfg, 1);
    // nothing per peer at start
    for f in &fabrics {
        let s = f.peer_state();
        assert_eq!((s.queue_pairs, s.pools), (0, 0), "{s:?}");
    }
    assert_eq!(net.live_qps(), 0);
    let fabrics = Arc::new(fabrics);
    let f2 = fabrics.clone();
    let rx = std::thread::spawn(move || receive(&f2[1], 3));
    for i in 0..3 {
        send_short(&fabrics[0], 1, &[i]).unwrap();
    }
    let got = rx.join().unwrap();
    assert_eq!(got, vec![(0, vec![0]), (0, vec![1]), (0, vec![2])]);
    // one RDMA put and get too: the same queue pair
    fabrics[0].put(1, 64, &[5; 100]).unwrap();
    let mut back = [0u8; 100];
    fabrics[0].get(1, 64, &mut back).unwrap();
    assert_eq!(back, [5; 100]);
    for r in 0..2 {
        let s = fabrics[r].peer_state();
        assert_eq!(
            (s.queue_pairs, s.pools, s.refused),
            (1, 1, 0),
            "rank {r}: {s:?}"
        );
        assert_eq!(
            s.pinned_bytes,
            cfg.pool_bytes() as u64 + size as u64 * 16,
            "one pool and the mailbox"
        );
        eprintln!("lazyrdma: rank {r} of {size} after talking to 1 peer: {s:?}");
    }
    for f in &fabrics[2..] {
        assert_eq!(f.peer_state().queue_pairs, 0);
    }
    assert_eq!(
        net.live_qps(),
        2,
        "one queue pair at each end, nothing else"
    );
}

#[test]
fn lazyrdma_two_ranks_sending_to_each_other_first_at_once_both_complete() {
    // even seeds: both requests are held back until both were sent, so
    // each rank asks before it hears the other's request (the race, every
    // time); odd seeds: as the threads happen to run
    for seed in 0..20 {
        let (fabrics, net, wires) = lazy_job(3, RdmaConfig::default(), seed);
        let forced = seed % 2 == 0;
        wires.park.store(forced, Ordering::Release);
        let fabrics = Arc::new(fabrics);
        let start = Arc::new(Barrier::new(2));
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let run = |me: usize, other: usize| {
            let (f, start, done) = (fabrics.clone(), start.clone(), done.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut got = Vec::new();
                for i in 0..4 {
                    send_short_into(&f[me], other, &[me as u64, i], &mut got).unwrap();
                }
                let got = receive_into(&f[me], 4, got);
                assert_eq!(got.len(), 4);
                assert!(got.iter().all(|(src, _)| *src == other));
                let s = f[me].peer_state();
                assert_eq!((s.queue_pairs, s.pools, s.refused), (1, 1, 0), "{s:?}");
                // keep polling until the other side has all of its messages
                done.fetch_add(1, Ordering::AcqRel);
                let t = Instant::now() + Duration::from_secs(20);
                while done.load(Ordering::Acquire) < 2 && Instant::now() < t {
                    f[me].poll(Channel::Request, &mut |_| {}).unwrap();
                }
            })
        };
        let a = run(0, 1);
        let b = run(1, 0);
        if forced {
            let t = Instant::now() + Duration::from_secs(20);
            while wires.parked.lock().len() < 2 {
                assert!(Instant::now() < t, "the two requests were not sent");
                std::thread::yield_now();
            }
            let p = wires.parked.lock();
            let kinds: Vec<_> = p.iter().map(|(_, _, b)| ConnectMsg::decode(b)).collect();
            assert!(
                kinds
                    .iter()
                    .all(|k| matches!(k, Ok(ConnectMsg::Request(_)))),
                "{kinds:?}"
            );
            drop(p);
            wires.release();
        }
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(
            net.live_qps(),
            2,
            "seed {seed}: one queue pair a side, not two"
        );
    }
}

#[test]
fn lazyrdma_a_peer_that_never_answers_is_named_within_the_bound() {
    let cfg = RdmaConfig {
        connect_timeout: Duration::from_millis(300),
        ..RdmaConfig::default()
    };
    let (fabrics, _net, wires) = lazy_job(3, cfg, 5);
    wires.deaf[2].store(true, Ordering::Relaxed);
    let t = Instant::now();
    let e = send_short(&fabrics[0], 2, &[1]).unwrap_err();
    let took = t.elapsed();
    let msg = e.to_string();
    assert!(matches!(e.kind(), ErrorKind::Timeout(_)), "{msg}");
    assert!(msg.contains("rank 2 did not answer"), "{msg}");
    assert!(msg.contains("SPLITRT_HANG_REPORT"), "{msg}");
    assert!(
        took >= cfg.connect_timeout && took < Duration::from_secs(10),
        "{took:?}"
    );
    // and a get names it too, within the same bound
    let mut b = [0u8; 8];
    let e = fabrics[0].get(2, 0, &mut b).unwrap_err();
    assert!(e.to_string().contains("rank 2 did not answer"), "{e}");
    eprintln!("lazyrdma: {msg} (after {took:?})");
}

#[test]
fn lazyrdma_malformed_connection_messages_are_refused_without_a_panic() {
    let (fabrics, net, _w) = lazy_job(3, RdmaConfig::default(), 9);
    let f = &fabrics[0];
    let bogus = splitrt_runtime::fabric::rdma::verbs::QpEndpoint {
        lid: 77,
        qpn: 12345,
        psn: 1,
        gid: [9; 16],
    };
    let mut junk: Vec<(usize, Vec<u8>)> = vec![
        (1, vec![]),
        (1, vec![1]),
        (1, vec![1, 1, 2, 3]),
        (1, vec![9, 1]),
        (1, vec![3, 1, 0]),
        (1, vec![2, 7]),
        // from outside the job, or from itself
        (3, ConnectMsg::Ready.encode()),
        (usize::MAX, ConnectMsg::Ready.encode()),
        (0, ConnectMsg::Request(bogus).encode()),
        // out of turn: an answer nobody asked for, READY before anything
        (1, ConnectMsg::Answer(bogus).encode()),
        (2, ConnectMsg::Ready.encode()),
        // a request naming a queue pair that does not exist
        (1, ConnectMsg::Request(bogus).encode()),
    ];
    let mut x = 0x2545_f491u32;
    for len in 0..40 {
        let b = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        junk.push((1 + len % 2, b));
    }
    let n = junk.len() as u64;
    for (from, b) in &junk {
        f.inject_connect_msg(*from, b).unwrap();
    }
    let s = f.peer_state();
    assert!(s.refused >= n - 40, "{s:?}");
    assert_eq!(s.refused, n, "every one refused: {s:?}");
    // the fabric goes on: rank 0 still reaches rank 1 and 2
    let fabrics = Arc::new(fabrics);
    let f2 = fabrics.clone();
    let rx1 = std::thread::spawn(move || receive(&f2[1], 1));
    let f3 = fabrics.clone();
    let rx2 = std::thread::spawn(move || receive(&f3[2], 1));
    send_short(&fabrics[0], 1, &[42]).unwrap();
    send_short(&fabrics[0], 2, &[43]).unwrap();
    assert_eq!(rx1.join().unwrap(), vec![(0, vec![42])]);
    assert_eq!(rx2.join().unwrap(), vec![(0, vec![43])]);
    // a request naming another queue pair than the connected one is refused
    let before = fabrics[1].peer_state().refused;
    let other = splitrt_runtime::fabric::rdma::verbs::QpEndpoint { psn: 2, ..bogus };
    fabrics[1]
        .inject_connect_msg(0, &ConnectMsg::Request(other).encode())
        .unwrap();
    assert_eq!(fabrics[1].peer_state().refused, before + 1);
    assert_eq!(net.live_qps(), 4, "0-1 and 0-2, one queue pair an end");
}

#[test]
fn lazyrdma_eager_start_still_connects_every_peer_at_once() {
    let net = ModelNetwork::new(3);
    let size = 3;
    let pending: Vec<PendingRdma<ModelDevice>> = (0..size)
        .map(|r| {
            PendingRdma::with_own_segment(
                net.device(&format!("rank{r}")),
                r,
                size,
                1 << 16,
                RdmaConfig::default(),
            )
            .unwrap()
        })
        .collect();
    let cards: Vec<_> = pending.iter().map(|p| p.card()).collect();
    assert!(cards.iter().all(|c| c.qps.len() == size));
    let fabrics: Vec<Fab> = pending
        .into_iter()
        .map(|p| p.connect(&cards).unwrap())
        .collect();
    for f in &fabrics {
        let s = f.peer_state();
        assert_eq!((s.queue_pairs, s.pools), (size, size), "{s:?}");
    }
    assert_eq!(net.live_qps(), size * size);
}

#[test]
fn rv2fix_a_lost_request_is_sent_again_and_the_peer_answers_later() {
    // review 2, finding 2: REQUEST was sent once; once lost, every later
    // first contact waited out the bound and blamed the peer
    let cfg = RdmaConfig {
        connect_timeout: Duration::from_millis(300),
        ..RdmaConfig::default()
    };
    let (fabrics, _net, wires) = lazy_job(2, cfg, 11);
    wires.deaf[1].store(true, Ordering::Relaxed);
    let e = send_short(&fabrics[0], 1, &[1]).unwrap_err();
    assert!(e.to_string().contains("rank 1 did not answer"), "{e}");
    // the side channel works again and rank 1 polls all along
    wires.deaf[1].store(false, Ordering::Relaxed);
    let fabrics = Arc::new(fabrics);
    let f2 = fabrics.clone();
    let rx = std::thread::spawn(move || receive(&f2[1], 1));
    let sent = send_short(&fabrics[0], 1, &[2]);
    let s0 = fabrics[0].peer_state();
    let s1 = fabrics[1].peer_state();
    assert!(sent.is_ok(), "{sent:?}; rank 0 {s0:?}, rank 1 {s1:?}");
    assert_eq!(rx.join().unwrap(), vec![(0, vec![2])]);
    for (r, s) in [(0, s0), (1, s1)] {
        assert_eq!(
            (s.queue_pairs, s.pools, s.refused),
            (1, 1, 0),
            "rank {r}: {s:?}"
        );
    }
}

#[test]
fn rv2fix_a_lost_answer_or_ready_is_sent_again_when_the_answerer_sends() {
    // review 2, finding 2: if READY (or ANSWER) is lost, the side that
    // answered waited for it forever when it sent toward the asker itself
    let cfg = RdmaConfig {
        connect_timeout: Duration::from_secs(5),
        ..RdmaConfig::default()
    };
    let (fabrics, _net, wires) = lazy_job(2, cfg, 13);
    let fabrics = Arc::new(fabrics);
    // rank 0 asks; rank 1 answers; rank 0's READY is lost (rank 1 deaf
    // once its answer went out)
    let f1 = fabrics.clone();
    let w1 = wires.clone();
    let answerer = std::thread::spawn(move || {
        let t = Instant::now() + Duration::from_secs(20);
        while f1[1].peer_state().queue_pairs == 0 {
            assert!(Instant::now() < t, "rank 1 never heard the request");
            f1[1].poll(Channel::Request, &mut |_| {}).unwrap();
        }
        w1.deaf[1].store(true, Ordering::Relaxed);
    });
    // rank 0 gets its answer (rank 1 answers as soon as it heard)
    fabrics[0].put(1, 0, &[3; 8]).unwrap();
    answerer.join().unwrap();
    // drop whatever READY was on its way, then hear again
    while wires.inboxes[1].lock().pop_front().is_some() {}
    wires.deaf[1].store(false, Ordering::Relaxed);
    let f0 = fabrics.clone();
    let rx = std::thread::spawn(move || receive(&f0[0], 1));
    let sent = send_short(&fabrics[1], 0, &[9]);
    assert!(
        sent.is_ok(),
        "{sent:?}; rank 0 {:?}, rank 1 {:?}",
        fabrics[0].peer_state(),
        fabrics[1].peer_state()
    );
    assert_eq!(rx.join().unwrap(), vec![(1, vec![9])]);
}

#[test]
fn rv2fix_first_contact_with_a_busy_peer_is_reported_not_failed_unless_hang_abort() {
    // review 2, finding 3: the hang report's time was a hard deadline for
    // the first access to a peer that computes without polling
    use splitrt_runtime::config::Config;
    let job = |abort: bool| Config {
        hang_report: Some(Duration::from_millis(200)),
        hang_abort: abort,
        ..Config::default()
    };
    // reports only: the access waits for the busy peer
    let (fabrics, _net, _w) = lazy_job(2, job(false).rdma(), 17);
    let fabrics = Arc::new(fabrics);
    let f2 = fabrics.clone();
    let rx = std::thread::spawn(move || {
        // rank 1 computes (no poll) for three times the report's time
        std::thread::sleep(Duration::from_millis(600));
        receive(&f2[1], 1)
    });
    let sent = send_short(&fabrics[0], 1, &[5]);
    assert!(sent.is_ok(), "{sent:?}");
    assert_eq!(rx.join().unwrap(), vec![(0, vec![5])]);
    // SPLITRT_HANG_ABORT=1: the access fails at the bound, naming the peer
    let (fabrics, _net, _w) = lazy_job(2, job(true).rdma(), 19);
    let t = Instant::now();
    let e = send_short(&fabrics[0], 1, &[6]).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Timeout(_)), "{e}");
    assert!(e.to_string().contains("rank 1 did not answer"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // SPLITRT_HANG_REPORT=off: never a report, never a failure
    let off = Config {
        hang_report: None,
        hang_abort: true,
        ..Config::default()
    }
    .rdma();
    assert!(!off.connect_abort, "{off:?}");
    assert_eq!(off.connect_timeout, Duration::MAX, "{off:?}");
}

#[test]
fn rv2fix_a_request_this_rank_cannot_open_a_queue_pair_for_is_refused_not_a_poll_error() {
    // review 2, finding 5: a failed queue-pair creation in answer to one
    // peer's REQUEST was an error from this rank's poll
    let cfg = RdmaConfig {
        connect_timeout: Duration::from_secs(5),
        ..RdmaConfig::default()
    };
    let (fabrics, net, _w) = lazy_job(2, cfg, 23);
    let fabrics = Arc::new(fabrics);
    let f0 = fabrics.clone();
    let asker = std::thread::spawn(move || send_short(&f0[0], 1, &[7]));
    let t = Instant::now() + Duration::from_secs(20);
    while fabrics[0].peer_state().queue_pairs == 0 {
        assert!(Instant::now() < t, "rank 0 never made its queue pair");
        std::thread::yield_now();
    }
    // rank 1's device is out of queue pairs when the request arrives
    net.refuse_qps(true);
    while fabrics[1].peer_state().refused == 0 {
        assert!(Instant::now() < t, "{:?}", fabrics[1].peer_state());
        let polled = fabrics[1].poll(Channel::Request, &mut |_| {});
        assert!(polled.is_ok(), "{polled:?}");
    }
    assert_eq!(fabrics[1].peer_state().queue_pairs, 0);
    // the device recovers: rank 0's request, asked again, is answered
    net.refuse_qps(false);
    let got = receive(&fabrics[1], 1);
    assert_eq!(got, vec![(0, vec![7])]);
    asker.join().unwrap().unwrap();
}

#[test]
fn rv2fix_a_blocked_relay_write_does_not_hold_the_device_lock() {
    // review 2, finding 5: an answer was written to the bootstrap socket
    // under the device lock, so a backed-up socket stalled every fabric op
    let (fabrics, _net, wires) = lazy_job(2, RdmaConfig::default(), 29);
    let fabrics = Arc::new(fabrics);
    wires.stall[1].store(true, Ordering::Release);
    let f0 = fabrics.clone();
    let asker = std::thread::spawn(move || send_short(&f0[0], 1, &[8]));
    let f1 = fabrics.clone();
    let rx = std::thread::spawn(move || receive(&f1[1], 1));
    let t = Instant::now() + Duration::from_secs(20);
    while !wires.stalled.load(Ordering::Acquire) {
        assert!(Instant::now() < t, "rank 1 never answered");
        std::thread::yield_now();
    }
    // rank 1's answer is stuck in its write: its device must stay usable
    let (tx, done) = std::sync::mpsc::channel();
    let f1 = fabrics.clone();
    std::thread::spawn(move || tx.send(f1[1].peer_state()).unwrap());
    let state = done.recv_timeout(Duration::from_secs(2));
    wires.stall[1].store(false, Ordering::Release);
    assert!(state.is_ok(), "peer_state waited for a relay write");
    asker.join().unwrap().unwrap();
    assert_eq!(rx.join().unwrap(), vec![(0, vec![8])]);
}

#[test]
fn rv2fix_requests_asked_again_are_spaced_out_doubling() {
    // asking again must not fill a non-polling peer's bounded inbox: over
    // a bound B the asker sends at 0, B/8, B/4, B/2 (and maybe at B)
    let cfg = RdmaConfig {
        connect_timeout: Duration::from_millis(400),
        ..RdmaConfig::default()
    };
    let (fabrics, _net, wires) = lazy_job(2, cfg, 31);
    wires.park.store(true, Ordering::Release);
    assert!(send_short(&fabrics[0], 1, &[1]).is_err());
    let n = wires.parked.lock().len();
    assert!((2..=5).contains(&n), "{n} REQUESTs in 0.4 s");
}
