//! Bootstrap without splitrt-run (srun, mpirun): rank 0 hosts the
//! rendezvous in a thread.
//!
//! * On one node rank 0 makes a fresh job key and publishes the address and
//!   the key in `boot-<job>` inside this user's [`PrivateDir`] (the job id
//!   comes from the scheduler's job and step ids, so concurrent jobs never
//!   share a file); the other ranks wait for that file.
//! * A job over several nodes cannot share a file: with
//!   `SPLITRT_BOOTSTRAP=host:port` rank 0 listens there, and every rank
//!   needs the key in `SPLITRT_JOB_KEY`.
//! * Under `srun --mpi=pmi2` (on one node or several) rank 0 hands the
//!   address and key over through the job's PMI-2 key-value space; no
//!   variable is needed.
//! * Under a PMIx launcher (`mpirun`, `prterun`, `srun --mpi=pmix`), in a
//!   build with the cargo feature `pmix`, rank 0 does the same through
//!   PMIx (put, commit, fence with data collection, get).

use super::pmi2::Pmi2;
use super::{PrivateDir, Server};
use crate::job::{JobInfo, ENV_BOOTSTRAP};
use crate::key::{JobKey, ENV_JOB_KEY};
use crate::{Error, ErrorKind, Result};
use std::time::{Duration, Instant};

/// A rendezvous hosted by rank 0.
pub struct Hosted {
    /// Address every rank (rank 0 included) joins.
    pub addr: String,
    /// The job key.
    pub key: JobKey,
    file: Option<(PrivateDir, String)>,
    server: Option<std::thread::JoinHandle<()>>,
}

fn file_name(job: &str) -> String {
    format!("boot-{job}")
}

/// Whether `vars` (the environment's variable names) show a PMIx launcher:
/// `PMIX_RANK`, `PMIX_NAMESPACE` or one of the `PMIX_SERVER_URI*`.
fn pmix_in(vars: impl IntoIterator<Item = String>) -> bool {
    vars.into_iter()
        .any(|k| k == "PMIX_RANK" || k == "PMIX_NAMESPACE" || k.starts_with("PMIX_SERVER_URI"))
}

/// Whether this process was started by a PMIx launcher (see [`pmix_in`]).
fn pmix_launcher() -> bool {
    pmix_in(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()))
}

/// The refusal of a job that spans several nodes but has no way to find
/// rank 0's rendezvous. Every rank gets it; only rank 0's says how to start
/// such a job (once per job, not once per rank), the others point to it.
/// `pmix` says whether a PMIx launcher started the job (in a build without
/// the `pmix` feature, which would have used it).
fn several_nodes_refusal(job: &JobInfo, pmix: bool) -> Error {
    if job.rank != 0 {
        return Error::bootstrap(format!(
            "this {:?} job spans several nodes ({} of {} ranks on this one) and no rendezvous \
             address reached this rank: rank 0's message says how to start it",
            job.source, job.local_size, job.size
        ));
    }
    let pmix = if pmix && !cfg!(feature = "pmix") {
        " This job was started by a PMIx launcher (its PMIX_* variables are set) and this program was \
         built without PMIx: built with the cargo feature `pmix` (`--features splitrt/pmix`, \
         needs libpmix-dev), it finds rank 0 through PMIx and needs no variable."
    } else {
        ""
    };
    Error::bootstrap(format!(
        "this {:?} job spans several nodes ({} of {} ranks on this one) and no rendezvous address \
         reached rank 0. Multi-node jobs run over the UDP fabric (the default across nodes) or \
         ibverbs (cargo feature `ibverbs`, SPLITRT_FABRIC=ibverbs); start one with \
         `srun --mpi=pmi2 ...`, with `splitrt-run --hosts node1:2,node2:2 ...`, with `mpirun` or \
         `prterun` in a build with the cargo feature `pmix`, or set \
         {ENV_BOOTSTRAP}=host:port to an address every node can reach (rank 0 listens there) and \
         {ENV_JOB_KEY} to the same secret on every rank (e.g. `export {ENV_JOB_KEY}=$(openssl rand -hex 32)`; \
         with mpirun: `-x {ENV_BOOTSTRAP} -x {ENV_JOB_KEY}`).{pmix} See docs/launching.md",
        job.source, job.local_size, job.size
    ))
}

impl Hosted {
    /// With `SPLITRT_BOOTSTRAP=host:port` under a scheduler (the multi-node
    /// way): rank 0 listens on that address; every rank joins it with `key`.
    pub fn at(job: &JobInfo, addr: &str, key: JobKey, timeout: Duration) -> Result<Hosted> {
        if job.rank != 0 {
            return Ok(Hosted {
                addr: addr.to_string(),
                key,
                file: None,
                server: None,
            });
        }
        let server = Server::bind(addr, key.clone()).map_err(|e| {
            Error::bootstrap(format!(
                "rank 0 cannot listen on {ENV_BOOTSTRAP}={addr} (it must be an address of rank 0's node): {e}"
            ))
        })?;
        Ok(Hosted {
            addr: addr.to_string(),
            key,
            file: None,
            server: Some(Self::spawn(server, job.size, timeout)?),
        })
    }

