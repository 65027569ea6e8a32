//! # splitrt-rpc — typed remote procedure calls on Active Messages
//!
//! A function registered by name on every rank, called on any rank with
//! serde arguments, its result a future: Lamellar's and UPC++'s `rpc`
//! model, as a layer on splitrt's raw Active Messages (which know nothing
//! of it).
//!
//! * [`Rpc::new`] adds splitrt-rpc's own handlers to an
//!   [`EndpointBuilder`]; [`Rpc::register`] adds one function, as an AM
//!   request handler named `rpc:<name>`. Every rank registers the same
//!   functions in the same order, so the handler-table check at attach
//!   names a function some rank lacks (or registered in another place).
//! * [`RpcFn::call`] encodes the arguments (postcard) into the
//!   destination's buffer and returns an [`RpcFuture`]. The buffer (at
//!   most one Medium to that rank) is sent when the next call would not
//!   fit, on [`Rpc::flush`], or when a caller waits on or polls a future
//!   of that destination: a call alone goes as an AM Short (`rpc:short`,
//!   arguments of at most 16 B encoded, in its words; its result comes
//!   back in a Short too if it fits) or to its function's handler, two or
//!   more as one `rpc:batch` Medium, answered by one reply.
//! * `.await` the future (it sleeps on the endpoint's traffic waker) or
//!   [`RpcFuture::wait`] for it.
//!
//! ```no_run
//! use splitrt_am::EndpointBuilder;
//! use splitrt_rpc::Rpc;
//!
//! # fn main() -> splitrt_am::Result<()> {
//! let mut b = EndpointBuilder::new();
//! let rpc = Rpc::new(&mut b)?;
//! let add = rpc.register(&mut b, "add", |_src, (x, y): (u64, u64)| x + y)?;
//! let greet = rpc.register(&mut b, "greet", |src, name: String| {
//!     format!("hello {name} from rank {src}")
//! })?;
//! let ep = b.attach()?;
//! let next = (ep.rank() + 1) % ep.size();
//! let sums: Vec<_> = (0..100u64)
//!     .map(|i| add.call(&ep, next, &(i, 1)))
//!     .collect::<Result<_, _>>()?; // buffered: sent as one or a few Mediums
//! for (i, s) in sums.into_iter().enumerate() {
//!     assert_eq!(s.wait()?, i as u64 + 1);
//! }
//! println!("{}", greet.call(&ep, next, &"world".to_string())?.wait()?);
//! ep.finish()
//! # }
//! ```
//!
//! What happens when things go wrong:
//!
//! * a function missing on some rank: attach fails on every rank, naming
//!   the first differing handler-table entry (`rpc:<name>`);
//! * arguments that do not decode as the function's argument type at the
//!   target (a call that bypassed the types): the future fails with an
//!   error naming the target, the function and the decoder's cause; the
//!   target answers and lives on;
//! * a function that panics: the target catches the panic (the panic hook
//!   still prints it there), answers with its message, and lives on; the
//!   future fails naming it. State the function shares with others may be
//!   left half-updated, as after any caught panic;
//! * arguments or a result larger than one Medium (`Endpoint::max_medium`,
//!   less a 14 B record header for arguments): an error at the call, or at
//!   the future (not chunked);
//! * a rank that fails: every future waiting on the job fails with the
//!   endpoint's error naming it, no hang.
//!
//! A function runs inside an AM request handler, so it must not block on
//! other ranks, and it cannot make calls itself (a request cannot be sent
//! from a handler; a call made there fails when it has to be sent).
#![warn(missing_docs)]

mod client;
mod fast;
mod fixed_records;
mod future;
mod pending;
mod serve;
mod wire;
// The lone call's round trip without locks (issue 25, third round).
mod lone;
mod slot;
mod sync;
// Small values' postcard bytes straight into a Short's words (fourth round).
mod shortser;
// ... and read back from them without postcard's deserializer.
mod shortde;

pub use future::RpcFuture;
pub use pending::MAX_OUTSTANDING;

use client::{Client, FuncInfo};
use fast::FAST_WORDS;
use pending::Pending;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serve::{message, Serve};
use splitrt_am::{Endpoint, EndpointBuilder, Error, Kind, Result};
use std::marker::PhantomData;
use std::sync::Arc;
use wire::{Results, Status};

