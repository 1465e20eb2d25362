//! Mounting and serving: checks on the mount point, the background daemon with its readiness pipe,
//! signals, and unmounting.
//!
//! Order matters. The tree is built (and every warning printed) by the caller before anything here
//! runs. In the background the process forks before any thread exists; the child blocks the
//! termination signals, sends its stdio to /dev/null and mounts (fuser's `Session::new` performs
//! mount(2) and the whole FUSE INIT handshake), and only then tells the parent, which exits 0. A
//! signal that arrives meanwhile stays pending and is handled by the signal thread once the mount
//! exists, so it never leaves a stale mount.
//!
//! Under systemd (`$NOTIFY_SOCKET` set), `READY=1` is sent once `Session::new` has returned, in the
//! foreground process or the background child (with `MAINPID=`), and `STOPPING=1` when a
//! termination signal starts the shutdown. A background daemon without `--log-file` logs to syslog.
//!
//! The threads that follow SOURCE (refresh, inotify, invalidator), the one that closes idle
//! sources and the one that releases read leases start with the signal thread, after the mount:
//! the fork still happens while the process has a single thread, and every thread inherits the
//! mask that blocks the signals these threads wait for. SIGUSR1 asks the refresh threads for a
//! full rescan.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fuser::{Config, MountOption, Session, SessionACL};
use log::{error, info, warn};

use crate::cli::MountOptions;
use crate::fs::TensorFs;
use crate::namespace::lease;
use crate::refresh::Follow;
use crate::{invalidate, logging, notify};

/// A reason the mount cannot happen, already worded for the user.
pub type Error = String;

/// Checks the mount point before mounting; returns its absolute path.
pub fn check_mountpoint(mnt: &Path) -> Result<PathBuf, Error> {
    let shown = mnt.display();
    let stale = || {
        format!(
            "{shown}: Transport endpoint is not connected: a FUSE daemon that served it has died; \
             clear the stale mount with `umount -l {shown}` (or `fusermount3 -uz {shown}`)"
        )
    };
    match fs::metadata(mnt) {
        Err(e) if is_disconnected(&e) => return Err(stale()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!("{shown}: mount point does not exist"));
        }
        Err(e) => return Err(format!("{shown}: {e}")),
        Ok(m) if !m.is_dir() => return Err(format!("{shown}: mount point is not a directory")),
        Ok(_) => {}
    }
    let abs = fs::canonicalize(mnt)
        .or_else(|_| std::path::absolute(mnt))
        .map_err(|e| format!("{shown}: {e}"))?;
    if let Some(MountEntry { fstype, source, .. }) = top_mount(&abs)
        && fstype.starts_with("fuse")
    {
        {
            // `stat` can still succeed on a stale mount from the attribute cache; statvfs cannot.
            if statvfs_errno(&abs)
                .is_some_and(|e| is_disconnected(&io::Error::from_raw_os_error(e)))
            {
                return Err(stale());
            }
            return Err(format!(
                "{shown}: a FUSE filesystem ({fstype} from {source}) is already mounted here; \
                 unmount it first (umount {shown})"
            ));
        }
    }
    Ok(abs)
}

/// The errors of a mount whose daemon is gone (ECONNABORTED for a moment after it dies, then
/// ENOTCONN).
fn is_disconnected(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTCONN) | Some(libc::ECONNABORTED)
    )
}

/// A line of /proc/self/mountinfo.
struct MountEntry {
    dev: u64,
    fstype: String,
    source: String,
}

