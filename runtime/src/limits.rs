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
