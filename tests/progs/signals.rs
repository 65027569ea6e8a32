//! Signals conformance (OpenSHMEM 1.5 put-with-signal, signal_add / set /
//! fetch, wait_until{,_any,_all,_some}), on whichever fabric and path the
//! job uses (`SPLITRT_FABRIC`, `SPLITRT_RMA=native|am`).
//!
//! * Data before signal: every rank sends its right neighbour a block of
//!   varying length (one word to 16 KiB) with a signal, ITERS times; the
//!   neighbour waits for the signal and checks every word of the block at
//!   once (a signal seen before its data fails here), then acknowledges
//!   with a plain signal so the block is reused only once read. Signal ops
//!   alternate between set and add.
//! * Accumulation: every rank adds to every rank's counter, plain and with
//!   a put (its slot of a gather array); each counter reaches the exact
//!   sum and every slot is in place once it does.
//! * wait_until_any / _all / _some: against words set locally (exact
//!   answers for every comparison) and against words every rank sets.
//! * signal_fetch of a local and of a remote word; an async wait.
//! * Misuse, each a clear error at the caller: a wait on a non-signal
//!   address, a peer's word, an index out of range, an empty list; a
//!   signal to a rank that does not exist, data and signal to two ranks;
//!   a hostile raw signal into a non-signal address, refused by its target.
//!
//! Usage: t_signals [conformance [ITERS] | never | late | dies]
//!   never  rank 0 waits for a signal no rank sends (for the hang report)
//!   late   rank 1 sends rank 0's signal after 2 s (a report, then success)
//!   dies   rank 1 exits without sending rank 0's signal
//! Prints `signals ok (PATH path)` per rank when every check passed.

#![allow(dead_code)] // `main` is unused where a test includes this file

use splitrt::pgas::{Cmp, GlobalPtr, Pgas, SignalOp};
use splitrt::{Error, ErrorKind};

fn main() {
    let mut a = std::env::args().skip(1);
    let mode = a.next().unwrap_or_else(|| "conformance".into());
    let iters: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    // a clone outlives the run: a failing rank reports and exits at once
    // (the launcher then ends the job), rather than waiting at exit
    let mut keep = None;
    let r = Pgas::attach().and_then(|pg| {
        keep = Some(pg.clone());
        match mode.as_str() {
            "conformance" => run_on(iters, pg),
            "never" | "late" | "dies" => waits(&mode, pg),
            _ => Err(Error::usage(format!("unknown mode {mode}"))),
        }
    });
    if let Err(e) = r {
        eprintln!("t_signals: {e}");
        std::process::exit(1);
    }
    drop(keep);
}

fn fail(msg: String) -> Error {
    Error::usage(msg)
}

fn expect_err(
    what: &str,
    r: splitrt::Result<impl std::fmt::Debug>,
    needle: &str,
) -> splitrt::Result<()> {
    match r {
        Err(e) if e.to_string().contains(needle) && matches!(e.kind(), ErrorKind::Usage(_)) => {
            Ok(())
        }
        other => Err(fail(format!(
            "{what}: expected a usage error containing {needle:?}, got {other:?}"
        ))),
    }
}

