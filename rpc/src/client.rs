//! The caller's side: per destination a buffer of call records (bounded
//! by one Medium to it), sent when it fills, on `flush`, or when a caller
//! waits; the slots of the calls in flight.

use crate::fast;
use crate::lone::Lone;
use crate::pending::Pending;
use crate::wire::{put_call_header, Calls, Status, CALL_HEADER};
use splitrt_am::{Endpoint, Error, Payload, RequestHandler, Result};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// A registered function as its callers see it.
pub(crate) struct FuncInfo {
    /// The name it was registered under (without `rpc:`).
    pub name: String,
    /// Its own handler, `rpc:<name>`, for a call sent alone.
    pub handler: RequestHandler,
}

/// One destination's buffered call records.
#[derive(Default)]
struct Outbox {
    bytes: Vec<u8>,
    /// How many times the buffer was taken to be sent: a call buffered
    /// while this was `n` left with the `n`-th take.
    taken: u64,
    /// Call records in `bytes`.
    records: u64,
    /// Calls sent, and the messages that carried them (for `Rpc::stats`);
    /// of those messages, the `rpc:short`s (a call alone in a Short).
    calls: u64,
    messages: u64,
    shorts: u64,
}

/// One destination: its outbox, and the cell of a call alone (a call
/// whose arguments fit a Short, made while the outbox is empty: kept as
/// its `rpc:short` words there, no lock; moved into the outbox as a
/// record when a second call comes).
#[derive(Default)]
struct Dest {
    outbox: parking_lot::Mutex<Outbox>,
    lone: Lone,
}

/// The take count a future of a call kept in a [`Lone`] cell holds.
pub(crate) const LONE: u64 = u64::MAX;

