//! The command line and the daemon's life cycle, checked with real mounts: background and
//! foreground mounts, signals, errors, mount options, `--list`, mount(8) and fstab, auto_unmount.
//!
//! The helpers the submodules share are here; each submodule is one theme.

use crate::common::*;

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod auto_unmount;
mod errors;
mod fstab;
mod lifecycle;
mod list;
mod options;

fn example() -> PathBuf {
    fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tiny-model")).unwrap()
}

/// A fresh temporary directory with an empty `mnt` directory in it.
fn mnt_dir(tag: &str) -> (TempDir, PathBuf) {
    let tmp = TempDir::new(tag);
    let mnt = fs::canonicalize(tmp.path()).unwrap().join("mnt");
    fs::create_dir(&mnt).unwrap();
    (tmp, mnt)
}

/// Lazily unmounts whatever is still mounted at its path when dropped (also when a test fails).
struct MountGuard(PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        for _ in 0..8 {
            if !is_mounted(&self.0) {
                break;
            }
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Runs `cmd` with stdout and stderr captured, as `Command::output()` does, and fails the test if
/// it has not returned (with its pipes closed) within `limit`.
fn output_within(mut cmd: Command, limit: Duration) -> (Output, Duration) {
    cmd.stdin(Stdio::null());
    let start = Instant::now();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(cmd.output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => (out.expect("cannot run command"), start.elapsed()),
        Err(_) => panic!(
            "command did not return (stdout/stderr captured) within {limit:?}: something \
             inherited its pipes or it hangs"
        ),
    }
}

fn tensormount(args: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.args(args);
    c
}

/// The binary, run in the background, captured, with a 10 s deadline.
fn mount_bg(args: &[&str]) -> Output {
    let (out, took) = output_within(tensormount(args), Duration::from_secs(10));
    assert!(took < Duration::from_secs(10), "took {took:?}");
    out
}

fn show(o: &Output) -> String {
    format!(
        "status: {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(o),
        stderr(o)
    )
}

/// The /proc/self/mounts entries (device, type, options) whose mount point is `mnt`.
fn mounts_at(mnt: &Path) -> Vec<(String, String, String)> {
    fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.get(1) == Some(&s(mnt))).then(|| (f[0].into(), f[2].into(), f[3].into()))
        })
        .collect()
}

/// How many mounts /proc/self/mountinfo has on `path`.
fn mount_count(path: &Path) -> usize {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(s(path)))
        .count()
}

/// The one mount at `mnt`: (device, type, options).
fn the_mount(mnt: &Path) -> (String, String, String) {
    let m = mounts_at(mnt);
    assert_eq!(m.len(), 1, "mounts at {}: {m:?}", mnt.display());
    m.into_iter().next().unwrap()
}

fn has_opt(options: &str, opt: &str) -> bool {
    options.split(',').any(|o| o == opt)
}

/// Live (non-zombie) processes named `name` whose command line contains `arg` as an argument.
fn pids_with_arg(name: &str, arg: &Path) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let mut args = cmdline.split(|&b| b == 0);
        let Some(argv0) = args.next() else { continue };
        let comm = fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        let named = comm.trim_end() == name
            || Path::new(std::ffi::OsStr::from_bytes(argv0)).file_name()
                == Some(std::ffi::OsStr::new(name));
        if named && args.any(|a| a == arg.as_os_str().as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// The tensormount processes serving `mnt`.
fn daemons_of(mnt: &Path) -> Vec<i32> {
    pids_with_arg("tensormount", mnt)
}

/// Waits (up to `limit`) until no tensormount process names `mnt` on its command line.
fn assert_no_daemon_within(mnt: &Path, limit: Duration) {
    let start = Instant::now();
    loop {
        let left = daemons_of(mnt);
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "tensormount processes {left:?} still serve {} after {limit:?}",
            mnt.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn poll_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "timed out ({limit:?}) waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

fn statvfs_errno(path: &Path) -> Option<i32> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut buf = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is NUL-terminated and `buf` is a writable statvfs buffer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), buf.as_mut_ptr()) };
    (rc != 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// Asserts the error contract: non-zero exit, exactly one line on stderr, starting
/// `tensormount: `, containing each of `needles`.
fn assert_error(o: &Output, needles: &[&str]) {
    assert!(!o.status.success(), "expected failure\n{}", show(o));
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr\n{}", show(o));
    assert!(
        lines[0].starts_with("tensormount: "),
        "stderr does not start with `tensormount: `\n{}",
        show(o)
    );
    for n in needles {
        assert!(lines[0].contains(n), "stderr lacks `{n}`\n{}", show(o));
    }
}

/// On a stale mount (daemon dead): a new mount fails with the stale-mount message that names the
/// command clearing it, stacks nothing, and `umount -l` then clears it.
fn assert_stale_reported(mnt: &Path) {
    // The kernel aborts the connection a moment after the daemon's death is visible (requests
    // caught in between fail with ECONNABORTED); from then on the mount answers ENOTCONN.
    wait_for("the dead connection to answer ENOTCONN", || {
        statvfs_errno(mnt) == Some(libc::ENOTCONN)
    });
    assert!(is_mounted(mnt), "the stale mount should still be there");
    let before = mount_count(mnt);
    let out = mount_bg(&[s(&example()), s(mnt)]);
    assert_error(&out, &["Transport endpoint is not connected"]);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("umount -l {}", mnt.display()))
            || err.contains(&format!("fusermount3 -uz {}", mnt.display())),
        "no clearing command in: {err}"
    );
    assert_eq!(mount_count(mnt), before, "something was mounted");
    let um = Command::new("umount").arg("-l").arg(mnt).output().unwrap();
    assert!(um.status.success(), "{}", show(&um));
    assert!(!is_mounted(mnt));
}
