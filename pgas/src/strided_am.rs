//! The AM path of strided and indexed transfers: one Medium request per
//! message of a transfer (a header naming the remote runs, and a put's
//! packed data), unpacked or packed by a handler on the target; a get's
//! data returns in the ordinary get reply (`splitrt.get_r`). The header is
//! hostile input here: parsed by [`crate::strided_shape::parse`],
//! every run checked against the user part of this rank's segment and the
//! frozen ranges before a byte is written, and the work bounded by the
//! payload (or by the reply limit).

use crate::heap::USER_BASE;
use crate::state::State;
use crate::strided_shape::{parse, Parsed, Wire};
use splitrt_am::{
    EndpointBuilder, Incoming, Kind, Payload, ReplyHandler, RequestHandler, Result, Token,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Reserved handler ids (below `RESERVED_HANDLERS`, clear of the ids
/// `handlers.rs` uses, the signals' 20-22 and the teams' 40).
const ID_PUT: u16 = 48;
const ID_PUT_R: u16 = 49;
const ID_GET: u16 = 50;

const OK: u64 = 0;
/// A run outside the user part of the segment.
const OUT_OF_RANGE: u64 = 1;
/// A run inside a frozen array.
const FROZEN: u64 = 2;
/// A header that does not parse, or data of the wrong length.
const MALFORMED: u64 = 3;

/// Handles of the strided / indexed handlers a rank sends.
#[derive(Clone, Copy)]
pub(crate) struct VisHandlers {
    pub put: RequestHandler,
    pub get: RequestHandler,
}

fn why(status: u64) -> &'static str {
    match status {
        OUT_OF_RANGE => "a run lies outside the user part of its segment",
        FROZEN => "a run lies in a frozen array",
        MALFORMED => "malformed header or data",
        _ => "unknown status",
    }
}

/// The checks of a put message against this rank's segment of `seg_len`
/// bytes: the header parses, the data is exactly what it describes, every
/// run lies in the user part. (Frozen ranges are the handler's.)
fn check_put(p: &[u8], seg_len: u64) -> std::result::Result<Parsed<'_>, u64> {
    let m = parse(p).map_err(|_| MALFORMED)?;
    if m.data.len() as u64 != m.bytes {
        return Err(MALFORMED);
    }
    if !m.wire.within(USER_BASE, seg_len) {
        return Err(OUT_OF_RANGE);
    }
    Ok(m)
}

/// The checks of a get message: the header parses, carries no data, its
/// reply fits in `max_reply` bytes and every run lies in the user part.
fn check_get(p: &[u8], seg_len: u64, max_reply: usize) -> std::result::Result<Parsed<'_>, u64> {
    let m = parse(p).map_err(|_| MALFORMED)?;
    if !m.data.is_empty() || m.bytes > max_reply as u64 {
        return Err(MALFORMED);
    }
    if !m.wire.within(USER_BASE, seg_len) {
        return Err(OUT_OF_RANGE);
    }
    Ok(m)
}

/// Whether a run of `wire` touches a frozen range (`frozen(offset, len)`):
/// a strided message's whole footprint is asked first, and only if that
/// touches one are its runs asked one by one (1000 runs were 1000 calls
/// and a second walk over the runs, about 2.5 µs of the handler, for
/// nothing frozen; issue 25).
fn touches_frozen(wire: &Wire<'_>, frozen: impl Fn(u64, u64) -> bool) -> bool {
    if let Some((o, n)) = wire.footprint() {
        if !frozen(o, n) {
            return false;
        }
    }
    wire.runs().any(|(o, n)| frozen(o, n))
}

/// Hand each run of a put message with its bytes of the data to
/// `write(segment offset, bytes)`, in order: the data is the runs' bytes
/// one run after the other. `MALFORMED` if the data does not hold exactly
/// the runs' bytes: the runs before the first one it falls short of were
/// written, none from that one on (a later, shorter run never gets an
/// earlier run's bytes), and the status is never `OK` (a partial write is
/// never reported as done). `check_put` refuses such a message before
/// (data length = `bytes` = the runs' sum, which `parse` computes), so a
/// put that reaches here is written whole, and the sender's "nothing of
/// that message was written" holds for every refusal it can get; this
/// keeps the handler honest should that invariant ever break.
fn unpack(msg: &Parsed<'_>, mut write: impl FnMut(u64, &[u8])) -> std::result::Result<(), u64> {
    // bytes of the data used so far; `usize::MAX` (the flag) once a run
    // fell short: no range starting there is in the data, so no later
    // run is written and the final check fails
    let mut at = 0usize;
    msg.wire
        .for_each_run(|o, n| match msg.data.get(at..at.wrapping_add(n as usize)) {
            Some(from) => {
                write(o, from);
                at += from.len();
            }
            None => at = usize::MAX,
        });
    if at != msg.data.len() {
        return Err(MALFORMED);
    }
    Ok(())
}

