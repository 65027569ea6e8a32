//! libfabric's `fi_pingpong`, measured in the same invocation when it is
//! installed (`libfabric-bin`): a server pinned to CPU 1 and a client pinned
//! to CPU 0, exactly as `shared/anchors/run-anchors.sh` runs it. Its last
//! output line is `bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec`;
//! `usec/xfer` is one-way latency (RTT/2).

use crate::am::ucx::{finish, stop};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The numbers of one `fi_pingpong` run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Line {
    /// MB/s as printed (ping-pong: both directions' payload counted once).
    pub mbs: f64,
    /// One-way latency in us (RTT/2).
    pub usec_per_xfer: f64,
}

/// Parse the last line of `fi_pingpong` output.
pub fn parse(out: &str) -> Option<Line> {
    let last = out.lines().rev().find(|l| !l.trim().is_empty())?;
    let f: Vec<&str> = last.split_whitespace().collect();
    if f.len() != 8 {
        return None;
    }
    Some(Line {
        mbs: f[5].parse().ok()?,
        usec_per_xfer: f[6].parse().ok()?,
    })
}

/// `fi_pingpong` on `PATH`, if installed.
pub fn find() -> Option<PathBuf> {
    crate::compare::on_path("fi_pingpong")
}

/// Runs `fi_pingpong` pairs on consecutive ports, logging every client's
/// command and output.
pub struct FiPingpong {
    exe: PathBuf,
    port: u16,
    log: PathBuf,
}

impl FiPingpong {
    /// A runner logging to `log` (truncated first).
    pub fn new(exe: PathBuf, log: PathBuf) -> FiPingpong {
        let _ = std::fs::write(&log, "");
        FiPingpong {
            exe,
            port: 40000 + (std::process::id() % 20000) as u16,
            log,
        }
    }

    fn cmd(&self, cpu: usize, provider: &str, ep: &str, size: usize, iters: usize) -> Command {
        let mut c = Command::new("taskset");
        c.arg("-c")
            .arg(cpu.to_string())
            .arg(&self.exe)
            .args(["-p", provider, "-e", ep])
            .args(["-I", &iters.to_string(), "-S", &size.to_string()])
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        c
    }

    /// One run: provider (`shm`, `tcp`, `udp;ofi_rxd`), endpoint type,
    /// message size, iterations.
    pub fn run(
        &mut self,
        provider: &str,
        ep: &str,
        size: usize,
        iters: usize,
    ) -> Result<Line, String> {
        self.port = self.port.checked_add(1).unwrap_or(40000);
        let port = self.port.to_string();
        let server = self
            .cmd(1, provider, ep, size, iters)
            .args(["-B", &port])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting taskset/fi_pingpong: {e}"))?;
        std::thread::sleep(Duration::from_millis(300));
        let client = match self
            .cmd(0, provider, ep, size, iters)
            .args(["-P", &port, "127.0.0.1"])
            .stdout(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                stop(server);
                return Err(format!("starting the fi_pingpong client: {e}"));
            }
        };
        let (out, ok) = finish(client, Duration::from_secs(30));
        let _ = finish(server, Duration::from_secs(3));
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.log)
        {
            let _ = writeln!(
                f,
                "# taskset -c 0 fi_pingpong -P {port} -p '{provider}' -e {ep} -I {iters} -S {size} 127.0.0.1 (server: taskset -c 1)\n{out}"
            );
        }
        match parse(&out) {
            Some(l) if ok => Ok(l),
            _ => Err(format!(
                "fi_pingpong -p '{provider}' -e {ep} -S {size} failed"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_the_last_line() {
        let out =
            "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n\
                   8       1k      =1k      15k         0.00s      7.69       1.04       0.96\n";
        let l = super::parse(out).unwrap();
        assert_eq!((l.mbs, l.usec_per_xfer), (7.69, 1.04));
        assert!(super::parse("error").is_none());
    }
}
