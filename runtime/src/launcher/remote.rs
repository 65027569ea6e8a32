//! Ranks on other hosts: `--hosts a:2,b:2` places ranks in order over the
//! hosts' slots, and each remote rank is started through a remote-shell
//! command (`ssh` unless `--rsh` says otherwise, the way Open MPI's
//! `plm_rsh_agent` works): `RSH HOST 'script'`.
//!
//! The script gets the job key on its standard input (never on a command
//! line, where `ps` on the remote host would show it), starts the rank,
//! and keeps reading its standard input as a lifeline: when the launcher
//! goes away or stops the job, the remote shell's input ends and the rank
//! is sent SIGTERM. After the rank ends, the script removes that rank's
//! shared-memory file if the rank could not.

use crate::{Error, Result};

/// One host and its slot count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSlots {
    /// Host name or address, as the remote shell and the resolver take it.
    pub host: String,
    /// Ranks it takes.
    pub slots: usize,
}

/// Parse `a:2,b:2,c` (a host without a count takes one rank).
///
/// ```
/// use splitrt_runtime::launcher::parse_hosts;
/// let h = parse_hosts("node1:2, node2").unwrap();
/// assert_eq!((h[0].host.as_str(), h[0].slots, h[1].slots), ("node1", 2, 1));
/// assert!(parse_hosts("node1:0").is_err());
/// ```
pub fn parse_hosts(s: &str) -> Result<Vec<HostSlots>> {
    let mut out = Vec::new();
    for item in s
        .split([',', '\n'])
        .map(str::trim)
        .filter(|i| !i.is_empty())
    {
        out.push(parse_one(item)?);
    }
    if out.is_empty() {
        return Err(Error::usage("--hosts names no host"));
    }
    Ok(out)
}

/// Most bytes of a host file read (a longer one is refused: an endless file
/// such as `/dev/zero` or a FIFO fed forever is never read whole).
pub const HOSTFILE_MAX: u64 = 1 << 20;