/// The RPC layer of one endpoint: made on its [`EndpointBuilder`] before
/// attach, where the functions are registered. Cheap to clone.
#[derive(Clone)]
pub struct Rpc {
    client: Arc<Client>,
    serve: Arc<Serve>,
    result: splitrt_am::ReplyHandler,
}

impl Rpc {
    /// Register splitrt-rpc's own handlers (`rpc:result`, `rpc:results`,
    /// `rpc:batch`, `rpc:fetch`, and `rpc:short`, `rpc:short_result` for a
    /// call alone whose arguments and result fit an AM Short) on `b`. One
    /// per builder.
    ///
    /// ```
    /// let mut b = splitrt_am::EndpointBuilder::new();
    /// let rpc = splitrt_rpc::Rpc::new(&mut b).unwrap();
    /// assert!(splitrt_rpc::Rpc::new(&mut b).is_err()); // registered twice
    /// # drop(rpc);
    /// ```
    pub fn new(b: &mut EndpointBuilder) -> Result<Rpc> {
        let slots = Arc::new(Pending::default());
        let s = slots.clone();
        let result = b.reply("rpc:result", Kind::Medium, 2, move |m| {
            let st = Status::from_byte(m.arg(1));
            let w = s.complete(m.arg(0), st, m.payload());
            if let Some(w) = w {
                w.wake();
            }
        })?;
        let s = slots.clone();
        let results = b.reply("rpc:results", Kind::Medium, 0, move |m| {
            let all = m.payload();
            for r in Results::new(all) {
                // a small result (most): stored by fixed-size copies
                let w = match fixed_records::padded(all, r.bytes) {
                    Some(b) => s.complete_as(r.call, r.status, || {
                        pending::Bytes::Short(r.bytes.len() as u8, b)
                    }),
                    None => s.complete(r.call, r.status, r.bytes),
                };
                if let Some(w) = w {
                    w.wake();
                }
            }
        })?;
        let serve = Arc::new(Serve::default());
        let sv = serve.clone();
        let batch = b.request("rpc:batch", Kind::Medium, 1, move |tok, m| {
            sv.batch(tok, m, results)
        })?;
        let sv = serve.clone();
        let fetch = b.request("rpc:fetch", Kind::Short, 1, move |tok, m| {
            sv.fetch(tok, m, result)
        })?;
        // The fast path (`fast.rs`): a call alone, arguments and result in
        // the words of AM Shorts.
        let s = slots.clone();
        let short_result = b.reply("rpc:short_result", Kind::Short, FAST_WORDS, move |m| {
            let (call, st, bytes, len) = fast::read_result(m.args());
            if let Some(w) = s.complete_short(call, st, bytes, len) {
                w.wake();
            }
        })?;
        let sv = serve.clone();
        let short = b.request("rpc:short", Kind::Short, FAST_WORDS, move |tok, m| {
            sv.short(tok, m, short_result, result)
        })?;
        Ok(Rpc {
            client: Arc::new(Client::new(slots, batch, fetch, short)),
            serve,
            result,
        })
    }

    /// Register `f` as the RPC function `name` (an AM request handler
    /// named `rpc:<name>`): `f(caller_rank, args) -> result`. Every rank
    /// registers the same functions in the same order, before attach.
    ///
    /// `f` runs inside a request handler on the target (see the crate
    /// docs); a panic in it is caught there and reported to the caller.
    ///
    /// ```
    /// let mut b = splitrt_am::EndpointBuilder::new();
    /// let rpc = splitrt_rpc::Rpc::new(&mut b).unwrap();
    /// let len = rpc.register(&mut b, "len", |_src, s: String| s.len()).unwrap();
    /// assert_eq!(len.name(), "len");
    /// ```
    pub fn register<Req, Resp, F>(
        &self,
        b: &mut EndpointBuilder,
        name: &str,
        f: F,
    ) -> Result<RpcFn<Req, Resp>>
    where
        Req: Serialize + DeserializeOwned,
        Resp: Serialize + DeserializeOwned,
        F: Fn(usize, Req) -> Resp + Send + Sync + 'static,
    {
        let index = self.client.funcs.read().len();
        let func = u16::try_from(index)
            .map_err(|_| Error::usage("too many RPC functions (at most 65536)"))?;
        let serve = self.serve.clone();
        let result = self.result;
        let handler = b.request(&format!("rpc:{name}"), Kind::Medium, 1, move |tok, m| {
            serve.single(func, tok, m, result)
        })?;
        let erased = Box::new(
            move |src: usize, args: &[u8], out: &mut Vec<u8>, small: Option<&mut fast::Stack>| {
                run_typed(&f, src, args, out, small)
            },
        );
        let at = self.serve.add(erased).ok_or_else(|| {
            Error::usage(format!(
                "rpc function '{name}' registered after calls were served (register before attach)"
            ))
        })?;
        debug_assert_eq!(at, index);
        self.client.funcs.write().push(FuncInfo {
            name: name.to_string(),
            handler,
        });
        Ok(RpcFn {
            client: self.client.clone(),
            func,
            _types: PhantomData,
        })
    }

