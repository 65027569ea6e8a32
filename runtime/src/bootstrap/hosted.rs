//! Bootstrap without splitrt-run (srun, mpirun on one node): rank 0 hosts
//! the rendezvous in a thread and publishes its address in a per-job file,
//! `$TMPDIR/splitrt-boot-<job>` (the job id comes from the scheduler's job
//! and step ids, so concurrent jobs never share a file); the other ranks
//! wait for that file. A job over several nodes cannot share a file and
//! needs `SPLITRT_BOOTSTRAP`.

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
}

impl Hosted {
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
            let size = job.size;
            std::thread::Builder::new()
                .name("splitrt-boot-host".into())
                .spawn(move || {
                    if let Err(e) = server.run(size, timeout) {
                        // The ranks learn the details themselves; keep the
                        // host's view for post-mortems only.
                        let _ = e;
                    }
                })
                .map_err(|e| Error::io("spawning the bootstrap host", e))?;
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
            });
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(s) = std::fs::read_to_string(&path) {
                let addr = s.trim().to_string();
                if !addr.is_empty() {
                    return Ok(Hosted { addr, file: None });
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

    /// Remove the address file (rank 0, once everyone has joined).
    pub fn unpublish(&mut self) {
        if let Some(p) = self.file.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for Hosted {
    fn drop(&mut self) {
        self.unpublish();
    }
}
