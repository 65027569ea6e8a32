//! Optional [`tracing`](https://docs.rs/tracing) spans (cargo feature
//! `tracing`, off by default): `am.send` (rank, peer, handler, bytes) for
//! every request and reply, `am.handler` (rank, peer, handler, bytes) around
//! every handler, `am.wait` (rank) around every wait and barrier, and, in
//! splitrt-pgas, `pgas.collective` (rank, op) around every blocking
//! collective. Sends and handlers are at level `TRACE`, waits and
//! collectives at `DEBUG`. Without the feature the macro expands to
//! nothing, so the default build carries no probe at all.

/// Enter a span until the end of the enclosing block:
/// `span!(TRACE, "am.send", rank = r, peer = p)`. Nothing without the
/// `tracing` feature (the field expressions are not evaluated then).
#[cfg(feature = "tracing")]
#[doc(hidden)]
#[macro_export]
macro_rules! span {
    ($lvl:ident, $name:expr, $($fields:tt)*) => {
        let _splitrt_span = $crate::spans::tracing::span!(
            $crate::spans::tracing::Level::$lvl, $name, $($fields)*
        )
        .entered();
    };
}

/// Enter a span until the end of the enclosing block (see the `tracing`
/// build); this build has no probes.
#[cfg(not(feature = "tracing"))]
#[doc(hidden)]
#[macro_export]
macro_rules! span {
    ($($t:tt)*) => {};
}

/// The `tracing` crate, for the [`span!`] macro's expansion in other
/// splitrt crates.
#[cfg(feature = "tracing")]
#[doc(hidden)]
pub use tracing;

/// A span entered for as long as the value lives (a collective's guard
/// keeps one); `()` without the `tracing` feature.
#[cfg(feature = "tracing")]
#[doc(hidden)]
pub type Entered = tracing::span::EnteredSpan;

/// A span entered for as long as the value lives; `()` without the
/// `tracing` feature.
#[cfg(not(feature = "tracing"))]
#[doc(hidden)]
pub type Entered = ();

/// Enter the `DEBUG` span `pgas.collective` (target `splitrt_pgas`) with
/// `rank` and `op` fields, held by the returned value (a collective's
/// guard).
#[doc(hidden)]
#[inline(always)]
#[allow(unused_variables, clippy::unused_unit)]
pub fn enter_collective(rank: usize, op: &str) -> Entered {
    #[cfg(feature = "tracing")]
    {
        tracing::debug_span!(target: "splitrt_pgas", "pgas.collective", rank, op).entered()
    }
    #[cfg(not(feature = "tracing"))]
    {
        ()
    }
}

/// Bytes a payload carries (for the `bytes` field).
#[cfg(feature = "tracing")]
pub(crate) fn bytes(p: &crate::Payload<'_>) -> usize {
    p.len()
}
