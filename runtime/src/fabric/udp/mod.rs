//! The UDP fabric: reliable, ordered, authenticated delivery over UDP for
//! ranks on different hosts (or every rank, with `--fabric udp`).
//!
//! Split the way quinn-proto / quinn and smoltcp are: [`proto`] is the
//! protocol as state machines without I/O, [`wire`] and [`crate::fabric::frames`]
//! (shared with the ibverbs fabric) its formats, `sim` (cargo feature
//! `test-doubles`) a seeded virtual network that drives it in one process,
//! [`faults`] the driver's fault injection, `filter` the kernel socket
//! filter that drops strangers' datagrams before the driver sees them.

mod driver;
pub mod faults;
mod filter;
mod fulltag;
pub mod job_nonce;
pub mod polyval_setting;
mod polyval_wide;
pub mod proto;
mod recv_batch;
#[cfg(feature = "test-doubles")]
pub mod sim;
#[cfg(feature = "test-doubles")]
pub mod sim_alltoall;
mod stamp;
pub mod wire;

pub use driver::{PendingUdp, UdpConfig, UdpFabric};