/// The checks on an attached context (`tests/signals.rs` runs them on
/// ranks attached over the verbs model too).
pub fn run_on(iters: usize, pg: Pgas) -> splitrt::Result<()> {
    let (me, n) = (pg.rank(), pg.size());
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    const MAX: usize = 2048;
    let data = pg.alloc_sym::<u64>(MAX)?;
    // 0: data arrived (from left), 1: data read (from right),
    // 2: plain adds, 3: put adds, 4: async
    let sig = pg.alloc_signals(5)?;
    let gather = pg.alloc_sym::<u64>(n)?;
    let each = pg.alloc_signals(n)?; // word p: set by rank p

    // --- data before signal, ITERS times around the ring
    for it in 0..iters {
        let len = 1 + (it * 397 + me * 13) % MAX;
        let block: Vec<u64> = (0..len)
            .map(|k| ((it as u64) << 40) | ((me as u64) << 24) | k as u64)
            .collect();
        // the right neighbour has read my previous block
        sig.wait_until(1, Cmp::Ge, it as u64)?;
        let op = if it % 2 == 0 {
            SignalOp::Set
        } else {
            SignalOp::Add
        };
        let v = if op == SignalOp::Set {
            it as u64 + 1
        } else {
            1
        };
        pg.put_signal(data.ptr(right), &block, sig.at(right, 0), op, v)?;
        // my left neighbour's block #it
        let got = sig.wait_until(0, Cmp::Ge, it as u64 + 1)?;
        if got != it as u64 + 1 {
            return Err(fail(format!(
                "iteration {it}: signal {got}, expected {}",
                it + 1
            )));
        }
        let llen = 1 + (it * 397 + left * 13) % MAX;
        let view = data.local();
        for k in 0..llen {
            let want = ((it as u64) << 40) | ((left as u64) << 24) | k as u64;
            let w = view.get(k);
            if w != want {
                return Err(fail(format!(
                    "iteration {it}: word {k} of {llen} from rank {left} is {w:#x}, expected \
                     {want:#x}: the signal was seen before the data"
                )));
            }
        }
        pg.signal_set(sig.at(left, 1), it as u64 + 1)?;
    }
    sig.wait_until(1, Cmp::Ge, iters as u64)?;
    pg.sync()?;
    pg.barrier()?;

    // --- accumulation from every rank, plain and with data
    const ROUNDS: u64 = 5;
    for _ in 0..ROUNDS {
        for t in 0..n {
            pg.signal_add(sig.at(t, 2), me as u64 + 1)?;
        }
    }
    for t in 0..n {
        pg.put_signal(
            gather.at(t, me),
            &[1000 + me as u64],
            sig.at(t, 3),
            SignalOp::Add,
            1,
        )?;
    }
    let total = ROUNDS * (n * (n + 1) / 2) as u64;
    let got = sig.wait_until(2, Cmp::Eq, total)?;
    if got != total {
        return Err(fail(format!("plain adds reached {got}, expected {total}")));
    }
    sig.wait_until(3, Cmp::Eq, n as u64)?;
    for p in 0..n {
        let g = gather.local().get(p);
        if g != 1000 + p as u64 {
            return Err(fail(format!(
                "gather slot {p} is {g} once its signal counted"
            )));
        }
    }

    // --- any / all / some on local words (exact answers)
    let all: Vec<usize> = (0..n).collect();
    pg.sync()?;
    pg.barrier()?;
    for (p, v) in [5u64, 9, 7].into_iter().enumerate() {
        if p < n {
            each.set(p, v)?;
        }
    }
    if n >= 3 {
        let w = [0, 1, 2];
        check(each.wait_until_any(&w, Cmp::Gt, 6)?, 1, "any > 6")?;
        check(
            each.wait_until_any(&[2, 1], Cmp::Gt, 6)?,
            2,
            "any > 6 in [2, 1]",
        )?;
        check(each.wait_until_any(&w, Cmp::Lt, 6)?, 0, "any < 6")?;
        check(each.wait_until_any(&w, Cmp::Eq, 7)?, 2, "any == 7")?;
        check(each.wait_until_any(&w, Cmp::Le, 5)?, 0, "any <= 5")?;
        check(each.wait_until_any(&w, Cmp::Ne, 5)?, 1, "any != 5")?;
        check(
            each.wait_until_some(&w, Cmp::Ge, 7)?,
            vec![1, 2],
            "some >= 7",
        )?;
        check(
            each.wait_until_some(&w, Cmp::Le, 7)?,
            vec![0, 2],
            "some <= 7",
        )?;
        each.wait_until_all(&w, Cmp::Ge, 5)?;
        each.wait_until_all(&w, Cmp::Le, 9)?;
        each.wait_until_all(&w, Cmp::Ne, 0)?;
        check(each.wait_until(1, Cmp::Gt, 8)?, 9, "wait_until > 8")?;
    }
    each.wait_until_all(&[], Cmp::Eq, 1)?; // empty: at once
    for p in 0..n {
        each.set(p, 0)?;
    }
    pg.barrier()?;

    // --- any / all / some on words every rank sets
    for t in 0..n {
        pg.signal_set(each.at(t, me), me as u64 + 1)?;
    }
    let some = each.wait_until_some(&all, Cmp::Ne, 0)?;
    if some.is_empty()
        || some
            .iter()
            .any(|&p| each.fetch(p).ok() != Some(p as u64 + 1))
    {
        return Err(fail(format!("wait_until_some answered {some:?}")));
    }
    check(
        each.wait_until_any(&all, Cmp::Eq, n as u64)?,
        n - 1,
        "any == n",
    )?;
    each.wait_until_all(&all, Cmp::Ge, 1)?;
    for p in 0..n {
        check(each.fetch(p)?, p as u64 + 1, "fetch after all")?;
    }
    // --- signal_fetch: local and remote
    pg.sync()?;
    pg.barrier()?;
    check(
        pg.signal_fetch(each.at(me, right))?,
        right as u64 + 1,
        "local signal_fetch",
    )?;
    check(
        pg.signal_fetch(each.at(right, me))?,
        me as u64 + 1,
        "remote signal_fetch",
    )?;
    check(
        pg.signal_wait_until(each.at(me, left), Cmp::Eq, left as u64 + 1)?,
        left as u64 + 1,
        "signal_wait_until",
    )?;

    // --- a pending async wait sleeps: its waker waits with the doorbell
    // bridge (no self-wake, no spinning), and dropping it takes it back
    {
        let ep = pg.endpoint();
        let before = ep.traffic_waiters();
        let mut w = Box::pin(sig.wait_until_async(4, Cmp::Eq, u64::MAX));
        let woken = std::sync::Arc::new(Woken(std::sync::atomic::AtomicUsize::new(0)));
        let waker = std::task::Waker::from(woken.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        if let std::task::Poll::Ready(r) = std::future::Future::poll(w.as_mut(), &mut cx) {
            return Err(fail(format!("an unsatisfied async wait is ready: {r:?}")));
        }
        // registered, unless the bridge fired already (traffic: UDP acks)
        let now = ep.traffic_waiters();
        let fired = || woken.0.load(std::sync::atomic::Ordering::SeqCst) > 0;
        if now != before + 1 {
            // taken by a fire: its wake follows (bounded wait for it)
            let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !fired() && std::time::Instant::now() < end {
                std::thread::yield_now();
            }
        }
        if now != before + 1 && !fired() {
            return Err(fail(format!(
                "a pending async wait left no waker with the bridge ({now} waiting, {before} before)"
            )));
        }
        drop(w);
        check(ep.traffic_waiters(), before, "waker taken back on drop")?;
        expect_err(
            "async wait out of range",
            ready_now(sig.wait_until_async(9, Cmp::Eq, 0)),
            "out of range",
        )?;
    }
    // --- an async wait (a current-thread runtime: nothing else polls)
    pg.put_signal(data.ptr(right), &[77], sig.at(right, 4), SignalOp::Set, 7)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| fail(format!("tokio: {e}")))?;
    let v = rt.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            sig.wait_until_async(4, Cmp::Eq, 7),
        )
        .await
        .map_err(|_| fail("the async wait timed out".into()))?
    })?;
    check(v, 7, "async wait")?;
    check(data.local().get(0), 77, "data of the async wait")?;

    // --- misuse: clear errors at the caller
    let not_sig: GlobalPtr<u64> = data.at(me, 0);
    expect_err(
        "wait on a data word",
        pg.signal_wait_until(not_sig, Cmp::Eq, 0),
        "is not a signal word",
    )?;
    expect_err(
        "signal into a data word",
        pg.signal_add(data.at(right, 3), 1),
        "is not a signal word",
    )?;
    expect_err(
        "fetch of a data word",
        pg.signal_fetch(data.at(right, 3)),
        "is not a signal word",
    )?;
    expect_err(
        "put_signal with a data word as signal",
        pg.put_signal(
            data.ptr(right),
            &[1u64],
            data.at(right, 1),
            SignalOp::Set,
            1,
        ),
        "is not a signal word",
    )?;
    expect_err(
        "signal to a rank that does not exist",
        pg.signal_add(sig.at(n + 3, 0), 1),
        "does not exist",
    )?;
    expect_err(
        "put_signal to a rank that does not exist",
        pg.put_signal(data.ptr(n), &[1u64], sig.at(n, 0), SignalOp::Set, 1),
        "does not exist",
    )?;
    if n > 1 {
        expect_err(
            "wait on a peer's word",
            pg.signal_wait_until(sig.at(right, 0), Cmp::Eq, 0),
            "waits only on its own",
        )?;
        expect_err(
            "data and signal to two ranks",
            pg.put_signal(data.ptr(right), &[1u64], sig.at(me, 0), SignalOp::Set, 1),
            "both go to one rank",
        )?;
    }
    expect_err(
        "index out of range",
        sig.wait_until(5, Cmp::Eq, 0),
        "out of range",
    )?;
    expect_err(
        "empty any",
        each.wait_until_any(&[], Cmp::Eq, 0),
        "no signal words",
    )?;
    expect_err(
        "empty some",
        each.wait_until_some(&[], Cmp::Eq, 0),
        "no signal words",
    )?;
    // a hostile peer bypasses the checks: its target refuses, never panics
    pg.raw_signal_for_tests(right, [2, not_sig.offset(), 1] /* add 1 */)?;
    match pg.sync() {
        Err(e) if e.to_string().contains("is not a signal word") => {}
        other => return Err(fail(format!("a raw signal into a data word: {other:?}"))),
    }
    pg.raw_signal_for_tests(right, [99, sig.at(right, 0).offset(), 1])?;
    match pg.sync() {
        Err(e) if e.to_string().contains("unknown signal operation") => {}
        other => return Err(fail(format!("a raw signal with a bad op: {other:?}"))),
    }

    pg.barrier()?;
    pg.free_signals(each)?;
    pg.free_sym(gather)?;
    pg.free_signals(sig)?;
    pg.free_sym(data)?;
    println!("signals ok ({:?} path) rank {me} of {n}", pg.rma_path());
    pg.finish()
}

