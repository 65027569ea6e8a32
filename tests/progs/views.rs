//! Views of a rank's own segment and frozen arrays (issue 23, points 1 and
//! 3), in a real job. Modes:
//!
//! * `alias`: a view read before and after a write through the same
//!   location sees the new value (a `&[u64]` there let LLVM reuse the old
//!   one: `twice` returned (1, 1) at opt-level 1 on the code before views);
//! * `drop`: an array outlives every `Pgas` handle and stays readable and
//!   writable (the code before read unmapped memory: SIGSEGV);
//! * `frozen`: `Pgas::freeze` gives a plain `&[T]`; every put, store,
//!   atomic, blocking write, scoped put, user Long and `write_segment` into
//!   the frozen range is refused at the sender naming the range and rank;
//!   gets still work; `thaw` restores writes; freezing different arrays on
//!   different ranks is refused everywhere.
//! * `race`: a writer thread on every rank puts 64 KiB blocks into every
//!   rank's part of an array without pause while the main thread freezes
//!   it, checks that its `&[u64]` does not change for a while (rank 0
//!   holds it longest), and thaws it, many times. Before the writers
//!   announced themselves to the freeze, and before thaw's first barrier,
//!   a put that passed its check before the freeze, or one from a rank
//!   that had thawed already, changed the slice under rank 0.
//!
//! * `late` (2 ranks, over UDP): rank 1 freezes and seals a range of its
//!   part of an array (the endpoint's calls, alone), then rank 0 sends a
//!   user Long into it (its own check passes: it froze nothing) and rank
//!   1 polls. The deposit is refused as it is written (the
//!   frozen bytes stay as they were) and reported naming rank 0. Before,
//!   UDP wrote the payload when the rank polled, under the frozen range
//!   (only the handler was refused).
//!
//! * `reserved`: every write path (put, blocking write, store, atomic,
//!   scoped put, `Endpoint::write_segment`) and every read path (get,
//!   `read_segment`) into splitrt's reserved bytes and the collectives'
//!   scratch block (offsets below 4 KiB + 256 KiB) is refused, on the
//!   target's part and on this rank's. Before, only the first 4 KiB were
//!   refused: a put into a peer's scratch forged the agreement of a
//!   freeze, so two ranks froze different arrays and a write landed under
//!   a live `FrozenArray::local()` slice (found in review), and
//!   `write_segment` wrote the barrier words other threads read as atomics.
//! * `threads`: a second thread of a rank that calls a collective while the
//!   main thread is inside one is refused, naming the cause; the main
//!   thread's collective completes. Before, the two mixed their steps
//!   (barrier epochs, scratch data) unnoticed.
//!
//! Each mode prints `views <mode> ok (<path>)` on success.

use splitrt::pgas::{Dist, GlobalPtr, LocalView, Pgas};
use splitrt::{EndpointBuilder, Error, Kind, Payload, Result};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let r = match mode.as_str() {
        "alias" => alias(),
        "drop" => dropped(),
        "frozen" => frozen(),
        "race" => race(),
        "late" => late(),
        "sealfail" => seal_fails(),
        "reserved" => reserved(),
        "threads" => threads(),
        _ => Err(Error::usage(
            "usage: t_views alias|drop|frozen|race|late|sealfail|reserved|threads",
        )),
    };
    if let Err(e) = r {
        eprintln!("t_views {mode}: {e}");
        std::process::exit(1);
    }
}

/// Read element 0, write 7 through the global pointer, read again.
#[inline(never)]
fn twice(v: LocalView<'_, u64>, pg: &Pgas, p: GlobalPtr<u64>) -> Result<(u64, u64)> {
    let a = v.get(0);
    pg.write(p, 7)?;
    let b = v.get(0);
    Ok((a, b))
}

