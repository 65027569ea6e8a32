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
//! * Vector waits and status masks (`vector`, [`vector_on`]): the
//!   `_all / _any / _some` forms with a compare value per word and with a
//!   mask, by index and by global pointer, exact answers on local words,
//!   OpenSHMEM's consume-each-word-once loops against every rank's
//!   put_signals, and their misuse errors (naming the rank).
//!
//! Usage: t_signals [conformance [ITERS] | vector [ROUNDS] | vidle | vnever | never | late | dies]
//!   never  rank 0 waits for a signal no rank sends (for the hang report)
//!   late   rank 1 sends rank 0's signal after 2 s (a report, then success)
//!   dies   rank 1 exits without sending rank 0's signal
//!   vidle  rank 0 waits with wait_until_all_vector for two words, rank 1
//!          sets the second 1 s late; rank 0 prints `vector wait: C ms
//!          CPU, R ms runnable, W ms, S sleeps` (its waiting thread's CPU
//!          time, time on or waiting for a CPU, the wall time, and how
//!          often it blocked)
//!   vnever rank 0 waits with wait_until_all_vector for words 0 and 1, of
//!          which rank 1 sets only word 0 (for the hang report)
//!   async_vectors  the masked and vector waits as futures (see
//!          `async_vectors_on`)
//!   vfreed a pointer-form vector future whose signal array is freed
//!          while it is pending (see `vector_freed_on`)
//!   vrealloc a pointer-form vector future whose signal array is freed and
//!          a new signal array allocated at the same offset (see
//!          `vector_realloc_on`)
//! Prints `signals ok (PATH path)` per rank when every check passed
//! (`vector signals ok` for `vector`).

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
            "vector" => vector_on(iters, pg),
            "vidle" => vector_idle(pg),
            "vnever" => vector_never(pg),
            "never" | "late" | "dies" => waits(&mode, pg),
            "async_sets" => async_sets_on(iters, pg),
            "async_vectors" => async_vectors_on(iters, pg),
            "vfreed" => vector_freed_on(pg),
            "vrealloc" => vector_realloc_on(pg),
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