/// The topmost mount at `path`, from /proc/self/mountinfo.
fn top_mount(path: &Path) -> Option<MountEntry> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let target = path.as_os_str().as_bytes();
    info.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        if unescape_mountinfo(fields.get(4)?) != target {
            return None;
        }
        let sep = fields.iter().position(|f| *f == "-")?;
        let (major, minor) = fields.get(2)?.split_once(':')?;
        Some(MountEntry {
            dev: libc::makedev(major.parse().ok()?, minor.parse().ok()?),
            fstype: fields.get(sep + 1)?.to_string(),
            source: fields.get(sep + 2)?.to_string(),
        })
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fn statvfs_errno(path: &Path) -> Option<i32> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut buf = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a valid NUL-terminated path and `buf` is a writable statvfs buffer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), buf.as_mut_ptr()) };
    (rc != 0).then(|| io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// The kernel mount configuration.
pub fn fuse_config(opts: &MountOptions, fsname: String, threads: usize) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::RO,
        MountOption::DefaultPermissions,
        MountOption::FSName(fsname),
        // fuser drops `Subtype` on the direct mount(2) path; the raw option reaches the kernel.
        MountOption::CUSTOM("subtype=tensormount".into()),
    ];
    if opts.noexec {
        config.mount_options.push(MountOption::NoExec);
    }
    config.acl = if opts.allow_other {
        SessionACL::All
    } else if opts.allow_root || opts.auto_unmount {
        // fuser refuses auto_unmount with the owner-only ACL.
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    if opts.auto_unmount {
        config.mount_options.push(MountOption::AutoUnmount);
    }
    config.n_threads = Some(threads.max(1));
    config.clone_fd = threads > 1;
    config
}

/// Mounts and serves in the foreground until unmounted or signalled; `follow`, if given, is
/// started once mounted.
pub fn run_foreground(
    fs: TensorFs,
    mnt: &Path,
    config: &Config,
    follow: Option<Follow>,
    source_idle: Duration,
) -> Result<(), Error> {
    block_termination_signals();
    let session = mount(fs, mnt, config)?;
    notify::notify("READY=1");
    serve(session, mnt, follow, source_idle)
}

/// Forks; the child mounts and serves, the parent returns once the mount is live (or failed).
pub fn run_background(
    fs: TensorFs,
    mnt: &Path,
    config: &Config,
    follow: Option<Follow>,
    source_idle: Duration,
) -> Result<(), Error> {
    let (read_end, write_end) = cloexec_pipe().map_err(|e| format!("cannot create a pipe: {e}"))?;
    // SAFETY: no thread has been started yet (the tree is built on this thread and the logger
    // starts none), so the child is a complete copy of a single-threaded process.
    match unsafe { libc::fork() } {
        -1 => Err(format!("cannot fork: {}", io::Error::last_os_error())),
        0 => {
            drop(read_end);
            let ready = File::from(write_end);
            let code = match daemon_child(fs, mnt, config, ready, follow, source_idle) {
                Ok(()) => 0,
                Err(e) => {
                    error!("{e}");
                    1
                }
            };
            std::process::exit(code)
        }
        _child => {
            drop(write_end);
            // This process exits as soon as the daemon answers: freeing the tree it built would
            // only delay the command's return (and copy the pages it frees, which it shares with
            // the child). Seen under strace: 39 ms between "ready" and the exit for the
            // 92,000-tensor model; without strace the gain is within this machine's noise.
            std::mem::forget((fs, follow));
            let mut answer = String::new();
            File::from(read_end)
                .read_to_string(&mut answer)
                .map_err(|e| format!("cannot hear from the daemon: {e}"))?;
            match answer.strip_prefix("ready") {
                Some(_) => Ok(()),
                None if answer.is_empty() => {
                    Err("the daemon exited before the mount was ready".into())
                }
                None => Err(answer),
            }
        }
    }
}