fn alias() -> Result<()> {
    let pg = Pgas::attach()?;
    let me = pg.rank();
    let a = pg.alloc_sym::<u64>(4)?;
    let p = a.at(me, 0);
    // the one-thread pattern of the issue, with a view
    let m = a.local();
    pg.write(p, 7)?;
    if m.get(0) != 7 {
        return Err(Error::usage(format!(
            "view read {} after write 7",
            m.get(0)
        )));
    }
    pg.write(p, 1)?;
    let got = twice(a.local(), &pg, p)?;
    if got != (1, 7) {
        return Err(Error::usage(format!(
            "view read {got:?} around a write of 7, expected (1, 7)"
        )));
    }
    // a neighbour's put lands in the view while it lives
    let right = (me + 1) % pg.size();
    pg.barrier()?;
    pg.write(a.at(right, 1), 100 + me as u64)?;
    pg.barrier()?;
    let left = (me + pg.size() - 1) % pg.size();
    if m.get(1) != 100 + left as u64 {
        return Err(Error::usage(format!(
            "view missed the left neighbour's put: {}",
            m.get(1)
        )));
    }
    // an alloc_local block is viewed through its owning handle
    let b = pg.alloc_local::<u32>(16)?;
    let v = b.view();
    v.fill(3);
    pg.write(b.at(2), 9u32)?;
    if v.iter().sum::<u32>() != 3 * 15 + 9 || v.get(2) != 9 {
        return Err(Error::usage("view of an alloc_local block"));
    }
    pg.free_local(b)?;
    println!("views alias ok ({:?} path)", pg.rma_path());
    pg.finish()
}

fn dropped() -> Result<()> {
    let pg = Pgas::attach()?;
    let path = pg.rma_path();
    let a = pg.alloc_sym::<u64>(4)?;
    a.local().set(0, 42 + pg.rank() as u64);
    pg.barrier()?;
    let want = 42 + pg.rank() as u64;
    drop(pg); // every Pgas handle gone: the array keeps the segment mapped
    let got = a.local().get(0);
    a.local().set(1, got + 1);
    if got != want || a.local().get(1) != want + 1 {
        return Err(Error::usage(format!(
            "after drop(pg): read {got}, expected {want}"
        )));
    }
    println!("views drop ok ({path:?} path)");
    Ok(()) // the array's drop finishes the endpoint (exit barrier)
}

/// `r` is an error whose message contains `needle`.
fn expect_err<T>(what: &str, r: Result<T>, needle: &str) -> Result<()> {
    match r {
        Ok(_) => Err(Error::usage(format!("{what}: accepted"))),
        Err(e) if e.to_string().contains(needle) => Ok(()),
        Err(e) => Err(Error::usage(format!("{what}: unexpected error {e}"))),
    }
}

/// A refused write: the error names the frozen range, this rank and the
/// target.
fn refused<T>(what: &str, r: Result<T>, me: usize, peer: usize, range: &str) -> Result<()> {
    match r {
        Ok(_) => Err(Error::usage(format!(
            "{what} into a frozen array: accepted"
        ))),
        Err(e) => {
            let s = e.to_string();
            if s.contains("frozen") && s.contains(range) && e.rank() == Some(me) {
                if e.peer().is_some_and(|p| p != peer) {
                    return Err(Error::usage(format!("{what}: wrong peer in {s}")));
                }
                Ok(())
            } else {
                Err(Error::usage(format!("{what}: unexpected error {s}")))
            }
        }
    }
}

