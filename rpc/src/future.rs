//! [`RpcFuture`]: the result of one call, awaited (a future that sleeps
//! on the endpoint's traffic waker) or waited for ([`RpcFuture::wait`]).

use crate::client::{Client, LONE};
use crate::pending::Polled;
use crate::wire::Status;
use serde::de::DeserializeOwned;
use splitrt_am::{Endpoint, Error, ErrorKind, Payload, Result, TrafficKey};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The pending result of an RPC ([`RpcFn::call`](crate::RpcFn::call)).
///
/// `.await` it (it registers a waker with the endpoint's traffic waker and
/// sleeps: no spinning) or [`wait`](Self::wait) for it. Either sends the
/// destination's buffered calls first, so a call is never left waiting in
/// a buffer by its own caller. Dropping it abandons the call (the function
/// still runs at the target; its result is dropped when it comes).
///
/// Errors name this rank, the target and the function: an argument that
/// did not decode at the target, a function that panicked there (the
/// target catches the panic and lives on), a result too large for one
/// Medium, the endpoint's error when a rank failed.
///
/// ```no_run
/// # async fn f(ep: &splitrt_am::Endpoint, sq: &splitrt_rpc::RpcFn<u64, u64>) -> splitrt_am::Result<()> {
/// // many calls to rank 0, aggregated; their results awaited in any order
/// let futs: Vec<_> = (0..10u64).map(|i| sq.call(ep, 0, &i)).collect::<Result<_, _>>()?;
/// for (i, f) in futs.into_iter().enumerate().rev() {
///     assert_eq!(f.await?, (i * i) as u64);
/// }
/// # Ok(()) }
/// ```
#[must_use = "a call's result is read through its future (dropping it abandons the call)"]
pub struct RpcFuture<R> {
    ep: Endpoint,
    client: Arc<Client>,
    dest: usize,
    func: u16,
    call: u64,
    /// The destination buffer's take count when the call was buffered
    /// ([`LONE`]: kept alone, in no buffer; [`SENT`]: sent since).
    taken: u64,
    /// The call is over (its result was returned).
    over: bool,
    key: Option<TrafficKey>,
    /// An unrelated error met while polling, returned at the end (as the
    /// PGAS layer's futures do).
    deferred: Option<Error>,
    _result: PhantomData<fn() -> R>,
}

impl<R: DeserializeOwned> RpcFuture<R> {
    pub(crate) fn new(
        ep: &Endpoint,
        client: Arc<Client>,
        dest: usize,
        func: u16,
        (call, taken): (u64, u64),
    ) -> Self {
        RpcFuture {
            ep: ep.clone(),
            client,
            dest,
            func,
            call,
            taken,
            over: false,
            key: None,
            deferred: None,
            _result: PhantomData,
        }
    }

    /// The rank the call went to.
    pub fn target(&self) -> usize {
        self.dest
    }

    /// Block until the result is in (polling the endpoint: spin, yield,
    /// then sleep on the doorbell, as [`Endpoint::wait_until`]), then
    /// return it. Sends the destination's buffered calls first.
    pub fn wait(mut self) -> Result<R> {
        let r = self.wait_inner();
        self.over = true;
        r
    }

    fn wait_inner(&mut self) -> Result<R> {
        let r = self.wait_result();
        self.with_deferred(r)
    }

