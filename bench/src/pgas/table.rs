//! The PGAS report: the header explaining every measurement and the table
//! sections built from the two jobs' results (native path, AM path).

use super::measure::Bench;
use super::plan::{Plan, DIRTY_STRIDE};
use crate::harness::report::{self, Row, Section};
use crate::harness::results::Results;
use crate::harness::stats::{Summary, NOISY_RATIO};
use crate::host::{caches, cpu_model};

/// The results of both jobs.
pub struct Runs<'a> {
    /// The `SPLITRT_RMA=native` job.
    pub native: &'a Results<Bench>,
    /// The `SPLITRT_RMA=am` job.
    pub am: &'a Results<Bench>,
}

impl Runs<'_> {
    /// (path name, results), native first.
    fn paths(&self) -> [(&'static str, &Results<Bench>); 2] {
        [("native", self.native), ("am", self.am)]
    }

    /// memcpy MB/s at `size`, pooled over both jobs' repetitions.
    fn memcpy(&self, size: usize) -> Summary {
        let mut v = self.native.rates(Bench::Memcpy, size);
        v.extend(self.am.rates(Bench::Memcpy, size));
        Summary::values(&v)
    }
}

fn ratio(a: f64, b: f64) -> String {
    format!("{:.2}x", a / b)
}

/// Rows of a latency quantity on both paths; the AM row notes its ratio to
/// the native one.
fn latency_rows(runs: &Runs<'_>, bench: Bench) -> Vec<Row> {
    let native = runs.native.summary(bench, 0).median;
    runs.paths()
        .into_iter()
        .map(|(path, res)| {
            let s = res.summary(bench, 0);
            let row = Row::new(
                "splitrt",
                format!("{}, {path}", bench.label()),
                None,
                "us",
                s,
            );
            if path == "am" {
                row.with_note(format!("am / native = {}", ratio(s.median, native)))
            } else {
                row
            }
        })
        .collect()
}

/// Rows of a bandwidth quantity at `size` on both paths, each noting its
/// ratio to memcpy.
fn bandwidth_rows(runs: &Runs<'_>, bench: Bench, size: usize) -> Vec<Row> {
    let memcpy = runs.memcpy(size).median;
    runs.paths()
        .into_iter()
        .filter(|(_, res)| res.sizes_of(bench).contains(&size))
        .map(|(path, res)| {
            let s = res.summary(bench, size);
            let name = format!("{} {path}", bench.label());
            let note = format!("{name} / memcpy = {}", ratio(s.median, memcpy));
            Row::new("splitrt", name, Some(size), "MB/s", s).with_note(note)
        })
        .collect()
}

