//! What must and must not compile against the public API (trybuild).
//! The expected compiler messages are in `tests/ui/*.stderr`; regenerate
//! them with `TRYBUILD=overwrite cargo test -p splitrt-am --test compile_fail`
//! after a compiler upgrade, and check the new text still names the cause.

/// `Payload` is `#[non_exhaustive]`: a user's exhaustive match needs a
/// wildcard arm, so a variant added later (as `FromSegment` was) breaks no
/// user; building the variants and matching with a wildcard still work.
#[test]
#[cfg_attr(miri, ignore = "runs rustc")]
fn payload_is_non_exhaustive() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/payload_wildcard_match.rs");
    t.compile_fail("tests/ui/payload_exhaustive_match.rs");
}
