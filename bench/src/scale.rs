//! `scale`: what a rank costs as the ranks of one host grow (docs/scale.md).
//! For each rank count, one job of the `t_scale` example (every rank sends
//! one Short to every other rank, then reports) through `splitrt-run -n N`
//! found next to this executable; prints per rank the peak RSS, the RSS
//! and PSS at the end (and the part of each in the other ranks' files),
//! its shared-memory file, the host's /dev/shm in use over the ranks, the
//! descriptors, threads and time to start beside the rank count, and
//! writes `DIR/scale.txt`. RSS counts every page a rank has mapped, so a
//! page of a peer's queue it wrote into counts in both; PSS divides a
//! page shared by m processes by m, so the ranks' PSS add up to the memory
//! the ranks map (page tables, the launcher and /dev/shm pages no rank
//! maps are not in it): their mean is the mapped memory a rank costs. Needs
//! the facade's launcher and example beside this executable: `cargo build
//! --release -p splitrt --bin splitrt-run --example t_scale` (`t_scale` is
//! an example of the root package `splitrt`, not of this crate).
//! `SPLITRT_SHM_QUEUE=pairs|shared` in its environment forces a receive
//! queue; unset it is `auto` (the rings below 16 ranks on the host, the
//! shared queue from 16): the header names the setting, and each row the
//! queue its job's ranks reported they ran on (`auto: shared`).

use crate::harness::run::{wrote, Run};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

/// One rank's report line (`scale rank R size N ... key value ...`).
fn fields(line: &str) -> Option<Vec<(&str, u64)>> {
    let rest = &line[line.find("scale rank ")?..];
    let words: Vec<&str> = rest.split_whitespace().skip(1).collect();
    Some(
        words
            .chunks(2)
            .filter_map(|kv| Some((kv[0], kv.get(1)?.parse().ok()?)))
            .collect(),
    )
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// The receive queue every rank of a job reported (`queue Q` at the end of
/// its line), or `mixed` / `?` if they differ or none said.
fn queue_of(stdout: &str) -> String {
    let mut seen: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("scale rank "))
        .filter_map(|l| l.split(" queue ").nth(1)?.split_whitespace().next())
        .collect();
    seen.dedup();
    match seen[..] {
        [q] => q.to_string(),
        [] => "?".into(),
        _ => "mixed".into(),
    }
}

/// Run `t_scale` at each of `ranks` (comma-separated) on this host.
pub fn run(r: &Run, ranks: &str) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let dir: PathBuf = exe
        .parent()
        .ok_or("this executable has no directory")?
        .into();
    let launcher = dir.join("splitrt-run");
    let prog = dir.join("examples").join("t_scale");
    if !launcher.exists() || !prog.exists() {
        return Err(format!(
            "{} or {} not built: cargo build --release -p splitrt --bin splitrt-run --example t_scale \
             (t_scale is an example of the root package splitrt)",
            launcher.display(),
            prog.display()
        ));
    }
    let counts: Vec<usize> = ranks
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| format!("bad rank count {s:?}"))
        })
        .collect::<Result<_, _>>()?;
    // SPLITRT_SHM_QUEUE reaches the jobs through the environment (unset:
    // auto); the header says which was set, each row what the ranks chose
    let queue = std::env::var("SPLITRT_SHM_QUEUE").unwrap_or_else(|_| "auto".into());
    let queue = queue.trim().to_string();
    let mut text = format!(
        "splitrt-bench scale (one host; SPLITRT_SHM_QUEUE={queue}; load average before: {})\n\
         RSS: pages a rank has mapped, a shared page counted in every rank that touched it; \
         PSS: each page divided by the ranks that map it (sums to the memory the ranks map);\n\
         at the end (every rank alive), MiB, RSS the max over ranks, PSS their mean (the ranks' \
         mapped total over the ranks); (peers): the part in the other ranks' shared-memory files; \
         anon: private memory (heap, stacks), PTE: page tables, max over ranks\n\
         {:>6} {:>14} {:>14} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>14} {:>16} {:>4} {:>7} {:>15} {:>8}\n",
        r.load_before(),
        "ranks",
        "queue",
        "peak RSS/rank",
        "RSS",
        "(peers)",
        "PSS",
        "(peers)",
        "anon",
        "PTE",
        "shm file/rank",
        "/dev/shm/rank",
        "fds",
        "threads",
        "start med/max",
        "wall"
    );
    print!("{text}");
    for n in counts {
        let t = Instant::now();
        let out = Command::new(&launcher)
            .args(["-n", &n.to_string(), "--timeout", &format!("{}", r.timeout)])
            .arg(&prog)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("starting {}: {e}", launcher.display()))?;
        let wall = t.elapsed().as_secs_f64();
        if !out.status.success() {
            return Err(format!(
                "t_scale on {n} ranks failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let rows: Vec<Vec<(&str, u64)>> = stdout.lines().filter_map(fields).collect();
        let col = |k: &str| -> Vec<u64> {
            rows.iter()
                .filter_map(|f| f.iter().find(|(n, _)| *n == k).map(|&(_, v)| v))
                .collect()
        };
        let max = |k: &str| col(k).into_iter().max().unwrap_or(0);
        let mean = |k: &str| {
            let v = col(k);
            v.iter().sum::<u64>() / (v.len() as u64).max(1)
        };
        let mib = |kb: u64| kb as f64 / 1024.0;
        let line = format!(
            "{:>6} {:>14} {:>10.1} MiB {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>10.1} MiB {:>12.2} MiB {:>4} {:>7} {:>7}/{:>5} ms {:>6.2} s\n",
            n,
            format!("{queue}: {}", queue_of(&stdout)),
            mib(max("hwm_kb")),
            mib(max("rss_kb")),
            mib(max("peer_rss_kb")),
            mib(mean("pss_kb")),
            mib(mean("peer_pss_kb")),
            mib(max("anon_kb")),
            mib(max("pte_kb")),
            mib(median(col("shm_file_kb"))),
            mib(max("shm_used_kb")) / n.max(1) as f64,
            max("fds"),
            max("threads"),
            median(col("start_ms")),
            max("start_ms"),
            wall
        );
        print!("{line}");
        text.push_str(&line);
    }
    let path = r.out.join("scale.txt");
    std::fs::write(&path, &text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("{}", wrote(&[&path]));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row names the queue its ranks reported, `mixed` if they differ
    /// and `?` if none did (a `t_scale` of before the `queue` field).
    #[test]
    fn a_row_names_the_queue_its_ranks_ran_on() {
        let line = |r: usize, q: &str| {
            format!("[{r}] scale rank {r} size 2 host h start_ms 9 shm_file_kb 1552 queue {q}\n")
        };
        assert_eq!(
            queue_of(&(line(0, "shared") + &line(1, "shared"))),
            "shared"
        );
        assert_eq!(queue_of(&(line(0, "pairs") + &line(1, "shared"))), "mixed");
        assert_eq!(queue_of("[0] scale rank 0 size 1 host h start_ms 9\n"), "?");
        // the numeric fields still parse around it
        let l = line(1, "pairs");
        let f = fields(&l).unwrap();
        assert!(f.contains(&("shm_file_kb", 1552)), "{f:?}");
    }
}
