//! Reliability: sources that change under live readers, a source replaced by rename, writers of
//! a leased source, other users with `allow_other`, a million tensors within a memory budget, and
//! SIGTERM while readers are busy.
//!
//! The helpers the submodules share are here; each submodule is one theme.

use crate::common::*;

use std::fs::{self, File};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

mod allow_other;
mod leases;
mod million;
mod rename;
mod sigterm;
mod truncated;

/// A fresh, empty mount point inside `tmp`.
fn mountpoint(tmp: &TempDir, name: &str) -> PathBuf {
    let p = tmp.join(name);
    fs::create_dir(&p).unwrap();
    p
}

/// Drops the kernel's cached pages of an open file, so the next read goes to the daemon.
fn drop_cache(f: &File) {
    // SAFETY: posix_fadvise on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise(DONTNEED) failed: {rc}");
}

/// Reads a whole file through a fresh descriptor after dropping its cached pages.
fn read_uncached(path: &Path) -> Vec<u8> {
    let f = File::open(path).unwrap();
    drop_cache(&f);
    let mut out = Vec::new();
    io::Read::read_to_end(&mut &f, &mut out).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    out
}
