//! A signal future's wake-up when a poll round after its registration
//! ran its word's handler and also met a malformed message (the
//! regression test of commit 38b8f31), over pure UDP with 2 ranks: the
//! fabric has no doorbell count, so the endpoint counts its poll rounds
//! that ran handlers and the doorbell bridge fires once that count moved
//! past what a waiter saw.
//!
//! The loss needs a bridge that did not see the datagrams before the
//! round took them (in a real run, one slower to wake than the poller),
//! so rank 0 holds the bridge thread: it registers a waiter (no count)
//! whose `wake` blocks until released, asks rank 1 to send, and once the
//! fire for that traffic runs the blocking `wake` on the bridge thread
//! (wakers run outside the list's lock) leaves rank 1's messages to
//! arrive: nothing polls, and the held bridge does not look. Then it
//! plays a signal future's poll (`SignalWait::poll`): read
//! `Endpoint::traffic_seq`, look at the word (clear), register with
//! `Endpoint::wake_on_traffic_since` and that count, look again (still
//! clear: the real future's re-look, which catches a round that ran
//! between its look and its registration, finds nothing here). Only then
//! does one poll round run, as another thread (the progress thread, or
//! any poller) would run it: it takes both datagrams, runs the word's
//! handler and meets rank 1's malformed message in the same batch (the
//! poll returns its error). Then the bridge is let go. The word is now
//! set and the future must be woken to see it: the datagrams are gone
//! from the socket, so only the count can tell the bridge, and it must
//! fire within 3 s of the round. Before 38b8f31 the failed round counted
//! nothing: the bridge found the socket empty and the count unmoved and
//! slept until the next datagram (a keepalive, 12 s later with
//! `SPLITRT_UDP_PEER_TIMEOUT=60`). (Without the hold the bridge, woken by
//! the registration, often saw the datagrams itself before the round and
//! fired for them: a run proved nothing.)
//!
//! Rank 1 answers each `go` with the word's request and then, through
//! the raw fabric, a Long into rank 0's segment past its end: rank 1's
//! segment is twice rank 0's, so its own send check passes it, and rank
//! 0's reassembler refuses it as malformed (a deposit outside the
//! segment; the error is a protocol error naming rank 1). An attempt
//! whose two messages came in different poll rounds proves nothing and
//! is repeated (at most 5), and so is one where a datagram (a
//! retransmission, an acknowledgement) was accepted between the round
//! and the wake (`UdpStats::received` moved): the bridge may then have
//! fired for it, not for the count.
//!
//! Usage: t_wake_batch (2 ranks, `SPLITRT_FABRIC=udp`); prints
//! `wake batch: woken in N ms (attempt A)` on rank 0, then `wake batch
//! ok` on every rank.

use splitrt::runtime::config::Config;
use splitrt::runtime::fabric::{Channel, Fabric, Packet};
use splitrt::runtime::job::JobInfo;
use splitrt::{Endpoint, EndpointBuilder, Error, ErrorKind, Kind, Payload};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

/// How long the registered waiter may wait for its wake-up.
const BOUND: Duration = Duration::from_secs(3);
/// How long rank 0 leaves rank 1's two messages to arrive before its poll.
const SETTLE: Duration = Duration::from_millis(300);
const ATTEMPTS: u64 = 5;
/// The longest the bridge is held in the gate's `wake`, and the longest
/// the test waits for it to get there.
const HOLD: Duration = Duration::from_secs(10);

/// Unparks the waiting thread and remembers that it was woken.
struct Flag(AtomicBool, std::thread::Thread);
impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
        self.1.unpark();
    }
}

/// A waker whose `wake` holds the thread that runs it (the bridge
/// thread, in its fire) until [`Gate::release`], at most [`HOLD`]: while
/// held, the bridge cannot look at the socket.
#[derive(Default)]
struct Gate {
    /// (the bridge entered `wake`, the test released it)
    state: Mutex<(bool, bool)>,
    cv: Condvar,
}
impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 = true;
        self.cv.notify_all();
        let _ = self
            .cv
            .wait_timeout_while(s, HOLD, |s| !s.1)
            .unwrap_or_else(|p| p.into_inner());
    }
}
impl Gate {
    /// Wait (at most [`HOLD`]) until the bridge is held in `wake`.
    fn entered(&self) -> bool {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (s, _) = self
            .cv
            .wait_timeout_while(s, HOLD, |s| !s.0)
            .unwrap_or_else(|p| p.into_inner());
        s.0
    }
    /// Let the bridge go on.
    fn release(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.cv.notify_all();
    }
}

