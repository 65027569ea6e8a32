//! Resource limits checked up front, so a job that cannot fit fails at start
//! with the fix in the message instead of "Too many open files" half way.

use crate::{Error, Result};

/// Make sure this process may open `needed` file descriptors: raise the
/// soft `RLIMIT_NOFILE` up to the hard limit if that suffices, otherwise
/// fail naming `what` needs them, the limits and the fix.
///
/// ```
/// splitrt_runtime::limits::ensure_open_files(16, "a test").unwrap();
/// ```
pub fn ensure_open_files(needed: u64, what: &str) -> Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes only into `lim`, which we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Ok(()); // cannot tell: let the job try
    }
    if lim.rlim_cur >= needed {
        return Ok(());
    }
    if lim.rlim_max >= needed {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max.min(needed.max(4096)),
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit(2) reads only `raised`, which we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(());
        }
    }
    Err(Error::config(format!(
        "{what} needs about {needed} open files, but the limit is {} (hard limit {}); \
         raise it with `ulimit -n {needed}` (or more) before starting the job",
        lim.rlim_cur, lim.rlim_max
    )))
}

/// The soft locked-memory limit (`RLIMIT_MEMLOCK`) in bytes, first raised
/// to the hard limit if it is below `needed`. `None`: no limit applies to
/// pinning memory for RDMA: the limit is unlimited, or this process holds
/// `CAP_IPC_LOCK` (the kernel then ignores the limit), or the limit cannot
/// be read (let the job try).
///
/// ```
/// let _ = splitrt_runtime::limits::locked_memory(1 << 20);
/// ```
pub fn locked_memory(needed: u64) -> Option<u64> {
    if has_cap_ipc_lock() {
        return None;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes only into `lim`, which we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur < needed && lim.rlim_max > lim.rlim_cur {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit(2) reads only `raised`, which we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    (lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// Whether this process's effective capabilities include `CAP_IPC_LOCK`
/// (from `/proc/self/status`; `false` when it cannot be read).
fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}
