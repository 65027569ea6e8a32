//! The Active Message benchmark (`splitrt-bench` / `splitrt-bench am`):
//! AM latency, throughput and message rate between two pinned ranks, next
//! to a raw cache-line ping-pong measured in the same run (and UCX, when
//! `ucx_perftest` is installed). [`driver`] runs in the user's process,
//! [`worker`] in each rank.

pub mod driver;
pub(crate) mod handlers;
pub(crate) mod latency;
mod measure;
pub(crate) mod pinger;
pub(crate) mod pingpong;
pub(crate) mod plan;
pub(crate) mod rows;
pub(crate) mod throughput;
pub(crate) mod ucx;
pub mod worker;
