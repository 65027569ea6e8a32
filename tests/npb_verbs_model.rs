//! NPB FT and MG class S over the verbs model (the ibverbs fabric without
//! hardware): the ranks are threads of this test process, each attached
//! to its device of one `ModelNetwork` (as `tests/verbs_model.rs` does),
//! running the examples' own `run_on` (`examples/npb_ft.rs`,
//! `examples/npb_mg.rs`), which must pass NPB's verification on 2 and 4
//! ranks over both one-sided paths. (`tests/npb.rs` runs the same
//! examples as processes on shm and udp.)

mod common;
use common::verbs_model::pgas_on_threads;

use splitrt::pgas::Pgas;
use splitrt::runtime::config::RmaPath;

// Each example includes its own copy of `examples/npb_common` (as it does
// when built alone), so that module is loaded twice here; its `main` is
// the example's.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../examples/npb_ft.rs"]
mod npb_ft;
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../examples/npb_mg.rs"]
mod npb_mg;

/// Segment per rank: FT S's two receive arrays are 2 * 16 B * 64^3 / P
/// (8 MiB on one rank), MG S's ghost and gather buffers far less.
const SEGMENT: usize = 16 << 20;

/// The rank of `pg`, whose endpoint must run over the verbs model.
fn on_the_model(pg: &Pgas) -> usize {
    assert!(
        matches!(
            pg.endpoint().raw_fabric_for_tests(),
            splitrt::runtime::fabric::AnyFabric::RdmaModel(_)
        ),
        "rank {}: not on the verbs model",
        pg.rank()
    );
    pg.rank()
}

fn ft(size: usize, rma: RmaPath, seed: u64) {
    pgas_on_threads("npb-ft", size, rma, SEGMENT, seed, move |pg| {
        let r = on_the_model(&pg);
        match npb_ft::run_on('S', pg)? {
            true => Ok(()),
            false => Err(splitrt::Error::usage(format!(
                "npb_ft S on {size} ranks ({rma:?}): rank {r} did not verify"
            ))),
        }
    });
}

fn mg(size: usize, rma: RmaPath, seed: u64) {
    pgas_on_threads("npb-mg", size, rma, SEGMENT, seed, move |pg| {
        let r = on_the_model(&pg);
        match npb_mg::run_on('S', pg)? {
            true => Ok(()),
            false => Err(splitrt::Error::usage(format!(
                "npb_mg S on {size} ranks ({rma:?}): rank {r} did not verify"
            ))),
        }
    });
}

#[test]
fn npb_ft_s_verbs_model_native_2() {
    ft(2, RmaPath::Native, 81);
}

#[test]
fn npb_ft_s_verbs_model_am_2() {
    ft(2, RmaPath::Am, 82);
}

#[test]
fn npb_ft_s_verbs_model_native_4() {
    ft(4, RmaPath::Native, 83);
}

#[test]
fn npb_ft_s_verbs_model_am_4() {
    ft(4, RmaPath::Am, 84);
}

#[test]
fn npb_mg_s_verbs_model_native_2() {
    mg(2, RmaPath::Native, 91);
}

#[test]
fn npb_mg_s_verbs_model_am_2() {
    mg(2, RmaPath::Am, 92);
}

#[test]
fn npb_mg_s_verbs_model_native_4() {
    mg(4, RmaPath::Native, 93);
}

#[test]
fn npb_mg_s_verbs_model_am_4() {
    mg(4, RmaPath::Am, 94);
}
