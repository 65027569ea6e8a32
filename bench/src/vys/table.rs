//! The driver's report: the stream table (delivered rate vs spectrum size
//! beside memcpy and the fabric's get of the same repetition), the
//! failure-rate scan, the targets met or missed, and the CSV.
//! Rates are medians over repetitions; ratios are taken within each
//! repetition first (same job, minutes apart at most), then the median;
//! outcome counts are summed over repetitions.

use super::plan::{digest_id, Place, Plan, Reads, Row, Section, SCAN_SIZE};
use super::record::{Counts, Output, RowResult};
use crate::harness::report::size_label;
use crate::harness::stats::median;
use splitrt::vys::signal::DigestKind;
use std::fmt::Write as _;

/// Delivered GB/s at or above this fraction of the reference is the
/// issue's target (memcpy on one host, the fabric's get across hosts).
pub const TARGET_RATIO: f64 = 0.8;
/// The rate target for 512-byte spectra on one host.
pub const TARGET_SMALL_RATE: f64 = 1e6;
/// Repetitions whose delivered rates differ more than this are flagged.
const NOISY: f64 = 1.5;

/// The report and what the checks found.
pub struct Report {
    /// The text tables.
    pub text: String,
    /// The CSV.
    pub csv: String,
    /// Valid spectra checked against the producer's pattern.
    pub checked: u64,
    /// Valid spectra with data that is not the producer's.
    pub mismatched: u64,
}

/// One row's numbers over repetitions.
struct Summary {
    row: Row,
    reps: usize,
    memcpy: f64,
    /// The three-thread pipeline of plain copies ([`super::baseline::pipeline`]).
    pipe: f64,
    /// The same reading half the area behind its writer.
    cold: f64,
    get: f64,
    get_loaded: f64,
    produced: f64,
    delivered: f64,
    gbps: f64,
    read: f64,
    gbps_min: f64,
    gbps_max: f64,
    ratio_memcpy: f64,
    ratio_pipe: f64,
    ratio_cold: f64,
    ratio_get: f64,
    ratio_get_loaded: f64,
    kept: f64,
    counts: Counts,
    checked: u64,
    mismatched: u64,
    signal_errors: u64,
    local_reads: u64,
    remote_reads: u64,
}

fn summarize(row: Row, o: &Output) -> Summary {
    let rs: Vec<&RowResult> = o.row(&row.key());
    let memcpy = o.baseline("memcpy", row.size);
    let pipe = o.baseline("pipe", row.size);
    let cold = o.baseline("pipe_cold", row.size);
    let get = o.baseline("get", row.size);
    let get_loaded = o.baseline("get_loaded", row.size);
    let per = |f: &dyn Fn(&RowResult) -> f64| median(&rs.iter().map(|r| f(r)).collect::<Vec<_>>());
    let gbps: Vec<f64> = rs.iter().map(|r| r.delivered_gbps()).collect();
    let mut counts = Counts::default();
    for r in &rs {
        counts.add(&r.window);
    }
    let sum = |f: &dyn Fn(&RowResult) -> u64| rs.iter().map(|r| f(r)).sum::<u64>();
    Summary {
        row,
        reps: rs.len(),
        memcpy: median(&memcpy.values().copied().collect::<Vec<_>>()),
        pipe: median(&pipe.values().copied().collect::<Vec<_>>()),
        cold: median(&cold.values().copied().collect::<Vec<_>>()),
        get: median(&get.values().copied().collect::<Vec<_>>()),
        get_loaded: median(&get_loaded.values().copied().collect::<Vec<_>>()),
        produced: per(&|r| r.produced_per_s),
        delivered: per(&|r| r.delivered_per_s()),
        gbps: median(&gbps),
        read: per(&|r| r.read_gbps(row.size)),
        gbps_min: gbps.iter().copied().fold(f64::INFINITY, f64::min),
        gbps_max: gbps.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ratio_memcpy: per(&|r| {
            r.delivered_gbps() / memcpy.get(&r.rep).copied().unwrap_or(f64::NAN)
        }),
        ratio_pipe: per(&|r| r.delivered_gbps() / pipe.get(&r.rep).copied().unwrap_or(f64::NAN)),
        ratio_cold: per(&|r| r.delivered_gbps() / cold.get(&r.rep).copied().unwrap_or(f64::NAN)),
        ratio_get: per(&|r| r.delivered_gbps() / get.get(&r.rep).copied().unwrap_or(f64::NAN)),
        ratio_get_loaded: per(&|r| {
            r.delivered_gbps() / get_loaded.get(&r.rep).copied().unwrap_or(f64::NAN)
        }),
        kept: per(&|r| r.delivered_per_s() / (r.produced_per_s * row.setup.consumers as f64)),
        counts,
        checked: sum(&|r| r.checked),
        mismatched: sum(&|r| r.mismatched),
        signal_errors: sum(&|r| r.signal_errors),
        local_reads: sum(&|r| r.local_reads),
        remote_reads: sum(&|r| r.remote_reads),
    }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.2}", 100.0 * part as f64 / whole as f64)
    }
}