fn main() {
    // a clone outlives the run: a failing rank reports and exits at once
    // (the launcher then ends the job), rather than waiting at exit
    let mut keep = None;
    if let Err(e) = run(&mut keep) {
        eprintln!("t_wake_batch: {e}");
        std::process::exit(1);
    }
    drop(keep);
}

fn run(keep: &mut Option<Endpoint>) -> splitrt::Result<()> {
    let word = Arc::new(AtomicU64::new(0));
    let gos = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let mut b = EndpointBuilder::new();
    let w = word.clone();
    let signal = b.request("signal", Kind::Short, 0, move |_t, _m| {
        w.store(1, Ordering::Release)
    })?;
    let g = gos.clone();
    let go = b.request("go", Kind::Short, 0, move |_t, _m| {
        g.fetch_add(1, Ordering::AcqRel);
    })?;
    let d = done.clone();
    let end = b.request("done", Kind::Short, 0, move |_t, _m| {
        d.store(true, Ordering::Release)
    })?;
    let job = JobInfo::from_env()?;
    let config = Config::from_env()?;
    let ep = b.attach_with(job, config)?;
    if ep.rank() == 1 {
        // its send check lets through a Long past rank 0's segment end
        // (every rank runs with the same segment size)
        match ep.raw_fabric_for_tests() {
            splitrt::runtime::fabric::AnyFabric::Udp(u) => {
                u.let_longs_pass_the_segment_end_for_tests(1 << 20)
            }
            _ => return Err(Error::usage("t_wake_batch runs over UDP")),
        }
    }
    *keep = Some(ep.clone());
    if ep.size() != 2 {
        return Err(Error::usage("t_wake_batch runs on 2 ranks"));
    }
    ep.barrier()?;
    match ep.rank() {
        0 => {
            let mut woken = None;
            for attempt in 1..=ATTEMPTS {
                word.store(0, Ordering::Release);
                match attempt_wake(&ep, &word, go)? {
                    Attempt::Woken(ms) => {
                        woken = Some((ms, attempt));
                        break;
                    }
                    Attempt::Split => {}
                }
            }
            let Some((ms, attempt)) = woken else {
                return Err(Error::usage(format!(
                    "in {ATTEMPTS} attempts the word's message and the malformed one never \
                     came in one poll round with no datagram between it and the wake"
                )));
            };
            println!("wake batch: woken in {ms} ms (attempt {attempt})");
            ep.request(1, end, &[], Payload::None)?;
        }
        _ => {
            let mut answered = 0;
            loop {
                ep.wait_until(|| {
                    gos.load(Ordering::Acquire) > answered || done.load(Ordering::Acquire)
                })?;
                if gos.load(Ordering::Acquire) == answered {
                    break;
                }
                answered += 1;
                ep.request(0, signal, &[], Payload::None)?;
                malformed_to_0(&ep)?;
            }
        }
    }
    ep.finish()?;
    println!("wake batch ok");
    Ok(())
}

/// How one attempt on rank 0 ended.
enum Attempt {
    /// The round ran the word's handler and met the malformed message,
    /// and the registered waiter was woken after it (in this many ms).
    Woken(u128),
    /// The two messages came in different poll rounds, or a datagram
    /// was accepted between the round and the wake: proves nothing.
    Split,
}

/// Whether `r` is rank 0's poll failing on rank 1's malformed message.
fn malformed(r: &splitrt::Result<usize>) -> bool {
    matches!(
        r,
        Err(e) if matches!(e.kind(), ErrorKind::Protocol(_)) && e.peer() == Some(1)
    )
}