fn daemon_child(
    fs: TensorFs,
    mnt: &Path,
    config: &Config,
    mut ready: File,
    follow: Option<Follow>,
    source_idle: Duration,
) -> Result<(), Error> {
    block_termination_signals();
    // SAFETY: setsid has no memory-safety preconditions.
    unsafe { libc::setsid() };
    let _ = std::env::set_current_dir("/");
    // Release the caller's terminal and pipes before mounting: fuser may start a long-lived
    // fusermount3 helper (auto_unmount), which inherits our stdio.
    redirect_stdio().map_err(|e| format!("cannot redirect stdio to /dev/null: {e}"))?;
    logging::detached();
    let session = match mount(fs, mnt, config) {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.write_all(e.as_bytes());
            return Err(e);
        }
    };
    // Before the parent returns, so that whoever ran it finds the notification already queued.
    notify::notify(&format!("READY=1\nMAINPID={}", std::process::id()));
    let _ = ready.write_all(b"ready");
    drop(ready);
    serve(session, mnt, follow, source_idle)
}

fn mount(fs: TensorFs, mnt: &Path, config: &Config) -> Result<Session<TensorFs>, Error> {
    if !Path::new("/dev/fuse").exists() {
        return Err(
            "/dev/fuse does not exist: load the fuse module (modprobe fuse), or give the \
                    container the device (--device /dev/fuse)"
                .into(),
        );
    }
    let sockets_before = socket_fds();
    let session = Session::new(fs, mnt, config).map_err(|e| {
        let what = match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => format!(
                "permission denied: mounting needs root, or fusermount3 (package fuse3) for other users ({e})"
            ),
            _ => e.to_string(),
        };
        format!("{}: cannot mount: {what}", mnt.display())
    })?;
    if config.mount_options.contains(&MountOption::AutoUnmount) {
        keep_unmount_socket_last(&sockets_before);
    }
    // The handshake's 16 MiB request buffer was zeroed in the heap's free space (what the build
    // freed) and dropped: give those pages back rather than keep them resident for the mount's life.
    // SAFETY: malloc_trim only releases free heap memory; it has no preconditions.
    unsafe { libc::malloc_trim(0) };
    Ok(session)
}

/// Runs the session until the kernel ends it: `umount`, or a signal handled by the signal thread.
fn serve(
    session: Session<TensorFs>,
    mnt: &Path,
    follow: Option<Follow>,
    source_idle: Duration,
) -> Result<(), Error> {
    crate::namespace::start_closer(source_idle)
        .map_err(|e| format!("cannot start the thread that closes idle sources: {e}"))?;
    // Without it, reads check their source each time.
    if let Err(e) = lease::start() {
        warn!("cannot start the thread that releases read leases: {e}");
    }
    let refresh = match follow {
        Some(f) => Some(
            f.start(session.notifier(), top_mount(mnt).map(|m| m.dev))
                .map_err(|e| format!("cannot start the refresh threads: {e}"))?,
        ),
        None => None,
    };
    let target = mnt.to_path_buf();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            loop {
                let sig = wait_termination_signal();
                if sig == libc::SIGUSR1 {
                    match &refresh {
                        Some(r) => {
                            info!("SIGUSR1: rescanning SOURCE");
                            r.rescan_all();
                        }
                        None => {
                            info!("SIGUSR1 ignored: the mount does not follow SOURCE (refresh=off)")
                        }
                    }
                    continue;
                }
                info!("signal {sig}: unmounting {}", target.display());
                // A kernel notification sent while the connection goes away could wait forever.
                invalidate::disarm();
                notify::notify("STOPPING=1");
                unmount(&target);
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    match session.run() {
        // A lazily detached mount whose last file closes can end the channel with ECONNABORTED
        // rather than ENODEV; both are a normal end.
        Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
        other => other.map_err(|e| format!("{}: FUSE session failed: {e}", mnt.display())),
    }
}

/// Unmounts `mnt`; if files are still open, detaches it lazily so that they are served until the
/// last one closes (the session ends then). Done here rather than through fuser, whose check of
/// whether the mount is still there misreads a channel with pending requests.
fn unmount(mnt: &Path) {
    let Ok(c) = CString::new(mnt.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: `c` is a valid NUL-terminated path for both calls.
    let mut rc = unsafe { libc::umount2(c.as_ptr(), 0) };
    if rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY) {
        // SAFETY: as above.
        rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
    if rc == 0 {
        return;
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        // Not root: the setuid helper may unmount what this user mounted.
        Some(libc::EPERM) => {
            let status = std::process::Command::new("fusermount3")
                .args(["-u", "-z", "--"])
                .arg(mnt)
                .stdin(std::process::Stdio::null())
                .status();
            if !status.is_ok_and(|s| s.success()) {
                error!(
                    "{}: cannot unmount: {err}; fusermount3 failed too",
                    mnt.display()
                );
            }
        }
        // Already unmounted.
        Some(libc::EINVAL) => {}
        _ => error!("{}: cannot unmount: {err}", mnt.display()),
    }
}

fn termination_signals() -> libc::sigset_t {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set; sigaddset only adds valid signal numbers to it.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1] {
            libc::sigaddset(set.as_mut_ptr(), sig);
        }
        set.assume_init()
    }
}

