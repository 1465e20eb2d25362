//! `-o auto_unmount`: a process of its own that unmounts the mount once the daemon is gone,
//! however it ended (SIGKILL included).
//!
//! The daemon starts it right after mounting by running its own executable again under the name
//! [`NAME`], with the daemon's pid, the mount's device and the mount point, and waits until it
//! says it is watching (a daemon killed before that is no longer the watcher's parent, which tells
//! the same). The watcher holds a pidfd of the daemon, which the kernel makes readable
//! only once the daemon has exited with every thread, so once every descriptor it held is closed,
//! `/dev/fuse`'s included, which has aborted the FUSE connection. Then, if the mount at the mount
//! point is still the daemon's (the same device, and its connection gone), the watcher unmounts it
//! (lazily if it is in use; through `fusermount3` where this user may not unmount) and exits; after
//! a normal unmount it finds nothing to do.
//!
//! fusermount3's own auto-unmount looks when the daemon's socket to it closes, which may come
//! before the last `/dev/fuse` reference is released (a worker thread still blocked reading the
//! device): its check then sees the connection aborting (ECONNABORTED), not gone (ENOTCONN), and
//! it leaves the dead mount in place. The pidfd has no such window.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use log::error;

use crate::base::sys;
use crate::daemon::logging;
use crate::daemon::mounts::{top_mount, unmount};

/// The name the watcher runs under (its `argv[0]`).
pub const NAME: &str = "tensormount-unmount";

/// What the watcher prints once it holds the daemon's pidfd.
const WATCHING: &str = "watching";

/// Starts the watcher of the mount at `mnt`, whose device is `dev`, for this process, and waits
/// until it watches. Call it once mounted, before the daemon serves.
pub fn start(mnt: &Path, dev: u64) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("auto_unmount: cannot start its watcher: {e}");
    let mut child = Command::new("/proc/self/exe")
        .arg0(NAME)
        .arg(std::process::id().to_string())
        .arg(dev.to_string())
        .arg(mnt)
        .arg(logging::sink_arg())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        // Its own process group: a signal to the daemon's group does not take it along.
        .process_group(0)
        .spawn()
        .map_err(|e| fail(&e))?;
    let mut line = String::new();
    let said = child
        .stdout
        .take()
        .map(|out| BufReader::new(out).read_line(&mut line));
    if !matches!(said, Some(Ok(_))) || line.trim_end() != WATCHING {
        let _ = child.kill();
        return Err(fail(&"it did not start watching"));
    }
    // Never waited for: it outlives the daemon, and init reaps it.
    drop(child);
    Ok(())
}

/// The watcher's `main`: `tensormount-unmount PID DEV MOUNTPOINT LOG`.
pub fn main(args: &[OsString]) -> ExitCode {
    let [pid, dev, mnt, log] = args else {
        eprintln!("usage: {NAME} PID DEV MOUNTPOINT LOG");
        return ExitCode::FAILURE;
    };
    let _ = logging::init_from_arg(log);
    let (Some(pid), Some(dev)) = (number(pid), number(dev)) else {
        error!("{NAME}: PID and DEV must be numbers");
        return ExitCode::FAILURE;
    };
    let mnt = PathBuf::from(mnt);
    // Nothing the daemon passed on unawares (a `/dev/fuse` descriptor received from fusermount3
    // has no close-on-exec flag) may keep the connection alive after it.
    sys::close_inherited_descriptors();
    // The daemon, this process's parent, is gone once it is no longer the parent (it was killed
    // before this could watch it): every descriptor it held is closed by then too.
    let pid = pid as libc::pid_t;
    let watched = match sys::pidfd_open(pid) {
        Ok(fd) if std::os::unix::process::parent_id() as libc::pid_t == pid => Some(fd),
        Ok(_) => None,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => None,
        Err(e) => {
            error!("auto_unmount: cannot watch the daemon: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{WATCHING}").and_then(|()| out.flush());
    if let Some(pidfd) = watched
        && let Err(e) = sys::wait_readable(&pidfd)
    {
        error!("auto_unmount: cannot wait for the daemon: {e}");
        return ExitCode::FAILURE;
    }
    if top_mount(&mnt).is_some_and(|m| m.dev == dev) && dead(&mnt) {
        unmount(&mnt);
    }
    ExitCode::SUCCESS
}

/// Whether the mount at `mnt` has lost its daemon: it answers ENOTCONN. The device number alone
/// cannot tell: the kernel gives a new mount the number of one just gone, and a daemon mounting
/// there again right after a plain unmount would be unmounted. A live mount answers (once its
/// daemon serves).
fn dead(mnt: &Path) -> bool {
    sys::statvfs_error(mnt).is_some_and(|e| e.raw_os_error() == Some(libc::ENOTCONN))
}

fn number(arg: &OsString) -> Option<u64> {
    arg.to_str()?.parse().ok()
}
