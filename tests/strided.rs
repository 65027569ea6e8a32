//! Strided and indexed transfers (`t_strided`, see tests/progs/strided.rs)
//! on 1, 2, 3, 4 and 8 ranks, on shm and udp (processes under the
//! launcher) and on the verbs model (ranks as threads), on both RMA
//! paths: 1-/2-/3-D shapes, zero-length dimensions, overlapping source
//! runs, shapes and runs larger than one message, indexed lists, 3-D
//! faces, and misuse refused at the caller with nothing written.

mod common;
use common::*;

#[path = "progs/strided.rs"]
mod strided;

use splitrt::pgas::RmaPath;

fn job_on(n: usize, fabric: &str, rma: &str) {
    every_rank_reports(
        n,
        "t_strided",
        &[],
        rma,
        &[("SPLITRT_FABRIC", fabric)],
        "strided ok",
        120,
    );
}

macro_rules! jobs {
    ($($name:ident: $n:expr, $fabric:expr, $rma:expr;)*) => {$(
        #[test]
        fn $name() {
            job_on($n, $fabric, $rma);
        }
    )*};
}

jobs! {
    strided_shm_native_1_rank: 1, "shm", "native";
    strided_shm_am_1_rank: 1, "shm", "am";
    strided_shm_native_2_ranks: 2, "shm", "native";
    strided_shm_am_2_ranks: 2, "shm", "am";
    strided_shm_native_3_ranks: 3, "shm", "native";
    strided_shm_am_3_ranks: 3, "shm", "am";
    strided_shm_native_4_ranks: 4, "shm", "native";
    strided_shm_am_4_ranks: 4, "shm", "am";
    strided_shm_native_8_ranks: 8, "shm", "native";
    strided_shm_am_8_ranks: 8, "shm", "am";
    strided_udp_native_1_rank: 1, "udp", "native";
    strided_udp_am_1_rank: 1, "udp", "am";
    strided_udp_native_2_ranks: 2, "udp", "native";
    strided_udp_am_2_ranks: 2, "udp", "am";
    strided_udp_native_3_ranks: 3, "udp", "native";
    strided_udp_am_3_ranks: 3, "udp", "am";
    strided_udp_native_4_ranks: 4, "udp", "native";
    strided_udp_am_4_ranks: 4, "udp", "am";
    strided_udp_native_8_ranks: 8, "udp", "native";
    strided_udp_am_8_ranks: 8, "udp", "am";
}

/// `size` ranks as threads over one verbs model network (as
/// tests/verbs_model.rs does), each running `t_strided`'s checks.
fn on_model(size: usize, rma: RmaPath, seed: u64) {
    verbs_model::pgas_on_threads("strided", size, rma, 4 << 20, seed, strided::run_on);
}

macro_rules! model_jobs {
    ($($name:ident: $n:expr, $rma:expr;)*) => {$(
        #[test]
        fn $name() {
            on_model($n, $rma, 40 + $n as u64);
        }
    )*};
}

model_jobs! {
    strided_verbs_model_native_1_rank: 1, RmaPath::Native;
    strided_verbs_model_am_1_rank: 1, RmaPath::Am;
    strided_verbs_model_native_2_ranks: 2, RmaPath::Native;
    strided_verbs_model_am_2_ranks: 2, RmaPath::Am;
    strided_verbs_model_native_3_ranks: 3, RmaPath::Native;
    strided_verbs_model_am_3_ranks: 3, RmaPath::Am;
    strided_verbs_model_native_4_ranks: 4, RmaPath::Native;
    strided_verbs_model_am_4_ranks: 4, RmaPath::Am;
    strided_verbs_model_native_8_ranks: 8, RmaPath::Native;
    strided_verbs_model_am_8_ranks: 8, RmaPath::Am;
}
