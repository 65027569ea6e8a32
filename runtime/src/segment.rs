//! Shared-memory files: each rank's `/dev/shm/splitrt-<job>-<tag>-<rank>`
//! holds its header, its inbound rings and its registered segment; `<tag>`
//! comes from the job key ([`JobKey::file_tag`](crate::key::JobKey::file_tag)),
//! so two jobs given the same job id never touch each other's files.
//!
//! Created `O_EXCL | O_NOFOLLOW` with mode 0600. Its pages are allocated
//! when first touched; at creation `/dev/shm` must have room for every
//! rank's file of this host (else an error naming it), and if it fills up
//! later a write's `SIGBUS` is named ([`crate::shm_full`]). With
//! `SPLITRT_SHM_RESERVE=1` the space is reserved up front instead
//! (`posix_fallocate`: no `SIGBUS` is possible, start-up zeroes every
//! page). A peer's file is trusted only if it belongs to this user and
//! nobody else can open it. Unlinked right after the start barrier.

use crate::{Error, Result};
use memmap2::MmapRaw;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

/// Directory holding the shared-memory files.
pub const SHM_DIR: &str = "/dev/shm";

/// File name prefix of every splitrt shared-memory file.
pub const FILE_PREFIX: &str = "splitrt-";

/// One rank's mapped shared-memory file.
pub struct ShmFile {
    /// Names a `SIGBUS` in this mapping (declared first: it stops watching
    /// before the mapping goes, so a later mapping is never misnamed).
    _watch: crate::shm_full::Watch,
    map: MmapRaw,
    path: PathBuf,
}

impl ShmFile {
    /// Path of `rank`'s file; `stem` is `<job>-<tag>`.
    pub fn path_for(stem: &str, rank: usize) -> PathBuf {
        PathBuf::from(format!("{SHM_DIR}/{FILE_PREFIX}{stem}-{rank}"))
    }

    /// Create and map a new zero-filled file of `len` bytes; fails if it
    /// exists. `room`: what `/dev/shm` must have free for the files of
    /// every rank of the job on this node, and the error if it has not.
    /// `reserve`: allocate all its space now (`SPLITRT_SHM_RESERVE=1`),
    /// else pages come at first touch.
    pub fn create(
        stem: &str,
        rank: usize,
        len: usize,
        room: &Room<'_>,
        reserve: bool,
    ) -> Result<ShmFile> {
        crate::shm_full::name_rank(rank);
        let path = Self::path_for(stem, rank);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| {
                Error::io(
                    format!(
                        "creating {} (exists already: another job with the same id and key?)",
                        path.display()
                    ),
                    e,
                )
            })?;
        let res =
            make_room(&file, &path, len, room, reserve).and_then(|()| Self::map(&file, &path));
        if res.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        res
    }

    /// Map an existing file (another rank's), if it is this user's and
    /// private.
    pub fn open(stem: &str, rank: usize) -> Result<ShmFile> {
        let path = Self::path_for(stem, rank);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e).with_peer(rank))?;
        let md = file
            .metadata()
            .map_err(|e| Error::io(format!("checking {}", path.display()), e))?;
        // SAFETY: geteuid(2) cannot fail and touches no memory.
        let me = unsafe { libc::geteuid() };
        if !md.file_type().is_file() || md.uid() != me || md.mode() & 0o077 != 0 {
            return Err(Error::bootstrap(format!(
                "refusing to map {}: owned by uid {} with mode {:o}, expected a private file of uid {me}",
                path.display(),
                md.uid(),
                md.mode() & 0o7777
            ))
            .with_peer(rank));
        }
        Self::map(&file, &path)
    }

    fn map(file: &File, path: &std::path::Path) -> Result<ShmFile> {
        let map = MmapRaw::map_raw(file)
            .map_err(|e| Error::io(format!("mapping {}", path.display()), e))?;
        let _watch = crate::shm_full::watch(map.as_ptr(), map.len());
        Ok(ShmFile {
            map,
            path: path.to_path_buf(),
            _watch,
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

/// What `/dev/shm` must hold for the shared-memory files of a node's
/// ranks, and how to say it does not.
pub struct Room<'a> {
    /// Bytes that must be free when the file is made (without reserving,
    /// what the node's files touch at start-up, not their sparse length).
    pub need: u64,
    /// The error for a `/dev/shm` with this many bytes free, of this many.
    pub short: &'a dyn Fn(u64, u64) -> Error,
}

/// Size the file and, with `reserve`, allocate its space; without, check
/// that `/dev/shm` has `room.need` free. Either way a shortage is an error
/// now.
fn make_room(
    file: &File,
    path: &std::path::Path,
    len: usize,
    room: &Room<'_>,
    reserve: bool,
) -> Result<()> {
    use std::os::fd::AsRawFd;
    file.set_len(len as u64)
        .map_err(|e| Error::io(format!("sizing {} to {len} B", path.display()), e))?;
    if !reserve {
        return match shm_space() {
            Some((free, total)) if free < room.need => Err((room.short)(free, total)),
            _ => Ok(()),
        };
    }
    // SAFETY: posix_fallocate(3) on a file descriptor we own; no memory.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    match rc {
        0 | libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        libc::ENOSPC | libc::EFBIG => {
            let (free, total) = shm_space().unwrap_or((0, 0));
            Err((room.short)(free, total))
        }
        e => Err(Error::io(
            format!("reserving {len} B for {}", path.display()),
            std::io::Error::from_raw_os_error(e),
        )),
    }
}

/// Free and total bytes of `/dev/shm`.
pub fn shm_space() -> Option<(u64, u64)> {
    space(SHM_DIR)
}

/// Free and total bytes of the file system holding `dir`.
fn space(dir: &str) -> Option<(u64, u64)> {
    let c = std::ffi::CString::new(dir).ok()?;
    // SAFETY: `libc::statvfs` is plain integers: all-zero bytes are a
    // valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs(3) writes only into `st`, a struct we own of the size
    // libc expects; the path is a valid NUL-terminated string (`c`, alive
    // for the call).
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let f = st.f_frsize as u64;
    Some((st.f_bavail as u64 * f, st.f_blocks as u64 * f))
}

/// Fault in the pages holding `addr..addr + len` now, writable, so that
/// first touches on a hot path take no page fault: a 32 KiB Medium
/// rotating through a landing zone (as they did until 2026-11-26) whose
/// pages were not there yet took
/// 4.3 us per round trip instead of 1.3 over 1000 round trips. Best
/// effort: on a kernel without `MADV_POPULATE_WRITE` (before 5.14), or if
/// `/dev/shm` has filled up (then the first touch is reported as before,
/// see [`crate::shm_full`]), the pages come at first touch.
///
/// # Safety
/// `addr..addr + len` must lie in one live shared mapping.
pub unsafe fn populate(addr: *mut u8, len: usize) {
    if len == 0 {
        return;
    }
    let page = 4096;
    // Outward to whole pages: a page holding a byte of a mapping is
    // mapped whole (mappings are page-granular).
    let start = addr as usize / page * page;
    let end = (addr as usize).saturating_add(len).div_ceil(page) * page;
    // SAFETY: start..end are the pages holding addr..addr + len, all in
    // the caller's live mapping; populating allocates and maps pages, it
    // changes no byte.
    unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            end - start,
            libc::MADV_POPULATE_WRITE,
        );
    }
}

