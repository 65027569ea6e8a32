//! Running handlers: find the registration for an arrived packet, check it
//! against what the sender claims, and call the handler with the right
//! context (token for requests, none for replies).

use crate::endpoint::{Inner, Token};
use crate::handler::{Func, Kind};
use crate::message::Incoming;
use splitrt_runtime::fabric::{Channel, Delivery};
use splitrt_runtime::trace::{self, Clock, Off, On, Stage};
use splitrt_runtime::{Error, Result};
use std::cell::Cell;

thread_local! {
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is running a handler right now.
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

pub(crate) fn dispatch(ep: &Inner, ch: Channel, d: &Delivery<'_>) -> Result<()> {
    // One check of the tracing switch per message; `Off` has no probes.
    if trace::enabled() {
        dispatch_with::<On>(ep, ch, d)
    } else {
        dispatch_with::<Off>(ep, ch, d)
    }
}

fn dispatch_with<C: Clock>(ep: &Inner, ch: Channel, d: &Delivery<'_>) -> Result<()> {
    let t = C::start();
    let bad = |why: String| {
        Err(
            Error::protocol(format!("message from rank {}: {why}", d.src))
                .at_rank(ep.rank)
                .with_peer(d.src),
        )
    };
    let Some(e) = ep.table.get(d.tag as usize).and_then(Option::as_ref) else {
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
    let _writing = user_long.then(crate::writing);
    if let (Some(dep), true) = (d.deposit, e.sig.id >= crate::RESERVED_HANDLERS) {
        let (off, len) = (dep.offset, dep.len);
        if let Err(why) = ep.check_user_deposit(off, len as u64) {
            return bad(why.to_string());
        }
        // Refused at the sender already. A Long sent before the freeze
        // landed before the freeze's barrier (the sender's freeze drains
        // its sends) but its handler may run after it: the handler is not
        // run, since its payload view could write under a frozen `&[T]`,
        // and the message is reported (a program that freezes an array
        // Longs are still being handled into races with its own
        // handlers). A sender that skipped the check is reported too.
        if let Some(r) = ep.frozen().find(off, len as u64) {
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
            long: Some(ep.deposited(dep.offset, dep.len)),
            offset: Some(dep.offset),
        },
    };
    let _scope = HandlerScope::enter();
    let t = C::record(Stage::Dispatch, t);
    match (&e.func, ch) {
        (Func::Request(f), Channel::Request) => f(Token { ep, src: d.src }, &msg),
        (Func::Reply(f), Channel::Reply) => f(&msg),
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
