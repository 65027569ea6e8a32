//! # splitrt-pgas — layer 3, Split-C for Rust
//!
//! A global address space over every rank's registered segment:
//! [`GlobalPtr`]s, a symmetric and a local heap, spread arrays, split-phase
//! `get` / `put` / `store` with `sync`, `store_sync` and `all_store_sync`,
//! collectives, remote atomics and signals (`put_signal`, `wait_until`).
//!
//! Every operation has two implementations behind the same API, chosen per
//! job with `SPLITRT_RMA` (launcher flag `--rma`): `native` copies straight
//! through the peer's mapped segment (shared memory), `am` uses Active
//! Message request/reply (the Split-C-over-AM scheme, which works on any
//! fabric). Every remote access is checked against the target segment's
//! bounds and the element's alignment at the caller.
#![warn(missing_docs)]

mod arrays;
mod atomic;
mod coll;
mod collectives;
mod context;
mod full_fence;
mod get_chunk;
mod handlers;
pub mod heap;
mod one_collective;
mod ops;
mod peer_books;
mod ptr;
mod quiet;
mod reduce;
mod rma;
mod shm_barrier;
mod signal;
mod signal_am;
mod signal_rdma;
mod signal_vector;
mod signal_word;
mod state;
mod strided;
mod strided_am;
mod strided_rdma;
mod strided_shape;
mod team;
mod team_area;
mod team_coll;
mod team_hier;
mod team_hier_a2a;
mod team_hier_a2av;
mod team_hier_scan;
mod team_hosts;
mod team_mail;
mod team_mates;
mod team_nb;
mod team_nb_forms;
mod team_sched;
mod team_shm;
mod team_split;
#[cfg(test)]
mod test_rank;
// (appended) the set waits on signal words as futures
mod signal_async;
// (appended) a team's shared description; the world's made at attach
mod team_core;
// (appended) the masked and vector signal waits as futures
mod signal_vector_async;
// (appended) the hierarchical non-blocking team collectives
mod team_hier_nb;
// (appended) the world barrier across hosts: shared memory per host, one message per host
mod world_barrier;
// (appended) its state, below the context and the handlers' state
mod world_barrier_state;
// (appended) the hierarchical non-blocking alltoall and alltoallv
mod team_hier_nb_a2a;
// (appended) the hierarchical reduce_scatter_nb and scans (pipelined)
mod team_hier_nb_scan;
// (appended) the blocking wait on one signal word by pointer (checks frees)
mod signal_wait_one;

pub use arrays::{Dist, FrozenArray, FrozenSpread, SpreadArray, SymArray};
pub use atomic::{AtomicFloat, AtomicInt, AtomicWord};
pub use bytemuck::{Pod, Zeroable};
pub use context::{LocalBlock, Pgas};
pub use ops::Atomics;
pub use ptr::GlobalPtr;
pub use reduce::{Op, Reduce};
pub use rma::{Get, GetInto, Scope};
pub use signal::{SignalWait, Signals};
pub use signal_async::SignalWaitSet;
pub use signal_vector_async::SignalWaitVector;
pub use signal_word::{Cmp, SignalOp};
pub use splitrt_am::LocalView;
pub use splitrt_runtime::config::RmaPath;
pub use strided::Shape;
pub use strided_shape::MAX_DIMS;
pub use team::Team;
pub use team_nb::{TeamRequest, MAX_ORPHANS};
