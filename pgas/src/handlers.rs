//! The AM path: splitrt's reserved handlers implementing get/put/store,
//! atomics, barrier and store counting as request/reply (the Split-C over AM
//! scheme: request "get" -> reply carrying the data). Registered at fixed ids
//! below `RESERVED_HANDLERS`, so user handlers never shift them.

use crate::atomic::{apply_atomic, AtomicOp, NO_FETCH};
use crate::heap::{RESERVED_BYTES, USER_BASE};
use crate::state::{AtomicSlot, State};
use splitrt_am::{
    EndpointBuilder, Incoming, Kind, Payload, ReplyHandler, RequestHandler, Result, Token,
};
use splitrt_runtime::fabric::SegmentBytes;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Handles of the reserved handlers a rank sends.
#[derive(Clone, Copy)]
pub(crate) struct Handlers {
    pub get: RequestHandler,
    pub put: RequestHandler,
    pub store: RequestHandler,
    pub atomic: RequestHandler,
    pub arrive: RequestHandler,
    pub release: RequestHandler,
    pub store_count: RequestHandler,
    /// Strided and indexed transfers (`strided_am.rs`).
    pub vis: crate::strided_am::VisHandlers,
    /// The signal handlers (`signal_am`).
    pub signal: crate::signal_am::SignalHandlers,
}

// A reply's status: OK, or why the request was refused (each cause its
// own code, so the requester's error names what is actually wrong).
const OK: u64 = 0;
/// The range ends past the responder's segment (or its end overflows);
/// a get's reply carries the segment's length, 8 bytes little-endian.
const OUT_OF_RANGE: u64 = 1;
/// An atomic's status: the word is in a frozen array.
const FROZEN: u64 = 2;
/// An atomic's status: no such operation (code, kind, or a bitwise
/// operation on a float).
const BAD_OP: u64 = 3;
/// A get's status: longer than a Medium reply of the responder's may be
/// (its maximum rides in the reply's payload, 8 bytes little-endian).
const OVER_MEDIUM: u64 = 4;
/// The range starts in splitrt's reserved first bytes (for a get the
/// reserved bytes, for a write also the collective scratch after them).
const RESERVED: u64 = 5;
/// An atomic's status: the offset is not a multiple of the width.
const MISALIGNED: u64 = 6;
/// An atomic's status: a width other than 4 or 8 bytes.
const BAD_WIDTH: u64 = 7;

/// Why a request was refused, from its reply's status.
fn refusal(status: u64) -> &'static str {
    match status {
        FROZEN => "the word is in a frozen array",
        BAD_OP => "unknown operation code",
        OUT_OF_RANGE => "out of range: past the end of its segment",
        RESERVED => "in splitrt's reserved first bytes of its segment",
        MISALIGNED => "misaligned: the offset is not a multiple of the width",
        BAD_WIDTH => "the width is not 4 or 8 bytes",
        OVER_MEDIUM => "over its Medium maximum",
        _ => "unknown status",
    }
}

/// A get's status, from its range and this rank's segment length and
/// Medium maximum: past the reserved first bytes (splitrt's own
/// collectives read the scratch block through it; users' gets of it are
/// refused at their sender), inside the segment, and no longer than one
/// Medium reply.
fn get_status(off: u64, len: u64, seg_len: u64, max_medium: u64) -> u64 {
    if off < RESERVED_BYTES {
        RESERVED
    } else if off.checked_add(len).is_none_or(|e| e > seg_len) {
        OUT_OF_RANGE
    } else if len > max_medium {
        OVER_MEDIUM
    } else {
        OK
    }
}

/// An atomic's address status (the operation is checked apart): a width
/// of 4 or 8 bytes, past splitrt's reserved bytes and scratch, inside the
/// segment of `seg_len` bytes, and aligned to the width, as every sender
/// checks.
fn atomic_status(off: u64, width: u64, seg_len: u64) -> u64 {
    if !matches!(width, 4 | 8) {
        BAD_WIDTH
    } else if off < USER_BASE {
        RESERVED
    } else if off.checked_add(width).is_none_or(|e| e > seg_len) {
        OUT_OF_RANGE
    } else if !off.is_multiple_of(width) {
        MISALIGNED
    } else {
        OK
    }
}

