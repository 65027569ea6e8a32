//! UCX over shared memory, measured in the same invocation when
//! `ucx_perftest` is on `PATH`: a server pinned to CPU 1 and a client pinned
//! to CPU 0 (`UCX_TLS=sm,self taskset -c N ucx_perftest ...`), as in
//! `shared/anchors/run-anchors.sh`. `ucp_am_lat` reports one-way latency
//! (RTT/2), which is doubled here so every latency in the table is a full
//! round trip.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The columns of `ucx_perftest`'s `Final:` line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Final {
    /// Iterations.
    pub iters: f64,
    /// Median latency or overhead (us; one-way for latency tests).
    pub p50_us: f64,
    /// Average latency or overhead (us).
    pub avg_us: f64,
    /// Overall bandwidth (MiB/s as UCX prints it).
    pub bw_overall: f64,
    /// Overall message rate (msgs/s).
    pub rate_overall: f64,
}

/// Parse the `Final:` line of `ucx_perftest` output:
/// `Final: iters p50 avg overall bw_avg bw_overall mr_avg mr_overall`.
pub fn parse_final(out: &str) -> Option<Final> {
    let line = out
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("Final:"))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let [iters, p50_us, avg_us, _overall, _bw_avg, bw_overall, _mr_avg, rate_overall] = v[..]
    else {
        return None;
    };
    Some(Final {
        iters,
        p50_us,
        avg_us,
        bw_overall,
        rate_overall,
    })
}

/// `ucx_perftest` on `PATH`, if installed.
pub fn find() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("ucx_perftest"))
        .find(|p| p.is_file())
}

/// Runs `ucx_perftest` pairs on consecutive TCP ports, appending each
/// client's command line and output to a log file.
pub struct Ucx {
    exe: PathBuf,
    /// `UCX_TLS` of both sides (`tcp` adds `UCX_NET_DEVICES=lo`).
    tls: String,
    port: u16,
    log: PathBuf,
}

/// Kill and reap a child we started (by its own handle, never by name).
pub(crate) fn stop(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// Wait up to `limit` for `c` to exit; kill it after that. Returns its
/// stdout and whether it exited successfully in time.
pub(crate) fn finish(mut c: Child, limit: Duration) -> (String, bool) {
    let end = Instant::now() + limit;
    let mut out = String::new();
    let reader = c.stdout.take().map(|mut o| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = o.read_to_string(&mut s);
            s
        })
    });
    let ok = loop {
        match c.try_wait() {
            Ok(Some(st)) => break st.success(),
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                stop(c);
                break false;
            }
        }
    };
    if let Some(r) = reader {
        out = r.join().unwrap_or_default();
    }
    (out, ok)
}

impl Ucx {
    /// A runner for `exe` logging to `log` (truncated first), starting
    /// from a port derived from our pid.
    pub fn new(exe: PathBuf, log: PathBuf) -> Ucx {
        let _ = std::fs::write(&log, "");
        Ucx {
            exe,
            tls: "sm,self".into(),
            port: 20000 + (std::process::id() % 20000) as u16,
            log,
        }
    }

    /// The same runner with `UCX_TLS=tls` (`tcp` also sets
    /// `UCX_NET_DEVICES=lo`).
    pub fn with_tls(mut self, tls: &str) -> Ucx {
        self.tls = tls.to_string();
        self
    }

    fn note(&self, text: &str) {
        let f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.log);
        if let Ok(mut f) = f {
            let _ = f.write_all(text.as_bytes());
        }
    }

    fn command(&self, cpu: usize) -> Command {
        let mut c = Command::new("taskset");
        c.arg("-c")
            .arg(cpu.to_string())
            .arg(&self.exe)
            .env("UCX_TLS", &self.tls)
            .stdin(Stdio::null());
        if self.tls == "tcp" {
            c.env("UCX_NET_DEVICES", "lo");
        }
        c
    }

    /// Run one test (`-t test -s size -n iters`); tries a second port if
    /// the first attempt fails.
    pub fn run(&mut self, test: &str, size: usize, iters: usize) -> Result<Final, String> {
        let mut last = String::new();
        for _ in 0..2 {
            match self.run_once(test, size, iters) {
                Ok(f) => return Ok(f),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn run_once(&mut self, test: &str, size: usize, iters: usize) -> Result<Final, String> {
        self.port = self.port.checked_add(1).unwrap_or(20000);
        let port = self.port.to_string();
        let server = self
            .command(1)
            .args(["-p", &port])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting taskset/ucx_perftest: {e}"))?;
        std::thread::sleep(Duration::from_millis(300));
        let client = match self
            .command(0)
            .args(["127.0.0.1", "-p", &port, "-t", test])
            .args(["-s", &size.to_string(), "-n", &iters.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                stop(server);
                return Err(format!("starting the ucx_perftest client: {e}"));
            }
        };
        let (out, ok) = finish(client, Duration::from_secs(60));
        let _ = finish(server, Duration::from_secs(5));
        self.note(&format!(
            "# UCX_TLS={} taskset -c 0 ucx_perftest 127.0.0.1 -p {port} -t {test} -s {size} -n {iters} (server: taskset -c 1)\n{out}\n",
            self.tls
        ));
        match parse_final(&out) {
            Some(f) if ok => Ok(f),
            _ => Err(format!(
                "ucx_perftest -t {test} -s {size} -n {iters} failed (port {port})"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_final_line() {
        let out = "+----+\n|  Stage | # iterations |\n\
                   Final:                100000      0.305     0.330     0.330       23.12      23.12     3030348     3030348\n";
        let f = parse_final(out).unwrap();
        assert_eq!(f.iters, 100000.0);
        assert_eq!(f.p50_us, 0.305);
        assert_eq!(f.rate_overall, 3030348.0);
        assert!(parse_final("no result").is_none());
    }
}