/// Read and parse the host file at `path`, at most [`HOSTFILE_MAX`] bytes.
pub fn read_hostfile(path: &std::path::Path) -> Result<Vec<HostSlots>> {
    use std::io::Read;
    let what = || format!("reading host file {}", path.display());
    let f = std::fs::File::open(path).map_err(|e| Error::io(what(), e))?;
    let mut bytes = Vec::new();
    f.take(HOSTFILE_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(what(), e))?;
    if bytes.len() as u64 > HOSTFILE_MAX {
        return Err(Error::usage(format!(
            "host file {} is longer than 1 MiB (an endless file or a FIFO?); \
             a host file names one host per line",
            path.display()
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::usage(format!("host file {} is not text (UTF-8)", path.display())))?;
    parse_hostfile(&text)
}

/// Parse a host file: one host per line as `host`, `host:N` or
/// `host slots=N`; `#` starts a comment.
pub fn parse_hostfile(text: &str) -> Result<Vec<HostSlots>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let item = match line.split_once(char::is_whitespace) {
            Some((h, rest)) => {
                let n = rest.trim().strip_prefix("slots=").ok_or_else(|| {
                    Error::usage(format!("host file line '{line}': expected 'host slots=N'"))
                })?;
                format!("{h}:{n}")
            }
            None => line.to_string(),
        };
        out.push(parse_one(&item)?);
    }
    if out.is_empty() {
        return Err(Error::usage("the host file names no host"));
    }
    Ok(out)
}

fn parse_one(item: &str) -> Result<HostSlots> {
    let (host, slots) = match item.rsplit_once(':') {
        Some((h, n)) => (
            h,
            n.parse::<usize>()
                .ok()
                .filter(|&n| (1..=4096).contains(&n))
                .ok_or_else(|| {
                    Error::usage(format!("host '{item}': slot count must be 1..=4096"))
                })?,
        ),
        None => (item, 1),
    };
    let ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
    if !ok {
        return Err(Error::usage(format!(
            "host '{host}': names and addresses use letters, digits, '-', '.' and '_'"
        )));
    }
    Ok(HostSlots {
        host: host.to_string(),
        slots,
    })
}

/// Where each rank goes: (host index, rank within the host, ranks on that
/// host), filling hosts in order.
pub fn place(n: usize, hosts: &[HostSlots]) -> Result<Vec<(usize, usize, usize)>> {
    let total: usize = hosts.iter().map(|h| h.slots).sum();
    if n > total {
        return Err(Error::usage(format!(
            "{n} ranks but the hosts have {total} slot(s)"
        )));
    }
    let mut out = Vec::with_capacity(n);
    let mut left = n;
    for (i, h) in hosts.iter().enumerate() {
        let here = h.slots.min(left);
        for l in 0..here {
            out.push((i, l, here));
        }
        left -= here;
    }
    Ok(out)
}

/// Whether `k` can be a shell variable's name (`[A-Za-z_][A-Za-z0-9_]*`):
/// only such names are forwarded to a remote rank.
pub fn is_identifier(k: &str) -> bool {
    let mut c = k.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// Exit code of the remote script when the job key never arrived on its
/// standard input (a remote shell that drops it, like `ssh -n`).
pub const NO_KEY_EXIT: i32 = 125;

/// `s` as one word for a POSIX shell.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The script a remote shell runs for one rank: read the key from
/// standard input, export `env`, run `argv` in `cwd`, and keep the
/// lifeline. `shm_file` is the rank's shared-memory file, removed after.
/// Variables whose names are not identifiers are left out (the caller
/// filters and warns; this is the last line of defence); every value is
/// quoted.
pub fn script(cwd: &str, env: &[(String, String)], argv: &[String], shm_file: &str) -> String {
    let mut s = format!(
        "IFS= read -r SPLITRT_JOB_KEY || {{ echo 'splitrt: the job key never arrived on \
         standard input (a remote shell that drops it, like ssh -n?)' >&2; exit {NO_KEY_EXIT}; }}; \
         export SPLITRT_JOB_KEY; "
    );
    s += &format!("cd {} 2>/dev/null || cd; ", quote(cwd));
    for (k, v) in env.iter().filter(|(k, _)| is_identifier(k)) {
        s += &format!("{k}={}; export {k}; ", quote(v));
    }
    s += "exec 3<&0; ";
    s += &argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ");
    s += " </dev/null & p=$!; ";
    s += "(cat <&3 >/dev/null 2>&1; kill -TERM $p 2>/dev/null) & w=$!; ";
    s += "wait $p; rc=$?; kill $w 2>/dev/null; ";
    s += &format!("rm -f {} 2>/dev/null; exit $rc", quote(shm_file));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_placement() {
        let h = parse_hostfile("# cluster\nnode1 slots=2\nnode2:1\nnode3\n").unwrap();
        assert_eq!(h.len(), 3);
        let p = place(4, &h).unwrap();
        assert_eq!(p, vec![(0, 0, 2), (0, 1, 2), (1, 0, 1), (2, 0, 1)]);
        assert!(place(5, &h).is_err());
        assert!(parse_hosts("a;b").is_err());
        assert!(parse_hosts("a:x").is_err());
    }

    #[test]
    fn only_identifiers_are_forwarded() {
        assert!(is_identifier("SPLITRT_A_1") && is_identifier("_x"));
        for bad in ["", "1A", "SPLITRT_X;touch x", "A B", "A$(x)", "A=B", "É"] {
            assert!(!is_identifier(bad), "{bad:?}");
        }
        let env = [("SPLITRT_X;id".to_string(), "v".to_string())];
        assert!(!script("/", &env, &["p".into()], "/f").contains("SPLITRT_X;id"));
    }

    #[test]
    #[cfg_attr(miri, ignore = "spawns sh (no processes under Miri)")]
    fn quoting_survives_the_shell() {
        let word = "it's a \"test\" $HOME `x`";
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", quote(word)))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), word);
    }
}
