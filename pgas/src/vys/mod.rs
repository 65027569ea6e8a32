//! vys: visibility streams (the VLA's system; the consumer library it
//! follows is vysmaw). Producers write spectra into a ring in memory that
//! consumers may read and announce them in small signal messages;
//! consumers choose what to read by a filter and fetch it by one-sided
//! reads, validated so a spectrum overwritten while read is never taken
//! for a good one.
//!
//! Built so far: the signal message wire format ([`signal`]), the
//! producer's ring with the validated read ([`ring`]) and signals over UDP
//! multicast ([`transport`]), and the read-only handover of a ring to a
//! consumer on the same host ([`export`]). The consumer library and the
//! read path across hosts come next (see ARCHITECTURE.md).

pub mod export;
pub mod ring;
pub mod signal;
pub mod transport;
