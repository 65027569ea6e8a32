//! The target's side: the registered functions (type-erased: bytes in,
//! bytes out), and what the request handlers do with a single call, a
//! batch and a fetch. Results that do not fit a batch's one reply are
//! held here (bounded) until the caller fetches them.

use crate::fast;
use crate::fast::{Stack, FAST_BYTES};
use crate::fixed_records;
use crate::wire::{put_result, Calls, Status, RESULT_HEADER};
use splitrt_am::{Incoming, Payload, ReplyHandler, Token};
use std::collections::HashMap;
use std::sync::OnceLock;

/// A registered function: the caller's rank and the encoded arguments in,
/// the encoded result (status `Ok`) or a message saying why not out. With
/// a [`Stack`] (the fast path) a result of at most 16 B is encoded there
/// and `out` left alone; a longer one is encoded into `out` and the stack
/// marked [`spilled`](Stack::spilled).
pub(crate) type ErasedFn =
    Box<dyn Fn(usize, &[u8], &mut Vec<u8>, Option<&mut Stack>) -> Status + Send + Sync>;

/// Most results held for fetching, and their bytes, at once.
const HELD_MAX: usize = 4096;
const HELD_MAX_BYTES: usize = 64 << 20;
/// Longest error message sent back (a panic message may be long).
const MESSAGE_MAX: usize = 480;

thread_local! {
    /// A single call's result buffer, kept for the next (no allocation per
    /// call once it has grown).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// This thread's result buffer (empty when another handler of this thread
/// holds it), for a result that did not fit the fast path's stack.
pub(crate) fn scratch() -> Vec<u8> {
    SCRATCH.with(|s| s.take())
}

/// Run function `func` of `funcs` for `src` on `args`, writing into `out`
/// (or `small`, see [`ErasedFn`]).
#[inline]
fn run_in(
    funcs: &[ErasedFn],
    func: u16,
    src: usize,
    args: &[u8],
    out: &mut Vec<u8>,
    small: Option<&mut Stack>,
) -> Status {
    out.clear();
    match funcs.get(func as usize) {
        Some(f) => f(src, args, out, small),
        None => {
            message(out, &format!("no RPC function #{func} is registered"));
            Status::Unknown
        }
    }
}

/// Results held for a fetch, by (caller, call id).
#[derive(Default)]
struct Held {
    map: HashMap<(usize, u64), (Status, Vec<u8>)>,
    bytes: usize,
}

/// The functions and the held results.
#[derive(Default)]
pub(crate) struct Serve {
    funcs: parking_lot::RwLock<Vec<ErasedFn>>,
    /// The functions, moved out of `funcs` when the first call arrives
    /// (after attach, so every registration is in): read with no lock.
    frozen: OnceLock<Box<[ErasedFn]>>,
    held: parking_lot::Mutex<Held>,
}

/// Write an error message (cut to [`MESSAGE_MAX`] bytes on a char boundary).
pub(crate) fn message(out: &mut Vec<u8>, msg: &str) {
    out.clear();
    let mut end = msg.len().min(MESSAGE_MAX);
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&msg.as_bytes()[..end]);
}

impl Serve {
    /// Add a function; its index is its registration order. `None` once
    /// calls were served (registration is over: the builder attached).
    pub(crate) fn add(&self, f: ErasedFn) -> Option<usize> {
        let mut v = self.funcs.write();
        if self.frozen.get().is_some() {
            return None;
        }
        v.push(f);
        Some(v.len() - 1)
    }

    /// The functions (frozen at the first call served).
    #[inline]
    fn funcs(&self) -> &[ErasedFn] {
        if let Some(f) = self.frozen.get() {
            return f;
        }
        // `add` checks `frozen` under this lock: held until it is set
        let mut v = self.funcs.write();
        self.frozen
            .get_or_init(|| std::mem::take(&mut *v).into_boxed_slice())
    }

    /// `rpc:short`: one call whose arguments came in the words (see
    /// [`fast`]); answered by `rpc:short_result` if the result fits its
    /// words, else by `rpc:result` as [`single`](Self::single). Inlined
    /// into its one caller, the `rpc:short` handler.
    #[inline(always)]
    pub(crate) fn short(
        &self,
        tok: Token<'_>,
        m: &Incoming<'_>,
        short_result: ReplyHandler,
        result: ReplyHandler,
    ) {
        // A result that fits goes out of `small` with no buffer at all;
        // `out` (allocated only for a longer result, which takes this
        // thread's scratch buffer, or an error message) is for the rest.
        let mut out = Vec::new();
        let mut small = Stack::default();
        let (call, mut st) = match fast::read_request(m.args()) {
            Ok((call, func, args, len)) => {
                let src = tok.src();
                let st = run_in(
                    self.funcs(),
                    func,
                    src,
                    &args[..len],
                    &mut out,
                    Some(&mut small),
                );
                (call, st)
            }
            Err(call) => {
                message(
                    &mut out,
                    "the call's argument length is past what a Short carries",
                );
                (call, Status::Unknown)
            }
        };
        if st == Status::Ok && !small.spilled {
            let w = fast::result_words_of(call, st, &small);
            let _ = tok.reply(short_result, &w, Payload::None);
        } else {
            let max = tok.max_medium();
            if st == Status::Ok && out.len() > max {
                st = Status::TooLarge;
                let msg = too_large(out.len(), max);
                message(&mut out, &msg);
            }
            // A failed reply (the caller died) leaves nothing to do here.
            let _ = tok.reply(result, &[call, st as u64], Payload::Medium(&out));
        }
        if out.capacity() > 0 {
            out.clear();
            SCRATCH.with(|s| s.replace(out));
        }
    }