/// The non-zero outcomes other than valid and overwritten, compactly.
fn others(s: &Summary) -> String {
    let c = &s.counts;
    let v: Vec<String> = [
        ("digest", c.digest_mismatch),
        ("readfail", c.read_failures),
        ("starved", c.starved),
        ("siglost", c.signals_lost),
        ("qdrop", c.queue_dropped),
        ("other", c.other),
        ("sigerr", s.signal_errors),
        ("MISMATCHED", s.mismatched),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(k, n)| format!("{k}={n}"))
    .collect();
    let mut t = if v.is_empty() {
        "-".into()
    } else {
        v.join(" ")
    };
    if s.reps > 1 && s.gbps_min > 0.0 && s.gbps_max / s.gbps_min > NOISY {
        t += " NOISY";
    }
    t
}

fn f(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        "-".into()
    }
}

/// Render the report of a job run by `plan` at `where_`.
pub fn render(plan: &Plan, o: &Output, where_: &str) -> Report {
    let stream: Vec<Summary> = plan
        .sizes
        .iter()
        .flat_map(|&s| plan.stream_rows(s))
        .map(|r| summarize(r, o))
        .collect();
    let scan: Vec<Summary> = plan.scan.iter().map(|r| summarize(*r, o)).collect();
    let mut t = String::new();
    let fact = |k: &str| o.fact(k).unwrap_or("?").to_string();
    let _ = writeln!(
        t,
        "vys stream ({where_}): producers on {}, consumers on {}\n\
         {} CPUs ({}; {}); load at start {}; {} build",
        fact("producer_host"),
        fact("consumer_host"),
        fact("cpus"),
        fact("cpu"),
        fact("caches"),
        fact("loadavg_at_start"),
        fact("build")
    );
    let _ = writeln!(
        t,
        "producers write flat out into rings of {} MiB (at least 64 slots); each consumer\n\
         takes every spectrum; windows of {} s after {} s of warm-up; medians over\n\
         repetitions, ratios per repetition (same job)",
        fact("stream_ring_bytes").parse::<usize>().unwrap_or(0) >> 20,
        fact("window_s"),
        fact("warmup_s")
    );
    t += "memcpy: one spectrum at a time out of a ring-sized area into one buffer (consumer's\n\
          host); pipe: the same bytes through three plain threads on the consumer's host (one\n\
          writes chunks flat out, one copies the newest out, one reads every copy: a stream's\n\
          work without vys, its ceiling when busy threads outnumber CPUs); cold: the same with\n\
          the copier half the area behind the writer (data as cold as a lagging consumer's); get: the UDP fabric's get, 8 MiB in flight (4..256 gets; remote consumers\n\
          keep as many reads outstanding), rank 0 -> rank 1; get+w: the same while a thread\n\
          of rank 0 writes memory flat out, as a producer does; read = what the consumers\n\
          copied, overwritten spectra included; kept = delivered / (produced x consumers)\n\n";
    let _ = writeln!(
        t,
        "{:<18} {:>8} {:>7} {:>6} {:>6} {:>6} {:>6} {:>8} {:>9} {:>9} {:>7} {:>8} {:>6} {:>6} {:>5} {:>6} {:>6} {:>7} {:>7}  other",
        "setup",
        "size",
        "memcpy",
        "pipe",
        "cold",
        "get",
        "get+w",
        "produced",
        "delivered",
        "delivered",
        "read",
        "/memcpy",
        "/pipe",
        "/cold",
        "/get",
        "/get+w",
        "kept",
        "valid%",
        "overwr%"
    );
    let _ = writeln!(
        t,
        "{:<18} {:>8} {:>7} {:>6} {:>6} {:>6} {:>6} {:>8} {:>9} {:>9} {:>7}",
        "", "", "GB/s", "GB/s", "GB/s", "GB/s", "GB/s", "M sp/s", "M sp/s", "GB/s", "GB/s"
    );
    for s in &stream {
        let chosen = s.counts.chosen();
        let _ = writeln!(
            t,
            "{:<18} {:>8} {:>7} {:>6} {:>6} {:>6} {:>6} {:>8} {:>9} {:>9} {:>7} {:>8} {:>6} {:>6} {:>5} {:>6} {:>6} {:>7} {:>7}  {}",
            s.row.setup.label(),
            size_label(Some(s.row.size)),
            f(s.memcpy, 2),
            f(s.pipe, 2),
            f(s.cold, 2),
            f(s.get, 3),
            f(s.get_loaded, 3),
            f(s.produced / 1e6, 3),
            f(s.delivered / 1e6, 3),
            f(s.gbps, 3),
            f(s.read, 3),
            f(s.ratio_memcpy, 3),
            f(s.ratio_pipe, 3),
            f(s.ratio_cold, 3),
            f(s.ratio_get, 2),
            f(s.ratio_get_loaded, 2),
            f(s.kept, 3),
            pct(s.counts.valid, chosen),
            pct(s.counts.overwritten, chosen),
            others(s)
        );
    }
    if !scan.is_empty() {
        let _ = writeln!(
            t,
            "\nverification failures vs ring length: {} spectra, 1 producer flat out, 1 consumer\n\
             taking everything, digest none; buffer = slots / produced rate;\n\
             overwr%read = overwritten / spectra read (valid or not)",
            size_label(Some(SCAN_SIZE))
        );
        let _ = writeln!(
            t,
            "{:<7} {:>7} {:>10} {:>9} {:>9} {:>10} {:>8} {:>9} {:>12}  other",
            "reads",
            "slots",
            "buffer ms",
            "produced",
            "delivered",
            "chosen",
            "valid%",
            "overwr%",
            "overwr%read"
        );
        for s in &scan {
            let chosen = s.counts.chosen();
            let read = s.counts.valid + s.counts.overwritten + s.counts.digest_mismatch;
            let _ = writeln!(
                t,
                "{:<7} {:>7} {:>10} {:>9} {:>9} {:>10} {:>8} {:>9} {:>12}  {}",
                s.row.setup.reads.id(),
                s.row.slots,
                f(s.row.slots as f64 / s.produced * 1e3, 4),
                f(s.produced / 1e6, 3),
                f(s.delivered / 1e6, 3),
                chosen,
                pct(s.counts.valid, chosen),
                pct(s.counts.overwritten, chosen),
                pct(s.counts.overwritten, read),
                others(s)
            );
        }
    }
    let checked: u64 = stream.iter().chain(&scan).map(|s| s.checked).sum();
    let mismatched: u64 = stream.iter().chain(&scan).map(|s| s.mismatched).sum();
    t += &targets(plan, &stream);
    let digest: u64 = stream
        .iter()
        .chain(&scan)
        .map(|s| s.counts.digest_mismatch)
        .sum();
    let _ = writeln!(
        t,
        "content check: {checked} valid spectra checked against the producer's pattern, \
         {mismatched} mismatched{};\n{digest} digest mismatches (head and tail right, data not)",
        if mismatched > 0 {
            " -- A VYS BUG: valid spectra with wrong data"
        } else {
            ""
        }
    );
    let mut csv = String::from(
        "section,place,setup,producers,consumers,reads,digest,spectrum_bytes,slots,reps,\
         memcpy_gbps,pipe_gbps,pipe_cold_gbps,get_gbps,get_loaded_gbps,produced_per_s,delivered_per_s,delivered_gbps,delivered_gbps_min,\
         delivered_gbps_max,read_gbps,ratio_memcpy,ratio_pipe,ratio_pipe_cold,ratio_get,ratio_get_loaded,kept,chosen,valid,overwritten,\
         digest_mismatch,read_failures,starved,signals_lost,queue_dropped,signal_errors,checked,\
         mismatched,local_reads,remote_reads\n",
    );
    for s in stream.iter().chain(&scan) {
        let r = &s.row;
        let c = &s.counts;
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.section.id(),
            plan.place.id(),
            r.setup.label(),
            r.setup.producers,
            r.setup.consumers,
            r.setup.reads.id(),
            digest_id(r.setup.digest),
            r.size,
            r.slots,
            s.reps,
            s.memcpy,
            s.pipe,
            s.cold,
            s.get,
            s.get_loaded,
            s.produced,
            s.delivered,
            s.gbps,
            s.gbps_min,
            s.gbps_max,
            s.read,
            s.ratio_memcpy,
            s.ratio_pipe,
            s.ratio_cold,
            s.ratio_get,
            s.ratio_get_loaded,
            s.kept,
            c.chosen(),
            c.valid,
            c.overwritten,
            c.digest_mismatch,
            c.read_failures,
            c.starved,
            c.signals_lost,
            c.queue_dropped,
            s.signal_errors,
            s.checked,
            s.mismatched,
            s.local_reads,
            s.remote_reads
        );
    }
    Report {
        text: t,
        csv,
        checked,
        mismatched,
    }
}

