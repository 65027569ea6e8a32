//! A directory only this user can read, for the files ranks hand each other
//! under srun / mpirun (the rendezvous address and the job key):
//! `$TMPDIR/splitrt-<uid>` (or `/tmp/splitrt-<uid>`), mode 0700.
//!
//! `/tmp` is shared with every user, so nothing there is trusted on its
//! name: the directory must be a real directory (not a link) owned by this
//! user with no access for anyone else, and every file in it is created with
//! `O_EXCL | O_NOFOLLOW`, mode 0600, written under a temporary name and
//! renamed into place, and checked for owner and mode when read.

use crate::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest file accepted from the directory.
const MAX_FILE: u64 = 4096;

/// This user's private splitrt directory.
#[derive(Clone, Debug)]
pub struct PrivateDir {
    path: PathBuf,
}

fn euid() -> u32 {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Refuse anything not owned by this user or open to others.
fn check_private(md: &std::fs::Metadata, what: &Path, dir: bool) -> Result<()> {
    let uid = euid();
    let kind_ok = if dir {
        md.file_type().is_dir()
    } else {
        md.file_type().is_file()
    };
    if !kind_ok || md.uid() != uid || md.mode() & 0o077 != 0 {
        return Err(Error::bootstrap(format!(
            "refusing to trust {}: it is {} owned by uid {} with mode {:o}, but must be a {} owned by \
             uid {uid} (you) that nobody else can access (another user may have planted it; \
             remove it, or point TMPDIR elsewhere)",
            what.display(),
            if md.file_type().is_symlink() {
                "a symbolic link"
            } else if md.file_type().is_dir() {
                "a directory"
            } else {
                "a file"
            },
            md.uid(),
            md.mode() & 0o7777,
            if dir { "directory" } else { "regular file" },
        )));
    }
    Ok(())
}

impl PrivateDir {
    /// The directory under `$TMPDIR` (or `/tmp`), created if missing.
    pub fn open() -> Result<PrivateDir> {
        let base = std::env::var_os("TMPDIR")
            .filter(|t| !t.is_empty())
            .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        Self::open_in(&base)
    }

    /// The directory under `base`, created if missing.
    pub fn open_in(base: &Path) -> Result<PrivateDir> {
        let path = base.join(format!("splitrt-{}", euid()));
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(format!("creating {}", path.display()), e)),
        }
        // symlink_metadata: a link planted in our place is refused, not followed
        let md = std::fs::symlink_metadata(&path)
            .map_err(|e| Error::io(format!("checking {}", path.display()), e))?;
        check_private(&md, &path, true)?;
        Ok(PrivateDir { path })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write `contents` as file `name`, atomically (temporary file, then
    /// rename), replacing an older file of that name.
    pub fn publish(&self, name: &str, contents: &str) -> Result<()> {
        let dst = self.path.join(name);
        let tmp = self
            .path
            .join(format!(".{name}.{}.tmp", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(contents.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &dst)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io(format!("writing {}", dst.display()), e)
        })
    }

    /// Read file `name` if it exists (`Ok(None)` if not); a file that is not
    /// this user's, is open to others, is a link or is too large is an error.
    pub fn read(&self, name: &str) -> Result<Option<String>> {
        let p = self.path.join(name);
        let mut f = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&p)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(format!("opening {}", p.display()), e)),
        };
        let md =
            File::metadata(&f).map_err(|e| Error::io(format!("checking {}", p.display()), e))?;
        check_private(&md, &p, false)?;
        if md.len() > MAX_FILE {
            return Err(Error::bootstrap(format!(
                "{} is {} B, more than a splitrt file ever holds",
                p.display(),
                md.len()
            )));
        }
        let mut s = String::new();
        (&mut f)
            .take(MAX_FILE)
            .read_to_string(&mut s)
            .map_err(|e| Error::io(format!("reading {}", p.display()), e))?;
        Ok(Some(s))
    }

    /// Remove file `name` (missing is fine).
    pub fn remove(&self, name: &str) {
        let _ = std::fs::remove_file(self.path.join(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("splitrt-unit-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates files and symbolic links under $TMPDIR (isolation)"
    )]
    fn publish_read_remove() {
        let base = scratch("pdir");
        let d = PrivateDir::open_in(&base).unwrap();
        assert_eq!(d.read("x").unwrap(), None);
        d.publish("x", "hello\n").unwrap();
        d.publish("x", "again\n").unwrap();
        assert_eq!(d.read("x").unwrap().as_deref(), Some("again\n"));
        let md = std::fs::metadata(d.path().join("x")).unwrap();
        assert_eq!(md.permissions().mode() & 0o777, 0o600);
        let md = std::fs::metadata(d.path()).unwrap();
        assert_eq!(md.permissions().mode() & 0o777, 0o700);
        d.remove("x");
        assert_eq!(d.read("x").unwrap(), None);
        // nothing else left behind (no temporary files)
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates files and symbolic links under $TMPDIR (isolation)"
    )]
    fn open_directory_link_and_open_file_are_refused() {
        let base = scratch("pdir-bad");
        let dir = base.join(format!("splitrt-{}", euid()));
        // a directory others can read
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = PrivateDir::open_in(&base).unwrap_err();
        assert!(e.to_string().contains("refusing to trust"), "{e}");
        std::fs::remove_dir(&dir).unwrap();
        // a symbolic link in its place
        let target = base.join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&target, &dir).unwrap();
        let e = PrivateDir::open_in(&base).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::remove_file(&dir).unwrap();
        // a file readable by others inside a good directory
        let d = PrivateDir::open_in(&base).unwrap();
        std::fs::write(d.path().join("f"), "x").unwrap();
        std::fs::set_permissions(d.path().join("f"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert!(d.read("f").is_err());
        // a link where the file should be
        std::os::unix::fs::symlink("/etc/hostname", d.path().join("l")).unwrap();
        assert!(d.read("l").is_err());
        std::fs::remove_dir_all(base).unwrap();
    }
}
