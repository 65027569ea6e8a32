//! The ibverbs fabric: Active Messages over RC send/receive, Long payloads
//! and one-sided get/put by RDMA write and read, on InfiniBand and RoCE.
//!
//! Layers, bottom up:
//! * [`verbs`]: the thin verbs layer as a trait; [`device`] implements it
//!   over a real device (cargo feature `ibverbs`), `model` is the
//!   in-process test double that runs everything above in `cargo test`
//!   (cargo feature `test-doubles`).
//! * the protocol above it is shared with or built like the other fabrics:
//!   message frames and reassembly ([`crate::fabric::frames`], the UDP
//!   fabric's), credits per peer and channel, and the progress engine.

pub mod credits;
pub mod device;

mod fabric;
#[cfg(feature = "test-doubles")]
pub mod model;
pub mod on_demand;
pub mod reg_cache;
pub mod verbs;
pub mod wire;

pub use fabric::{PendingRdma, RdmaConfig, RdmaFabric};
