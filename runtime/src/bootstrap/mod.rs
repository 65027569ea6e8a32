//! Out-of-band TCP rendezvous. Used only to allgather endpoint addresses,
//! check that every rank registered the same table, barrier at start and
//! exit, and spread the news when a rank dies. The launcher (or, later,
//! rank 0) hosts the [`Server`]; every rank holds one [`Client`].

mod client;
mod server;
pub mod wire;

pub use client::Client;
pub use server::{Culprit, Server};
pub use wire::{Hello, Msg, Peer};
