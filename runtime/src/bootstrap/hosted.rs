//! Bootstrap without splitrt-run (srun, mpirun on one node): rank 0 hosts
//! the rendezvous in a thread and publishes its address in a per-job file,
//! `$TMPDIR/splitrt-boot-<job>` (the job id comes from the scheduler's job
//! and step ids, so concurrent jobs never share a file); the other ranks
//! wait for that file. A job over several nodes cannot share a file and
//! needs `SPLITRT_BOOTSTRAP=host:port`, where rank 0 then listens.

use super::Server;
use crate::job::{JobInfo, ENV_BOOTSTRAP};
use crate::{Error, ErrorKind, Result};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where rank 0 publishes the rendezvous address of `job`.
pub fn address_file(job: &str) -> PathBuf {
    let dir = std::env::var_os("TMPDIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    dir.join(format!("splitrt-boot-{job}"))
}

/// A rendezvous hosted by rank 0 for a one-node job.
pub struct Hosted {
    /// Address every rank (rank 0 included) joins.
    pub addr: String,
    file: Option<PathBuf>,
    server: Option<std::thread::JoinHandle<()>>,
}

impl Hosted {
    /// With `SPLITRT_BOOTSTRAP=host:port` under a scheduler (the multi-node
    /// way): rank 0 listens on that address; every rank joins it.
    pub fn at(job: &JobInfo, addr: &str, timeout: Duration) -> Result<Hosted> {
        if job.rank != 0 {
            return Ok(Hosted {
                addr: addr.to_string(),
                file: None,
                server: None,
            });
        }
        let server = Server::bind(addr).map_err(|e| {
            Error::bootstrap(format!(
                "rank 0 cannot listen on {ENV_BOOTSTRAP}={addr} (it must be an address of rank 0's node): {e}"
            ))
        })?;
        Ok(Hosted {
            addr: addr.to_string(),
            file: None,
            server: Some(Self::spawn(server, job.size, timeout)?),
        })
    }

    fn spawn(
        server: Server,
        size: usize,
        timeout: Duration,
    ) -> Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new()
            .name("splitrt-boot-host".into())
            .spawn(move || {
                // The ranks learn every failure through their own
                // connections; the host's verdict adds nothing.
                let _ = server.run(size, timeout);
            })
            .map_err(|e| Error::io("spawning the bootstrap host", e))
    }

    /// Rank 0: start the server and publish its address. Others: wait (at
    /// most `timeout`) for the address.
    pub fn start(job: &JobInfo, timeout: Duration) -> Result<Hosted> {
        if job.local_size < job.size {
            return Err(Error::bootstrap(format!(
                "this {:?} job spans several nodes ({} of {} ranks on this one); set {ENV_BOOTSTRAP}=host:port \
                 to an address every node can reach (rank 0 listens there). Only the shared-memory fabric \
                 exists so far, so multi-node jobs cannot run yet",
                job.source, job.local_size, job.size
            )));
        }
        let path = address_file(&job.job_id);
        if job.rank == 0 {
            let server = Server::bind("127.0.0.1:0")?;
            let addr = server.local_addr()?.to_string();
            let server = Self::spawn(server, job.size, timeout)?;
            let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
            std::fs::write(&tmp, format!("{addr}\n"))
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|e| {
                    Error::io(
                        format!("publishing the bootstrap address in {}", path.display()),
                        e,
                    )
                })?;
            return Ok(Hosted {
                addr,
                file: Some(path),
                server: Some(server),
            });
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(s) = std::fs::read_to_string(&path) {
                let addr = s.trim().to_string();
                // A file left by an earlier rank 0 that died points at a dead
                // port: keep watching until the live rank 0 replaces it.
                if !addr.is_empty() && listening(&addr) {
                    return Ok(Hosted {
                        addr,
                        file: None,
                        server: None,
                    });
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::new(ErrorKind::Timeout(format!(
                    "rank 0 did not publish the bootstrap address in {} within {:.1} s (did rank 0 start? \
                     ranks on other nodes need {ENV_BOOTSTRAP})",
                    path.display(),
                    timeout.as_secs_f64()
                ))));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Rank 0 at exit: keep the rendezvous up until every rank has said
    /// goodbye (or was lost), at most `limit`, so no rank sees it vanish.
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
        if let Some(p) = self.file.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Whether something accepts connections at `addr` (the server ignores a
/// connection that closes without saying hello).
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

    #[test]
    fn several_nodes_without_an_address_is_refused_with_the_reason() {
        let job = JobInfo {
            rank: 1,
            size: 4,
            local_rank: 1,
            local_size: 2,
            node: 0,
            job_id: "slurm9.0".into(),
            bootstrap: None,
            source: JobSource::Slurm,
        };
        let e = Hosted::start(&job, Duration::from_millis(10))
            .err()
            .expect("refused");
        let msg = e.to_string();
        assert!(
            msg.contains("spans several nodes") && msg.contains("SPLITRT_BOOTSTRAP"),
            "{msg}"
        );
    }

    /// An address file left by a dead rank 0 is not trusted: the rank keeps
    /// waiting for a live address (here: none comes, so it times out).
    #[test]
    fn a_stale_address_file_is_ignored() {
        let id = format!("unit-stale-{}", std::process::id());
        // a port nobody listens on: bind, note it, close
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        std::fs::write(address_file(&id), format!("{dead}\n")).unwrap();
        let job = JobInfo {
            rank: 1,
            size: 2,
            local_rank: 1,
            local_size: 2,
            node: 0,
            job_id: id.clone(),
            bootstrap: None,
            source: JobSource::Slurm,
        };
        let e = Hosted::start(&job, Duration::from_millis(300))
            .err()
            .expect("no live rank 0");
        assert!(e.to_string().contains("did not publish"), "{e}");
        let _ = std::fs::remove_file(address_file(&id));
    }

    #[test]
    fn a_rank_waits_for_rank_0_and_times_out_clearly() {
        let job = JobInfo {
            rank: 3,
            size: 4,
            local_rank: 3,
            local_size: 4,
            node: 0,
            job_id: format!("unit-absent-{}", std::process::id()),
            bootstrap: None,
            source: JobSource::OpenMpi,
        };
        let e = Hosted::start(&job, Duration::from_millis(50))
            .err()
            .expect("times out");
        assert!(e.to_string().contains("rank 0 did not publish"), "{e}");
    }
}
