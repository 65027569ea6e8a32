//! The AM path of signals: splitrt's reserved handlers for a put with a
//! signal (one Long: the payload is deposited, then the handler updates
//! the signal word named in its arguments, so a waiter that sees the
//! signal sees the data) and for a signal alone (a Short), each
//! acknowledged like a put (counted for `Pgas::sync`).

use crate::heap::USER_BASE;
use crate::signal_word::SignalOp;
use crate::state::State;
use splitrt_am::{EndpointBuilder, Incoming, Kind, Payload, RequestHandler, Result, Token};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Reserved handler ids of signals (clear of the ids 0..=9 the other
/// reserved handlers use).
const PUT_SIGNAL: u16 = 20;
const SIGNAL: u16 = 21;
const SIGNAL_R: u16 = 22;

/// Handles of the signal handlers a rank sends.
#[derive(Clone, Copy)]
pub(crate) struct SignalHandlers {
    /// Long, args `[op, signal offset, value]`.
    pub put_signal: RequestHandler,
    /// Short, args `[op, signal offset, value]`.
    pub signal: RequestHandler,
}

const OK: u64 = 0;
/// The signal address is not a signal word of the target.
const NOT_A_SIGNAL: u64 = 1;
/// No such signal operation.
const BAD_OP: u64 = 2;
/// The payload landed outside the user range.
const BAD_DATA: u64 = 3;

/// Why a signal was refused, from its reply's status.
fn refusal(status: u64) -> &'static str {
    match status {
        NOT_A_SIGNAL => "the address is not a signal word (not in a Pgas::alloc_signals array)",
        BAD_OP => "unknown signal operation",
        BAD_DATA => "the data landed outside the user range",
        _ => "unknown status",
    }
}

/// Update the signal word at `off` of this rank's segment by `op`, `value`
/// (a peer's codes: anything may arrive); the status to reply.
fn apply(st: &State, op: u64, off: u64, value: u64) -> u64 {
    let Some(op) = SignalOp::decode(op) else {
        return BAD_OP;
    };
    let seg = st.seg();
    let fits = off
        .checked_add(8)
        .is_some_and(|e| e <= seg.len() as u64 && off >= USER_BASE);
    if !(fits && st.signals.is_word(off)) {
        return NOT_A_SIGNAL;
    }
    // SAFETY: [off, off + 8) lies in this rank's segment (checked above),
    // mapped while the endpoint that runs this handler lives; `off` is
    // 8-aligned (a signal word) in a page-aligned segment; signal words
    // are touched only by atomics.
    let word = unsafe { &*(seg.base().wrapping_add(off as usize) as *const AtomicU64) };
    op.apply(word, value);
    // Count the write on this rank's doorbell, as a native signal write
    // does: a future of this rank that looked at the word just before
    // (`Endpoint::wake_on_traffic_since`) must be woken even when this
    // handler ran on another thread (the progress thread) while the
    // future's own poll found the message held, and the doorbell bridge
    // then found the rings empty (a lost wake-up: `t_signals async_sets`
    // on the AM path waited 20 s now and then under load).
    // SAFETY: `seg` is this rank's own segment, from the fabric the
    // endpoint running this handler owns.
    unsafe { seg.wake_owner_counted() };
    OK
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
    // handlers. The one Long (put_signal) comes only from `Pgas`'s
    // put_signal, which refuses the reserved area and frozen ranges
    // before sending; a sealed range is refused at deposit by the fabric,
    // and the handler reports a reserved-area deposit a broken peer made.
    unsafe { b.reserved_request(id, name, kind, nargs, f) }
}

/// Register the signal handlers (called by `handlers::register`).
pub(crate) fn register(b: &mut EndpointBuilder, st: &Arc<State>) -> Result<SignalHandlers> {
    let s = st.clone();
    let f = move |m: &Incoming<'_>| {
        let status = m.arg(0);
        if status != OK {
            s.fail(format!(
                "rank {} refused a signal ({})",
                m.src(),
                refusal(status)
            ));
        }
        if let Some(b) = s.peer_puts.get() {
            b.complete(m.src());
        }
        s.puts_done.fetch_add(1, Ordering::Release);
    };
    // SAFETY: splitrt's own reply handler, a Short (no deposit to check).
    let signal_r = unsafe { b.reserved_reply(SIGNAL_R, "splitrt.signal_r", Kind::Short, 1, f) }?;
    let s = st.clone();
    let put_signal = reserved_request(
        b,
        PUT_SIGNAL,
        "splitrt.put_signal",
        Kind::Long,
        3,
        move |tok, m| {
            // The payload already sits where it belongs (deposited before
            // this handler runs): the signal goes after it.
            let status = if m.long_offset().is_some_and(|o| o >= USER_BASE) {
                apply(&s, m.arg(0), m.arg(1), m.arg(2))
            } else {
                BAD_DATA
            };
            if let Err(e) = tok.reply(signal_r, &[status], Payload::None) {
                s.fail(format!("replying to a put_signal: {e}"));
            }
        },
    )?;
    let s = st.clone();
    let signal = reserved_request(
        b,
        SIGNAL,
        "splitrt.signal",
        Kind::Short,
        3,
        move |tok, m| {
            let status = apply(&s, m.arg(0), m.arg(1), m.arg(2));
            if let Err(e) = tok.reply(signal_r, &[status], Payload::None) {
                s.fail(format!("replying to a signal: {e}"));
            }
        },
    )?;
    Ok(SignalHandlers { put_signal, signal })
}