/// [`EndpointBuilder::reserved_request`] for this module's handlers.
fn reserved_request<F>(
    b: &mut EndpointBuilder,
    id: u16,
    name: &str,
    kind: Kind,
    nargs: usize,
    f: F,
) -> Result<RequestHandler>
where
    F: Fn(Token<'_>, &Incoming<'_>) + Send + Sync + 'static,
{
    // SAFETY: called only from `register` below, with splitrt's own
    // handlers. Their Longs (put, store) come only from `Pgas`'s put and
    // store, which refuse the reserved area and frozen ranges before
    // sending; a sealed range is refused at deposit by the fabric, and the
    // handlers report a reserved-area deposit a broken peer made. The
    // other handlers carry no deposit.
    unsafe { b.reserved_request(id, name, kind, nargs, f) }
}

/// [`EndpointBuilder::reserved_reply`] for this module's handlers.
fn reserved_reply<F>(
    b: &mut EndpointBuilder,
    id: u16,
    name: &str,
    kind: Kind,
    nargs: usize,
    f: F,
) -> Result<ReplyHandler>
where
    F: Fn(&Incoming<'_>) + Send + Sync + 'static,
{
    // SAFETY: called only from `register` below, with splitrt's own reply
    // handlers, none of which is a Long (no deposit to check).
    unsafe { b.reserved_reply(id, name, kind, nargs, f) }
}

/// Arguments of a get's reply (`splitrt.get_r`): the slot, the offset in
/// the destination, the status. A get's chunks are sized with them
/// (`Endpoint::max_medium_unsplit`).
pub(crate) const GET_REPLY_ARGS: usize = 3;

pub(crate) fn register(b: &mut EndpointBuilder, st: &Arc<State>) -> Result<Handlers> {
    // Replies first: requests capture their handles.
    let s = st.clone();
    let get_r: ReplyHandler = reserved_reply(
        b,
        1,
        "splitrt.get_r",
        Kind::Medium,
        GET_REPLY_ARGS,
        move |m| {
            let (slot, at, status) = (m.arg(0) as usize, m.arg(1) as usize, m.arg(2));
            let mut dests = s.dests.lock();
            let mut wake = None;
            // a freed slot's `Dest` (its waker too), dropped after unlocking
            let mut gone = None;
            match dests.get_mut(slot) {
                None => s.fail(format!(
                    "get reply from rank {} for unknown slot {slot}",
                    m.src()
                )),
                Some(d) if d.cancelled => {
                    // the owner gave up and released its buffer: drop the data
                    d.remaining = d.remaining.saturating_sub(1);
                    if d.remaining == 0 {
                        gone = dests.remove(slot);
                    }
                }
                Some(d) => {
                    let data = m.payload();
                    if matches!(status, OVER_MEDIUM | OUT_OF_RANGE) {
                        // the responder's bound (its Medium maximum or
                        // segment length), checked (a peer's bytes)
                        let bound = <[u8; 8]>::try_from(data)
                            .map(|b| format!(" of {} B", u64::from_le_bytes(b)))
                            .unwrap_or_default();
                        d.error = Some(format!(
                            "rank {} refused a get ({}{bound})",
                            m.src(),
                            refusal(status)
                        ));
                    } else if status != OK {
                        d.error = Some(format!(
                            "rank {} refused a get ({})",
                            m.src(),
                            refusal(status)
                        ));
                    } else if at.checked_add(data.len()).is_none_or(|e| e > d.len) {
                        d.error = Some(format!(
                            "rank {} sent a get reply beyond the buffer",
                            m.src()
                        ));
                    } else {
                        // SAFETY: [at, at + len) lies inside the destination
                        // (checked above): an in-bounds offset.
                        let to = unsafe { d.ptr.add(at) };
                        // SAFETY: the destination is alive until `remaining` hits
                        // zero or the slot is cancelled (see Dest), which the
                        // dests lock held here keeps from happening meanwhile.
                        unsafe { std::ptr::copy(data.as_ptr(), to, data.len()) };
                        d.got = d.got.saturating_add(data.len());
                    }
                    d.remaining = d.remaining.saturating_sub(1);
                    if d.remaining == 0 {
                        d.check_complete(m.src());
                        // complete: the awaiting future, if any, may finish
                        wake = d.waker.take();
                    }
                }
            }
            drop(dests);
            drop(gone);
            if let Some(w) = wake {
                w.wake();
            }
            // every reply counts, so sync's books always balance
            s.gets_done.fetch_add(1, Ordering::Release);
        },
    )?;
    let s = st.clone();
    let put_r = reserved_reply(b, 3, "splitrt.put_r", Kind::Short, 1, move |m| {
        if m.arg(0) != OK {
            s.fail(format!(
                "rank {} refused a put ({})",
                m.src(),
                refusal(m.arg(0))
            ));
        }
        if let Some(b) = s.peer_puts.get() {
            b.complete(m.src());
        }
        s.puts_done.fetch_add(1, Ordering::Release);
    })?;
    let s = st.clone();
    let atomic_r = reserved_reply(b, 6, "splitrt.atomic_r", Kind::Short, 3, move |m| {
        let (slot, status) = (m.arg(0), m.arg(2));
        let why = || format!("rank {} refused an atomic ({})", m.src(), refusal(status));
        if slot == NO_FETCH {
            // a non-fetching atomic: counted for sync, as a put's reply
            if status != OK {
                s.fail(why());
            }
            if let Some(b) = s.peer_puts.get() {
                b.complete(m.src());
            }
            s.puts_done.fetch_add(1, Ordering::Release);
            return;
        }
        let mut a = s.atomics.lock();
        let i = usize::try_from(slot).unwrap_or(usize::MAX);
        if matches!(a.get_mut(i), Some(AtomicSlot::Cancelled)) {
            a.remove(i);
        } else if let Some(slot) = a.get_mut(i) {
            *slot = if status == OK {
                AtomicSlot::Done(m.arg(1))
            } else {
                AtomicSlot::Failed(why())
            };
        }
    })?;

    let s = st.clone();
    let get = reserved_request(b, 0, "splitrt.get", Kind::Short, 4, move |tok, m| {
        let (slot, at, off, len) = (m.arg(0), m.arg(1), m.arg(2), m.arg(3));
        let seg = s.seg();
        // A reply carries at most a Medium's maximum (the requester sizes
        // its gets by it): a longer one, from a hostile or confused peer,
        // is refused to the requester before any byte is copied, rather
        // than failing this rank's reply.
        let max = tok.max_medium() as u64;
        let seg_len = seg.len() as u64;
        let status = get_status(off, len, seg_len, max);
        if status != OK {
            // the bound the requester's error names, if any
            let bound = match status {
                OVER_MEDIUM => max,
                _ => seg_len,
            };
            let r = tok.reply(
                get_r,
                &[slot, at, status],
                Payload::Medium(&bound.to_le_bytes()),
            );
            if let Err(e) = r {
                s.fail(format!("replying to a get: {e}"));
            }
            return;
        }
        // The reply's bytes are copied by the fabric straight out of the
        // segment into its datagrams (over UDP; the other fabrics copy them
        // into a buffer first) by a raw copy: no reference over segment
        // bytes other threads and peers may write meanwhile (a peer's racing
        // put tears the data, as any get racing a put does; another thread's
        // is the data race a native get's non-atomic copy also accepts,
        // docs/safety.md "What remains outside the reference model").
        // SAFETY: the segment was taken from the endpoint that runs this
        // handler, which keeps it mapped while the handler (and so the
        // reply's send) runs; its bytes are read only by the fabric's raw
        // copy, and nothing here holds a `&mut` to them. The range was
        // checked by `get_status` (and again by `new`).
        let payload = unsafe { SegmentBytes::new(seg, off as usize, len as usize) };
        let r = match payload {
            Some(src) => tok.reply(get_r, &[slot, at, OK], Payload::FromSegment(src)),
            // (not reached: `new` checks the range `get_status` passed)
            None => tok.reply(
                get_r,
                &[slot, at, OUT_OF_RANGE],
                Payload::Medium(&seg_len.to_le_bytes()),
            ),
        };
        if let Err(e) = r {
            s.fail(format!("replying to a get: {e}"));
        }
    })?;
    let s = st.clone();
    let put = reserved_request(b, 2, "splitrt.put", Kind::Long, 0, move |tok, m| {
        // The payload already sits where it belongs; acknowledge it. A put
        // into a frozen array is refused at its sender; one sent before
        // the freeze was deposited before the freeze's barrier (the
        // sender's freeze drains its sends), so its bytes are part of the
        // frozen contents even if this handler runs after the freeze.
        let ok = m.long_offset().is_some_and(|o| o >= USER_BASE);
        let status = if ok { OK } else { RESERVED };
        if let Err(e) = tok.reply(put_r, &[status], Payload::None) {
            s.fail(format!("replying to a put: {e}"));
        }
    })?;
    let s = st.clone();
    let store = reserved_request(b, 4, "splitrt.store", Kind::Long, 0, move |_tok, m| {
        // Reply-free: count the bytes for store_sync. Senders never target
        // the reserved area (checked at the caller); a peer that did is
        // reported rather than counted. A store into a frozen array is
        // refused at its sender; one sent before the freeze landed before
        // the freeze's barrier (see the put handler), so it is counted.
        let len = m.payload_len() as u64;
        match m.long_offset() {
            Some(o) if o >= USER_BASE => {
                s.stored().fetch_add(len, Ordering::Release);
            }
            _ => s.fail(format!("rank {} stored into the reserved area", m.src())),
        }
    })?;
    let s = st.clone();
    let atomic = reserved_request(b, 5, "splitrt.atomic", Kind::Short, 6, move |tok, m| {
        let (slot, op, width, off, a, b) =
            (m.arg(0), m.arg(1), m.arg(2), m.arg(3), m.arg(4), m.arg(5));
        // announced across the frozen check and the update: a freeze on
        // another thread of this rank waits for it (see `Pgas::freeze`)
        let res = splitrt_am::while_writing(|| {
            let Some(op) = AtomicOp::decode(op, a, b) else {
                return Err(BAD_OP);
            };
            let status = atomic_status(off, width, s.seg().len() as u64);
            if status != OK {
                return Err(status);
            }
            if tok.frozen_segment_range(off, width).is_some() {
                return Err(FROZEN);
            }
            // SAFETY: inside the local segment and aligned (checked just
            // before); the handler runs inside the endpoint that owns the
            // fabric.
            unsafe { apply_atomic(s.seg(), off, width, op) }.ok_or(BAD_WIDTH)
        });
        let (old, status) = match res {
            Ok(v) => (v, OK),
            Err(why) => (0, why),
        };
        if let Err(e) = tok.reply(atomic_r, &[slot, old, status], Payload::None) {
            s.fail(format!("replying to an atomic: {e}"));
        }
    })?;
    let s = st.clone();
    let arrive = reserved_request(
        b,
        7,
        "splitrt.barrier_arrive",
        Kind::Short,
        4,
        move |_tok, m| {
            // (args 2, 3: the host report of `world_barrier.rs`)
            s.world_bar
                .report(m.arg(0), m.src(), s.size(), m.arg(2), m.arg(3));
            s.arrive(m.arg(0), m.arg(1), m.src(), s.size());
        },
    )?;
    let s = st.clone();
    let release = reserved_request(
        b,
        8,
        "splitrt.barrier_release",
        Kind::Short,
        2,
        move |_tok, m| {
            // (arg 1: the world barrier's form, decided at epoch 1 by rank
            // 0, `world_barrier.rs`; published before the release)
            s.world_bar
                .set_hier(m.src() == 0 && m.arg(0) == 1 && m.arg(1) == 1);
            s.released.fetch_max(m.arg(0), Ordering::AcqRel);
            s.world_bar.released_to_host(m.src(), m.arg(0), m.arg(1));
        },
    )?;
    let s = st.clone();
    let store_count = reserved_request(
        b,
        9,
        "splitrt.store_count",
        Kind::Short,
        2,
        move |_tok, m| {
            let p = (m.arg(0) % 2) as usize;
            s.store_expected[p].fetch_add(m.arg(1), Ordering::AcqRel);
            s.store_reports[p].fetch_add(1, Ordering::AcqRel);
        },
    )?;
    let vis = crate::strided_am::register(b, st, get_r)?;
    let signal = crate::signal_am::register(b, st)?;
    Ok(Handlers {
        get,
        put,
        store,
        atomic,
        arrive,
        release,
        store_count,
        vis,
        signal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Dest;
    use crate::test_rank::one_rank_over_model as one_rank;

    /// Send one raw get request of `len` bytes at `USER_BASE` to rank 0
    /// (itself, over the AM path) into a fresh slot; poll a bounded number
    /// of times until the slot completes; return its error.
    fn raw_get(pg: &crate::Pgas, len: usize) -> Option<String> {
        raw_get_at(pg, USER_BASE, len)
    }

    /// [`raw_get`] at segment offset `off`, unchecked (as a broken or
    /// hostile peer could send it).
    fn raw_get_at(pg: &crate::Pgas, off: u64, len: usize) -> Option<String> {
        let inner = &pg.inner;
        let mut buf = vec![0u8; len];
        let slot = inner.st.dests.lock().insert(Dest {
            ptr: buf.as_mut_ptr(),
            len,
            remaining: 1,
            got: 0,
            error: None,
            cancelled: false,
            waker: None,
        });
        let args = [slot as u64, 0, off, len as u64];
        inner
            .ep
            .request(0, inner.h.get, &args, Payload::None)
            .expect("a get request");
        let mut polls = 0;
        while inner.st.dests.lock().items_remaining(slot) != 0 {
            polls += 1;
            assert!(
                polls < 100_000,
                "a get of {len} B was never answered (the responder failed?): {:?}",
                inner.st.errors.lock()
            );
            let _ = inner.ep.poll();
        }
        let d = inner.st.dests.lock().remove(slot).expect("the slot");
        drop(buf);
        d.error
    }

    /// Review of h14-bouncefix: a get longer than the responder's Medium
    /// maximum is refused to the requester, named as such (it was "out of
    /// its segment"); before the responder checked it, its reply failed
    /// there and the requester's slot never completed. A get of exactly
    /// the maximum passes.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "attaches a verbs-model endpoint (a bootstrap and its threads)"
    )]
    fn a_get_over_the_medium_maximum_is_refused_by_name() {
        let pg = one_rank("getmax");
        let max = pg.inner.ep.max_medium(0).expect("rank 0's Medium maximum");
        assert!(USER_BASE as usize + max < pg.inner.st.seg().len());
        let e = raw_get(&pg, max + 1).expect("refused");
        assert!(
            e.contains("rank 0") && e.contains(&format!("over its Medium maximum of {max} B")),
            "{e}"
        );
        assert_eq!(raw_get(&pg, max), None);
        assert!(pg.inner.st.errors.lock().is_empty());
    }

    /// h15-left: each refusal names its own cause. A get past the
    /// segment's end (or at an offset whose end overflows) or into the
    /// reserved bytes was refused as "bad address: out of its segment,
    /// misaligned or reserved", though a get has no alignment; an atomic's
    /// bad width, reserved offset, range past the end and misalignment all
    /// had that one text too. Now the get says "out of range" with the
    /// segment's length or "reserved", and each atomic its cause.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "attaches a verbs-model endpoint (a bootstrap and its threads)"
    )]
    fn each_refusal_names_its_cause() {
        let pg = one_rank("refusals");
        let seg = pg.inner.st.seg().len() as u64;
        let past =
            format!("rank 0 refused a get (out of range: past the end of its segment of {seg} B)");
        let reserved = "rank 0 refused a get (in splitrt's reserved first bytes of its segment)";
        for (what, off, len, want) in [
            ("past the end", seg - 8, 16, past.as_str()),
            ("end overflowing", u64::MAX - 3, 8, past.as_str()),
            ("reserved", 8, 8, reserved),
        ] {
            let e = raw_get_at(&pg, off, len).unwrap_or_else(|| panic!("get {what}: accepted"));
            assert!(
                e.contains(want) && !e.contains("misaligned"),
                "get {what}: {e}"
            );
        }
        for (what, width, off, want) in [
            ("width 3", 3, USER_BASE, "(the width is not 4 or 8 bytes)"),
            (
                "reserved",
                8,
                8,
                "(in splitrt's reserved first bytes of its segment)",
            ),
            (
                "past the end",
                8,
                seg - 4,
                "(out of range: past the end of its segment)",
            ),
            (
                "end overflowing",
                8,
                u64::MAX - 7,
                "(out of range: past the end of its segment)",
            ),
            (
                "misaligned",
                8,
                USER_BASE + 4,
                "(misaligned: the offset is not a multiple of the width)",
            ),
        ] {
            let e = pg
                .raw_atomic_for_tests(0, [0, width, off, 1, 0])
                .expect_err(what)
                .to_string();
            assert!(
                e.contains(&format!("rank 0 refused an atomic {want}")),
                "atomic {what}: {e}"
            );
        }
        // the context survives its refusals
        assert!(pg.inner.st.errors.lock().is_empty());
        assert_eq!(raw_get(&pg, 64), None);
    }
}
