//! Running the real daemon: a mount made by the command line in the background ([`Mounted`]), a
//! foreground daemon driven by signals ([`Daemon`]), and what they read of the daemon's process.
//! Shared by every test binary (through `tests/common/mod.rs`) and by the benchmark
//! (`benches/mount/main.rs` includes this file), so it uses nothing else of `tests/common`.
//!
//! Both runners clean up lazily: whatever is still mounted when they are dropped is unmounted
//! (`umount`, else `umount -l`), and a foreground daemon still running is killed.
#![allow(dead_code)]

use std::cell::OnceCell;
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The daemon's binary, as built by cargo for this test or benchmark.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tensormount")
}

/// Whether `path` is a mount point now (per /proc/self/mountinfo).
pub fn is_mounted(path: &Path) -> bool {
    let path = path.to_str().unwrap().replace(' ', "\\040");
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path.as_str()))
}

/// Whether anything is mounted at or below `root`.
pub fn mounted_below(root: &Path) -> bool {
    let prefix = root.as_os_str().as_bytes();
    fs::read_to_string("/proc/self/mountinfo").is_ok_and(|info| {
        info.lines().any(|l| {
            l.split(' ')
                .nth(4)
                .is_some_and(|p| p.as_bytes().starts_with(prefix))
        })
    })
}

/// Runs `cmd` with no input or output; true if it exited 0.
fn quiet(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `umount PATH`, and `umount -l PATH` (detach lazily) if that fails; true if the plain one
/// worked.
pub fn unmount(path: &Path) -> bool {
    if quiet(Command::new("umount").arg(path)) {
        return true;
    }
    quiet(Command::new("umount").arg("-l").arg(path));
    false
}

/// The background daemon serving `src` on `mnt`: the only process whose argv starts with exactly
/// `BIN SRC MNT` once the mounting command has returned (any `-o OPTS` comes after).
pub fn find_daemon(src: &Path, mnt: &Path) -> Option<i32> {
    let want: [&[u8]; 3] = [
        bin().as_bytes(),
        src.as_os_str().as_bytes(),
        mnt.as_os_str().as_bytes(),
    ];
    fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
        (args.len() >= 3 && args[..3] == want).then_some(pid)
    })
}

/// A field of /proc/PID/status in bytes (e.g. `RssAnon`, given there in kB).
pub fn proc_status_bytes(pid: i32, key: &str) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// A field of /proc/PID/io, e.g. `wchar`: every byte the process wrote, FUSE replies included.
pub fn proc_io(pid: i32, key: &str) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(": "))?
        .parse()
        .ok()
}