/// The vector and masked waits (OpenSHMEM 1.5 `shmem_wait_until_{all,any,
/// some}{,_vector}` with `status`), `rounds` times the cross-rank part
/// (`tests/signals.rs` runs them on ranks over the verbs model too).
pub fn vector_on(rounds: usize, pg: Pgas) -> splitrt::Result<()> {
    let (me, n) = (pg.rank(), pg.size());
    let right = (me + 1) % n;
    let data = pg.alloc_sym::<u64>(4)?;
    let v = pg.alloc_signals(6)?;
    let from = pg.alloc_signals(n)?; // word p: signalled by rank p
    let gather = pg.alloc_sym::<u64>(n)?;

    // --- exact answers on words set locally: [5, 9, 7, 0, 3, 8]
    for (i, x) in [5u64, 9, 7, 0, 3, 8].into_iter().enumerate() {
        v.set(i, x)?;
    }
    let w3 = [0, 1, 2];
    let w4 = [0, 1, 2, 3];
    v.wait_until_all_vector(&w3, None, Cmp::Eq, &[5, 9, 7])?;
    v.wait_until_all_vector(&[5, 4, 3], None, Cmp::Le, &[8, 3, 0])?;
    v.wait_until_all_vector(
        &w4,
        Some(&[false, true, false, true]),
        Cmp::Ge,
        &[5, 99, 7, 99],
    )?;
    let none: [usize; 0] = [];
    v.wait_until_all_vector(&none, None, Cmp::Eq, &[])?; // empty: at once
    v.wait_until_all_vector(&w3, Some(&[true; 3]), Cmp::Eq, &[1, 1, 1])?; // all masked
    check(
        v.wait_until_any_vector(&w3, None, Cmp::Eq, &[4, 9, 7])?,
        Some(1),
        "any_vector ==",
    )?;
    check(
        v.wait_until_any_vector(&w3, Some(&[false, true, false]), Cmp::Eq, &[4, 9, 7])?,
        Some(2),
        "any_vector == masked",
    )?;
    check(
        v.wait_until_any_vector(&[4, 0], None, Cmp::Gt, &[2, 4])?,
        Some(0),
        "any_vector in [4, 0]: position 0 (word 4)",
    )?;
    check(
        v.wait_until_any_vector(&w3, Some(&[true; 3]), Cmp::Eq, &[5, 9, 7])?,
        None,
        "any_vector all masked",
    )?;
    check(
        v.wait_until_any_vector(&none, None, Cmp::Eq, &[])?,
        None,
        "any_vector empty",
    )?;
    check(
        v.wait_until_some_vector(&w4, None, Cmp::Ge, &[5, 10, 7, 0])?,
        vec![0, 2, 3],
        "some_vector >=",
    )?;
    check(
        v.wait_until_some_vector(
            &w4,
            Some(&[true, false, false, false]),
            Cmp::Ge,
            &[5, 10, 7, 0],
        )?,
        vec![2, 3],
        "some_vector >= masked",
    )?;
    check(
        v.wait_until_some_vector(&w4, Some(&[true; 4]), Cmp::Ge, &[0; 4])?,
        vec![],
        "some_vector all masked",
    )?;
    check(
        v.wait_until_some_vector(&[5, 1], None, Cmp::Ne, &[8, 8])?,
        vec![1],
        "some_vector != in [5, 1]",
    )?;
    // the masked scalar forms
    check(
        v.wait_until_any_masked(&w3, &[true, false, false], Cmp::Gt, 6)?,
        Some(1),
        "any_masked > 6",
    )?;
    check(
        v.wait_until_any_masked(&w3, &[true, true, false], Cmp::Gt, 6)?,
        Some(2),
        "any_masked > 6, two masked",
    )?;
    check(
        v.wait_until_any_masked(&w3, &[true; 3], Cmp::Gt, 6)?,
        None,
        "any_masked all masked",
    )?;
    check(
        v.wait_until_some_masked(&w3, &[false, true, false], Cmp::Ge, 5)?,
        vec![0, 2],
        "some_masked >= 5",
    )?;
    // positions in `which`, not words: they index `status`
    check(
        v.wait_until_any_masked(&[2, 1, 0], &[true, false, false], Cmp::Gt, 6)?,
        Some(1),
        "any_masked in [2, 1, 0]: position 1 (word 1)",
    )?;
    check(
        v.wait_until_some_masked(&[5, 2, 0], &[false, true, false], Cmp::Ge, 5)?,
        vec![0, 2],
        "some_masked in [5, 2, 0]: positions 0 and 2 (words 5 and 0)",
    )?;
    check(
        v.wait_until_some_masked(&w3, &[true; 3], Cmp::Ge, 5)?,
        vec![],
        "some_masked all masked",
    )?;
    v.wait_until_all_masked(&w4, &[false, false, false, true], Cmp::Ge, 5)?; // word 3 (0) masked
    v.wait_until_all_masked(&w4, &[true; 4], Cmp::Eq, 1)?;
    // by global pointer: positions in the list
    let ptrs = [v.at(me, 3), v.at(me, 1), v.at(me, 5)];
    check(
        pg.wait_until_any_vector(&ptrs, None, Cmp::Eq, &[1, 9, 8])?,
        Some(1),
        "Pgas::wait_until_any_vector",
    )?;
    check(
        pg.wait_until_some_vector(&ptrs, Some(&[false, true, false]), Cmp::Ge, &[0, 0, 8])?,
        vec![0, 2],
        "Pgas::wait_until_some_vector",
    )?;
    pg.wait_until_all_vector(&ptrs, None, Cmp::Eq, &[0, 9, 8])?;
    pg.wait_until_all_vector(&[], None, Cmp::Eq, &[])?;

    // --- against every rank: the OpenSHMEM loops take each word once
    let all: Vec<usize> = (0..n).collect();
    for round in 0..rounds as u64 {
        // a: each rank p puts its slot and sets word p to its own value;
        // wait for every word's value at once
        pg.sync()?;
        pg.barrier()?;
        for t in 0..n {
            pg.put_signal(
                gather.at(t, me),
                &[(round << 32) | (1000 + me as u64)],
                from.at(t, me),
                SignalOp::Set,
                3 * round + me as u64 + 1,
            )?;
        }
        let want: Vec<u64> = (0..n as u64).map(|p| 3 * round + p + 1).collect();
        from.wait_until_all_vector(&all, None, Cmp::Eq, &want)?;
        check_slots(&gather, round, 1000, &all, "all_vector")?;
        // b: any with a status mask, one word at a time
        pg.sync()?;
        pg.barrier()?;
        for t in 0..n {
            pg.put_signal(
                gather.at(t, me),
                &[(round << 32) | (2000 + me as u64)],
                from.at(t, me),
                SignalOp::Add,
                1,
            )?;
        }
        let mut done = vec![false; n];
        let mut taken = 0;
        // (each word holds its sender's value + 1 now: a vector of values)
        let want: Vec<u64> = (0..n as u64).map(|p| 3 * round + p + 2).collect();
        while let Some(p) = from.wait_until_any_vector(&all, Some(&done), Cmp::Eq, &want)? {
            if done[p] {
                return Err(fail(format!("any_vector answered {p} twice")));
            }
            done[p] = true;
            taken += 1;
            check_slots(&gather, round, 2000, &[p], "any_vector")?;
        }
        check(taken, n, "any_vector took every word once")?;
        // c: some with a status mask
        pg.sync()?;
        pg.barrier()?;
        for t in 0..n {
            pg.put_signal(
                gather.at(t, me),
                &[(round << 32) | (3000 + me as u64)],
                from.at(t, me),
                SignalOp::Set,
                u64::MAX - me as u64,
            )?;
        }
        let mut done = vec![false; n];
        let mut taken = 0;
        loop {
            let hits = from.wait_until_some_masked(&all, &done, Cmp::Gt, u64::MAX - n as u64)?;
            if hits.is_empty() {
                break;
            }
            for &p in &hits {
                if done[p] {
                    return Err(fail(format!("some_masked answered {p} twice")));
                }
                done[p] = true;
                taken += 1;
            }
            check_slots(&gather, round, 3000, &hits, "some_masked")?;
        }
        check(taken, n, "some_masked took every word once")?;
        // back to 0 for the next round (nobody signals until the barrier)
        for p in 0..n {
            from.set(p, 0)?;
        }
    }
    pg.sync()?;
    pg.barrier()?;

    // --- misuse: a clear usage error at the caller, naming the rank
    let at_me = format!("rank {me}");
    let named = |what: &str, r: splitrt::Result<()>, needle: &str| match r {
        Err(e)
            if e.to_string().contains(needle)
                && e.to_string().contains(&at_me)
                && matches!(e.kind(), ErrorKind::Usage(_)) =>
        {
            Ok(())
        }
        other => Err(fail(format!(
            "{what}: expected a usage error of {at_me} containing {needle:?}, got {other:?}"
        ))),
    };
    named(
        "mask shorter than the words",
        v.wait_until_all_masked(&w3, &[false, false], Cmp::Eq, 0),
        "the status mask has 2 entries for 3 signal words",
    )?;
    named(
        "mask longer than the words",
        v.wait_until_any_masked(&w3, &[false; 4], Cmp::Eq, 0)
            .map(drop),
        "the status mask has 4 entries for 3 signal words",
    )?;
    named(
        "vector mask of another length",
        v.wait_until_some_vector(&w3, Some(&[false]), Cmp::Eq, &[0, 0, 0])
            .map(drop),
        "the status mask has 1 entries for 3 signal words",
    )?;
    named(
        "too few compare values",
        v.wait_until_all_vector(&w3, None, Cmp::Eq, &[5, 9]),
        "2 compare values for 3 signal words",
    )?;
    named(
        "compare values for an empty list",
        v.wait_until_any_vector(&none, None, Cmp::Eq, &[1])
            .map(drop),
        "1 compare values for 0 signal words",
    )?;
    named(
        "vector index out of range",
        v.wait_until_all_vector(&[0, 6], None, Cmp::Eq, &[5, 0]),
        "signal index 6 is out of range",
    )?;
    named(
        "masked index out of range",
        v.wait_until_some_masked(&[9], &[false], Cmp::Eq, 0)
            .map(drop),
        "signal index 9 is out of range",
    )?;
    named(
        "masked-out index out of range (still refused)",
        v.wait_until_all_masked(&[0, 7], &[false, true], Cmp::Eq, 5),
        "signal index 7 is out of range",
    )?;
    named(
        "vector wait on a data word",
        pg.wait_until_all_vector(&[v.at(me, 0), data.at(me, 1)], None, Cmp::Eq, &[5, 0]),
        "is not a signal word",
    )?;
    named(
        "vector wait on a data word (masked out: still refused)",
        pg.wait_until_any_vector(&[data.at(me, 1)], Some(&[true]), Cmp::Eq, &[0])
            .map(drop),
        "is not a signal word",
    )?;
    named(
        "pointer vector with a short mask",
        pg.wait_until_some_vector(&ptrs, Some(&[]), Cmp::Eq, &[0; 3])
            .map(drop),
        "the status mask has 0 entries for 3 signal words",
    )?;
    if n > 1 {
        named(
            "vector wait on a peer's word",
            pg.wait_until_all_vector(&[v.at(right, 0)], None, Cmp::Eq, &[5]),
            "waits only on its own",
        )?;
    }

    pg.barrier()?;
    pg.free_sym(gather)?;
    pg.free_signals(from)?;
    pg.free_signals(v)?;
    pg.free_sym(data)?;
    println!(
        "vector signals ok ({:?} path) rank {me} of {n}",
        pg.rma_path()
    );
    pg.finish()
}

