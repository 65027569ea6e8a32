//! # splitrt — Active Messages + Split-C style PGAS for Rust
//!
//! The facade users depend on. It re-exports the three layers:
//! [`runtime`] (job, bootstrap, launcher, segments, fabrics), [`am`]
//! (endpoints, handlers, progress) and [`pgas`] (global pointers,
//! split-phase access, collectives), and beside them [`vys`] (visibility
//! streams, which use the runtime only) and [`rpc`] (typed remote
//! procedure calls with futures, on the AM layer). The common names are at the top
//! level.
//!
//! Start programs with `splitrt-run -n N PROGRAM`; a program started without
//! a launcher runs as a 1-rank job. See `examples/hello.rs`.

pub use splitrt_am as am;
pub use splitrt_pgas as pgas;
pub use splitrt_rpc as rpc;
pub use splitrt_runtime as runtime;
pub use splitrt_vys as vys;

pub use splitrt_am::{
    Endpoint, EndpointBuilder, Incoming, Kind, Payload, ReplyHandler, RequestHandler, Token,
    MAX_ARGS,
};
pub use splitrt_runtime::{Error, ErrorKind, Result};

/// The README's code blocks, compiled as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