/// Blocks SIGINT, SIGTERM, SIGHUP and SIGUSR1 in this thread and every thread it starts later;
/// they are then only received by [`wait_termination_signal`]. Blocks the signal of broken read
/// leases too, which only the lease thread receives (see [`lease`]).
fn block_termination_signals() {
    let mut set = termination_signals();
    // SAFETY: `set` is an initialised signal set, to which sigaddset adds a valid signal; the old
    // mask is not wanted.
    unsafe {
        libc::sigaddset(&mut set, lease::SIGNAL);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

fn wait_termination_signal() -> i32 {
    let set = termination_signals();
    let mut sig = 0;
    // SAFETY: `set` is initialised and `sig` is a valid place for the result.
    unsafe { libc::sigwait(&set, &mut sig) };
    sig
}

/// The descriptors of this process that are sockets.
fn socket_fds() -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            fs::read_link(e.path()).is_ok_and(|l| l.as_os_str().as_bytes().starts_with(b"socket:"))
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// With `auto_unmount`, fusermount3 waits for the daemon's end of a socket to close, then unmounts
/// only if it finds the FUSE connection already gone. A process that dies releases its descriptors
/// highest-numbered first, and fuser's socket is numbered above `/dev/fuse` (it reuses the number
/// of fusermount3's end for the descriptor it receives): so the socket went first and, about once
/// in a hundred deaths, fusermount3 looked while `/dev/fuse` was still open and left the dead
/// mount in place. A copy of the socket on descriptor 0 (stdin, which the daemon never reads) is
/// released last of all, after every `/dev/fuse` descriptor, including those the worker threads
/// clone later. `before` lists the sockets that existed before mounting: the new one is fuser's.
fn keep_unmount_socket_last(before: &[i32]) {
    let new: Vec<i32> = socket_fds()
        .into_iter()
        .filter(|fd| !before.contains(fd))
        .collect();
    let [socket] = new[..] else {
        warn!(
            "auto_unmount: cannot tell fusermount3's socket among {new:?}; a daemon that is killed may leave its mount behind"
        );
        return;
    };
    // SAFETY: dup3 only changes the descriptor table: `socket` is open, and descriptor 0 (stdin,
    // /dev/null or the caller's terminal, never read by the daemon) is replaced atomically.
    if unsafe { libc::dup3(socket, 0, libc::O_CLOEXEC) } < 0 {
        warn!(
            "auto_unmount: cannot move fusermount3's socket to descriptor 0: {}",
            io::Error::last_os_error()
        );
    }
}

fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn redirect_stdio() -> io::Result<()> {
    let null = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for fd in 0..3 {
        // SAFETY: dup2 onto the standard descriptors; `null` stays open for the call.
        if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), fd) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo("/mnt/a\\040b"), b"/mnt/a b");
        assert_eq!(unescape_mountinfo("/x\\134y"), b"/x\\y");
        assert_eq!(unescape_mountinfo("/plain"), b"/plain");
    }
}