/// How far into a region (a landing zone) pages were faulted in, growing
/// as uses reach further, one call per use instead of a fault per page:
/// a small Medium that cycles through the first 8 KiB of its zone
/// populates those, not the whole zone (populating 512 KiB at a 4 KiB
/// Medium's first use cost 0.8 ms, 0.8 us per round trip of a
/// 1000-round-trip row; populating ahead of use slowed an 8-rank
/// sample sort by 15%).
#[derive(Debug, Default)]
pub struct PopulatedPrefix {
    to: usize,
}

impl PopulatedPrefix {
    /// A region whose first `to` bytes were faulted in already.
    pub fn upto(to: usize) -> Self {
        PopulatedPrefix { to }
    }

    /// Make sure `base..base + end` is faulted in.
    ///
    /// # Safety
    /// `base..base + limit` must lie in one live shared mapping, and
    /// `end <= limit`.
    #[inline]
    pub unsafe fn cover(&mut self, base: *mut u8, end: usize, limit: usize) {
        if end <= self.to {
            return;
        }
        let to = end.min(limit);
        // SAFETY: self.to < end and to <= limit, and base..base + limit is
        // one live mapping (this function's `# Safety` contract), so
        // `self.to` is an in-bounds offset.
        let from = unsafe { base.add(self.to) };
        // SAFETY: `populate`'s contract: from..base + to lies within
        // base..base + limit, the caller's one live shared mapping.
        unsafe { populate(from, to - self.to) };
        self.to = to;
    }
}

/// Remove every shared-memory file of the job whose files are named by
/// `stem` (`<job>-<tag>`); returns how many were left. Files of another job
/// with the same id but another key are not touched.
pub fn remove_job_files(stem: &str) -> usize {
    let prefix = format!("{FILE_PREFIX}{stem}-");
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

/// Removes the files of the job named by its `stem` ([`remove_job_files`])
/// when dropped, however the scope ends: a test that fails half way leaves
/// nothing in `/dev/shm`.
#[cfg(test)]
pub(crate) struct RemoveJobFilesOnDrop(pub(crate) String);

#[cfg(test)]
impl Drop for RemoveJobFilesOnDrop {
    fn drop(&mut self) {
        remove_job_files(&self.0);
    }
}

#[cfg(test)]
mod remove_on_drop_tests {
    use super::*;

    /// A scope that panics after making a job's files still removes them
    /// (and no file of another stem).
    #[test]
    #[cfg_attr(miri, ignore = "creates files in /dev/shm (file system: FFI)")]
    fn a_panicking_scope_removes_its_jobs_files() {
        let stem = format!("unitrmdrop{}", std::process::id());
        let other = format!("{stem}x");
        let _clean_other = RemoveJobFilesOnDrop(other.clone());
        std::fs::write(ShmFile::path_for(&other, 0), b"x").unwrap();
        let r = std::panic::catch_unwind(|| {
            let _clean = RemoveJobFilesOnDrop(stem.clone());
            for r in 0..3 {
                std::fs::write(ShmFile::path_for(&stem, r), b"x").unwrap();
            }
            panic!("a failing assert");
        });
        assert!(r.is_err());
        for r in 0..3 {
            assert!(!ShmFile::path_for(&stem, r).exists(), "rank {r}");
        }
        assert!(ShmFile::path_for(&other, 0).exists());
    }
}