/// The targets, met or missed.
fn targets(plan: &Plan, stream: &[Summary]) -> String {
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let mut t = String::from("\ntargets\n");
    let main = |reads: Reads| {
        stream.iter().filter(move |s| {
            s.row.section == Section::Stream
                && s.row.setup.producers == 1
                && s.row.setup.consumers == 1
                && s.row.setup.reads == reads
                && s.row.setup.digest == DigestKind::None
        })
    };
    match plan.place {
        Place::OneHost => {
            for s in main(Reads::Local).filter(|s| s.row.size >= 8 << 10) {
                let _ = writeln!(
                    t,
                    "  1x1 local none {:>8}: delivered / memcpy {:.3} (target >= {TARGET_RATIO}): {} \
                     (no consumer can pass produced / memcpy {:.3}; \
                     delivered / pipe {:.3}, / cold pipe {:.3}; read / memcpy {:.3}, valid {}%)",
                    size_label(Some(s.row.size)),
                    s.ratio_memcpy,
                    verdict(s.ratio_memcpy >= TARGET_RATIO),
                    s.produced * s.row.size as f64 / 1e9 / s.memcpy,
                    s.ratio_pipe,
                    s.ratio_cold,
                    s.read / s.memcpy,
                    pct(s.counts.valid, s.counts.chosen())
                );
            }
            for s in main(Reads::Local).filter(|s| s.row.size == 512) {
                let _ = writeln!(
                    t,
                    "  1x1 local none    512 B: one consumer delivers {:.3} M spectra/s of {:.3} M/s \
                     produced (target >= 1 M/s): {}",
                    s.delivered / 1e6,
                    s.produced / 1e6,
                    verdict(s.delivered >= TARGET_SMALL_RATE)
                );
            }
        }
        Place::Across => {
            for s in main(Reads::Remote) {
                let _ = writeln!(
                    t,
                    "  1x1 remote none {:>8}: vys / fabric get {:.3} (target >= {TARGET_RATIO}): {} \
                     (vys / get while rank 0 writes {:.3}, valid {}%)",
                    size_label(Some(s.row.size)),
                    s.ratio_get,
                    verdict(s.ratio_get >= TARGET_RATIO),
                    s.ratio_get_loaded,
                    pct(s.counts.valid, s.counts.chosen())
                );
            }
        }
    }
    t
}
