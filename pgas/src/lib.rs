//! # splitrt-pgas — layer 3 (in progress)
//!
//! Global pointers, split-phase get/put/store, collectives and atomics are
//! built here on top of [`splitrt_am`]. This crate is a placeholder until
//! that work lands; it exports nothing yet.