/// The table sections.
pub fn sections(runs: &Runs<'_>, plan: &Plan) -> Vec<Section> {
    let mut out = Vec::new();

    let mut rows = Vec::new();
    for b in [
        Bench::PutSync,
        Bench::Read,
        Bench::ReadDirty,
        Bench::PutPingPong,
    ] {
        rows.extend(latency_rows(runs, b));
    }
    // put_signal + wait beside the put + sync round trip of the same job
    for ((path, res), row) in runs
        .paths()
        .into_iter()
        .zip(latency_rows(runs, Bench::PutSignalPingPong))
    {
        let put = res.summary(Bench::PutPingPong, 0).median;
        let sig = res.summary(Bench::PutSignalPingPong, 0).median;
        rows.push(row.with_note(format!(
            "put_signal / put ping-pong ({path}) = {}",
            ratio(sig, put)
        )));
    }
    out.push(Section {
        title: "one-sided latency, 8 B, rank 0 -> rank 1 (blocking; p50/p99 over batch means)"
            .into(),
        rows,
    });

    let mut rows = latency_rows(runs, Bench::SyncEmpty);
    for (row, (_, res)) in latency_rows(runs, Bench::SyncAfterPut)
        .into_iter()
        .zip(runs.paths())
    {
        let clock = res.summary(Bench::ClockPair, 0).median * 1e3;
        rows.push(row.with_note(format!("Instant::now() pair ({clock:.0} ns) subtracted")));
    }
    out.push(Section {
        title: "cost of pg.sync()".into(),
        rows,
    });

    let mut sizes: Vec<usize> = runs
        .paths()
        .iter()
        .flat_map(|(_, r)| r.sizes_of(Bench::Memcpy))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut rows = Vec::new();
    for &size in &sizes {
        let r = plan.rounds(size);
        rows.push(
            Row::new(
                "raw",
                Bench::Memcpy.label(),
                Some(size),
                "MB/s",
                runs.memcpy(size),
            )
            .with_note(format!(
                "both jobs pooled; {} ops per round, {} timed rounds",
                r.per_round, r.timed
            )),
        );
        for b in [Bench::PutBw, Bench::GetBw] {
            rows.extend(bandwidth_rows(runs, b, size));
        }
    }
    out.push(Section {
        title: "put / get bandwidth: a round of split-phase ops, then one sync (MB/s)".into(),
        rows,
    });

    let mut rows = Vec::new();
    let mut store_sizes: Vec<usize> = runs
        .paths()
        .iter()
        .flat_map(|(_, r)| r.sizes_of(Bench::StoreBw))
        .collect();
    store_sizes.sort_unstable();
    store_sizes.dedup();
    for size in store_sizes {
        let n = plan.store_msgs(size);
        rows.extend(
            bandwidth_rows(runs, Bench::StoreBw, size)
                .into_iter()
                .map(|r| r.with_note(format!("{n} stores"))),
        );
    }
    out.push(Section {
        title: "store throughput: rank 0's first store until rank 1's store_sync returned (MB/s)"
            .into(),
        rows,
    });

    let mut rows = Vec::new();
    for (path, res) in runs.paths() {
        let (a, b) = (
            res.summary(Bench::StridedPut, 0),
            res.summary(Bench::SeparatePuts, 0),
        );
        let note = format!("separate / strided = {}", ratio(b.median, a.median));
        rows.push(
            Row::new(
                "splitrt",
                format!("{}, {path}", Bench::StridedPut.label()),
                None,
                "us",
                a,
            )
            .with_note(note),
        );
        rows.push(Row::new(
            "splitrt",
            format!("{}, {path}", Bench::SeparatePuts.label()),
            None,
            "us",
            b,
        ));
    }
    out.push(Section {
        title: "strided put vs separate puts: 1000 runs of 64 B, 128 B apart at rank 1, same job, alternating batches (us per 1000 runs)".into(),
        rows,
    });
    // team collectives beside their closest references, same job
    let mut rows = Vec::new();
    for (path, res) in runs.paths() {
        for (b, reference, what) in [
            (
                Bench::TeamAlltoall,
                Bench::HandAlltoall,
                "alltoall / by hand",
            ),
            (
                Bench::TeamAllgather,
                Bench::PgasAllreduce,
                "allgather / Pgas::allreduce",
            ),
            (
                Bench::TeamAllreduce,
                Bench::PgasAllreduce,
                "Team / Pgas allreduce",
            ),
            (
                Bench::TeamScan,
                Bench::TeamAllreduce,
                "scan / Team::allreduce",
            ),
            (
                Bench::SplitTeamAllreduce,
                Bench::PgasAllreduce,
                "split team / Pgas allreduce",
            ),
        ] {
            let (a, r) = (res.summary(b, 0), res.summary(reference, 0));
            rows.push(
                Row::new("splitrt", format!("{}, {path}", b.label()), None, "us", a)
                    .with_note(format!("{what} ({path}) = {}", ratio(a.median, r.median))),
            );
        }
        for b in [Bench::HandAlltoall, Bench::PgasAllreduce] {
            rows.push(Row::new(
                "splitrt",
                format!("{}, {path}", b.label()),
                None,
                "us",
                res.summary(b, 0),
            ));
        }
    }
    out.push(Section {
        title: "team collectives (world team, 2 ranks) beside their closest references, same job (us per call, batch means)".into(),
        rows,
    });

    out
}