fn frozen() -> Result<()> {
    let mut b = EndpointBuilder::new();
    let user_long = b.request("user_long", Kind::Long, 0, |_tok, _m| {})?;
    let pg = Pgas::attach_with(b)?;
    let (me, n) = (pg.rank(), pg.size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    // (a block before the array, so a put can overlap the array's start
    // from user bytes: the first user block starts where splitrt's end)
    let _pad = pg.alloc_sym::<u64>(8)?;
    let a = pg.alloc_sym::<u64>(8)?;
    a.local().fill(me as u64 + 1);
    pg.barrier()?;
    pg.put(a.at(right, 1), &[100 + me as u64])?; // completed by the freeze
    let f = pg.freeze(a)?;
    let off = f.ptr(0).offset();
    let range = format!("{off:#x}..{:#x}", off + 64);

    // reads: a plain slice here, gets from anywhere
    let mine: &[u64] = f.local();
    let mut want = [me as u64 + 1; 8];
    want[1] = 100 + left as u64;
    if mine != want {
        return Err(Error::usage(format!(
            "frozen contents {mine:?}, expected {want:?}"
        )));
    }
    let theirs = pg.get(f.ptr(right), 8)?.wait()?;
    if theirs[0] != right as u64 + 1 {
        return Err(Error::usage(format!("get from a frozen array: {theirs:?}")));
    }

    // writes: refused at the sender, whichever way they go
    for t in [me, right] {
        let p = f.at(t, 3);
        refused("put", pg.put(p, &[0xbad]), me, t, &range)?;
        refused("write", pg.write(p, 0xbad), me, t, &range)?;
        refused(
            "write_slice",
            pg.write_slice(f.at(t, 6), &[1, 2, 3]),
            me,
            t,
            &range,
        )?;
        refused("store", pg.store(p, &[0xbad]), me, t, &range)?;
        refused("fetch_add", pg.fetch_add(p, 1), me, t, &range)?;
        refused("swap", pg.swap(p, 1), me, t, &range)?;
        refused("compare_swap", pg.compare_swap(p, 0, 1), me, t, &range)?;
        refused(
            "scoped put",
            pg.scope(|s| s.put(p, &[0xbad])),
            me,
            t,
            &range,
        )?;
        let long = Payload::Long {
            data: &[0xbb; 16],
            offset: off + 8,
        };
        refused(
            "user Long",
            pg.endpoint().request(t, user_long, &[], long),
            me,
            t,
            &range,
        )?;
    }
    // a put that only overlaps the range's end
    let before = GlobalPtr::<u64>::new(right, off - 8);
    refused(
        "overlapping put",
        pg.put(before, &[1, 2]),
        me,
        right,
        &range,
    )?;
    let ep = pg.endpoint();
    refused(
        "write_segment",
        ep.write_segment(off + 16, &[1; 8]),
        me,
        me,
        &range,
    )?;
    // writes elsewhere still work meanwhile
    let other = pg.alloc_local::<u64>(1)?;
    pg.write(other.ptr(), 5)?;
    pg.sync()?;
    pg.barrier()?;
    if f.local() != want || pg.get(f.ptr(right), 8)?.wait()?[3] != right as u64 + 1 {
        return Err(Error::usage("a refused write changed a frozen array"));
    }

    // thaw: writes work again
    let a = pg.thaw(f)?;
    pg.put(a.at(right, 2), &[9])?;
    pg.fetch_add(a.at(right, 4), 10)?;
    pg.sync()?;
    pg.barrier()?;
    let v = a.local();
    if v.get(2) != 9 || v.get(4) != me as u64 + 11 {
        return Err(Error::usage(format!("after thaw: {:?}", v.to_vec())));
    }
    ep.write_segment(off + 16, &7u64.to_ne_bytes())?;
    if v.get(2) != 7 {
        return Err(Error::usage("write_segment after thaw"));
    }

    // freeze again, then freeze different arrays on different ranks
    let f = pg.freeze(a)?;
    let (x, y) = (pg.alloc_sym::<u32>(4)?, pg.alloc_sym::<u32>(4)?);
    if n > 1 {
        let (mine, other) = if me % 2 == 0 { (x, y) } else { (y, x) };
        expect_err(
            "freezing different arrays",
            pg.freeze(mine),
            "different arrays",
        )?;
        drop(other);
    }
    let a = pg.thaw(f)?;
    pg.put(a.at(right, 0), &[1])?;
    pg.sync()?;

    // a freeze on rank 0 from inside a write (a handler, say) is refused,
    // on every rank, and leaves nothing frozen (before: rank 0 skipped its
    // own announcement and froze)
    let z = pg.alloc_sym::<u64>(2)?;
    let zoff = z.at(me, 0).offset();
    let why = if me == 0 {
        "inside a write"
    } else {
        "another rank cannot freeze"
    };
    let frozen = if me == 0 {
        splitrt::am::while_writing(|| pg.freeze(z))
    } else {
        pg.freeze(z)
    };
    match frozen {
        Ok(_) => return Err(Error::usage("a freeze inside a write: accepted")),
        Err(e) if e.to_string().contains(why) => {}
        Err(e) => return Err(Error::usage(format!("a freeze inside a write: {e}"))),
    }
    if let Some(r) = pg.endpoint().frozen_segment_range(zoff, 16) {
        return Err(Error::usage(format!("a failed freeze left {r:?} frozen")));
    }

    // a spread array: this rank's elements as a slice, writes refused
    let sp = pg.spread::<u32>(10, Dist::Cyclic)?;
    let n_mine = sp.len_on(me);
    for k in 0..n_mine {
        sp.local().set(k, sp.global_index(me, k) as u32);
    }
    let fs = pg.freeze_spread(sp)?;
    let want: Vec<u32> = (0..n_mine).map(|k| (k * n + me) as u32).collect();
    if fs.local() != want || fs.len() != 10 {
        return Err(Error::usage(format!("frozen spread: {:?}", fs.local())));
    }
    let soff = fs.ptr(0).offset();
    let srange = format!("{soff:#x}..");
    refused("spread put", pg.put(fs.ptr(9), &[0]), me, 9 % n, &srange)?;
    if pg.read(fs.ptr(9))? != 9 {
        return Err(Error::usage("a get from a frozen spread array"));
    }
    let sp = pg.thaw_spread(fs)?;
    pg.barrier()?;
    pg.put(sp.ptr(9), &[90])?;
    pg.sync()?;
    pg.barrier()?;
    if pg.read(sp.ptr(9))? != 90 {
        return Err(Error::usage("a put after thaw_spread"));
    }
    println!("views frozen ok ({:?} path)", pg.rma_path());
    pg.finish()
}

/// Elements of the raced array (64 KiB: a put copies for microseconds).
const RACE_LEN: usize = 8192;

fn race() -> Result<()> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let pg = Pgas::attach()?;
    let (me, n) = (pg.rank(), pg.size());
    let mut a = pg.alloc_sym::<u64>(RACE_LEN)?;
    let targets: Vec<GlobalPtr<u64>> = (0..n).map(|r| a.ptr(r)).collect();
    pg.barrier()?;
    let stop = Arc::new(AtomicBool::new(false));
    let (puts, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let writer = {
        let (pg, stop, puts, refused) = (pg.clone(), stop.clone(), puts.clone(), refused.clone());
        std::thread::spawn(move || -> Result<()> {
            let mut buf = vec![0u64; RACE_LEN];
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                buf.fill(((me as u64) << 48) | k);
                for &t in &targets {
                    match pg.put(t, &buf) {
                        Ok(()) => puts.fetch_add(1, Ordering::Relaxed),
                        Err(e) if e.to_string().contains("frozen") => {
                            refused.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(e) => return Err(e),
                    };
                }
            }
            Ok(())
        })
    };
    let rounds = 200;
    let mut changed = None;
    for round in 0..rounds {
        let f = pg.freeze(a)?;
        let s: &[u64] = f.local();
        let first = s.to_vec();
        // Hold the slice: rank 0 longest, so the others reach thaw first.
        let hold = if me == 0 { 300 } else { 20 };
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_micros(hold) && changed.is_none() {
            for (i, want) in first.iter().enumerate().step_by(61) {
                // SAFETY: reads inside the slice; volatile so the compiler
                // reads the bytes again instead of trusting the `&[u64]`
                // (the point is to see whether anything wrote them).
                let now = unsafe { std::ptr::read_volatile(&s[i]) };
                if now != *want {
                    changed = Some((round, i, *want, now));
                    break;
                }
            }
        }
        a = pg.thaw(f)?;
    }
    stop.store(true, Ordering::Relaxed);
    writer
        .join()
        .map_err(|_| Error::usage("the writer thread panicked"))??;
    if let Some((round, i, was, now)) = changed {
        return Err(Error::usage(format!(
            "rank {me}: element {i} of a frozen array changed from {was:#x} to {now:#x} \
             in round {round} while this rank held its &[u64]"
        )));
    }
    let (p, r) = (
        puts.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    if p == 0 || r == 0 {
        return Err(Error::usage(format!(
            "rank {me}: the writer did not race the freezes ({p} puts, {r} refused)"
        )));
    }
    pg.barrier()?;
    println!(
        "views race ok ({:?} path, {p} puts, {r} refused)",
        pg.rma_path()
    );
    pg.finish()
}

/// A seal that fails (here: called inside a write announcement, so its
/// quiesce refuses) leaves the range frozen and sealed: past the freeze's
/// barrier other ranks may hold slices of it already.
fn seal_fails() -> Result<()> {
    let pg = Pgas::attach()?;
    let a = pg.alloc_sym::<u64>(8)?;
    let off = a.at(pg.rank(), 0).offset();
    let ep = pg.endpoint();
    // SAFETY: a test of the seal's error path, not the PGAS protocol: no
    // reference to the range is made.
    unsafe { ep.freeze_segment_range(off, 64) }?;
    let e = splitrt::am::while_writing(|| {
        // SAFETY: as above.
        unsafe { ep.seal_segment_range(off, 64) }
    });
    if e.is_ok() {
        eprintln!("t_views sealfail: a seal inside a write announcement succeeded");
        std::process::exit(1);
    }
    if ep.frozen_segment_range(off, 64).is_none() {
        eprintln!("t_views sealfail: a failed seal unfroze the range");
        std::process::exit(1);
    }
    if ep.write_segment(off, &[1; 8]).is_ok() {
        eprintln!("t_views sealfail: a write into the range was accepted after a failed seal");
        std::process::exit(1);
    }
    // SAFETY: as above: no reference to the range was made.
    unsafe { ep.unseal_segment_range(off, 64) }?;
    // SAFETY: as above.
    unsafe { ep.thaw_segment_range(off, 64) }?;
    println!("views sealfail ok");
    pg.finish()
}

fn late() -> Result<()> {
    let mut b = EndpointBuilder::new();
    static HANDLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let user_long = b.request("user_long", Kind::Long, 0, |_tok, _m| {
        HANDLED.store(true, std::sync::atomic::Ordering::Relaxed)
    })?;
    let pg = Pgas::attach_with(b)?;
    let me = pg.rank();
    if pg.size() != 2 {
        return Err(Error::usage("late: 2 ranks"));
    }
    let a = pg.alloc_sym::<u64>(8)?;
    a.local().fill(1);
    let off = a.at(1, 0).offset();
    pg.barrier()?;
    let ep = pg.endpoint();
    if me == 0 {
        // rank 1 has frozen and sealed the range when this arrives
        std::thread::sleep(std::time::Duration::from_millis(500));
        let long = Payload::Long {
            data: &[0xbb; 64],
            offset: off,
        };
        ep.request(1, user_long, &[], long)?;
    } else {
        // SAFETY: a test of the deposit check, not the PGAS protocol: no
        // reference to the range is made here; it is read by copies.
        let froze = unsafe { ep.freeze_segment_range(off, 64) }
            // SAFETY: as above.
            .and_then(|()| unsafe { ep.seal_segment_range(off, 64) });
        let mut said = match froze {
            Ok(()) => String::new(),
            Err(e) => e.to_string(),
        };
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !said.contains("frozen") && std::time::Instant::now() < until {
            if let Err(e) = ep.poll() {
                said = e.to_string();
            }
        }
        let mut got = [0u8; 64];
        ep.read_segment(off, &mut got)?;
        let want: Vec<u8> = [1u64; 8].iter().flat_map(|x| x.to_ne_bytes()).collect();
        if HANDLED.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!(
                "t_views late: inconclusive: the Long was polled before the freeze (slow host?)"
            );
            std::process::exit(1);
        }
        // a failure exits at once (dropping the endpoint would wait for
        // rank 0, which waits in the barrier below)
        if got[..] != want[..] {
            eprintln!("t_views late: a Long wrote under the frozen range: {got:?} ({said})");
            std::process::exit(1);
        }
        if !(said.contains("frozen") && said.contains("rank 0")) {
            eprintln!("t_views late: the refused Long was not reported naming rank 0: '{said}'");
            std::process::exit(1);
        }
        // SAFETY: as above: no reference to the range was made.
        unsafe { ep.thaw_segment_range(off, 64) }?;
    }
    pg.barrier()?;
    println!("views late ok (rank {me})");
    Ok(())
}

/// See the module docs, `reserved`.
fn reserved() -> Result<()> {
    let pg = Pgas::attach()?;
    let (me, n) = (pg.rank(), pg.size());
    let peer = (me + 1) % n;
    let user = pg.alloc_sym::<u64>(1)?;
    let first_user = user.at(me, 0).offset();
    if first_user < 4096 + (256 << 10) {
        return Err(Error::usage(format!(
            "the first user allocation is at {first_user:#x}, inside splitrt's scratch"
        )));
    }
    let offsets = [4096u64, 4096 + (128 << 10), 4096 + (256 << 10) - 8, 0, 64];
    for off in offsets {
        for r in [peer, me] {
            let p = GlobalPtr::<u64>::new(r, off);
            let what = |op: &str| format!("{op} at {r}:{off:#x}");
            expect_err(&what("a put"), pg.put(p, &[7]), "reserved")?;
            expect_err(&what("a blocking write"), pg.write(p, 7), "reserved")?;
            expect_err(&what("a store"), pg.store(p, &[7]), "reserved")?;
            expect_err(&what("an atomic"), pg.fetch_add(p, 1), "reserved")?;
            expect_err(
                &what("a scoped put"),
                pg.scope(|s| s.put(p, &[7])),
                "reserved",
            )?;
            expect_err(&what("a get"), pg.read(p), "reserved")?;
        }
    }
    let ep = pg.endpoint();
    for off in offsets {
        expect_err(
            &format!("write_segment at {off:#x}"),
            ep.write_segment(off, &[7; 8]),
            "reserved",
        )?;
        let mut buf = [0u8; 8];
        expect_err(
            &format!("read_segment at {off:#x}"),
            ep.read_segment(off, &mut buf),
            "reserved",
        )?;
    }
    // the collectives still work, and the user's first word is writable
    let mut v = [me as u64 + 1];
    pg.allreduce(&mut v, splitrt::pgas::Op::Sum)?;
    if v[0] != (n * (n + 1) / 2) as u64 {
        return Err(Error::usage(format!("allreduce gave {}", v[0])));
    }
    pg.write(user.at(peer, 0), 5)?;
    pg.barrier()?;
    if user.local().get(0) != 5 {
        return Err(Error::usage("a put into the first user word was lost"));
    }
    println!("views reserved ok ({:?} path)", pg.rma_path());
    Ok(())
}

/// See the module docs, `threads`.
fn threads() -> Result<()> {
    let pg = Pgas::attach()?;
    let me = pg.rank();
    // rank 0's main thread sits in a barrier until rank 1 arrives, which
    // it does only after rank 0's second thread has tried a collective
    let a = pg.alloc_sym::<u64>(1)?;
    if me == 0 {
        let pg2 = pg.clone();
        let flag = a.at(1, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // wait until the main thread is inside its barrier (an event,
            // not a guess: it stays inside until rank 1 arrives, which is
            // after the flag below)
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !pg2.collective_in_progress() {
                if std::time::Instant::now() > deadline {
                    tx.send((
                        Some("the main thread never entered its barrier".into()),
                        None,
                    ))
                    .ok();
                    pg2.write(flag, 1).ok();
                    return;
                }
                std::thread::yield_now();
            }
            let mut v = [1u64];
            let r = pg2.allreduce(&mut v, splitrt::pgas::Op::Sum);
            let b = pg2.barrier();
            // let rank 1 arrive
            pg2.write(flag, 1).ok();
            tx.send((
                r.err().map(|e| e.to_string()),
                b.err().map(|e| e.to_string()),
            ))
            .ok();
        });
        pg.barrier()?;
        t.join()
            .map_err(|_| Error::usage("the second thread panicked"))?;
        let (r, b) = rx.recv().map_err(|_| Error::usage("no report"))?;
        for (what, e) in [("an allreduce", r), ("a barrier", b)] {
            match e {
                Some(s) if s.contains("another thread of this rank is inside a collective") => {}
                other => {
                    return Err(Error::usage(format!(
                        "{what} from a second thread during a barrier: {other:?}"
                    )))
                }
            }
        }
    } else {
        // wait for rank 0's second thread, then enter the barrier
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while a.local().get(0) == 0 {
            if std::time::Instant::now() > deadline {
                return Err(Error::usage("rank 0's second thread never wrote"));
            }
            pg.endpoint().poll()?;
            std::thread::yield_now();
        }
        pg.barrier()?;
    }
    // afterwards any one thread may run collectives again
    let pg2 = pg.clone();
    std::thread::spawn(move || pg2.barrier())
        .join()
        .map_err(|_| Error::usage("panicked"))??;
    drop(a);
    println!("views threads ok ({:?} path)", pg.rma_path());
    Ok(())
}
