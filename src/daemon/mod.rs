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

pub(crate) mod logging;
pub(crate) mod mounts;
pub(crate) mod notify;
pub(crate) mod unmount;

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use fuser::{Config, MountOption, Session, SessionACL};
use log::{debug, error, info, warn};

use crate::base::sys::{self, Forked, Signals};
use crate::command::cli::MountOptions;
use crate::daemon::mounts::{MountEntry, top_mount, unmount};
use crate::fs::integrity::Verifier;
use crate::fuse::Fuse;
use crate::refresh::Follow;
use crate::source::{LEASE_SIGNAL, Sources};

/// What serving needs besides the filesystem: the sources, whose threads start once mounted, how
/// long one may stay idle, and the refresh machinery if the mount follows SOURCE.
pub struct Serve {
    pub sources: Sources,
    pub source_idle: Duration,
    pub follow: Option<Follow>,
    /// `-o verify`: the thread that hashes weight files in the background.
    pub verifier: Option<Verifier>,
    /// `-o auto_unmount`: a watcher process unmounts once the daemon is gone.
    pub auto_unmount: bool,
}

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
            if sys::statvfs_error(&abs).is_some_and(|e| is_disconnected(&e)) {
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
        // auto_unmount has always let root in too (fusermount3's, which it once was, required it).
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(threads.max(1));
    // One descriptor for every thread: a reply the daemon writes to the device itself (see
    // `Fuse::device`) must go to the descriptor its request was read from.
    config.clone_fd = false;
    config
}

/// Mounts and serves in the foreground until unmounted or signalled; `follow`, if given, is
/// started once mounted.
pub fn run_foreground(fs: Fuse, mnt: &Path, config: &Config, serve: Serve) -> Result<(), Error> {
    block_signals();
    let session = mount(fs, mnt, config, serve.auto_unmount)?;
    notify::notify("READY=1");
    run(session, mnt, serve)
}

/// Forks; the child mounts and serves, the parent returns once the mount is live (or failed).
pub fn run_background(fs: Fuse, mnt: &Path, config: &Config, serve: Serve) -> Result<(), Error> {
    let (read_end, write_end) = sys::pipe().map_err(|e| format!("cannot create a pipe: {e}"))?;
    // The tree is built on this thread and the logger starts none: the process has one thread.
    match sys::fork().map_err(|e| format!("cannot fork: {e}"))? {
        Forked::Child => {
            drop(read_end);
            let ready = File::from(write_end);
            let code = match daemon_child(fs, mnt, config, ready, serve) {
                Ok(()) => 0,
                Err(e) => {
                    error!("{e}");
                    1
                }
            };
            std::process::exit(code)
        }
        Forked::Parent => {
            drop(write_end);
            // This process exits as soon as the daemon answers: freeing the tree it built would
            // only delay the command's return (and copy the pages it frees, which it shares with
            // the child). Seen under strace: 39 ms between "ready" and the exit for the
            // 92,000-tensor model; without strace the gain is within this machine's noise.
            std::mem::forget((fs, serve));
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
    fs: Fuse,
    mnt: &Path,
    config: &Config,
    mut ready: File,
    serve: Serve,
) -> Result<(), Error> {
    block_signals();
    sys::setsid();
    let _ = std::env::set_current_dir("/");
    // Release the caller's terminal and pipes before mounting: fuser may start a long-lived
    // fusermount3 helper (auto_unmount), which inherits our stdio.
    redirect_stdio().map_err(|e| format!("cannot redirect stdio to /dev/null: {e}"))?;
    logging::detached();
    let session = match mount(fs, mnt, config, serve.auto_unmount) {
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
    run(session, mnt, serve)
}

/// Mounts; with `auto_unmount`, starts the watcher that unmounts once this process is gone.
fn mount(
    fs: Fuse,
    mnt: &Path,
    config: &Config,
    auto_unmount: bool,
) -> Result<Session<Fuse>, Error> {
    if !Path::new("/dev/fuse").exists() {
        return Err(
            "/dev/fuse does not exist: load the fuse module (modprobe fuse), or give the \
                    container the device (--device /dev/fuse)"
                .into(),
        );
    }
    let readahead_kb = fs.fs.tuning().readahead_kb;
    let device = fs.device();
    let session = Session::new(fs, mnt, config).map_err(|e| {
        let what = match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => format!(
                "permission denied: mounting needs root, or fusermount3 (package fuse3) for other users ({e})"
            ),
            _ => e.to_string(),
        };
        format!("{}: cannot mount: {what}", mnt.display())
    })?;
    if let Some(kb) = readahead_kb {
        raise_readahead(mnt, kb);
    }
    match session.as_fd().try_clone_to_owned() {
        Ok(fd) => {
            let _ = device.set(fd);
        }
        Err(e) => debug!("cannot keep the FUSE device for replies of several slices: {e}"),
    }
    if auto_unmount {
        let dev = top_mount(mnt)
            .map(|m| m.dev)
            .ok_or_else(|| format!("{}: mounted, but not in the mount table", mnt.display()))?;
        // Unmounted again if the watcher cannot start: a mount asked to unmount itself must not
        // be left behind by a daemon that dies.
        unmount::start(mnt, dev).inspect_err(|_| crate::daemon::mounts::unmount(mnt))?;
    }
    // The handshake's 16 MiB request buffer was zeroed in the heap's free space (what the build
    // freed) and dropped: give those pages back rather than keep them resident for the mount's life.
    sys::trim_heap();
    Ok(session)
}

/// Raises the readahead of the mount at `mnt` (its `/sys/class/bdi/MAJOR:MINOR/read_ahead_kb`) to
/// `kb` where lower. The kernel reads a page fault of a mapped file around it by that much, and the
/// default (128 KiB) makes a client that maps a tensor file wait on one small request after
/// another. It can only be raised after the mount (FUSE INIT can only lower it), and needs root;
/// without it, the default stays.
fn raise_readahead(mnt: &Path, kb: u32) {
    let Some(m) = top_mount(mnt) else {
        return;
    };
    let path = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(m.dev),
        libc::minor(m.dev)
    );
    let now: Option<u32> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| s.trim().parse().ok());
    if now.is_some_and(|n| n < kb)
        && let Err(e) = std::fs::write(&path, kb.to_string())
    {
        debug!("{path}: cannot raise the readahead to {kb} KiB: {e}");
    }
}

