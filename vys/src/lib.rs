//! # splitrt-vys — visibility streams
//!
//! vys: visibility streams (the VLA's system; the consumer library it
//! follows is vysmaw). Producers write spectra into a ring in memory that
//! consumers may read and announce them in small signal messages;
//! consumers choose what to read by a filter and fetch it by one-sided
//! reads, validated so a spectrum overwritten while read is never taken
//! for a good one.
//!
//! * [`signal`]: the signal message wire format;
//! * [`ring`]: the producer's ring and the validated read;
//! * [`transport`]: signals over UDP multicast;
//! * [`export`]: the read-only handover of a ring on the same host;
//! * [`handshake`], [`read_proto`], [`read_server`], [`read_client`]: reads
//!   across hosts, served by the producer's read server thread over the UDP
//!   fabric's protocol (several reads per request: [`read_batch`]; several
//!   server threads: `ProducerConfig::read_threads`);
//! * [`rdma_export`], [`rdma_read`], [`rdma_device`]: reads by RDMA read
//!   (ordered for the seqlock) over the verbs layer, the queue pair and
//!   the ring's key exchanged in the read session's handshake;
//! * [`producer`] and [`consumer`]: the library APIs (the consumer drops
//!   replayed signals: `replay`);
//! * [`checkable`]: spectra whose data is a function of their identity;
//! * [`stream_key`]: the operator's key, parsed;
//! * [`description`]: a producer's stream description (what its spectra
//!   mean), versioned, sent with the signals; [`described`]: what a
//!   consumer knows of them.
//!
//! The crate uses the runtime layer only (fabrics, the UDP protocol, the
//! verbs layer); it knows nothing of PGAS. Inside a splitrt job, signals
//! can also travel by Active Message (`SignalInjector`, example `vys_am`).
#![warn(missing_docs)]

pub mod checkable;
pub mod consumer;
pub mod described;
pub mod description;
pub mod export;
pub mod handshake;
mod landing;
pub mod producer;
mod queue;
pub mod rdma_device;
pub mod rdma_export;
pub mod rdma_read;
pub mod read_batch;
pub mod read_client;
pub mod read_proto;
pub mod read_server;
pub mod read_threads;
mod replay;
mod reply_buffers;
pub mod ring;
#[cfg(test)]
mod session_pair;
pub mod signal;
pub mod stream_key;
pub mod transport;
