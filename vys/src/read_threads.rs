//! The setting of how many threads serve a producer's remote reads
//! (issue 27 part 6; [`super::read_server::ReadServer::start_threads`]).

use super::read_server::MAX_READ_THREADS;

/// The setting of a producer's read-server threads (1..=16), read by
/// `ProducerConfig::apply_settings` into its `read_threads`.
pub const ENV_READ_THREADS: &str = "SPLITRT_VYS_READ_THREADS";

/// The default: one thread. A consumer's session lives on one thread
/// however many there are (the kernel keeps its address on one socket),
/// so a second thread never speeds up one consumer; it serves a second
/// consumer in parallel, which helps only with cores to spare beside the
/// producer's (measured across two namespace hosts on 2 CPUs: no gain at
/// 8 or 64 KiB; docs/vys.md "Speed across hosts"). Set
/// [`ENV_READ_THREADS`] for producers that many consumers read at once.
pub fn default_threads() -> usize {
    1
}

/// The thread count `get` sets under [`ENV_READ_THREADS`] (`None`: not
/// set), checked to 1..=[`MAX_READ_THREADS`]; the error names the
/// setting.
pub fn threads_setting(get: impl Fn(&str) -> Option<String>) -> Result<Option<usize>, String> {
    let Some(v) = get(ENV_READ_THREADS) else {
        return Ok(None);
    };
    match v.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_READ_THREADS).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "{ENV_READ_THREADS}={v:?}: the read-server threads must be a number within \
             1..={MAX_READ_THREADS}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vysspeed_thread_settings_are_bounded_and_named() {
        let get = |v: &'static str| move |k: &str| (k == ENV_READ_THREADS).then(|| v.to_string());
        assert_eq!(threads_setting(|_| None), Ok(None));
        assert_eq!(threads_setting(get("1")), Ok(Some(1)));
        assert_eq!(threads_setting(get("16")), Ok(Some(16)));
        for bad in ["0", "17", "-1", "lots", ""] {
            let e = threads_setting(get(bad)).unwrap_err();
            assert!(e.contains(ENV_READ_THREADS), "{bad}: {e}");
        }
        assert_eq!(default_threads(), 1);
    }
}