    /// Wait for the result and decode it where it lies (the slot freed).
    fn wait_result(&self) -> Result<R> {
        let (ep, client, dest, call) = (&self.ep, &*self.client, self.dest, self.call);
        let slots = &client.slots;
        // The slot is looked up once; the wait looks at its state word.
        let slot = slots.watch(call);
        let ready = || slot.is_none_or(|s| s.ready(call));
        // Already in (a call waited on long after it was made): no wait,
        // nothing sent.
        if ready() {
            match slots.poll(call, None, |st, b| self.decode(st, b)) {
                Polled::Done(r) => return r,
                Polled::Held => fetch(ep, client, dest, call)?,
                Polled::Waiting => {}
            }
        }
        // About to block: send the destination's buffer, this call's if it
        // is still there, and in any case the calls buffered for the same
        // rank since, so the target runs them while this waits, instead of
        // caller and target taking turns (a stream of calls with a window
        // of outstanding ones waited for each batch's whole reply, then
        // filled the next batch with the target idle). A failed send
        // completes the calls in it with the error; the poll reports it.
        // A call still kept alone is sent from its cell (then nothing was
        // buffered for its rank since: a second call would have moved it
        // into the buffer), without the buffer's flush.
        // A call kept alone that is not in its cell any more was sent by
        // another thread or moved into the buffer (perhaps just now): the
        // flush then takes the buffer's lock whatever `queued` says.
        if self.taken == LONE {
            if client.send_lone(ep, dest, Some(call)).is_none() {
                let _ = client.flush_after_lone(ep, dest);
            }
        } else {
            let _ = client.flush_to(ep, dest, None);
        }
        loop {
            let waited = ep.wait_until_described(
                &|| {
                    format!(
                        "in RpcFuture::wait for rpc '{}' on rank {dest}",
                        client.name(self.func),
                    )
                },
                ready,
            );
            if let Err(e) = waited {
                slots.abandon(call);
                return Err(e);
            }
            match slots.poll(call, None, |st, b| self.decode(st, b)) {
                Polled::Waiting => {}
                Polled::Held => fetch(ep, client, dest, call)?,
                Polled::Done(r) => return r,
            }
        }
    }

    /// Send the destination's buffer if this call is still in it.
    fn flush(&mut self) -> Result<()> {
        // A failed send completes this call with the error too; the poll
        // after this reports it as this call's.
        match self.taken {
            SENT => {}
            LONE => {
                // kept alone: sent from its cell, or it joined the outbox
                // (or another thread sends it): send that, taking the
                // outbox lock whatever `queued` says (it is marked SENT
                // now and never flushes again)
                if self
                    .client
                    .send_lone(&self.ep, self.dest, Some(self.call))
                    .is_none()
                {
                    let _ = self.client.flush_after_lone(&self.ep, self.dest);
                }
                self.taken = SENT;
            }
            t => {
                let _ = self.client.flush_to(&self.ep, self.dest, Some(t));
            }
        }
        Ok(())
    }

    /// Ask the target for a result it held (it did not fit its batch's reply).
    fn fetch(&mut self) -> Result<()> {
        fetch(&self.ep, &self.client, self.dest, self.call)
    }

    /// The result's value, or the call's error (inlined into each poll:
    /// a call returns its large `Result` through memory).
    #[inline(always)]
    fn decode(&self, st: Status, bytes: &[u8]) -> Result<R> {
        if st == Status::Ok {
            // small shapes without postcard's deserializer, else postcard
            if let Some(v) = crate::shortde::decode::<R>(bytes) {
                return Ok(v);
            }
            if let Ok(v) = postcard::from_bytes::<R>(bytes) {
                return Ok(v);
            }
        }
        self.failed(st, bytes)
    }

    /// A value in place of an unrelated error met while polling, returned
    /// now (as the PGAS layer's futures do).
    #[inline]
    fn with_deferred(&mut self, r: Result<R>) -> Result<R> {
        match (r, self.deferred.take()) {
            (Ok(_), Some(e)) => Err(e),
            (r, _) => r,
        }
    }