/// Gather slots `ps` hold round `round`'s values `base + p`.
fn check_slots(
    gather: &splitrt::pgas::SymArray<u64>,
    round: u64,
    base: u64,
    ps: &[usize],
    what: &str,
) -> splitrt::Result<()> {
    let view = gather.local();
    for &p in ps {
        let want = (round << 32) | (base + p as u64);
        let g = view.get(p);
        if g != want {
            return Err(fail(format!(
                "{what}, round {round}: slot {p} is {g:#x} once its signal was seen, \
                 expected {want:#x}"
            )));
        }
    }
    Ok(())
}

/// Rank 0 waits for words 0 and 1 with `wait_until_all_vector`; rank 1
/// sets word 0 at once and word 1 a second later. Rank 0 reports its
/// waiting thread's CPU time over the wait.
fn vector_idle(pg: Pgas) -> splitrt::Result<()> {
    let s = pg.alloc_signals(2)?;
    match pg.rank() {
        0 => {
            let (t, c, (r0, v0)) = (std::time::Instant::now(), thread_cpu(), sched());
            s.wait_until_all_vector(&[0, 1], None, Cmp::Eq, &[1, 2])?;
            let (cpu, wall, (r1, v1)) = (thread_cpu() - c, t.elapsed(), sched());
            println!(
                "vector wait: {} ms CPU, {} ms runnable, {} ms, {} sleeps",
                cpu.as_millis(),
                (r1 - r0) / 1_000_000,
                wall.as_millis(),
                v1 - v0
            );
        }
        1 => {
            pg.signal_set(s.at(0, 0), 1)?;
            pg.sync()?;
            // a late peer (not synchronisation: rank 0's idle wait is the point)
            std::thread::sleep(std::time::Duration::from_secs(1));
            pg.signal_set(s.at(0, 1), 2)?;
        }
        _ => {}
    }
    pg.sync()?;
    pg.barrier()?;
    println!("done {}", pg.rank());
    pg.finish()
}

