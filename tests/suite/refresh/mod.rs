//! The mount follows its source: files and models added, removed, replaced by rename, rewritten in
//! place, downloaded the way huggingface_hub does, republished the way save_pretrained does. Real
//! mounts, real writers (the official safetensors writer), waits on the root's refresh generation
//! (never bare sleeps), in inotify and poll modes where they differ.

use crate::common::*;

use std::ffi::CString;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, symlink};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod added;
mod removed;
mod rewritten;
mod steady;
mod writers;

/// A foreground daemon following `src`, mounted on `mnt`.
struct Live {
    tmp: TempDir,
    src: PathBuf,
    mnt: PathBuf,
    daemon: Daemon,
    py: PathBuf,
}

impl Live {
    /// Makes a source directory with `setup`, and mounts it (or the path `setup` returns, if it
    /// is a file) with `-o opts`.
    fn start(tag: &str, opts: &str, setup: impl FnOnce(&Live0) -> PathBuf) -> Live {
        require_fuse();
        let py = python();
        let tmp = TempDir::new(tag);
        let src = tmp.join("src");
        fs::create_dir(&src).unwrap();
        let mnt = tmp.join("mnt");
        fs::create_dir(&mnt).unwrap();
        let l0 = Live0 {
            src: src.clone(),
            py: py.clone(),
        };
        let source = setup(&l0);
        let log = tmp.join("daemon.log");
        let opts = format!("ro,{opts}");
        let args = ["-o", opts.trim_end_matches(',')];
        let (daemon, _) = Daemon::spawn(&source, &mnt, &args, &log, Duration::from_secs(30));
        Live {
            tmp,
            src,
            mnt,
            daemon,
            py,
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.mnt.join(p)
    }

    fn src(&self, p: &str) -> PathBuf {
        self.src.join(p)
    }

    fn save(&self, p: &str, seed: u64, names: &[&str]) {
        save(&self.py, &self.src(p), seed, names);
    }

    /// Waits until `cond` holds, looking again after each refresh.
    fn until(&self, what: &str, cond: impl FnMut() -> bool) {
        wait_refreshed(&self.mnt, what, cond);
    }

    /// SIGUSR1, then waits for the rescan it asks for.
    fn rescan(&self) {
        let seen = generation(&self.mnt);
        self.daemon.signal(libc::SIGUSR1);
        wait_generation_after(&self.mnt, seen);
    }

    fn compare(&self, src: &str, tensor_dir: &str) {
        let (src, dir) = (self.src(src), self.path(tensor_dir));
        oracle(
            &self.py,
            &["compare", src.to_str().unwrap(), dir.to_str().unwrap()],
        );
    }
}

/// What `setup` gets before the mount exists.
struct Live0 {
    src: PathBuf,
    py: PathBuf,
}

impl Live0 {
    fn save(&self, p: &str, seed: u64, names: &[&str]) {
        save(&self.py, &self.src.join(p), seed, names);
    }
}

/// Writes `path` with the official writer (which writes a temporary file and renames it).
fn save(py: &Path, path: &Path, seed: u64, names: &[&str]) {
    let seed = seed.to_string();
    let mut args = vec!["save", path.to_str().unwrap(), &seed];
    args.extend_from_slice(names);
    oracle(py, &args);
}

fn ino(p: &Path) -> u64 {
    fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .ino()
}

fn errno<T>(r: std::io::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

/// Drops the kernel's cached pages of an open file, so the next read goes to the daemon.
fn drop_cache(f: &File) {
    // SAFETY: posix_fadvise on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
}

/// The whole file through `f`, past the page cache.
fn read_all_uncached(f: &File) -> std::io::Result<Vec<u8>> {
    drop_cache(f);
    let len = f.metadata()?.len() as usize;
    let mut buf = vec![0; len];
    f.read_exact_at(&mut buf, 0)?;
    Ok(buf)
}

/// The bytes a tensor has in a source file, by its header.
fn tensor_bytes(file: &Path, name: &str) -> Vec<u8> {
    let bytes = fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let off = &header[name]["data_offsets"];
    let (b, e) = (
        off[0].as_u64().unwrap() as usize,
        off[1].as_u64().unwrap() as usize,
    );
    bytes[8 + n + b..8 + n + e].to_vec()
}

/// An inotify watch on a file of the mount, as a tool watching the mount would have.
struct Watch {
    fd: i32,
}

impl Watch {
    fn new(file: &Path) -> Watch {
        // SAFETY: plain syscalls on our own descriptor and a valid path.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            assert!(fd >= 0);
            let c = CString::new(file.as_os_str().as_bytes()).unwrap();
            assert!(libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_DELETE_SELF) >= 0);
            Watch { fd }
        }
    }

    /// Whether IN_DELETE_SELF was queued.
    fn deleted(&self) -> bool {
        let mut buf = vec![0u8; 4096];
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
        let mut at = 0usize;
        while n > 0 && at + 16 <= n as usize {
            let mask = u32::from_ne_bytes(buf[at + 4..at + 8].try_into().unwrap());
            if mask & libc::IN_DELETE_SELF != 0 {
                return true;
            }
            at += 16 + u32::from_ne_bytes(buf[at + 12..at + 16].try_into().unwrap()) as usize;
        }
        false
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // SAFETY: closes our own descriptor.
        unsafe { libc::close(self.fd) };
    }
}
