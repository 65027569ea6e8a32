//! Out-of-band TCP rendezvous. Used only to allgather endpoint addresses,
//! check that every rank registered the same table, barrier at start and
//! exit, and spread the news when a rank dies. The launcher hosts the
//! [`Server`] (or, under srun / mpirun on one node, rank 0: [`Hosted`]);
//! every rank holds one [`Client`].

mod client;
mod hosted;
mod server;
pub mod wire;

pub use client::Client;
pub use hosted::{address_file, Hosted};
pub use server::{Culprit, Server};
pub use wire::{Hello, Msg, Peer};
