//! Read leases on local sources: released at once for a writer, not relied on once broken.

use super::drop_cache;
use crate::common::*;

use std::fs::{self, File};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many read leases process `pid` holds on inode `ino` (`/proc/locks`).
fn leases(pid: i32, ino: u64) -> usize {
    fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1) == Some(&"LEASE")
                && f.get(4) == Some(&pid.to_string().as_str())
                && f.get(5).is_some_and(|id| id.ends_with(&format!(":{ino}")))
        })
        .count()
}

/// `fs.lease-break-time`, in seconds.
fn lease_break_time() -> u64 {
    fs::read_to_string(LEASE_BREAK_TIME)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(45)
}

const LEASE_BREAK_TIME: &str = "/proc/sys/fs/lease-break-time";

/// A one-tensor source (U8 tensor `w`), mounted, whose daemon has served a first read of `w` and
/// holds a read lease on it.
struct Leased {
    src: PathBuf,
    /// Where the tensor's bytes start in the source.
    data_start: u64,
    m: Mounted,
    /// `w` in the mount, opened before any change.
    f: File,
}

fn mount_leased(tmp: &TempDir, len: usize) -> Leased {
    let src = tmp.join("m.safetensors");
    let w = bytes(len, 9);
    write_safetensors(
        &src,
        &[T {
            name: "w",
            dtype: "U8",
            shape: &[len],
            data: w.clone(),
        }],
        None,
    );
    let meta = fs::metadata(&src).unwrap();
    let m = Mounted::new(&src, "");
    let f = File::open(m.path("w")).unwrap();
    drop_cache(&f);
    let mut buf = vec![0u8; 4096];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == w[..4096], "w reads wrong before any change");
    assert_eq!(
        leases(m.pid().expect("daemon pid"), meta.ino()),
        1,
        "no read lease of the daemon on the source in /proc/locks"
    );
    Leased {
        data_start: meta.len() - len as u64,
        src,
        m,
        f,
    }
}

/// The daemon holds a read lease on a local source it serves (so its reads need not check each
/// time that the source is unchanged). A writer that opens the source goes on at once, because
/// the daemon releases the lease when the kernel says it is wanted, instead of waiting for the
/// kernel to break it after `fs.lease-break-time` (45 s by default); a change it then makes fails
/// the next uncached read of a file opened before it, as any in-place change does.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn lease_released_at_once_for_a_writer_whose_change_is_caught() {
    require_fuse();
    let tmp = TempDir::new("lease");
    let Leased {
        src,
        data_start,
        m,
        f,
        ..
    } = mount_leased(&tmp, 1 << 20);
    let ino = fs::metadata(&src).unwrap().ino();
    let pid = m.pid().expect("daemon pid");

    let break_time = lease_break_time();
    let started = Instant::now();
    let writer = fs::OpenOptions::new().write(true).open(&src).unwrap();
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(break_time) / 2,
        "opening the source for writing took {waited:?} (lease-break-time {break_time} s): \
         the daemon did not release its lease"
    );
    assert_eq!(
        leases(pid, ino),
        0,
        "the lease is still held while a writer has the source open"
    );

    writer
        .write_all_at(&[0xff; 4096], data_start + 8192)
        .unwrap();
    drop(writer);
    drop_cache(&f);
    let mut buf = vec![0u8; 4096];
    let e = f
        .read_exact_at(&mut buf, 8192)
        .expect_err("read of the changed bytes succeeded");
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
    drop(f);
    m.unmount().unwrap();
}

/// Sets a sysctl for the life of the guard.
struct Sysctl(&'static str, String);

impl Sysctl {
    fn set(path: &'static str, value: &str) -> Sysctl {
        let old = fs::read_to_string(path).unwrap();
        fs::write(path, value).unwrap();
        Sysctl(path, old)
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = fs::write(self.0, &self.1);
    }
}

/// A daemon that cannot answer (stopped) when a writer opens its source: the kernel breaks the
/// lease itself after `fs.lease-break-time` and lets the writer change the file. The reads that
/// queued up meanwhile, served as the daemon resumes (while its lease thread may not have run
/// yet), must not pass the changed bytes off as the old version.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn lease_broken_while_the_daemon_was_stopped_is_not_relied_on() {
    require_fuse();
    // Shortened for the test (the kernel's default is 45 s); restored on drop.
    let _break_time = Sysctl::set(LEASE_BREAK_TIME, "2");
    let tmp = TempDir::new("lease-stopped");
    let len = 4 << 20;
    let Leased {
        src,
        data_start,
        m,
        f,
        ..
    } = mount_leased(&tmp, len);
    let pid = m.pid().expect("daemon pid");
    // The first read's readahead out of the kernel's cache: the reads below reach the daemon.
    drop_cache(&f);
    let f = Arc::new(f);

    // SAFETY: kill(2) of the daemon, a process of this test.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let started = Instant::now();
    let writer = fs::OpenOptions::new().write(true).open(&src).unwrap();
    let waited = started.elapsed();
    writer
        .write_all_at(&vec![0xff; len - 4096], data_start + 4096)
        .unwrap();
    drop(writer);
    // Reads that reach the daemon, queued while it is stopped.
    let readers: Vec<_> = (1..17u64)
        .map(|i| {
            let f = f.clone();
            std::thread::spawn(move || {
                let mut b = vec![0u8; 4096];
                f.read_exact_at(&mut b, i * (128 << 10)).map(|()| b)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    assert!(
        waited >= Duration::from_secs(1),
        "the writer did not wait for the lease of the stopped daemon ({waited:?})"
    );
    for (i, r) in readers.into_iter().enumerate() {
        match r.join().unwrap() {
            Ok(b) => panic!(
                "read {} after the change succeeded ({} bytes 0xff)",
                i + 1,
                b.iter().filter(|&&x| x == 0xff).count()
            ),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "read {}: {e}", i + 1),
        }
    }
    drop(f);
    m.unmount().unwrap();
}