    /// Send every destination's buffered calls now (a waiting caller
    /// sends its destination's by itself): for calls whose results are
    /// awaited later, so the targets work meanwhile.
    ///
    /// ```no_run
    /// # fn f(ep: &splitrt_am::Endpoint, rpc: &splitrt_rpc::Rpc, add: &splitrt_rpc::RpcFn<(u64, u64), u64>) -> splitrt_am::Result<()> {
    /// let futs: Vec<_> = (0..ep.size())
    ///     .map(|r| add.call(ep, r, &(1, 2)))
    ///     .collect::<Result<_, _>>()?;
    /// rpc.flush(ep)?; // every rank starts on its call now
    /// // ... other work ...
    /// for f in futs {
    ///     f.wait()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn flush(&self, ep: &Endpoint) -> Result<()> {
        self.client.flush_all(ep)
    }

    /// What this rank's calls cost so far: calls sent, the AM messages
    /// that carried them (fewer when calls were aggregated), and how many
    /// of those calls went alone in an AM Short (the fast path: a call
    /// alone whose arguments encode in at most 16 B).
    ///
    /// ```no_run
    /// # fn f(ep: &splitrt_am::Endpoint, rpc: &splitrt_rpc::Rpc, inc: &splitrt_rpc::RpcFn<u64, u64>) -> splitrt_am::Result<()> {
    /// let futs: Vec<_> = (0..1000u64).map(|i| inc.call(ep, 0, &i)).collect::<Result<_, _>>()?;
    /// for f in futs {
    ///     f.wait()?;
    /// }
    /// let s = rpc.stats();
    /// println!("{} calls in {} messages", s.calls, s.messages); // e.g. 1000 in 1
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> RpcStats {
        let (calls, messages, short_calls) = self.client.stats();
        RpcStats {
            calls,
            messages,
            short_calls,
        }
    }
}

/// Counters of one rank's calls ([`Rpc::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RpcStats {
    /// Calls sent.
    pub calls: u64,
    /// Request messages that carried them (a call alone, or a batch).
    pub messages: u64,
    /// Of those, the calls sent alone in an AM Short (`rpc:short`, the
    /// fast path: arguments of at most 16 B encoded, in the Short's words).
    pub short_calls: u64,
}

/// Decode, run (catching a panic), encode (into `small` if given and the
/// result fits, see [`serve::ErasedFn`]).
fn run_typed<Req, Resp, F>(
    f: &F,
    src: usize,
    args: &[u8],
    out: &mut Vec<u8>,
    small: Option<&mut fast::Stack>,
) -> Status
where
    Req: DeserializeOwned,
    Resp: Serialize,
    F: Fn(usize, Req) -> Resp,
{
    // small shapes without postcard's deserializer, else postcard (and
    // its errors)
    let req = match shortde::decode::<Req>(args).map_or_else(
        || postcard::take_from_bytes::<Req>(args),
        |r| Ok((r, &[][..])),
    ) {
        Ok((r, [])) => r,
        Ok((_, rest)) => {
            let msg = format!(
                "{} B left over after decoding {} ({} B given)",
                rest.len(),
                std::any::type_name::<Req>(),
                args.len()
            );
            message(out, &msg);
            return Status::BadArgs;
        }
        Err(e) => {
            let msg = format!(
                "{e} (decoding {} from {} B)",
                std::any::type_name::<Req>(),
                args.len()
            );
            message(out, &msg);
            return Status::BadArgs;
        }
    };
    let resp = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(src, req))) {
        Ok(r) => r,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            message(out, &what);
            return Status::Panicked;
        }
    };
    if let Some(s) = small {
        if shortser::encode_small(&resp, s) {
            return Status::Ok;
        }
        // longer than a Short carries (or it does not encode: said below)
        *s = fast::Stack {
            spilled: true,
            ..Default::default()
        };
        if out.capacity() == 0 {
            *out = serve::scratch();
        }
    }
    match encode_into(&resp, out) {
        Ok(()) => Status::Ok,
        Err(e) => {
            message(out, &format!("the result did not encode: {e}"));
            Status::Unencodable
        }
    }
}