thread_local! {
    /// The buffer a flush swaps into an outbox, and gets back after the
    /// send: no allocation per flush once both have grown.
    static SPARE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The caller's state, shared by every [`RpcFn`](crate::RpcFn) and future
/// of one [`Rpc`](crate::Rpc).
pub(crate) struct Client {
    pub slots: Arc<Pending>,
    pub funcs: parking_lot::RwLock<Vec<FuncInfo>>,
    /// `rpc:batch` and `rpc:fetch`.
    pub batch: RequestHandler,
    pub fetch: RequestHandler,
    /// `rpc:short`: a call sent alone whose arguments fit an AM Short.
    pub short: RequestHandler,
    /// Per destination (made at the first call, when the job's size is known).
    outboxes: OnceLock<Box<[Dest]>>,
    /// Per destination: the largest Medium to it.
    limits: OnceLock<Box<[usize]>>,
}

impl Client {
    pub(crate) fn new(
        slots: Arc<Pending>,
        batch: RequestHandler,
        fetch: RequestHandler,
        short: RequestHandler,
    ) -> Self {
        Client {
            slots,
            funcs: Default::default(),
            batch,
            fetch,
            short,
            outboxes: OnceLock::new(),
            limits: OnceLock::new(),
        }
    }

    /// Calls sent, the messages that carried them, and how many of those
    /// were `rpc:short`s, over every destination.
    pub(crate) fn stats(&self) -> (u64, u64, u64) {
        let mut t = (0, 0, 0);
        for d in self.outboxes.get().into_iter().flatten() {
            let lone = d.lone.sent.load(Ordering::Relaxed);
            let o = d.outbox.lock();
            t.0 += o.calls + lone;
            t.1 += o.messages + lone;
            t.2 += o.shorts + lone;
        }
        t
    }

    /// The name of function `func`.
    pub(crate) fn name(&self, func: u16) -> String {
        self.funcs
            .read()
            .get(func as usize)
            .map_or_else(|| format!("#{func}"), |f| f.name.clone())
    }

    fn outboxes(&self, ep: &Endpoint) -> Result<(&[Dest], &[usize])> {
        if let (Some(o), Some(l)) = (self.outboxes.get(), self.limits.get()) {
            return Ok((o, l));
        }
        let limits = (0..ep.size())
            .map(|p| ep.max_medium(p))
            .collect::<Result<Box<[usize]>>>()?;
        let l = self.limits.get_or_init(|| limits);
        let o = self
            .outboxes
            .get_or_init(|| (0..ep.size()).map(|_| Default::default()).collect());
        Ok((o, l))
    }

    /// Buffer a call of `func` to `dest`, its arguments written by
    /// `encode` straight into the buffer (appending; an error leaves the
    /// buffer as it was); returns its call id and the buffer's take count
    /// (see [`Outbox::taken`]). Sends the destination's buffer first if
    /// the record does not fit in it. With `fast` (the arguments already
    /// encoded, at most 16 B) and nothing buffered for `dest` the call is
    /// kept as its `rpc:short` words in the destination's [`Lone`] cell
    /// instead, with no lock (`encode` unused; the take count [`LONE`]).
    #[inline]
    pub(crate) fn enqueue(
        &self,
        ep: &Endpoint,
        dest: usize,
        func: u16,
        fast: Option<&fast::Stack>,
        encode: &mut dyn FnMut(&mut Vec<u8>) -> std::result::Result<(), String>,
    ) -> Result<(u64, u64)> {
        // The lone call's path, inlined into the call: a known rank with
        // nothing buffered, a free slot, the cell empty.
        if let (Some(args), Some(o), Some(l)) = (fast, self.outboxes.get(), self.limits.get()) {
            if let (Some(d), Some(&limit)) = (o.get(dest), l.get(dest)) {
                if CALL_HEADER + args.len <= limit && !d.lone.queued.load(Ordering::Acquire) {
                    if let Some(call) = self.slots.alloc() {
                        if d.lone.put(&fast::words_of(call, func, args)) {
                            return Ok((call, LONE));
                        }
                        return self.enqueue_slow(ep, dest, func, fast, encode, Some(call));
                    }
                }
            }
        }
        self.enqueue_slow(ep, dest, func, fast, encode, None)
    }

    /// [`enqueue`](Self::enqueue) past its lone-call path (with `call`:
    /// the slot that path took).
    #[inline(never)]
    fn enqueue_slow(
        &self,
        ep: &Endpoint,
        dest: usize,
        func: u16,
        fast: Option<&fast::Stack>,
        encode: &mut dyn FnMut(&mut Vec<u8>) -> std::result::Result<(), String>,
        call: Option<u64>,
    ) -> Result<(u64, u64)> {
        let at = |e: Error| e.at_rank(ep.rank()).with_peer(dest);
        if dest >= ep.size() {
            return Err(at(Error::usage(format!(
                "rpc '{}': rank {dest} does not exist in a job of {} ranks",
                self.name(func),
                ep.size()
            ))));
        }
        let (outboxes, limits) = self.outboxes(ep)?;
        let limit = limits[dest];
        let Some(call) = call.or_else(|| self.slots.alloc()) else {
            return Err(at(Error::usage(format!(
                "rpc '{}': {} calls are outstanding (their futures alive), the most one Rpc \
                 keeps; wait for some before calling more",
                self.name(func),
                crate::MAX_OUTSTANDING
            ))));
        };
        let d = &outboxes[dest];
        if let Some(args) = fast {
            if CALL_HEADER + args.len <= limit && d.lone.put(&fast::words_of(call, func, args)) {
                return Ok((call, LONE));
            }
        }
        loop {
            let mut o = d.outbox.lock();
            // A call kept alone joins this one in the buffer (before it).
            // The buffer holds something from here on (this call, and that
            // one if any): `take_to_outbox` marks it `queued` before the
            // lone call leaves its cell, so a wait that finds the cell
            // empty and takes the lock finds it in the buffer, and a flush
            // without a take count takes the lock for this call's record.
            if let Some(w) = d.lone.take_to_outbox() {
                fast::spill(&w, &mut o.bytes);
                o.records += 1;
            }
            // A small call joining a batch that has room for the longest
            // small record: one fixed-size copy, nothing to check after.
            if let Some(args) = fast {
                if o.bytes.len() + CALL_HEADER + fast::FAST_BYTES <= limit {
                    fast::put_record(&mut o.bytes, func, call, args);
                    o.records += 1;
                    return Ok((call, o.taken));
                }
            }
            let start = o.bytes.len();
            let encoded = match fast {
                // encoded already: copied, not encoded again
                Some(args) => {
                    fast::put_record(&mut o.bytes, func, call, args);
                    Ok(())
                }
                None => {
                    put_call_header(&mut o.bytes, func, call, 0);
                    encode(&mut o.bytes)
                }
            };
            if let Err(why) = encoded {
                o.bytes.truncate(start);
                if o.records == 0 {
                    d.lone.queued.store(false, Ordering::Release);
                }
                drop(o);
                let why = format!("the arguments did not encode: {why}");
                return Err(self.refused(ep, dest, func, call, why));
            }
            let len = o.bytes.len() - start - CALL_HEADER;
            if CALL_HEADER + len > limit {
                o.bytes.truncate(start);
                if o.records == 0 {
                    d.lone.queued.store(false, Ordering::Release);
                }
                drop(o);
                let why = format!(
                    "the arguments are {len} B encoded, more than one Medium to rank {dest} \
                     carries ({limit} B, less {CALL_HEADER} B of record header); RPC arguments \
                     are not chunked"
                );
                return Err(self.refused(ep, dest, func, call, why));
            }
            if o.bytes.len() <= limit {
                let at_len = start + CALL_HEADER - 4;
                o.bytes[at_len..at_len + 4].copy_from_slice(&(len as u32).to_le_bytes());
                o.records += 1;
                return Ok((call, o.taken));
            }
            // does not fit after the records buffered: send those, retry
            o.bytes.truncate(start);
            drop(o);
            if let Err(e) = self.flush_to(ep, dest, None) {
                self.slots.abandon(call);
                return Err(e);
            }
        }
    }

    /// The error of call `call` of `func` to `dest` refused at the call
    /// (its slot freed): out of line, so the call path builds no closure
    /// for it.
    #[cold]
    #[inline(never)]
    fn refused(&self, ep: &Endpoint, dest: usize, func: u16, call: u64, why: String) -> Error {
        self.slots.abandon(call);
        Error::usage(format!("rpc '{}': {why}", self.name(func)))
            .at_rank(ep.rank())
            .with_peer(dest)
    }

    /// Send the call kept alone for `dest` (with `call`: only if it is
    /// that call) in an `rpc:short`, with no lock: `None` if there was none
    /// (it was sent, or joined the outbox), else what the send gave.
    #[inline]
    pub(crate) fn send_lone(
        &self,
        ep: &Endpoint,
        dest: usize,
        call: Option<u64>,
    ) -> Option<Result<()>> {
        let d = self.outboxes.get()?.get(dest)?;
        self.send_lone_of(ep, dest, d, call)
    }

    /// [`send_lone`](Self::send_lone) with `dest`'s [`Dest`] at hand.
    #[inline]
    fn send_lone_of(
        &self,
        ep: &Endpoint,
        dest: usize,
        d: &Dest,
        call: Option<u64>,
    ) -> Option<Result<()>> {
        let words = d.lone.take(call)?;
        d.lone.sent.fetch_add(1, Ordering::Relaxed);
        Some(self.send_short(ep, dest, &words))
    }

    /// Send an `rpc:short`; a failed send fails its call.
    #[inline(always)] // a lone call's send: no call frame of its own
    fn send_short(
        &self,
        ep: &Endpoint,
        dest: usize,
        words: &[u64; fast::FAST_WORDS],
    ) -> Result<()> {
        let sent = ep.request(dest, self.short, words, Payload::None);
        if let Err(e) = &sent {
            // a waker taken is woken, never dropped: it may be another
            // call's (the slot freed and taken again meanwhile)
            if let Some(w) =
                self.slots
                    .complete(words[0], Status::SendFailed, e.to_string().as_bytes())
            {
                w.wake();
            }
        }
        sent
    }

    /// Send `dest`'s buffered calls (with `only_take = Some(n)`: only if
    /// the buffer is still the one of take count `n`, i.e. a call buffered
    /// then is still in it; without, the call kept alone too): one alone
    /// to its function's handler, several as one `rpc:batch`. The buffer
    /// is swapped under its lock with this thread's spare and sent without
    /// the lock (a send that waits for room runs handlers, which may call
    /// again). A failed send fails every call in it.
    pub(crate) fn flush_to(
        &self,
        ep: &Endpoint,
        dest: usize,
        only_take: Option<u64>,
    ) -> Result<()> {
        self.flush_locked_if(ep, dest, only_take, false)
    }

    /// Send `dest`'s buffered calls for a call kept alone that its own
    /// [`send_lone`](Self::send_lone) did not find in the cell: it was
    /// sent by another thread, or a second call moved it into the buffer,
    /// perhaps still doing so (the cell busy or empty while `queued` is
    /// not yet seen). So the outbox lock is taken whatever `queued` says:
    /// the lock orders this flush after that move. Only a contended lone
    /// call pays for it.
    pub(crate) fn flush_after_lone(&self, ep: &Endpoint, dest: usize) -> Result<()> {
        self.flush_locked_if(ep, dest, None, true)
    }

    /// [`flush_to`](Self::flush_to); with `always_lock`, the outbox lock is
    /// taken even when `queued` says the buffer is empty.
    fn flush_locked_if(
        &self,
        ep: &Endpoint,
        dest: usize,
        only_take: Option<u64>,
        always_lock: bool,
    ) -> Result<()> {
        let Some(d) = self.outboxes.get().and_then(|o| o.get(dest)) else {
            return Ok(());
        };
        let mut lone = Ok(());
        if only_take.is_none() {
            if let Some(r) = self.send_lone_of(ep, dest, d, None) {
                lone = r;
            }
            if !always_lock && !d.lone.queued.load(Ordering::Acquire) {
                return lone;
            }
        }
        let mut o = d.outbox.lock();
        if o.records == 0 || only_take.is_some_and(|t| t != o.taken) {
            return lone;
        }
        o.taken += 1;
        o.calls += o.records;
        o.messages += 1;
        // The fast path: one call whose arguments fit an AM Short's words
        // (a record of a raw call, or a call kept alone that joined it).
        if o.records == 1 {
            if let Some(words) = fast::request_words(&o.bytes) {
                o.bytes.clear();
                o.records = 0;
                o.shorts += 1;
                d.lone.queued.store(false, Ordering::Release);
                drop(o);
                return self.send_short(ep, dest, &words).and(lone);
            }
        }
        let mut bytes = SPARE.with(|s| s.take());
        std::mem::swap(&mut o.bytes, &mut bytes);
        let records = std::mem::take(&mut o.records);
        d.lone.queued.store(false, Ordering::Release);
        drop(o);
        let sent = match Calls::new(&bytes).next() {
            Some(Ok(r)) if records == 1 => {
                let h = self.funcs.read().get(r.func as usize).map(|f| f.handler);
                match h {
                    Some(h) => ep.request(dest, h, &[r.call], Payload::Medium(r.args)),
                    None => Err(Error::usage("an RPC call of an unknown function")),
                }
            }
            _ => ep.request(dest, self.batch, &[records], Payload::Medium(&bytes)),
        };
        if let Err(e) = &sent {
            let msg = e.to_string();
            for r in Calls::new(&bytes).flatten() {
                // a waker taken is woken, never dropped: an awaited call
                // (or the next call in a reused slot) sleeps on it
                if let Some(w) = self
                    .slots
                    .complete(r.call, Status::SendFailed, msg.as_bytes())
                {
                    w.wake();
                }
            }
        }
        bytes.clear();
        SPARE.with(|s| {
            if s.borrow().capacity() < bytes.capacity() {
                s.replace(bytes);
            }
        });
        sent.and(lone)
    }

    /// Send every destination's buffered calls.
    pub(crate) fn flush_all(&self, ep: &Endpoint) -> Result<()> {
        let n = self.outboxes.get().map_or(0, |o| o.len());
        let mut first = Ok(());
        for d in 0..n {
            if let Err(e) = self.flush_to(ep, d, None) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}