    fn spawn(
        server: Server,
        size: usize,
        timeout: Duration,
    ) -> Result<std::thread::JoinHandle<()>> {
        // two descriptors per rank (reader and writer), the pending
        // handshakes (two descriptors each), and room for the rank's own files and sockets
        let needed = 2 * size as u64 + 2 * super::MAX_PENDING as u64 + 64;
        crate::limits::ensure_open_files(
            needed,
            &format!("rank 0, hosting the bootstrap of {size} ranks,"),
        )?;
        std::thread::Builder::new()
            .name("splitrt-boot-host".into())
            .spawn(move || {
                // The ranks learn every failure through their own
                // connections; the host's verdict adds nothing.
                let _ = server.hosted_by(0).run(size, timeout);
            })
            .map_err(|e| Error::io("spawning the bootstrap host", e))
    }

    /// Under `srun --mpi=pmi2`: rank 0 makes the key, listens on an address
    /// the other nodes can reach and puts both in the job's PMI-2 key-value
    /// space; after a fence every rank reads them.
    pub fn via_pmi2(job: &JobInfo, timeout: Duration) -> Result<Hosted> {
        const KEY: &str = "splitrt-boot";
        let mut pmi = Pmi2::init(timeout)?;
        if (pmi.rank, pmi.size) != (job.rank, job.size) {
            return Err(Error::bootstrap(format!(
                "PMI-2 says rank {} of {}, the environment says rank {} of {}",
                pmi.rank, pmi.size, job.rank, job.size
            )));
        }
        let mut hosted = None;
        if job.rank == 0 {
            let key = JobKey::generate()?;
            let server = Server::bind(&format!("{}:0", reachable_ip(job)), key.clone())?;
            let addr = server.local_addr()?.to_string();
            let server = Self::spawn(server, job.size, timeout)?;
            pmi.put(KEY, &format!("{addr} {}", key.to_hex()))?;
            hosted = Some(Hosted {
                addr,
                key,
                file: None,
                server: Some(server),
            });
        }
        pmi.fence()?;
        let found = pmi.get(KEY)?;
        pmi.finalize();
        if let Some(h) = hosted {
            return Ok(h);
        }
        let v =
            found.ok_or_else(|| Error::bootstrap("rank 0 published no address through PMI-2"))?;
        Self::handed_over(&v, "PMI-2")
    }

    /// A rank other than 0: the `"addr key"` rank 0 handed over through
    /// `via` (PMI-2, PMIx).
    fn handed_over(v: &str, via: &str) -> Result<Hosted> {
        let (addr, key) = v
            .split_once(' ')
            .ok_or_else(|| Error::bootstrap(format!("malformed bootstrap address from {via}")))?;
        Ok(Hosted {
            addr: addr.to_string(),
            key: JobKey::from_hex(key)?,
            file: None,
            server: None,
        })
    }

    /// Under a PMIx launcher (`mpirun`, `prterun`, `srun --mpi=pmix`; cargo
    /// feature `pmix`): as [`via_pmi2`](Hosted::via_pmi2), through PMIx.
    /// Rank 0 makes the key, listens on an address the other nodes can
    /// reach and `PMIx_Put`s both; every rank commits and fences (with data
    /// collection, at most `timeout`); the others `PMIx_Get` them from
    /// rank 0.
    #[cfg(feature = "pmix")]
    pub fn via_pmix(job: &JobInfo, timeout: Duration) -> Result<Hosted> {
        const KEY: &str = "splitrt-boot";
        let mut pmix = crate::pmix::Pmix::init()?;
        if (pmix.rank, pmix.size) != (job.rank, job.size) {
            return Err(Error::bootstrap(format!(
                "PMIx says rank {} of {}, the environment says rank {} of {}",
                pmix.rank, pmix.size, job.rank, job.size
            )));
        }
        if job.rank == 0 {
            let key = JobKey::generate()?;
            let server = Server::bind(&format!("{}:0", reachable_ip(job)), key.clone())?;
            let addr = server.local_addr()?.to_string();
            let server = Self::spawn(server, job.size, timeout)?;
            pmix.put(KEY, &format!("{addr} {}", key.to_hex()))?;
            pmix.commit_and_fence(timeout)?;
            return Ok(Hosted {
                addr,
                key,
                file: None,
                server: Some(server),
            });
        }
        pmix.commit_and_fence(timeout)?;
        let v = pmix.get(0, KEY, timeout)?;
        drop(pmix);
        Self::handed_over(&v, "PMIx")
    }