/// Runs the session until the kernel ends it: `umount`, or a signal handled by the signal thread.
fn run(session: Session<Fuse>, mnt: &Path, serve: Serve) -> Result<(), Error> {
    let Serve {
        sources,
        source_idle,
        follow,
        verifier,
        ..
    } = serve;
    sources
        .start_closer(source_idle)
        .map_err(|e| format!("cannot start the thread that closes idle sources: {e}"))?;
    // Without it, reads check their source each time.
    if let Err(e) = sources.start_leases() {
        warn!("cannot start the thread that releases read leases: {e}");
    }
    let refresh = match follow {
        Some(f) => Some(
            f.start(session.notifier(), top_mount(mnt).map(|m| m.dev))
                .map_err(|e| format!("cannot start the refresh threads: {e}"))?,
        ),
        None => None,
    };
    if let Some(v) = verifier {
        v.start()
            .map_err(|e| format!("cannot start the verify thread: {e}"))?;
    }
    let target = mnt.to_path_buf();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let signals = termination_signals();
            loop {
                let sig = signals.wait();
                if sig == libc::SIGUSR1 {
                    match &refresh {
                        Some((r, _)) => {
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
                if let Some((_, invalidator)) = &refresh {
                    invalidator.disarm();
                }
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

/// SIGINT, SIGTERM, SIGHUP and SIGUSR1, which only the signal thread receives.
fn termination_signals() -> Signals {
    Signals::of(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1])
}

/// Blocks the termination signals in this thread and every thread it starts later; they are then
/// only received by the signal thread. Blocks the signal of broken read leases too, which only the
/// lease thread receives.
fn block_signals() {
    Signals::of(&[
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGUSR1,
        LEASE_SIGNAL,
    ])
    .block();
}

fn redirect_stdio() -> io::Result<()> {
    let null = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for fd in 0..3 {
        sys::dup_onto(null.as_raw_fd(), fd, false)?;
    }
    Ok(())
}