    /// The error of a call that failed (out of line: words it with the
    /// function's name).
    #[cold]
    #[inline(never)]
    fn failed(&self, st: Status, bytes: &[u8]) -> Result<R> {
        let text = || String::from_utf8_lossy(bytes).into_owned();
        let name = self.client.name(self.func);
        let (me, dest) = (self.ep.rank(), self.dest);
        let why = match st {
            Status::Ok => match postcard::from_bytes::<R>(bytes) {
                Ok(v) => return Ok(v),
                Err(e) => Error::protocol(format!(
                    "rpc '{name}' on rank {dest}: its result did not decode as {}: {e}",
                    std::any::type_name::<R>()
                )),
            },
            Status::BadArgs => Error::protocol(format!(
                "rpc '{name}' on rank {dest}: the arguments did not decode there: {}",
                text()
            )),
            Status::Panicked => Error::protocol(format!(
                "rpc '{name}' on rank {dest}: the function panicked there ({}); the panic was \
                 caught and rank {dest} lives on",
                text()
            )),
            Status::TooLarge => Error::usage(format!("rpc '{name}' on rank {dest}: {}", text())),
            Status::SendFailed => match self.ep.failure() {
                Some(e) => return Err(e),
                None => Error::usage(format!(
                    "rpc '{name}' to rank {dest}: sending failed: {}",
                    text()
                )),
            },
            Status::Held | Status::Unknown | Status::Unencodable => {
                Error::protocol(format!("rpc '{name}' on rank {dest}: {}", text()))
            }
        };
        Err(why.at_rank(me).with_peer(dest))
    }

    fn poll_once(&mut self, cx: &mut Context<'_>) -> Poll<Result<R>> {
        self.flush()?;
        loop {
            match self.ep.poll() {
                Ok(_) => {}
                Err(e) => {
                    let fatal = matches!(
                        e.kind(),
                        ErrorKind::PeerFailed(_) | ErrorKind::Timeout(_) | ErrorKind::Usage(_)
                    );
                    if fatal {
                        self.client.slots.abandon(self.call);
                        return Poll::Ready(Err(e));
                    }
                    self.deferred.get_or_insert(e);
                }
            }
            let polled = self
                .client
                .slots
                .poll(self.call, Some(cx.waker()), |st, b| self.decode(st, b));
            match polled {
                Polled::Done(r) => return Poll::Ready(self.with_deferred(r)),
                Polled::Held => {
                    self.fetch()?;
                    continue;
                }
                Polled::Waiting => {}
            }
            if let Some(e) = self.ep.failure() {
                self.client.slots.abandon(self.call);
                return Poll::Ready(Err(e));
            }
            let k = self.key.get_or_insert_with(|| self.ep.traffic_key());
            if let Err(e) = self.ep.wake_on_traffic_as(k, cx.waker()) {
                self.client.slots.abandon(self.call);
                return Poll::Ready(Err(e));
            }
            return Poll::Pending;
        }
    }
}

/// Ask `dest` for the result of `call` it held (it did not fit its
/// batch's reply); a failed send abandons the call.
fn fetch(ep: &Endpoint, client: &Client, dest: usize, call: u64) -> Result<()> {
    let sent = ep.request(dest, client.fetch, &[call], Payload::None);
    if let Err(e) = sent {
        client.slots.abandon(call);
        return Err(e);
    }
    Ok(())
}

/// The take count of a call kept alone once it was sent (or joined a
/// buffer that was sent).
const SENT: u64 = LONE - 1;

// Nothing in it is pinned in place.
impl<R> Unpin for RpcFuture<R> {}

impl<R: DeserializeOwned> Future for RpcFuture<R> {
    type Output = Result<R>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<R>> {
        let this = self.get_mut();
        if this.over {
            return Poll::Ready(Err(Error::usage(
                "an RpcFuture was polled after it returned its result",
            )
            .at_rank(this.ep.rank())));
        }
        let r = this.poll_once(cx);
        if r.is_ready() {
            this.over = true;
            if let Some(k) = this.key.take() {
                this.ep.forget_traffic_wake(&k);
            }
        }
        r
    }
}

impl<R> Drop for RpcFuture<R> {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.ep.forget_traffic_wake(&k);
        }
        if !self.over {
            self.client.slots.abandon(self.call);
        }
    }
}