/// The text above the table: setup and measurement conventions.
pub fn header(runs: &Runs<'_>, plan: &Plan, before: &str, after: &str) -> String {
    let c = |k: &str| runs.native.config_value(k).unwrap_or("?").to_string();
    let size = |k: &str| report::size_label(c(k).parse::<usize>().ok());
    format!(
        "splitrt-bench pgas ({} build{}): 2 ranks pinned to CPUs 0 and 1, SPLITRT_SPIN_ONLY=1, {} repetition(s),\n\
         one job per one-sided path, back to back: SPLITRT_RMA=native (copies through the mapped peer segment),\n\
         then SPLITRT_RMA=am (request/reply Active Messages; gets come back in Medium replies of <= {}).\n\
         cpu: {}; caches: {}; load average before: {before}, after: {after}\n\
         shm fabric: cell {} B, ring {} cells, segment {} per rank (SPLITRT_SEGMENT_SIZE={}).\n\
         latency rows: us per blocking operation; p50/p99 over per-batch means ({} batches of {} ops after {}\n\
         untimed); a row shows the median over repetitions, spread = min..max of the per-repetition p50s.\n\
         put 8 B + sync = pg.put(p, &[x]) then pg.sync(), always the same word of rank 1 (native: completes at\n\
         the local copy, the line stays in rank 0's cache). read = pg.read(p) of that word (native: a hit in\n\
         rank 0's cache after the first). read of a line the peer just wrote: rank 1 writes {} lines {} B apart,\n\
         barrier, rank 0 reads each once (a cache-to-cache transfer each), barrier; mean per read. put ping-pong\n\
         RTT: rank 0 puts+syncs a word to rank 1, which polls it (wait_until) and puts+syncs it back.\n\
         put_signal ping-pong RTT (same job, after the put ping-pong): rank 0 put_signals a word with a signal set to\n\
         rank 1, which waits for the signal (Signals::wait_until) and put_signals back; no sync per trip.\n\
         sync: pg.sync() with nothing outstanding (batch mean), and right after one 8 B put (each sync timed\n\
         alone, the cost of two Instant::now() calls subtracted).\n\
         bandwidth: rounds of k = min({}, {} / size) split-phase ops, then one completion. Op j moves slot j\n\
         (size B at offset j*size) of one {} buffer to slot j of another, cycling, so every op moves other\n\
         bytes to another place (compare with the caches above). put = k x pg.put from a private buffer into\n\
         rank 1's landing area, then pg.sync(); get = pg.scope with k s.get from rank 1's area into a private\n\
         buffer, then rank 0 reads 1 byte per 64 B line of it (rank 1 rewrites its area before each size's\n\
         gets); memcpy = the put rounds as copy_from_slice into rank 0's own segment (rank 0, CPU 0, measured\n\
         in both jobs). MB/s with 1 MB = 1e6 B; X / memcpy = median over memcpy median at that size.\n\
         store: rank 0 pg.store()s N messages of S bytes (slots as above) to consecutive addresses of rank 1, which\n\
         store_sync(N*S)s, reads 1 byte per 64 B line of all of it, and enters a barrier; timed on rank 0 from\n\
         its first store until rank 1's barrier arrival reached it (1 untimed round first).\n\
         strided: rank 0 puts 1000 runs of 64 B (packed at the source) 128 B apart into rank 1 as one\n\
         pg.put_strided + pg.sync, and as 1000 pg.put + pg.sync, alternating batches of each in the same job.\n\
         NOISY = spread max/min > {NOISY_RATIO}.\n",
        c("build"),
        if plan.quick {
            ", --quick: smoke test only, numbers mean little"
        } else {
            ""
        },
        plan.reps,
        size("max_medium"),
        cpu_model(),
        caches(),
        c("cell_size"),
        c("ring_len"),
        size("segment_size"),
        plan.segment_size,
        plan.batches,
        plan.batch,
        plan.warm(),
        plan.dirty_lines,
        DIRTY_STRIDE,
        plan.window,
        report::size_label(Some(plan.area)),
        report::size_label(Some(plan.area)),
    )
}