/// One attempt on rank 0 (see the module docs); an error if the bridge
/// was not held or woke the waiter before the round, the word was set
/// too soon, a poll failed otherwise, or the registered waiter was not
/// woken within [`BOUND`] of the round.
fn attempt_wake(
    ep: &Endpoint,
    word: &AtomicU64,
    go: splitrt::RequestHandler,
) -> splitrt::Result<Attempt> {
    // hold the bridge: a waiter (no count) whose wake blocks; the fire
    // for the traffic `go` brings runs it on the bridge thread
    let gate = Arc::new(Gate::default());
    let held = ep.traffic_key();
    ep.wake_on_traffic_as(&held, &Waker::from(gate.clone()))?;
    ep.request(1, go, &[], Payload::None)?;
    if !gate.entered() {
        gate.release();
        ep.forget_traffic_wake(&held);
        return Err(Error::usage(format!(
            "the bridge did not fire within {HOLD:?}"
        )));
    }
    // rank 1's two messages, left to arrive; nothing polls meanwhile,
    // and the bridge, held, does not look
    std::thread::sleep(SETTLE);
    // the signal future's poll: the count, the look, the registration
    // with that count, the look again
    let seq = ep.traffic_seq();
    let flag = Arc::new(Flag(AtomicBool::new(false), std::thread::current()));
    let key = ep.traffic_key();
    let attempt = (|| {
        if word.load(Ordering::Acquire) != 0 {
            return Err(Error::usage("the word was set before its handler's round"));
        }
        ep.wake_on_traffic_since(&key, &Waker::from(flag.clone()), seq)?;
        if word.load(Ordering::Acquire) != 0 {
            return Err(Error::usage(
                "the word was set before its handler's round (re-look)",
            ));
        }
        // another thread's handler round, after the registration and the
        // re-look: the word's handler runs, and the fabric fails the
        // round for the next message
        let r = ep.poll();
        // the datagrams accepted so far: one more by the wake (a
        // retransmission, an ack, read by the keeper thread) may have
        // fired the bridge without the count
        let rx = received(ep);
        if flag.0.load(Ordering::SeqCst) {
            return Err(Error::usage("woken before the bridge was let go"));
        }
        Ok((r, rx))
    })();
    // the bridge goes on: from here only the count can tell it
    gate.release();
    let t = Instant::now();
    let (r, rx) = match attempt {
        Ok(r) => r,
        Err(e) => {
            ep.forget_traffic_wake(&key);
            return Err(e);
        }
    };
    let mut seen = malformed(&r);
    if !(seen && word.load(Ordering::Acquire) == 1) {
        ep.forget_traffic_wake(&key);
        if let Err(e) = &r {
            if !seen {
                return Err(Error::usage(format!("unexpected poll error: {e}")));
            }
        }
        let t = Instant::now();
        while !(seen && word.load(Ordering::Acquire) == 1) {
            if t.elapsed() > Duration::from_secs(10) {
                return Err(Error::usage("rank 1's two messages never came"));
            }
            seen |= malformed(&ep.poll());
        }
        return Ok(Attempt::Split);
    }
    while !flag.0.load(Ordering::SeqCst) && t.elapsed() < BOUND {
        std::thread::park_timeout(BOUND.saturating_sub(t.elapsed()));
    }
    let rx_at_wake = received(ep);
    ep.forget_traffic_wake(&key);
    if flag.0.load(Ordering::SeqCst) && rx_at_wake != rx {
        // a datagram came between the round and the wake: the bridge
        // may have fired for it, not for the count
        return Ok(Attempt::Split);
    }
    if !flag.0.load(Ordering::SeqCst) {
        return Err(Error::usage(format!(
            "a waiter registered before a poll round that ran its word's handler and met a \
             malformed message was not woken within {BOUND:?} of that round (traffic_seq read \
             {seq:?}, now {:?})",
            ep.traffic_seq()
        )));
    }
    Ok(Attempt::Woken(t.elapsed().as_millis()))
}

/// Datagrams this rank's UDP fabric accepted so far (`None` off UDP).
fn received(ep: &Endpoint) -> Option<u64> {
    ep.udp_stats().map(|s| s.received)
}

/// Rank 1: a Long into rank 0's segment past its end, as a broken peer
/// could send it (only the test-doubles build reaches the raw fabric).
fn malformed_to_0(ep: &Endpoint) -> splitrt::Result<()> {
    let past_end = ep.config().segment_size as u64;
    let pkt = Packet {
        tag: 0,
        words: &[],
        payload: &[0u8; 8],
        deposit: Some(past_end),
    };
    let sent = ep
        .raw_fabric_for_tests()
        .try_send(0, Channel::Request, &pkt, &mut |_| Ok(()))?;
    if !sent {
        return Err(Error::usage("no room for the malformed message"));
    }
    Ok(())
}
