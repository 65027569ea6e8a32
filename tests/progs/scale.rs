//! t_scale: what a rank costs at start and after it has talked to every
//! other rank (docs/scale.md's validation). Every rank starts, passes a
//! barrier, sends one Short request to every other rank, waits for the
//! n - 1 it is owed, passes a barrier and prints one line:
//!
//! `scale rank R size N host H start_ms S fds F threads T rss_kb X hwm_kb Y
//! shm_file_kb Z shm_used_kb U pss_kb P own_rss_kb A own_pss_kb B
//! peer_rss_kb C peer_pss_kb D anon_kb E pte_kb F queue Q`
//!
//! start_ms: from the process's start to the endpoint attached (10 ms
//! resolution); fds, threads: this process's open descriptors and threads
//! then; rss, hwm: its resident set now and at its peak; shm_file_kb:
//! the size of its own shared-memory file; shm_used_kb: /dev/shm in use
//! on its host (every job's: subtract what was used before). pss_kb: its
//! proportional set size (`/proc/self/smaps_rollup`: a page mapped by m
//! processes counts 1/m in each, so the ranks' PSS add up to the memory
//! the ranks map (not the host's: page tables, the launcher and /dev/shm
//! pages no rank maps are outside it), where their RSS counts a shared
//! page once per rank that touched it); own_*: the part of RSS / PSS in its own shared-memory
//! file, peer_*: in the other ranks' files of the job (their queues or
//! rings, doorbells and segments this rank mapped by touching them);
//! anon_kb: its private memory (`RssAnon`: heap, stacks); pte_kb: its
//! page tables (`VmPTE`, 8 B per mapped page, shared ones included). The
//! memory figures are read while every rank is alive (between two
//! barriers), so PSS divides by every rank that mapped a page. queue: the
//! host's shared-memory receive queue (`pairs` or `shared`, as
//! `SPLITRT_SHM_QUEUE` chose it; `none` without shared memory).

use splitrt::{EndpointBuilder, Kind, Payload};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn main() {
    if let Err(e) = run() {
        eprintln!("t_scale: {e}");
        std::process::exit(1);
    }
}

/// Milliseconds since this process started.
fn age_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // the fields after the command name (which may hold spaces)
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let start_ticks: f64 = rest
        .split_whitespace()
        .nth(19)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let up: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    ((up - start_ticks / hz) * 1000.0).max(0.0) as u64
}

fn entries(dir: &str) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

fn status_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// KiB of this rank's own shared-memory file (mapped; unlinked after
/// the start, so found in `smaps`, the text of /proc/self/smaps): what
/// /dev/shm must hold for it.
fn shm_file_kb(smaps: &str, job: &str, rank: usize) -> u64 {
    let prefix = format!("/dev/shm/splitrt-{job}-");
    let suffix = format!("-{rank}");
    let mut mine = false;
    let mut kb = 0;
    for l in smaps.lines() {
        let mut w = l.split_whitespace();
        // a mapping's first line (an address range, then perms, offset,
        // device, inode and, for a file, its path); an anonymous mapping
        // has no path and is not this file's (until h15-auto its `Size`
        // was added to the file mapped before it: 272 KiB more at 1 to 16
        // ranks)
        if w.next()
            .is_some_and(|a| a.contains('-') && !a.ends_with(':'))
        {
            mine = w
                .nth(4)
                .is_some_and(|p| p.starts_with(&prefix) && p.ends_with(&suffix));
            continue;
        }
        if mine {
            if let Some(v) = l.strip_prefix("Size:") {
                kb += v
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
            }
        }
    }
    kb
}

/// A `Key:   N kB` line's N.
fn kb_of(line: &str, key: &str) -> Option<u64> {
    line.strip_prefix(key)?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// KiB of this process's proportional set size.
fn pss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| s.lines().find_map(|l| kb_of(l, "Pss:")))
        .unwrap_or(0)
}

/// KiB of RSS and PSS in this rank's own shared-memory file and in its
/// job's other files (the peers' on this host): `[own_rss, own_pss,
/// peer_rss, peer_pss]`, from `smaps` (the text of /proc/self/smaps).
fn shm_split_kb(smaps: &str, job: &str, rank: usize) -> [u64; 4] {
    let prefix = format!("/dev/shm/splitrt-{job}-");
    let suffix = format!("-{rank}");
    // which mapping the lines belong to: None (not the job's), own, peer
    let mut which: Option<usize> = None;
    let mut kb = [0u64; 4];
    for l in smaps.lines() {
        let mut w = l.split_whitespace();
        if w.next()
            .is_some_and(|a| a.contains('-') && !a.ends_with(':'))
        {
            which = w.nth(4).filter(|p| p.starts_with(&prefix)).map(|p| {
                if p.ends_with(&suffix) {
                    0
                } else {
                    2
                }
            });
            continue;
        }
        if let Some(i) = which {
            if let Some(v) = kb_of(l, "Rss:") {
                kb[i] += v;
            } else if let Some(v) = kb_of(l, "Pss:") {
                kb[i + 1] += v;
            }
        }
    }
    kb
}

/// KiB of /dev/shm in use on this host (every job's and user's).
fn shm_used_kb() -> u64 {
    // SAFETY: an all-zero statvfs is a valid out-value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    if unsafe { libc::statvfs(c"/dev/shm".as_ptr(), &mut st) } != 0 {
        return 0;
    }
    (st.f_blocks - st.f_bfree) as u64 * st.f_frsize as u64 / 1024
}

fn run() -> splitrt::Result<()> {
    let got = Arc::new(AtomicUsize::new(0));
    let mut b = EndpointBuilder::new();
    let g = got.clone();
    let hit = b.request("hit", Kind::Short, 0, move |_t, _m| {
        g.fetch_add(1, Ordering::AcqRel);
    })?;
    let ep = b.attach()?;
    let start_ms = age_ms();
    let (me, n) = (ep.rank(), ep.size());
    ep.barrier()?;
    for i in 1..n {
        ep.request((me + i) % n, hit, &[], Payload::None)?;
    }
    ep.wait_until(|| got.load(Ordering::Acquire) == n - 1)?;
    ep.barrier()?;
    // every figure of this process's memory first, then /proc/self/smaps
    // once: its text grows with the mappings (one per peer's file) and
    // stays in the heap, which PSS, RSS and RssAnon read after it would
    // count (+44 KiB of PSS per rank at 16 ranks, +236 KiB at 256)
    let (anon, pte) = (status_kb("RssAnon:"), status_kb("VmPTE:"));
    let (rss, hwm, pss) = (status_kb("VmRSS:"), status_kb("VmHWM:"), pss_kb());
    let (fds, threads) = (entries("/proc/self/fd"), entries("/proc/self/task"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let job = &ep.job().job_id;
    let line = format!(
        "scale rank {me} size {n} host {} start_ms {start_ms} fds {fds} threads {threads} rss_kb {rss} hwm_kb {hwm} shm_file_kb {} shm_used_kb {}",
        host.trim(),
        shm_file_kb(&smaps, job, me),
        shm_used_kb(),
    );
    let [own_rss, own_pss, peer_rss, peer_pss] = shm_split_kb(&smaps, job, me);
    // no rank leaves (unmapping what the others' PSS shares with it)
    // before every rank has read its own
    ep.barrier()?;
    println!(
        "{line} pss_kb {pss} own_rss_kb {own_rss} own_pss_kb {own_pss} peer_rss_kb {peer_rss} peer_pss_kb {peer_pss} anon_kb {anon} pte_kb {pte} queue {}",
        ep.shm_queue().map_or("none", |q| q.name())
    );
    ep.finish()
}