    /// One node: rank 0 makes the key, starts the server and publishes
    /// both; the others wait (at most `timeout`) for them.
    pub fn start(job: &JobInfo, timeout: Duration) -> Result<Hosted> {
        if Pmi2::available() {
            return Self::via_pmi2(job, timeout);
        }
        #[cfg(feature = "pmix")]
        if pmix_launcher() {
            return Self::via_pmix(job, timeout);
        }
        if job.local_size < job.size {
            return Err(several_nodes_refusal(job, pmix_launcher()));
        }
        let dir = PrivateDir::open()?;
        let name = file_name(&job.job_id);
        if job.rank == 0 {
            let key = JobKey::generate()?;
            let server = Server::bind("127.0.0.1:0", key.clone())?;
            let addr = server.local_addr()?.to_string();
            let server = Self::spawn(server, job.size, timeout)?;
            dir.publish(&name, &format!("{addr}\n{}\n", key.to_hex()))?;
            return Ok(Hosted {
                addr,
                key,
                file: Some((dir, name)),
                server: Some(server),
            });
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = dir.read(&name)? {
                let mut lines = s.lines();
                if let (Some(addr), Some(key)) = (lines.next(), lines.next()) {
                    let addr = addr.trim().to_string();
                    // A file left by an earlier rank 0 that died points at a
                    // dead port: keep watching until the live rank 0
                    // replaces it.
                    if let (Ok(key), true) = (JobKey::from_hex(key), listening(&addr)) {
                        return Ok(Hosted {
                            addr,
                            key,
                            file: None,
                            server: None,
                        });
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::new(ErrorKind::Timeout(format!(
                    "rank 0 did not publish the bootstrap address in {} within {:.1} s (did rank 0 start? \
                     ranks on other nodes need {ENV_BOOTSTRAP} and {ENV_JOB_KEY})",
                    dir.path().join(&name).display(),
                    timeout.as_secs_f64()
                ))));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Rank 0 at exit, or once the job has failed: keep the rendezvous up
    /// until every other rank has said goodbye or is gone, at most
    /// `limit`, so no rank sees it vanish before it has been told why the
    /// job ended. Later calls return at once.
    pub fn wait_for_goodbyes(&mut self, limit: Duration) {
        if let Some(h) = self.server.take() {
            let end = Instant::now() + limit;
            while !h.is_finished() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Remove the address file (rank 0, once everyone has joined).
    pub fn unpublish(&mut self) {
        if let Some((dir, name)) = self.file.take() {
            dir.remove(&name);
        }
    }
}

/// An address of this node the others can reach: the one the route to
/// srun's node uses (Slurm names it), else what the host name resolves to,
/// else loopback (one-node jobs).
fn reachable_ip(job: &JobInfo) -> String {
    use std::net::{ToSocketAddrs, UdpSocket};
    if job.local_size == job.size {
        return "127.0.0.1".into();
    }
    let routed = std::env::var("SLURM_LAUNCH_NODE_IPADDR")
        .ok()
        .and_then(|ip| {
            let s = UdpSocket::bind("0.0.0.0:0").ok()?;
            // connect() on UDP sends nothing; it only picks the route
            s.connect((ip.as_str(), 9)).ok()?;
            s.local_addr().ok().map(|a| a.ip())
        });
    let by_name = || {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
        (host.trim(), 0)
            .to_socket_addrs()
            .ok()?
            .find(|a| a.is_ipv4() && !a.ip().is_loopback())
            .map(|a| a.ip())
    };
    routed
        .filter(|ip| !ip.is_unspecified())
        .or_else(by_name)
        .map_or_else(|| "127.0.0.1".into(), |ip| ip.to_string())
}

/// Whether something accepts connections at `addr` (the server drops a
/// connection that closes without completing the handshake).
fn listening(addr: &str) -> bool {
    use std::net::{TcpStream, ToSocketAddrs};
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok())
}

impl Drop for Hosted {
    fn drop(&mut self) {
        self.unpublish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobSource;

    fn job(rank: usize, size: usize, local_size: usize, id: &str) -> JobInfo {
        JobInfo {
            rank,
            size,
            local_rank: rank % local_size,
            local_size,
            node: 0,
            job_id: id.into(),
            bootstrap: None,
            key: None,
            source: JobSource::Slurm,
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "files in the private directory and TCP sockets (isolation)"
    )]
    fn several_nodes_without_an_address_is_refused_with_the_reason() {
        let e = Hosted::start(&job(0, 4, 2, "slurm9.0"), Duration::from_millis(10))
            .err()
            .expect("refused");
        let msg = e.to_string();
        assert!(
            msg.contains("spans several nodes")
                && msg.contains("SPLITRT_BOOTSTRAP")
                && msg.contains("SPLITRT_JOB_KEY"),
            "{msg}"
        );
    }

    /// The refusal says what works (it once said multi-node jobs could not
    /// run at all) and only rank 0 prints how to start the job: the other
    /// ranks point to it instead of printing it once each.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "files in the private directory and TCP sockets (isolation)"
    )]
    fn several_nodes_refusal_says_what_works_once() {
        let zero = Hosted::start(&job(0, 4, 2, "slurm9.1"), Duration::from_millis(10))
            .err()
            .expect("refused")
            .to_string();
        assert!(!zero.contains("cannot run"), "{zero}");
        for what in [
            "UDP",
            "ibverbs",
            "srun --mpi=pmi2",
            "splitrt-run --hosts",
            "-x SPLITRT_BOOTSTRAP",
        ] {
            assert!(zero.contains(what), "{what} missing: {zero}");
        }
        let one = Hosted::start(&job(3, 4, 2, "slurm9.1"), Duration::from_millis(10))
            .err()
            .expect("refused")
            .to_string();
        assert!(one.contains("rank 0's message"), "{one}");
        assert!(
            !one.contains("SPLITRT_JOB_KEY"),
            "the instructions again: {one}"
        );
    }

    /// A PMIx launcher is recognised by its variables.
    #[test]
    fn pmix_launcher_is_recognised_by_its_variables() {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(pmix_in(v(&["HOME", "PMIX_RANK"])));
        assert!(pmix_in(v(&["PMIX_NAMESPACE"])));
        assert!(pmix_in(v(&["PMIX_SERVER_URI41"])));
        assert!(!pmix_in(v(&["HOME", "PMIX_VERSION", "PMI_FD"])));
    }

    /// The refusal names the `pmix` feature among the ways to start a
    /// multi-node job, and under a PMIx launcher in a build without it,
    /// says that this is what the job lacks.
    #[test]
    fn several_nodes_refusal_mentions_the_pmix_feature() {
        let mut j = job(0, 4, 2, "ompi7");
        j.source = JobSource::OpenMpi;
        let plain = several_nodes_refusal(&j, false).to_string();
        assert!(plain.contains("cargo feature `pmix`"), "{plain}");
        assert!(!plain.contains("started by a PMIx launcher"), "{plain}");
        let under = several_nodes_refusal(&j, true).to_string();
        assert_eq!(
            under.contains("started by a PMIx launcher"),
            !cfg!(feature = "pmix"),
            "{under}"
        );
        let other = several_nodes_refusal(&job(3, 4, 2, "ompi7"), true).to_string();
        assert!(!other.contains("pmix"), "only rank 0 says it: {other}");
    }

    /// An address file left by a dead rank 0 is not trusted: the rank keeps
    /// waiting for a live address (here: none comes, so it times out).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "files in the private directory and TCP sockets (isolation)"
    )]
    fn a_stale_address_file_is_ignored() {
        let id = format!("unit-stale-{}", std::process::id());
        // a port nobody listens on: bind, note it, close
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let dir = PrivateDir::open().unwrap();
        let key = JobKey::generate().unwrap();
        dir.publish(&file_name(&id), &format!("{dead}\n{}\n", key.to_hex()))
            .unwrap();
        let e = Hosted::start(&job(1, 2, 2, &id), Duration::from_millis(300))
            .err()
            .expect("no live rank 0");
        assert!(e.to_string().contains("did not publish"), "{e}");
        dir.remove(&file_name(&id));
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "files in the private directory and TCP sockets (isolation)"
    )]
    fn rank_0_publishes_and_a_peer_finds_address_and_key() {
        let id = format!("unit-pub-{}", std::process::id());
        let mut h0 = Hosted::start(&job(0, 2, 2, &id), Duration::from_secs(5)).unwrap();
        let h1 = Hosted::start(&job(1, 2, 2, &id), Duration::from_secs(5)).unwrap();
        assert_eq!((h1.addr.as_str(), &h1.key), (h0.addr.as_str(), &h0.key));
        h0.unpublish();
        assert_eq!(
            PrivateDir::open().unwrap().read(&file_name(&id)).unwrap(),
            None
        );
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "files in the private directory and TCP sockets (isolation)"
    )]
    fn a_rank_waits_for_rank_0_and_times_out_clearly() {
        let mut j = job(3, 4, 4, &format!("unit-absent-{}", std::process::id()));
        j.source = JobSource::OpenMpi;
        let e = Hosted::start(&j, Duration::from_millis(50))
            .err()
            .expect("times out");
        assert!(e.to_string().contains("rank 0 did not publish"), "{e}");
    }
}
