//! # splitrt-am — layer 2, Active Messages (AM-2 semantics)
//!
//! Register handlers by name, kind and argument count on an
//! [`EndpointBuilder`] (in the same order on every rank), [`attach`] to the
//! job, then send requests; request handlers answer through the [`Token`]
//! they are given, which `reply` consumes (so at most one reply is a
//! compile-time rule); reply handlers get no token and cannot send.
//!
//! ```no_run
//! use splitrt_am::{EndpointBuilder, Kind, Payload};
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//!
//! # fn main() -> splitrt_am::Result<()> {
//! let got = Arc::new(AtomicU64::new(0));
//! let mut b = EndpointBuilder::new();
//! let g = got.clone();
//! let pong = b.reply("pong", Kind::Short, 1, move |m| {
//!     g.store(m.arg(0), Ordering::Release);
//! })?;
//! let ping = b.request("ping", Kind::Short, 1, move |tok, m| {
//!     tok.reply(pong, &[m.arg(0) + 1], Payload::None).expect("reply");
//! })?;
//! let ep = b.attach()?;
//! let peer = (ep.rank() + 1) % ep.size();
//! ep.request(peer, ping, &[41], Payload::None)?;
//! ep.wait_until(|| got.load(Ordering::Acquire) == 42)?;
//! ep.finish()
//! # }
//! ```
//!
//! [`attach`]: EndpointBuilder::attach
#![warn(missing_docs)]

mod bridge;
mod dispatch;
mod endpoint;
mod handler;
mod message;
mod progress;
mod rma;
#[doc(hidden)]
pub mod spans;
mod writers;

pub use bridge::TrafficKey;
pub use endpoint::{Endpoint, EndpointBuilder, Token};
pub use handler::{Kind, ReplyHandler, RequestHandler, MAX_ARGS, RESERVED_HANDLERS};
pub use message::{Incoming, Payload};
pub use progress::{Progress, ENV_PROGRESS};
pub use rma::{Mapped, OneSided, Rma};
pub use splitrt_runtime::fabric::{Sent, WouldBlock};
pub use splitrt_runtime::view::LocalView;
pub use splitrt_runtime::{Error, ErrorKind, Result};
pub use writers::{
    can_freeze, while_writing, while_writing_leaf, writing, writing_leaf, Writing, WritingLeaf,
};
