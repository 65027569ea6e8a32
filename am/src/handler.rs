//! Handler kinds, handles and the registration table.
//!
//! The table is generic over the handler functions it stores (the
//! endpoint's `RequestFn` and `ReplyFn`): a request handler takes a
//! [`Token`](crate::Token), which refers to the endpoint, so naming that
//! type here would make this module and the endpoint use each other.

use crate::message::Payload;
use splitrt_runtime::fabric::MAX_WORDS;
use splitrt_runtime::{Error, Result};

/// Most argument words a message carries.
pub const MAX_ARGS: usize = MAX_WORDS;

/// Wire ids below this are reserved for splitrt's own handlers (PGAS,
/// collectives, vys), so user registrations never shift them.
pub const RESERVED_HANDLERS: u16 = 64;

/// The logical channel a handler receives on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Argument words only.
    Short,
    /// Arguments plus a payload the handler reads in place.
    Medium,
    /// Arguments plus a payload deposited in the receiver's segment at an
    /// address the sender chose, before the handler runs.
    Long,
}

impl Kind {
    pub(crate) fn of(p: &Payload<'_>) -> Kind {
        match p {
            Payload::None => Kind::Short,
            Payload::Medium(_) | Payload::FromSegment(_) => Kind::Medium,
            Payload::Long { .. } => Kind::Long,
        }
    }
}

/// Handle of a registered request handler; send it with
/// [`Endpoint::request`](crate::Endpoint::request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHandler(pub(crate) Sig);

/// Handle of a registered reply handler; send it with
/// [`Token::reply`](crate::Token::reply).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyHandler(pub(crate) Sig);

/// What a sender checks against: id, kind, argument count, and the
/// registration table the handle came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sig {
    pub id: u16,
    pub kind: Kind,
    pub nargs: u8,
    /// Process-unique id of the table (builder) that registered it.
    pub table: u32,
}

/// Hands out process-unique table ids (0 is never used).
static NEXT_TABLE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

impl Sig {
    /// Check a send against the registration; `name` is only looked up to
    /// word an error.
    #[inline]
    pub(crate) fn check<'a>(
        &self,
        name: impl FnOnce() -> &'a str,
        args: &[u64],
        payload: &Payload<'_>,
    ) -> Result<()> {
        if args.len() != self.nargs as usize {
            return Err(Error::usage(format!(
                "handler '{}' takes {} argument words, {} given",
                name(),
                self.nargs,
                args.len()
            )));
        }
        let k = Kind::of(payload);
        if k != self.kind {
            return Err(Error::usage(format!(
                "handler '{}' is a {:?} handler, sent a {k:?} message",
                name(),
                self.kind
            )));
        }
        Ok(())
    }
}

/// A registered function: `Q` a request handler, `R` a reply handler.
pub(crate) enum Func<Q, R> {
    Request(Q),
    Reply(R),
}

pub(crate) struct Entry<Q, R> {
    pub name: String,
    pub sig: Sig,
    pub func: Func<Q, R>,
}

impl<Q, R> Entry<Q, R> {
    /// The line this entry contributes to the table every rank must agree on.
    pub(crate) fn describe(&self) -> String {
        let dir = match self.func {
            Func::Request(_) => "request",
            Func::Reply(_) => "reply",
        };
        format!(
            "#{} {} ({:?} {dir}, {} args)",
            self.sig.id, self.name, self.sig.kind, self.sig.nargs
        )
    }
}

/// The registration table under construction.
pub(crate) struct Table<Q, R> {
    pub entries: Vec<Option<Entry<Q, R>>>,
    user: u16,
    /// This table's identity, stamped into every handle it gives out.
    pub id: u32,
}

impl<Q, R> Default for Table<Q, R> {
    fn default() -> Self {
        Table {
            entries: Vec::new(),
            user: 0,
            id: NEXT_TABLE.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl<Q, R> Table<Q, R> {
    pub(crate) fn add(
        &mut self,
        id: Option<u16>,
        name: &str,
        kind: Kind,
        nargs: usize,
        func: Func<Q, R>,
    ) -> Result<Sig> {
        if nargs > MAX_ARGS {
            return Err(Error::usage(format!(
                "handler '{name}' declares {nargs} argument words (max {MAX_ARGS})"
            )));
        }
        if self.entries.iter().flatten().any(|e| e.name == name) {
            return Err(Error::usage(format!(
                "handler '{name}' is registered twice"
            )));
        }
        let id = match id {
            Some(id) if id < RESERVED_HANDLERS => id,
            Some(id) => {
                return Err(Error::usage(format!(
                    "reserved handler id {id} out of range"
                )))
            }
            None => {
                let id = RESERVED_HANDLERS
                    .checked_add(self.user)
                    .ok_or_else(|| Error::usage("too many handlers (the wire id is 16 bits)"))?;
                self.user += 1;
                id
            }
        };
        let i = id as usize;
        if self.entries.len() <= i {
            self.entries.resize_with(i + 1, || None);
        }
        if self.entries[i].is_some() {
            return Err(Error::usage(format!("handler id {id} is taken")));
        }
        let sig = Sig {
            id,
            kind,
            nargs: nargs as u8,
            table: self.id,
        };
        self.entries[i] = Some(Entry {
            name: name.to_string(),
            sig,
            func,
        });
        Ok(sig)
    }

    pub(crate) fn describe(&self) -> Vec<String> {
        self.entries.iter().flatten().map(Entry::describe).collect()
    }
}
