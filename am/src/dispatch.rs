//! Running handlers: find the registration for an arrived packet, check it
//! against what the sender claims, and call the handler with the right
//! context (token for requests, none for replies).
//!
//! What it needs of the endpoint that received the packet is the [`Host`]
//! trait, which the endpoint implements: the endpoint calls [`dispatch`]
//! as it polls, so this module does not name the endpoint back.

use crate::handler::{Entry, Func, Kind};
use crate::message::Incoming;
use splitrt_runtime::fabric::{Channel, Delivery};
use splitrt_runtime::trace::{self, Clock, Off, On, Stage};
use splitrt_runtime::view::LocalView;
use splitrt_runtime::{Error, Result};
use std::cell::Cell;
use std::ops::Range;

/// The endpoint as dispatch sees it (implemented by the endpoint's shared
/// state; static dispatch, one instance).
pub(crate) trait Host {
    /// A registered request handler.
    type Request;
    /// A registered reply handler.
    type Reply;
    /// This rank.
    fn rank(&self) -> usize;
    /// The registration of wire id `id`, if any.
    fn entry(&self, id: u16) -> Option<&Entry<Self::Request, Self::Reply>>;
    /// A user deposit of `len` bytes at `offset` must not touch a reserved
    /// range.
    fn check_deposit(&self, offset: u64, len: u64) -> Result<()>;
    /// The frozen segment range `len` bytes at `offset` touch, if any.
    fn frozen_range(&self, offset: u64, len: u64) -> Option<Range<u64>>;
    /// The `len` bytes a Long deposited at `offset` of this rank's segment.
    fn deposit_view(&self, offset: u64, len: usize) -> LocalView<'_, u8>;
    /// Call request handler `f` for a message from `src` (with the token
    /// to reply through).
    fn run_request(&self, f: &Self::Request, src: usize, msg: &Incoming<'_>);
    /// Call reply handler `f`.
    fn run_reply(&self, f: &Self::Reply, msg: &Incoming<'_>);
}

thread_local! {
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is running a handler right now (inline: a Short
/// request asks it on its fast path, where a call cost 6 instructions).
#[inline]
pub(crate) fn in_handler() -> bool {
    IN_HANDLER.with(|c| c.get())
}

/// Marks this thread as inside a handler until dropped (restores the
/// previous state, since a replying request handler may run reply handlers).
struct HandlerScope(bool);
impl HandlerScope {
    fn enter() -> Self {
        HandlerScope(IN_HANDLER.with(|c| c.replace(true)))
    }
}
impl Drop for HandlerScope {
    fn drop(&mut self) {
        IN_HANDLER.with(|c| c.set(self.0));
    }
}

pub(crate) fn dispatch<H: Host>(ep: &H, ch: Channel, d: &Delivery<'_>) -> Result<()> {
    crate::span!(
        TRACE,
        "am.handler",
        rank = ep.rank(),
        peer = d.src,
        handler = d.tag,
        bytes = d.payload.len() + d.deposit.map_or(0, |x| x.len),
        reply = matches!(ch, Channel::Reply)
    );
    // One check of the tracing switch per message; `Off` has no probes.
    if trace::enabled() {
        dispatch_with::<On, H>(ep, ch, d)
    } else {
        dispatch_with::<Off, H>(ep, ch, d)
    }
}

fn dispatch_with<C: Clock, H: Host>(ep: &H, ch: Channel, d: &Delivery<'_>) -> Result<()> {
    let t = C::start();
    // A Short that fits its registration and channel: the same checks as
    // below, as plain compares, and the handler runs. Anything else (a
    // mismatch included) takes the general path, which words the error.
    if d.deposit.is_none() && d.payload.is_empty() {
        if let Some(e) = ep.entry(d.tag) {
            if e.sig.kind == Kind::Short && d.words.len() == e.sig.nargs as usize {
                let msg = Incoming {
                    src: d.src,
                    args: d.words,
                    payload: &[],
                    long: None,
                    offset: None,
                };
                match (&e.func, ch) {
                    (Func::Request(f), Channel::Request) => {
                        let _scope = HandlerScope::enter();
                        let t = C::record(Stage::Dispatch, t);
                        ep.run_request(f, d.src, &msg);
                        C::record(Stage::Handler, t);
                        return Ok(());
                    }
                    (Func::Reply(f), Channel::Reply) => {
                        let _scope = HandlerScope::enter();
                        let t = C::record(Stage::Dispatch, t);
                        ep.run_reply(f, &msg);
                        C::record(Stage::Handler, t);
                        return Ok(());
                    }
                    _ => {}
                }
            }
        }
    }
    let bad = |why: String| {
        Err(
            Error::protocol(format!("message from rank {}: {why}", d.src))
                .at_rank(ep.rank())
                .with_peer(d.src),
        )
    };
    let Some(e) = ep.entry(d.tag) else {
        return bad(format!("unknown handler id {}", d.tag));
    };
    let kind = match (d.deposit.is_some(), d.payload.is_empty()) {
        (true, _) => Kind::Long,
        (false, true) if e.sig.kind == Kind::Short => Kind::Short,
        (false, _) => Kind::Medium,
    };
    if kind != e.sig.kind || d.words.len() != e.sig.nargs as usize {
        return bad(format!(
            "handler '{}' expects {:?} with {} args, got {kind:?} with {}",
            e.name,
            e.sig.kind,
            e.sig.nargs,
            d.words.len()
        ));
    }
    // A user handler may write through its Long's payload view: announce
    // it from the frozen check below until the handler returns, so a
    // freeze on another thread waits for it (see `writers`).
    let user_long = d.deposit.is_some() && e.sig.id >= crate::RESERVED_HANDLERS;
    // SAFETY: the guard lives in this frame and drops before it returns.
    let _writing = user_long.then(|| unsafe { crate::writers::writing() });
    if let (Some(dep), true) = (d.deposit, e.sig.id >= crate::RESERVED_HANDLERS) {
        let (off, len) = (dep.offset, dep.len);
        if let Err(why) = ep.check_deposit(off, len as u64) {
            return bad(why.to_string());
        }
        // Refused at the sender already. A Long sent before the freeze
        // landed before the freeze's barrier (the sender's freeze drains
        // its sends) but its handler may run after it: the handler is not
        // run, since its payload view could write under a frozen `&[T]`,
        // and the message is reported (a program that freezes an array
        // Longs are still being handled into races with its own
        // handlers). A sender that skipped the check is reported too.
        if let Some(r) = ep.frozen_range(off, len as u64) {
            return bad(format!(
                "a Long payload at segment offset {off:#x} ({len} B) wrote into bytes \
                 {:#x}..{:#x}, which are frozen",
                r.start, r.end
            ));
        }
    }
    let msg = match d.deposit {
        None => Incoming {
            src: d.src,
            args: d.words,
            payload: d.payload,
            long: None,
            offset: None,
        },
        Some(dep) => Incoming {
            src: d.src,
            args: d.words,
            payload: &[],
            long: Some(ep.deposit_view(dep.offset, dep.len)),
            offset: Some(dep.offset),
        },
    };
    let _scope = HandlerScope::enter();
    let t = C::record(Stage::Dispatch, t);
    match (&e.func, ch) {
        (Func::Request(f), Channel::Request) => ep.run_request(f, d.src, &msg),
        (Func::Reply(f), Channel::Reply) => ep.run_reply(f, &msg),
        _ => {
            return bad(format!(
                "handler '{}' arrived on the {ch:?} channel",
                e.name
            ))
        }
    }
    C::record(Stage::Handler, t);
    Ok(())
}