/// A waker that counts its wakes.
struct Woken(std::sync::atomic::AtomicUsize);
impl std::task::Wake for Woken {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Poll a future that is ready at its first poll.
fn ready_now<T>(f: impl std::future::Future<Output = splitrt::Result<T>>) -> splitrt::Result<T> {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::future::Future::poll(f.as_mut(), &mut cx) {
        std::task::Poll::Ready(r) => r,
        std::task::Poll::Pending => Err(fail("expected a ready future".into())),
    }
}

fn check<T: PartialEq + std::fmt::Debug>(got: T, want: T, what: &str) -> splitrt::Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(fail(format!("{what}: got {got:?}, expected {want:?}")))
    }
}

/// Rank 0 waits for word 0, which rank 1 sends late (`late`), never
/// (`never`), or not before it dies (`dies`).
fn waits(mode: &str, pg: Pgas) -> splitrt::Result<()> {
    let s = pg.alloc_signals(1)?;
    match (pg.rank(), mode) {
        (0, _) => {
            s.wait_until(0, Cmp::Eq, 1)?;
        }
        (1, "late") => {
            // a late peer (not synchronisation: rank 0's report is the point)
            std::thread::sleep(std::time::Duration::from_secs(2));
            pg.signal_set(s.at(0, 0), 1)?;
        }
        (1, "dies") => std::process::exit(3),
        _ => {}
    }
    println!("done {}", pg.rank());
    pg.finish()
}
