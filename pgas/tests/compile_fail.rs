//! Lifetimes that must not compile (trybuild): a split-phase scope cannot
//! be handed a buffer that dies before the scope waits for its gets.
//! The expected compiler messages are in `tests/ui/*.stderr`; regenerate
//! them with `TRYBUILD=overwrite cargo test -p splitrt-pgas --test compile_fail`
//! after a compiler upgrade, and check the new text still names the borrow.

#[test]
#[cfg_attr(miri, ignore = "runs rustc")]
fn scope_lifetimes() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/scope_outer_buffer.rs");
    t.compile_fail("tests/ui/scope_local_buffer.rs");
    t.compile_fail("tests/ui/scope_shrunk.rs");
}
