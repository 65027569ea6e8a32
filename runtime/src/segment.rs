//! Shared-memory files: each rank's `/dev/shm/splitrt-<job>-<rank>` holds its
//! header, its inbound rings and its registered segment. Owner-only
//! permissions, created exclusively, unlinked right after the start barrier.

use crate::{Error, Result};
use memmap2::MmapRaw;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// Directory holding the shared-memory files.
pub const SHM_DIR: &str = "/dev/shm";

/// File name prefix of every splitrt shared-memory file.
pub const FILE_PREFIX: &str = "splitrt-";

/// One rank's mapped shared-memory file.
pub struct ShmFile {
    map: MmapRaw,
    path: PathBuf,
}

impl ShmFile {
    /// Path of `rank`'s file in `job`.
    pub fn path_for(job: &str, rank: usize) -> PathBuf {
        PathBuf::from(format!("{SHM_DIR}/{FILE_PREFIX}{job}-{rank}"))
    }

    /// Create and map a new zero-filled file of `len` bytes; fails if it exists.
    pub fn create(job: &str, rank: usize, len: usize) -> Result<ShmFile> {
        let path = Self::path_for(job, rank);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| {
                Error::io(
                    format!(
                        "creating {} (left by an earlier job with the same id? remove it)",
                        path.display()
                    ),
                    e,
                )
            })?;
        let res = file
            .set_len(len as u64)
            .map_err(|e| Error::io(format!("sizing {} to {len} B", path.display()), e))
            .and_then(|()| Self::map(&file, &path));
        if res.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        res
    }

    /// Map an existing file (another rank's).
    pub fn open(job: &str, rank: usize) -> Result<ShmFile> {
        let path = Self::path_for(job, rank);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e).with_peer(rank))?;
        Self::map(&file, &path)
    }

    fn map(file: &File, path: &std::path::Path) -> Result<ShmFile> {
        let map = MmapRaw::map_raw(file)
            .map_err(|e| Error::io(format!("mapping {}", path.display()), e))?;
        Ok(ShmFile {
            map,
            path: path.to_path_buf(),
        })
    }

    /// Base address of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Remove the file name; the mappings stay valid.
    pub fn unlink(&self) -> Result<()> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("removing {}", self.path.display()), e)),
        }
    }
}

/// Remove every shared-memory file of `job`; returns how many were left.
pub fn remove_job_files(job: &str) -> usize {
    let prefix = format!("{FILE_PREFIX}{job}-");
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name().to_str().is_some_and(|n| {
                n.strip_prefix(&prefix)
                    .is_some_and(|r| r.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}
