//! The PGAS benchmark (`splitrt-bench pgas`): one-sided put / get / store
//! latency and bandwidth and the cost of `sync`, on the native and the AM
//! one-sided path (one job each), beside a memcpy baseline measured in the
//! same run. [`driver`] runs in the user's process, [`worker`] in each rank.

mod bandwidth;
mod collective;
pub mod driver;
mod latency;
mod measure;
mod plan;
mod signal;
mod store;
pub(crate) mod strided;
mod table;
pub mod worker;