/// Register the strided / indexed handlers; `get_r` is the ordinary get
/// reply (a slot, an offset in it, a status, the data).
pub(crate) fn register(
    b: &mut EndpointBuilder,
    st: &Arc<State>,
    get_r: ReplyHandler,
) -> Result<VisHandlers> {
    let s = st.clone();
    let put_r_fn = move |m: &Incoming<'_>| {
        if m.arg(0) != OK {
            s.fail(format!(
                "rank {} refused a strided/indexed put ({}): nothing of that message was \
                     written",
                m.src(),
                why(m.arg(0))
            ));
        }
        if let Some(b) = s.peer_puts.get() {
            b.complete(m.src());
        }
        s.puts_done.fetch_add(1, Ordering::Release);
    };
    // SAFETY: splitrt's own reply handler, a Short (no deposit).
    let put_r =
        unsafe { b.reserved_reply(ID_PUT_R, "splitrt.vis_put_r", Kind::Short, 1, put_r_fn) }?;
    let s = st.clone();
    let put_fn = move |tok: Token<'_>, m: &Incoming<'_>| {
        let seg = s.seg();
        // announced across the frozen check and the writes (as the
        // atomic handler does; see `Pgas::freeze`)
        let status = splitrt_am::while_writing(|| {
            let msg = check_put(m.payload(), seg.len() as u64)?;
            if touches_frozen(&msg.wire, |o, n| tok.frozen_segment_range(o, n).is_some()) {
                return Err(FROZEN);
            }
            // the runs in the tight loop (`Wire::for_each_run`), each
            // with its own bytes of the data, in order
            unpack(&msg, |o, from| {
                // SAFETY: [o, o + from.len()) is one of the message's
                // runs, so it lies in this rank's segment (every run was
                // checked by `check_put`), mapped while the endpoint
                // running this handler lives; `from` is the message's
                // payload, never the segment. Raw copy: other threads
                // and peers may touch these bytes.
                unsafe {
                    splitrt_runtime::memmove::memmove(
                        from.as_ptr(),
                        seg.base().wrapping_add(o as usize),
                        from.len(),
                    )
                };
            })?;
            Ok(())
        });
        let status = status.err().unwrap_or(OK);
        if let Err(e) = tok.reply(put_r, &[status], Payload::None) {
            s.fail(format!("replying to a strided/indexed put: {e}"));
        }
    };
    // SAFETY: splitrt's own request handler, a Medium (no deposit: it
    // writes the segment itself, after checking every run against the
    // user part of the segment and the frozen ranges).
    let put = unsafe { b.reserved_request(ID_PUT, "splitrt.vis_put", Kind::Medium, 0, put_fn) }?;
    let s = st.clone();
    let get_fn = move |tok: Token<'_>, m: &Incoming<'_>| {
        let (slot, at) = (m.arg(0), m.arg(1));
        let seg = s.seg();
        let mut buf: Vec<u8> = Vec::new();
        let status = match check_get(m.payload(), seg.len() as u64, tok.max_medium()) {
            Err(why) => why,
            Ok(msg) => {
                buf.reserve(msg.bytes as usize);
                msg.wire.for_each_run(|o, n| {
                    let (len, n) = (buf.len(), n as usize);
                    // SAFETY: [o, o + n) lies in this rank's segment
                    // (checked), mapped while the endpoint lives; the
                    // spare capacity holds the run (the runs' total is
                    // `msg.bytes`, reserved above), never the segment.
                    unsafe {
                        splitrt_runtime::memmove::memmove(
                            seg.base().wrapping_add(o as usize),
                            buf.as_mut_ptr().wrapping_add(len),
                            n,
                        )
                    };
                    // SAFETY: the copy initialised these n bytes,
                    // inside the capacity.
                    unsafe { buf.set_len(len + n) };
                });
                OK
            }
        };
        let r = tok.reply(get_r, &[slot, at, status], Payload::Medium(&buf));
        if let Err(e) = r {
            s.fail(format!("replying to a strided/indexed get: {e}"));
        }
    };
    // SAFETY: splitrt's own request handler, a Medium (no deposit; it only
    // reads the segment).
    let get = unsafe { b.reserved_request(ID_GET, "splitrt.vis_get", Kind::Medium, 2, get_fn) }?;
    Ok(VisHandlers { put, get })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// The frozen check of a put message: a footprint clear of frozen
    /// ranges asks nothing more; one that touches a frozen range decides
    /// run by run (a frozen range between runs refuses nothing).
    #[test]
    fn strided_handler_frozen_check_asks_the_footprint_first() {
        use std::cell::Cell;
        // runs of 8 B at USER_BASE + 16 i, i < 4: footprint 56 B
        let hdr = words(&[1 | 1 << 8, 8, USER_BASE, 0, 4, 4, 16]);
        let m = parse(&hdr).unwrap();
        let asked = Cell::new(0);
        let asked = &asked;
        let frozen_at = |lo: u64, hi: u64| {
            move |o: u64, n: u64| {
                asked.set(asked.get() + 1);
                o < hi && lo < o + n
            }
        };
        // nothing frozen near: one question
        assert!(!touches_frozen(&m.wire, frozen_at(0, 8)));
        assert_eq!(asked.replace(0), 1);
        // frozen bytes between two runs: every run asked, none refused
        assert!(!touches_frozen(
            &m.wire,
            frozen_at(USER_BASE + 8, USER_BASE + 16)
        ));
        assert_eq!(asked.replace(0), 5);
        // frozen bytes in the third run: refused
        let third = USER_BASE + 32;
        assert!(touches_frozen(&m.wire, frozen_at(third + 4, third + 5)));
        // an indexed message is asked run by run
        let idx = words(&[2, 2, USER_BASE, 8, USER_BASE + 64, 8]);
        let m = parse(&idx).unwrap();
        assert!(touches_frozen(
            &m.wire,
            frozen_at(USER_BASE + 70, USER_BASE + 71)
        ));
        assert!(!touches_frozen(
            &m.wire,
            frozen_at(USER_BASE + 8, USER_BASE + 64)
        ));
    }

    /// A put message whose data does not hold exactly its runs' bytes
    /// (what `check_put` refuses first): `unpack` says MALFORMED, and
    /// writes no run from the first short one on: a later, shorter run
    /// never gets an earlier run's bytes. Before, the short run was
    /// skipped without advancing in the data, the next run written from
    /// there, and the put reported OK.
    #[test]
    fn strided_unpack_refuses_data_that_is_not_the_runs() {
        let writes = |msg: &Parsed<'_>| {
            let mut w: Vec<(u64, Vec<u8>)> = Vec::new();
            let r = unpack(msg, |o, from| w.push((o, from.to_vec())));
            (r, w)
        };
        let data: Vec<u8> = (0..32).collect();
        // indexed runs of 8, 8 and 4 B
        let pairs = words(&[USER_BASE, 8, USER_BASE + 64, 8, USER_BASE + 128, 4]);
        fn indexed<'a>(pairs: &'a [u8], data: &'a [u8]) -> Parsed<'a> {
            Parsed {
                wire: Wire::Indexed { pairs },
                bytes: 20,
                data,
            }
        }
        let idx = |data| indexed(&pairs, data);
        let (r, w) = writes(&idx(&data[..20]));
        assert_eq!(r, Ok(()));
        assert_eq!(
            w,
            [
                (USER_BASE, data[..8].to_vec()),
                (USER_BASE + 64, data[8..16].to_vec()),
                (USER_BASE + 128, data[16..20].to_vec()),
            ]
        );
        // 12 B: the second run falls short; the third is not written
        // with the second's bytes
        let (r, w) = writes(&idx(&data[..12]));
        assert_eq!(r, Err(MALFORMED));
        assert_eq!(w, [(USER_BASE, data[..8].to_vec())]);
        // too much data: every run written, still not OK
        assert_eq!(writes(&idx(&data[..21])).0, Err(MALFORMED));
        assert_eq!(writes(&idx(&[])), (Err(MALFORMED), Vec::new()));
        // strided: 3 runs of 8 B, 20 B of data
        let hdr = words(&[1 | 1 << 8, 8, USER_BASE, 0, 3, 4, 16]);
        let mut m = parse(&hdr).unwrap();
        m.data = &data[..20];
        let (r, w) = writes(&m);
        assert_eq!(r, Err(MALFORMED));
        assert_eq!(w.len(), 2);
        m.data = &data[..24];
        assert_eq!(writes(&m).0, Ok(()));
    }

    /// The handlers' checks: the data must be exactly what the header
    /// describes, the runs in the user part, a get's reply within limit.
    #[test]
    fn strided_handler_checks_refuse_hostile_messages() {
        let seg = USER_BASE + 4096;
        let hdr = |base: u64, n: u64| words(&[1 | 1 << 8, 8, base, 0, n, 4, 16]);
        let mut put = hdr(USER_BASE, 2);
        put.extend([1u8; 16]);
        assert!(check_put(&put, seg).is_ok());
        assert_eq!(check_put(&put[..put.len() - 1], seg).err(), Some(MALFORMED));
        let mut low = hdr(USER_BASE - 8, 2);
        low.extend([1u8; 16]);
        assert_eq!(check_put(&low, seg).err(), Some(OUT_OF_RANGE));
        let mut high = hdr(seg - 8, 2);
        high.extend([1u8; 16]);
        assert_eq!(check_put(&high, seg).err(), Some(OUT_OF_RANGE));
        assert_eq!(check_put(&[9; 40], seg).err(), Some(MALFORMED));
        assert!(check_get(&hdr(USER_BASE, 4), seg, 32).is_ok());
        assert_eq!(
            check_get(&hdr(USER_BASE, 4), seg, 31).err(),
            Some(MALFORMED)
        );
        assert_eq!(check_get(&put, seg, 1 << 16).err(), Some(MALFORMED));
        let idx = words(&[2, 2, USER_BASE, 8, seg - 8, 9]);
        assert_eq!(check_get(&idx, seg, 1 << 16).err(), Some(OUT_OF_RANGE));
    }
}