/// Rank 0 waits for words 0 (== 1) and 1 (>= 2); rank 1 sets word 0 only.
fn vector_never(pg: Pgas) -> splitrt::Result<()> {
    let s = pg.alloc_signals(2)?;
    match pg.rank() {
        0 => s.wait_until_all_vector(&[0, 1], None, Cmp::Ge, &[1, 2])?,
        1 => {
            pg.signal_set(s.at(0, 0), 1)?;
            pg.sync()?;
        }
        _ => {}
    }
    println!("done {}", pg.rank());
    pg.finish()
}

/// This thread's time on a CPU or waiting for one (ns, from
/// `/proc/thread-self/schedstat`: a busy spin is runnable all along,
/// however loaded the machine) and its voluntary context switches (it
/// blocked).
fn sched() -> (u64, u64) {
    let ns = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .map(|s| {
            s.split_whitespace()
                .take(2)
                .filter_map(|x| x.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    let sleeps = std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0);
    (ns, sleeps)
}

/// This thread's CPU time.
fn thread_cpu() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer for clock_gettime.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `async_sets`: the set waits as futures (`wait_until_{any,all,some}
/// _async`), with the progress thread on, each made before the left
/// neighbour's signals may have come (put_signal, signal_add, signal_set
/// from it; from this rank itself on 1 rank) and awaited under
/// [`park_on`]; then a wait that stays pending for 300 ms must be polled
/// only a few times (a future that wakes itself, or is woken by nothing
/// that concerns it in a loop, spins). Prints `async sets ok (PATH path)`.
pub fn async_sets_on(rounds: usize, pg: Pgas) -> splitrt::Result<()> {
    use splitrt::am::Progress;
    let (me, n) = (pg.rank(), pg.size());
    let right = (me + 1) % n;
    pg.endpoint().set_progress(Progress::Thread)?;
    let data = pg.alloc_sym::<u64>(1)?;
    let sig = pg.alloc_signals(4)?;
    for round in 1..=rounds as u64 {
        // word 0: set to the round, 1: +1 a round, 2: put_signal set, 3: never
        let all = sig.wait_until_all_async(&[0, 1, 2], Cmp::Ge, round);
        let any = sig.wait_until_any_async(&[3, 1], Cmp::Ge, round);
        let some = sig.wait_until_some_async(&[3, 2, 0], Cmp::Ge, round);
        pg.signal_set(sig.at(right, 0), round)?;
        pg.signal_add(sig.at(right, 1), 1)?;
        pg.put_signal(
            data.ptr(right),
            &[round],
            sig.at(right, 2),
            SignalOp::Set,
            round,
        )?;
        park_on(all).map_err(|e| fail(format!("round {round} all: {e}")))?;
        if data.local().get(0) < round {
            return Err(fail(format!(
                "round {round}: all: the put_signal's data is {} after its signal",
                data.local().get(0)
            )));
        }
        check(park_on(any)?.1, 1, "any: the first word that holds")?;
        check(park_on(some)?.1, vec![2, 0], "some: the words that hold")?;
        // the AM path's signals complete at sync
        pg.sync()?;
    }
    expect_err(
        "async any of no words",
        ready_now(sig.wait_until_any_async(&[], Cmp::Eq, 0)),
        "no signal words",
    )?;
    ready_now(sig.wait_until_all_async(&[], Cmp::Eq, 5))?;
    expect_err(
        "async some out of range",
        ready_now(sig.wait_until_some_async(&[0, 9], Cmp::Eq, 0)),
        "out of range",
    )?;
    pg.barrier()?;
    // no spinning: rank 0's wait is pending until rank 1 signals, 300 ms on
    if n >= 2 && me == 0 {
        let (polls, i) = park_on(sig.wait_until_any_async(&[3], Cmp::Eq, 7))?;
        check(i, 3, "the late signal")?;
        if polls > 1000 {
            return Err(fail(format!(
                "a set wait pending for 300 ms was polled {polls} times: it spins"
            )));
        }
    } else if n >= 2 && me == 1 {
        let end = std::time::Instant::now() + std::time::Duration::from_millis(300);
        pg.endpoint()
            .wait_until(|| std::time::Instant::now() >= end)?;
        pg.signal_set(sig.at(0, 3), 7)?;
        pg.sync()?;
    }
    pg.barrier()?;
    pg.endpoint().set_progress(Progress::Polling)?;
    println!("async sets ok ({:?} path) rank {me} of {n}", pg.rma_path());
    Ok(())
}

/// `async_vectors`: the masked and vector waits as futures
/// (`Signals::wait_until_{all,any,some}_{masked,vector}_async`,
/// `Pgas::wait_until_{all,any,some}_vector_async`), with the progress
/// thread on, each made before the left neighbour's signals may have come
/// and awaited under [`park_on`] (as `async_sets`); their argument errors
/// at the future; then a masked wait pending for 300 ms must be polled
/// only a few times. Prints `async vectors ok (PATH path)`.
pub fn async_vectors_on(rounds: usize, pg: Pgas) -> splitrt::Result<()> {
    use splitrt::am::Progress;
    let (me, n) = (pg.rank(), pg.size());
    let right = (me + 1) % n;
    pg.endpoint().set_progress(Progress::Thread)?;
    let data = pg.alloc_sym::<u64>(1)?;
    let sig = pg.alloc_signals(4)?;
    let at = |i| sig.at(me, i);
    for round in 1..=rounds as u64 {
        // word 0: set to the round, 1: +1 a round, 2: put_signal set, 3: never
        let (no, yes) = (false, true);
        let all_m = sig.wait_until_all_masked_async(&[0, 1, 3], &[no, no, yes], Cmp::Ge, round);
        let any_m = sig.wait_until_any_masked_async(&[3, 1, 2], &[no, yes, no], Cmp::Ge, round);
        let some_m = sig.wait_until_some_masked_async(&[0, 3, 2], &[no, no, yes], Cmp::Ge, round);
        let all_v = sig.wait_until_all_vector_async(&[0, 1, 2], None, Cmp::Ge, &[round, 1, round]);
        let any_v = sig.wait_until_any_vector_async(&[3, 1], Some(&[no, no]), Cmp::Ge, &[1, round]);
        let some_v =
            sig.wait_until_some_vector_async(&[3, 2, 0], None, Cmp::Ge, &[1, round, round]);
        let all_p = pg.wait_until_all_vector_async(&[at(2), at(0)], None, Cmp::Ge, &[round, round]);
        let any_p =
            pg.wait_until_any_vector_async(&[at(3), at(2)], Some(&[no, no]), Cmp::Ge, &[1, round]);
        let some_p = pg.wait_until_some_vector_async(
            &[at(1), at(3), at(0)],
            None,
            Cmp::Ge,
            &[round, 1, round],
        );
        pg.signal_set(sig.at(right, 0), round)?;
        pg.signal_add(sig.at(right, 1), 1)?;
        pg.put_signal(
            data.ptr(right),
            &[round],
            sig.at(right, 2),
            SignalOp::Set,
            round,
        )?;
        let w = |what: &str, e: Error| fail(format!("round {round} {what}: {e}"));
        park_on(all_v).map_err(|e| w("all vector", e))?;
        if data.local().get(0) < round {
            return Err(fail(format!(
                "round {round}: all vector: the put_signal's data is {} after its signal",
                data.local().get(0)
            )));
        }
        park_on(all_m).map_err(|e| w("all masked", e))?;
        park_on(all_p).map_err(|e| w("all vector by pointer", e))?;
        check(
            park_on(any_m)?.1,
            Some(2),
            "any masked: the position that holds",
        )?;
        check(
            park_on(some_m)?.1,
            vec![0],
            "some masked: the positions that hold",
        )?;
        check(
            park_on(any_v)?.1,
            Some(1),
            "any vector: the position that holds",
        )?;
        check(
            park_on(some_v)?.1,
            vec![1, 2],
            "some vector: the positions that hold",
        )?;
        check(park_on(any_p)?.1, Some(1), "any vector by pointer")?;
        check(park_on(some_p)?.1, vec![0, 2], "some vector by pointer")?;
        // the AM path's signals complete at sync
        pg.sync()?;
    }
    // as the blocking forms: an empty or fully masked list at once
    check(
        ready_now(sig.wait_until_any_masked_async(&[3], &[true], Cmp::Eq, 9))?,
        None,
        "async any of fully masked words",
    )?;
    ready_now(sig.wait_until_all_vector_async(&[], None, Cmp::Eq, &[]))?;
    check(
        ready_now(pg.wait_until_some_vector_async(&[], None, Cmp::Eq, &[]))?,
        Vec::<usize>::new(),
        "async some of no words by pointer",
    )?;
    // the blocking forms' argument checks, at the future
    expect_err(
        "async masked: short mask",
        ready_now(sig.wait_until_all_masked_async(&[0, 1], &[false], Cmp::Eq, 0)),
        "the status mask has 1 entries for 2 signal words",
    )?;
    expect_err(
        "async masked out of range",
        ready_now(sig.wait_until_some_masked_async(&[0, 9], &[false, true], Cmp::Eq, 0)),
        "out of range",
    )?;
    expect_err(
        "async vector: short values",
        ready_now(sig.wait_until_any_vector_async(&[0, 1], None, Cmp::Eq, &[0])),
        "1 compare values for 2 signal words",
    )?;
    expect_err(
        "async vector by pointer: not a signal word",
        ready_now(pg.wait_until_all_vector_async(&[data.ptr(me)], None, Cmp::Eq, &[0])),
        "is not a signal word",
    )?;
    if n >= 2 {
        expect_err(
            "async vector by pointer: another rank's word",
            ready_now(pg.wait_until_any_vector_async(&[sig.at(right, 0)], None, Cmp::Eq, &[0])),
            "a rank waits only on its own signal words",
        )?;
    }
    let e = ready_now(sig.wait_until_all_vector_async(&[0, 1], None, Cmp::Eq, &[0]))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    if !e.contains(&format!("rank {me}")) {
        return Err(fail(format!(
            "the vector wait's error names no rank: {e:?}"
        )));
    }
    pg.barrier()?;
    // no spinning: rank 0's wait is pending until rank 1 signals, 300 ms on
    if n >= 2 && me == 0 {
        // Ge: rank 1 sets 8 300 ms after 7 (a loaded machine may not look
        // in between)
        let f = sig.wait_until_any_masked_async(&[2, 3], &[true, false], Cmp::Ge, 7);
        let (polls, i) = park_on(f)?;
        check(i, Some(1), "the late signal")?;
        if polls > 1000 {
            return Err(fail(format!(
                "a masked wait pending for 300 ms was polled {polls} times: it spins"
            )));
        }
        let f = pg.wait_until_all_vector_async(&[at(3), at(0)], None, Cmp::Ge, &[8, 1]);
        let (polls, ()) = park_on(f)?;
        if polls > 1000 {
            return Err(fail(format!(
                "a vector wait pending for 300 ms was polled {polls} times: it spins"
            )));
        }
    } else if n >= 2 && me == 1 {
        for v in [7, 8] {
            let end = std::time::Instant::now() + std::time::Duration::from_millis(300);
            pg.endpoint()
                .wait_until(|| std::time::Instant::now() >= end)?;
            pg.signal_set(sig.at(0, 3), v)?;
            pg.sync()?;
        }
    }
    pg.barrier()?;
    pg.endpoint().set_progress(Progress::Polling)?;
    println!(
        "async vectors ok ({:?} path) rank {me} of {n}",
        pg.rma_path()
    );
    Ok(())
}

/// Run `f` on this thread, parking between polls (a pending future must
/// wake the thread: a 20-s park that times out is a lost wake-up): its
/// polls and its output.
fn park_on<T>(
    f: impl std::future::Future<Output = splitrt::Result<T>>,
) -> splitrt::Result<(usize, T)> {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    for polls in 1..=100_000 {
        if let std::task::Poll::Ready(r) = f.as_mut().poll(&mut cx) {
            return r.map(|t| (polls, t));
        }
        let t = std::time::Instant::now();
        std::thread::park_timeout(std::time::Duration::from_secs(20));
        if t.elapsed() >= std::time::Duration::from_secs(20) {
            return Err(fail("a pending signal wait was never woken".into()));
        }
    }
    Err(fail(
        "a pending signal wait was polled 100000 times: it spins".into(),
    ))
}

/// `vfreed`: a `Pgas::wait_until_{all,any,some}_vector_async` future
/// pending on this rank's signal word whose array is then freed (the
/// future borrows only the `Pgas`, so this compiles), its memory handed
/// out again by `alloc_sym` and set through the new allocation: the next
/// poll must end the future with an error naming the rank ("not a signal
/// word"), never resolve on data that is no longer a signal word. With
/// the progress thread on (on the AM path it would copy a put into the
/// reused memory while the future loads it). Prints `vector freed ok
/// (PATH path)` (and whether the memory was reused).
pub fn vector_freed_on(pg: Pgas) -> splitrt::Result<()> {
    use splitrt::am::Progress;
    let (me, n) = (pg.rank(), pg.size());
    pg.endpoint().set_progress(Progress::Thread)?;
    let sigs = pg.alloc_signals(2)?;
    let (w0, w1) = (sigs.at(me, 0), sigs.at(me, 1));
    let all = pg.wait_until_all_vector_async(&[w0], None, Cmp::Eq, &[1]);
    let any = pg.wait_until_any_vector_async(&[w1, w0], None, Cmp::Eq, &[1, 1]);
    let some = pg.wait_until_some_vector_async(&[w0], Some(&[false]), Cmp::Eq, &[1]);
    let (mut all, mut any, mut some) = (
        std::pin::pin!(all),
        std::pin::pin!(any),
        std::pin::pin!(some),
    );
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    use std::future::Future;
    let pending = all.as_mut().poll(&mut cx).is_pending()
        && any.as_mut().poll(&mut cx).is_pending()
        && some.as_mut().poll(&mut cx).is_pending();
    if !pending {
        return Err(fail("the vector futures resolved before any signal".into()));
    }
    let freed = w0.offset();
    pg.free_signals(sigs)?;
    let data = pg.alloc_sym::<u64>(2)?;
    let reused = data.ptr(me).offset() == freed;
    data.local().set(0, 1);
    data.local().set(1, 1);
    let what = [
        ("all", all.as_mut().poll(&mut cx).map(|r| r.map(drop))),
        ("any", any.as_mut().poll(&mut cx).map(|r| r.map(drop))),
        ("some", some.as_mut().poll(&mut cx).map(|r| r.map(drop))),
    ];
    for (name, p) in what {
        match p {
            std::task::Poll::Ready(Err(e))
                if e.to_string().contains("not a signal word")
                    && e.to_string().contains(&format!("rank {me}")) => {}
            other => {
                return Err(fail(format!(
                    "{name}: a vector future on a freed signal array (memory reused: \
                     {reused}) gave {other:?}, not an error naming rank {me}"
                )))
            }
        }
    }
    pg.free_sym(data)?;
    pg.endpoint().set_progress(Progress::Polling)?;
    println!(
        "vector freed ok ({:?} path) rank {me} of {n} reused {reused}",
        pg.rma_path()
    );
    Ok(())
}

/// `vrealloc`: `Pgas::wait_until_{all,any,some}_vector_async` futures on
/// this rank's signal words, built, then the array freed and a new signal
/// array allocated by `alloc_signals` at the same offset (its words 0):
/// the futures wait on `Eq 0`, which the new array's words satisfy, yet
/// the words they name are gone, so the first poll must end each with an
/// error naming the rank ("not a signal word"), never resolve on the new
/// array's words. Prints `vector realloc ok (PATH path)`.
pub fn vector_realloc_on(pg: Pgas) -> splitrt::Result<()> {
    let (me, n) = (pg.rank(), pg.size());
    let sigs = pg.alloc_signals(2)?;
    let (w0, w1) = (sigs.at(me, 0), sigs.at(me, 1));
    let all = pg.wait_until_all_vector_async(&[w0], None, Cmp::Eq, &[0]);
    let any = pg.wait_until_any_vector_async(&[w1, w0], None, Cmp::Eq, &[0, 0]);
    let some = pg.wait_until_some_vector_async(&[w0], Some(&[false]), Cmp::Eq, &[0]);
    let (mut all, mut any, mut some) = (
        std::pin::pin!(all),
        std::pin::pin!(any),
        std::pin::pin!(some),
    );
    let freed = w0.offset();
    pg.free_signals(sigs)?;
    let again = pg.alloc_signals(2)?;
    if again.at(me, 0).offset() != freed {
        return Err(fail(format!(
            "the new signal array is at {:?}, not at the freed offset {freed:#x}: \
             nothing to check",
            again.at(me, 0)
        )));
    }
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    use std::future::Future;
    let what = [
        ("all", all.as_mut().poll(&mut cx).map(|r| r.map(drop))),
        ("any", any.as_mut().poll(&mut cx).map(|r| r.map(drop))),
        ("some", some.as_mut().poll(&mut cx).map(|r| r.map(drop))),
    ];
    for (name, p) in what {
        match p {
            std::task::Poll::Ready(Err(e))
                if e.to_string().contains("not a signal word")
                    && e.to_string().contains(&format!("rank {me}")) => {}
            other => {
                return Err(fail(format!(
                    "{name}: a vector future on a freed signal array whose offset a new \
                     signal array took gave {other:?}, not an error naming rank {me}"
                )))
            }
        }
    }
    pg.free_signals(again)?;
    println!(
        "vector realloc ok ({:?} path) rank {me} of {n}",
        pg.rma_path()
    );
    Ok(())
}