/// Waits up to `limit` for process `pid` to be gone; true if it is.
pub fn wait_gone(pid: i32, limit: Duration) -> bool {
    let t = Instant::now();
    loop {
        // SAFETY: kill with signal 0 only checks that the process exists.
        if unsafe { libc::kill(pid, 0) } != 0 {
            return true;
        }
        if t.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A live mount made by the real binary in the background (`tensormount SRC MNT [-o OPTS]`, which
/// returns once the mount is live). Unmounted on drop (lazily if need be), without waiting for the
/// daemon; [`Mounted::unmount`] also waits for it to exit.
pub struct Mounted {
    /// The mount point.
    pub dir: PathBuf,
    /// Wall time of the mounting command.
    pub took: Duration,
    /// What the mounting command wrote to stderr.
    pub stderr: String,
    src: PathBuf,
    pid: OnceCell<Option<i32>>,
    live: bool,
    /// A mount point made by [`Mounted::try_new`], removed after unmounting.
    scratch: Option<PathBuf>,
}

impl Mounted {
    /// Mounts `source` on a fresh mount point with `-o opts` (if not empty) and asserts that the
    /// command succeeded.
    pub fn new(source: &Path, opts: &str) -> Mounted {
        let (m, out) = Mounted::try_new(source, opts);
        assert!(
            out.status.success(),
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        m.expect("mounted")
    }

    /// Mounts `source` on a fresh mount point and returns the command's output; `None` if nothing
    /// got mounted.
    pub fn try_new(source: &Path, opts: &str) -> (Option<Mounted>, Output) {
        static N: AtomicUsize = AtomicUsize::new(0);
        let scratch = std::env::temp_dir().join(format!(
            "tensormount-mountpoint-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&scratch);
        let dir = scratch.join("mnt");
        fs::create_dir_all(&dir).unwrap();
        let (out, took) = mount_command(source, &dir, opts, &[]).unwrap();
        if !is_mounted(&dir) {
            let _ = fs::remove_dir_all(&scratch);
            return (None, out);
        }
        let m = Mounted {
            dir,
            took,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            src: source.to_path_buf(),
            pid: OnceCell::new(),
            live: true,
            scratch: Some(scratch),
        };
        (Some(m), out)
    }

    /// Mounts `src` on the existing directory `mnt` with `-o opts` (if not empty) and `env` added
    /// to the daemon's environment; the error says why, with the command's stderr.
    pub fn start(
        src: &Path,
        mnt: &Path,
        opts: &str,
        env: &[(&str, &str)],
    ) -> Result<Mounted, String> {
        let (out, took) =
            mount_command(src, mnt, opts, env).map_err(|e| format!("cannot run {}: {e}", bin()))?;
        if !out.status.success() {
            return Err(format!(
                "mounting {} failed ({}): {}",
                src.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Mounted {
            dir: mnt.to_path_buf(),
            took,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            src: src.to_path_buf(),
            pid: OnceCell::new(),
            live: true,
            scratch: None,
        })
    }

    pub fn path(&self, p: impl AsRef<Path>) -> PathBuf {
        self.dir.join(p)
    }

    /// The daemon's pid, found in /proc on first use (while mounted).
    pub fn pid(&self) -> Option<i32> {
        *self.pid.get_or_init(|| find_daemon(&self.src, &self.dir))
    }

    /// A field of the daemon's /proc/PID/status in bytes (e.g. `RssAnon`).
    pub fn status_bytes(&self, key: &str) -> Option<u64> {
        proc_status_bytes(self.pid()?, key)
    }

    /// `wchar` of the daemon's /proc/PID/io: every byte it wrote, FUSE replies included.
    pub fn wchar(&self) -> Option<u64> {
        proc_io(self.pid()?, "wchar")
    }

    /// Unmounts (lazily if `umount` fails, which is then the error) and waits up to 10 s for the
    /// daemon to exit.
    pub fn unmount(mut self) -> Result<(), String> {
        let pid = self.pid();
        self.live = false;
        let res = match unmount(&self.dir) {
            true => Ok(()),
            false => Err(format!(
                "umount {} failed; detached lazily",
                self.dir.display()
            )),
        };
        if let Some(pid) = pid {
            wait_gone(pid, Duration::from_secs(10));
        }
        res
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.live {
            unmount(&self.dir);
        }
        if let Some(s) = &self.scratch {
            let _ = fs::remove_dir_all(s);
        }
    }
}

/// Runs `tensormount SRC MNT [-o OPTS]` with `env` added and no input; returns its output and
/// wall time.
pub fn mount_command(
    src: &Path,
    mnt: &Path,
    opts: &str,
    env: &[(&str, &str)],
) -> io::Result<(Output, Duration)> {
    let mut cmd = Command::new(bin());
    cmd.arg(src).arg(mnt).stdin(Stdio::null());
    if !opts.is_empty() {
        cmd.args(["-o", opts]);
    }
    cmd.envs(env.iter().copied());
    let t = Instant::now();
    let out = cmd.output()?;
    Ok((out, t.elapsed()))
}

/// A foreground daemon (`tensormount -f`) with its stderr in a file. On drop (if it was not
/// stopped): lazy unmount, then kill.
pub struct Daemon {
    pub child: Child,
    mnt: PathBuf,
    log: PathBuf,
    started: Instant,
}

impl Daemon {
    /// Spawns `tensormount -f [opts] src mnt` and waits (up to `limit`) for the mount to appear;
    /// also returns how long that took. Panics on failure.
    pub fn spawn(
        src: &Path,
        mnt: &Path,
        opts: &[&str],
        log: &Path,
        limit: Duration,
    ) -> (Daemon, Duration) {
        Daemon::try_spawn(src, mnt, opts, &[], log, limit).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Daemon::spawn`] with `env` added to the daemon's environment, and the failure as an
    /// error: the daemon exited before mounting, or no mount after `limit` (it is then killed).
    pub fn try_spawn(
        src: &Path,
        mnt: &Path,
        opts: &[&str],
        env: &[(&str, &str)],
        log: &Path,
        limit: Duration,
    ) -> Result<(Daemon, Duration), String> {
        let mut d = Daemon::start(src, mnt, opts, log, |cmd| {
            cmd.envs(env.iter().copied());
        })?;
        let took = d.wait_mounted(limit)?;
        Ok((d, took))
    }

    /// Starts `tensormount -f [opts] src mnt` (without `RUST_LOG`, stderr in `log`) and returns
    /// at once; `setup` may add to the command first (environment, resource limits).
    pub fn start(
        src: &Path,
        mnt: &Path,
        opts: &[&str],
        log: &Path,
        setup: impl FnOnce(&mut Command),
    ) -> Result<Daemon, String> {
        let stderr = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut cmd = Command::new(bin());
        cmd.arg("-f")
            .args(opts)
            .arg(src)
            .arg(mnt)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        setup(&mut cmd);
        let started = Instant::now();
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", bin()))?;
        Ok(Daemon {
            child,
            mnt: mnt.to_path_buf(),
            log: log.to_path_buf(),
            started,
        })
    }

    /// Waits up to `limit` for the mount to appear; returns how long after the start it did. An
    /// error if the daemon exits first or the limit passes.
    pub fn wait_mounted(&mut self, limit: Duration) -> Result<Duration, String> {
        let wait = Instant::now();
        while !is_mounted(&self.mnt) {
            if let Some(st) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!(
                    "daemon exited ({st}) before mounting: {}",
                    self.stderr()
                ));
            }
            if wait.elapsed() >= limit {
                return Err(format!(
                    "no mount after {limit:?}; stderr so far: {}",
                    self.stderr()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(self.started.elapsed())
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A field of the daemon's /proc/PID/status in bytes (e.g. `RssAnon`).
    pub fn status_bytes(&self, key: &str) -> Option<u64> {
        proc_status_bytes(self.pid(), key)
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) of our own child.
        let rc = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(rc, 0, "kill: {}", io::Error::last_os_error());
    }

    /// Waits up to `limit` for the daemon to exit.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                start.elapsed() < limit,
                "daemon still running {limit:?} after it was told to stop; stderr: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then asserts exit 0 and that the mount is gone; returns the daemon's stderr.
    pub fn stop(&mut self) -> String {
        self.signal(libc::SIGTERM);
        self.exits_zero("after SIGTERM")
    }

    /// Waits for the daemon to exit, and asserts that it exits 0 (`when`, for the message) and
    /// leaves no mount; returns its stderr.
    pub fn exits_zero(&mut self, when: &str) -> String {
        let st = self.wait(Duration::from_secs(30));
        let err = self.stderr();
        assert_eq!(
            st.code(),
            Some(0),
            "daemon exit {when}: {st}; stderr:\n{err}"
        );
        assert!(
            !is_mounted(&self.mnt),
            "still mounted after the daemon exited"
        );
        err
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        } else if is_mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}
