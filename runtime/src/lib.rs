//! # splitrt-runtime — layer 1, the "virtual network interface"
//!
//! Everything below Active Messages: who am I in the job ([`job`]), how the
//! ranks find each other ([`bootstrap`]), how a job is started
//! ([`launcher`]), registered memory ([`segment`]) and the fabrics that move
//! packets and bytes between ranks ([`fabric`]).
//!
//! Nothing here knows what a handler or a global pointer is: a fabric moves
//! [`fabric::Packet`]s carrying an opaque 16-bit tag, argument words and a
//! payload, and can deposit a payload straight into a peer's segment.
#![warn(missing_docs)]

pub mod backoff;
pub mod bootstrap;
pub mod config;
pub mod cpus;
pub mod deadline;
pub mod error;
pub mod fabric;
pub mod frozen;
pub mod hang;
pub mod job;
pub mod key;
pub mod launcher;
pub mod limits;
pub mod memmove;
#[cfg(feature = "pmix")]
pub mod pmix;
pub mod route;
pub mod segment;
pub mod shm_full;
pub mod size;
pub mod trace;
pub mod view;
pub mod world;

pub use error::{Error, ErrorKind, Result};
pub use world::World;