    /// `rpc:<name>`: one call, its id in word 0, its arguments the payload;
    /// answered by `rpc:result` (call id, status; result or message).
    pub(crate) fn single(&self, func: u16, tok: Token<'_>, m: &Incoming<'_>, result: ReplyHandler) {
        let call = m.arg(0);
        let mut out = SCRATCH.with(|s| s.take());
        let mut st = run_in(self.funcs(), func, tok.src(), m.payload(), &mut out, None);
        let max = tok.max_medium();
        if st == Status::Ok && out.len() > max {
            st = Status::TooLarge;
            let msg = too_large(out.len(), max);
            message(&mut out, &msg);
        }
        // A failed reply (the caller died) leaves nothing to do here.
        let _ = tok.reply(result, &[call, st as u64], Payload::Medium(&out));
        out.clear();
        SCRATCH.with(|s| s.replace(out));
    }

    /// `rpc:batch`: call records back to back; answered by one
    /// `rpc:results` of result records. A result that does not fit the
    /// room left (after room for a short record per call still to come)
    /// is held for `rpc:fetch`.
    pub(crate) fn batch(&self, tok: Token<'_>, m: &Incoming<'_>, results: ReplyHandler) {
        let src = tok.src();
        let max = tok.max_medium();
        // Records after the current one, for the room kept for their
        // results' headers: the caller's count (word 0) saves a walk; a
        // wrong one (a hostile peer) only costs that peer results.
        let mut left = usize::try_from(m.arg(0))
            .unwrap_or(usize::MAX)
            .min(m.payload().len());
        let mut out = Vec::with_capacity(max.min(m.payload().len() * 2 + 64));
        let mut scratch = Vec::new();
        let funcs = self.funcs();
        for rec in Calls::new(m.payload()) {
            left = left.saturating_sub(1);
            let reserve = left * RESULT_HEADER;
            let (call, mut st) = match rec {
                Ok(r) => {
                    // A result of at most 16 B (most) is encoded on the
                    // stack and written as its record by fixed-size copies.
                    let mut small = Stack::default();
                    let st = run_in(funcs, r.func, src, r.args, &mut scratch, Some(&mut small));
                    if st == Status::Ok && !small.spilled {
                        if out.len() + RESULT_HEADER + FAST_BYTES + reserve <= max {
                            fixed_records::put_ok_result(&mut out, r.call, &small);
                            continue;
                        }
                        // near the reply's end: the general way below
                        let (b, len) = fixed_records::bytes_of(&small);
                        scratch.clear();
                        scratch.extend_from_slice(&b[..len]);
                    }
                    (r.call, st)
                }
                Err(Some(call)) => {
                    message(&mut scratch, "the call record was cut short");
                    (call, Status::Unknown)
                }
                Err(None) => continue,
            };
            if st == Status::Ok && scratch.len() > max {
                st = Status::TooLarge;
                let msg = too_large(scratch.len(), max);
                message(&mut scratch, &msg);
            }
            if out.len() + RESULT_HEADER + scratch.len() + reserve <= max {
                put_result(&mut out, call, st, &scratch);
            } else if out.len() + RESULT_HEADER + reserve <= max {
                match self.hold(src, call, st, std::mem::take(&mut scratch)) {
                    Ok(()) => put_result(&mut out, call, Status::Held, &[]),
                    Err(msg) => {
                        message(&mut scratch, &msg);
                        if out.len() + RESULT_HEADER + scratch.len() + reserve > max {
                            scratch.clear();
                        }
                        put_result(&mut out, call, Status::TooLarge, &scratch);
                    }
                }
            }
            // else: a hostile batch (records shorter than their results'
            // headers); its caller never sends one, so nothing is owed.
        }
        let _ = tok.reply(results, &[], Payload::Medium(&out));
        if scratch.capacity() > 0 {
            // this thread's scratch buffer, if a long result took it
            scratch.clear();
            SCRATCH.with(|s| s.replace(scratch));
        }
    }

    fn hold(&self, src: usize, call: u64, st: Status, bytes: Vec<u8>) -> Result<(), String> {
        let mut h = self.held.lock();
        if h.map.len() >= HELD_MAX || h.bytes + bytes.len() > HELD_MAX_BYTES {
            return Err(format!(
                "the result did not fit the batch's reply and {} results ({} B) already wait \
                 to be fetched (at most {HELD_MAX}, {HELD_MAX_BYTES} B)",
                h.map.len(),
                h.bytes
            ));
        }
        h.bytes += bytes.len();
        if let Some((_, old)) = h.map.insert((src, call), (st, bytes)) {
            h.bytes -= old.len();
        }
        Ok(())
    }

    /// `rpc:fetch` (Short, the call id): reply with the held result.
    pub(crate) fn fetch(&self, tok: Token<'_>, m: &Incoming<'_>, result: ReplyHandler) {
        let call = m.arg(0);
        let held = {
            let mut h = self.held.lock();
            let got = h.map.remove(&(tok.src(), call));
            if let Some((_, b)) = &got {
                h.bytes -= b.len();
            }
            got
        };
        let (st, bytes) = held.unwrap_or_else(|| {
            let mut out = Vec::new();
            message(&mut out, "no result is held for this call");
            (Status::Unknown, out)
        });
        let _ = tok.reply(result, &[call, st as u64], Payload::Medium(&bytes));
    }
}

fn too_large(len: usize, max: usize) -> String {
    format!(
        "the result is {len} B encoded, more than the largest Medium reply ({max} B); \
         RPC results are not chunked (return it in parts, or move it with a Long)"
    )
}
