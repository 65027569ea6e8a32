//! Out-of-band TCP rendezvous. Used only to allgather endpoint addresses,
//! check that every rank registered the same table, barrier at start and
//! exit, and spread the news when a rank dies. The launcher hosts the
//! [`Server`] (or, under srun / mpirun, rank 0: [`Hosted`]); every rank
//! holds one [`Client`]. Every connection authenticates with the job key
//! ([`auth`]) before anything it sends is acted on.

pub mod auth;
mod client;
mod hosted;
pub mod pmi2;
mod private_dir;
mod relay;
mod server;
pub mod wire;

pub use client::{BarrierStatus, Client};
pub use hosted::Hosted;
pub use private_dir::PrivateDir;
pub use relay::Relay;
pub use server::{Culprit, Server, ServerStats, EVICT_AFTER, HANDSHAKE_TIMEOUT, MAX_PENDING};
pub use wire::{Collective, Hello, Msg, Peer};