/// A postcard output that appends to a borrowed `Vec` a slice at a time
/// (postcard's `to_extend` takes its writer by value and pushes through
/// `Extend` a byte at a time: most of an 8 B call's encoding cost).
struct Tail<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for Tail<'_> {
    type Output = ();

    #[inline]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    #[inline]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    #[inline]
    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Append `v`'s postcard encoding to `out`.
#[inline]
fn encode_into<T: Serialize + ?Sized>(v: &T, out: &mut Vec<u8>) -> postcard::Result<()> {
    postcard::serialize_with_flavor(v, Tail(out))
}

/// A registered RPC function taking `Req` and returning `Resp`; call it
/// with [`call`](Self::call). Cheap to clone.
pub struct RpcFn<Req, Resp> {
    client: Arc<Client>,
    func: u16,
    _types: PhantomData<fn(Req) -> Resp>,
}

impl<Req, Resp> Clone for RpcFn<Req, Resp> {
    fn clone(&self) -> Self {
        RpcFn {
            client: self.client.clone(),
            func: self.func,
            _types: PhantomData,
        }
    }
}

impl<Req: Serialize, Resp: DeserializeOwned> RpcFn<Req, Resp> {
    /// Call the function on `rank` (any rank, this one included) with
    /// `args`: encoded into that rank's buffer, sent when the buffer
    /// fills, on [`Rpc::flush`], or when this or another future of that
    /// rank is waited on or polled.
    ///
    /// An error at once for arguments larger than one Medium to `rank`,
    /// a rank outside the job, more than [`MAX_OUTSTANDING`] live calls,
    /// or a buffer that had to be sent and could not be.
    ///
    /// ```no_run
    /// # fn f(ep: &splitrt_am::Endpoint, sq: &splitrt_rpc::RpcFn<u64, u64>) -> splitrt_am::Result<()> {
    /// let fut = sq.call(ep, 0, &12)?;
    /// assert_eq!(fut.wait()?, 144);
    /// # Ok(()) }
    /// ```
    pub fn call(&self, ep: &Endpoint, rank: usize, args: &Req) -> Result<RpcFuture<Resp>> {
        // Arguments of at most 16 B are encoded on the stack, and sent in
        // a Short's words if the call goes alone; longer ones are encoded
        // into the buffer (a second encoding, only for those).
        let mut small = fast::Stack::default();
        let small = shortser::encode_small(args, &mut small).then_some(&small);
        let call = self.client.enqueue(ep, rank, self.func, small, &mut |v| {
            encode_into(args, v).map_err(|e| e.to_string())
        })?;
        Ok(RpcFuture::new(
            ep,
            self.client.clone(),
            rank,
            self.func,
            call,
        ))
    }
}

impl<Req, Resp> RpcFn<Req, Resp> {
    /// The name it was registered under.
    pub fn name(&self) -> String {
        self.client.name(self.func)
    }

    /// **For tests of the target's checks.** Call with raw bytes as the
    /// encoded arguments, bypassing the types (a peer with another idea of
    /// the argument type). Only for tests; the result still decodes as `Resp`.
    #[doc(hidden)]
    pub fn call_raw(&self, ep: &Endpoint, rank: usize, args: &[u8]) -> Result<RpcFuture<Resp>>
    where
        Resp: DeserializeOwned,
    {
        let call = self.client.enqueue(ep, rank, self.func, None, &mut |v| {
            v.extend_from_slice(args);
            Ok(())
        })?;
        Ok(RpcFuture::new(
            ep,
            self.client.clone(),
            rank,
            self.func,
            call,
        ))
    }
}
