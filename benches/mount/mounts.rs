//! Mounts for the benchmark, on the tests' daemon runner (`tests/common/daemon.rs`): every live
//! mount and the fixture root are registered, so that a guard, an error path or a signal
//! (SIGINT, SIGTERM, SIGHUP) unmounts them and removes the fixtures.

use std::ffi::CString;
use std::fs;
use std::io;
use std::ops::Deref;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use crate::daemon::{Mounted, mounted_below, unmount};
use crate::{Res, err};

// ---------------------------------------------------------------------------------------------
// Cleanup: every live mount and the fixture root are registered, so a guard, an error path or a
// signal can undo them.

pub struct Registry {
    pub mounts: Vec<PathBuf>,
    pub root: Option<PathBuf>,
}

pub static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    mounts: Vec::new(),
    root: None,
});

pub fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Lazily unmounts whatever is still registered, then removes the fixture root unless something is
/// still mounted below it.
pub fn cleanup_all() {
    let mut reg = registry();
    for m in reg.mounts.drain(..) {
        unmount(&m);
    }
    if let Some(root) = reg.root.take() {
        if mounted_below(&root) {
            eprintln!(
                "warning: something is still mounted under {}; left in place",
                root.display()
            );
        } else {
            let t = Instant::now();
            match fs::remove_dir_all(&root) {
                Ok(()) => eprintln!(
                    "removed {} in {:.1} s",
                    root.display(),
                    t.elapsed().as_secs_f64()
                ),
                Err(e) => eprintln!("warning: cannot remove {}: {e}", root.display()),
            }
        }
    }
}

/// Removes everything at the end of `main`, also when it returns early or panics.
pub struct CleanupGuard;

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        cleanup_all();
    }
}

/// Blocks the termination signals in every thread and cleans up from a dedicated thread when one
/// arrives. Must run before any other thread starts; children get the default mask back (std resets
/// it before exec).
pub fn install_signal_cleanup() {
    // SAFETY: plain sigset manipulation on a local, then pthread_sigmask on this thread.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: `set` is a valid initialised sigset; sigwait writes the signal number.
        unsafe { libc::sigwait(&set, &mut sig) };
        eprintln!("\nsignal {sig}: unmounting and removing the fixtures");
        cleanup_all();
        std::process::exit(128 + sig);
    });
}

// ---------------------------------------------------------------------------------------------
// Mounts

/// `TENSORMOUNT_TUNING` for the daemon: inherited as it is, or forced to `baseline`.
#[derive(Clone, Copy, PartialEq)]
pub enum Tuning {
    Inherited,
    Baseline,
    /// The defaults with `-o kernel_cache` on every mount.
    KernelCache,
}

impl Tuning {
    pub fn short(self) -> &'static str {
        match self {
            Tuning::Inherited => "tuned",
            Tuning::Baseline => "baseline tuning",
            Tuning::KernelCache => "kernel_cache",
        }
    }

    pub fn label(self) -> String {
        match self {
            Tuning::Baseline => {
                "TENSORMOUNT_TUNING=baseline (1 FUSE thread, fuser defaults)".into()
            }
            Tuning::KernelCache => "-o kernel_cache on every mount (the mount's page cache)".into(),
            Tuning::Inherited => match std::env::var("TENSORMOUNT_TUNING") {
                Ok(v) => format!("TENSORMOUNT_TUNING={v}"),
                Err(_) => "daemon defaults (TENSORMOUNT_TUNING unset)".into(),
            },
        }
    }
}

/// A live mount of the real binary (background mode), registered for cleanup while it lives;
/// unmounted on drop. Derefs to the shared [`Mounted`]: `took`, `path`, `status_bytes`, `wchar`.
pub struct Mount {
    inner: Option<Mounted>,
    mnt: PathBuf,
}

impl Mount {
    /// Mounts `src` on `mnt`, with `-o opts` unless `opts` is empty.
    pub fn new(src: &Path, mnt: &Path, tuning: Tuning, opts: &str) -> Res<Mount> {
        let env: &[(&str, &str)] = match tuning {
            Tuning::Baseline => &[("TENSORMOUNT_TUNING", "baseline")],
            Tuning::Inherited | Tuning::KernelCache => &[],
        };
        let opts = match (tuning, opts) {
            (Tuning::KernelCache, "") => "kernel_cache".to_string(),
            (Tuning::KernelCache, o) => format!("{o},kernel_cache"),
            (_, o) => o.to_string(),
        };
        // Registered first, so a signal during the mount still unmounts it.
        registry().mounts.push(mnt.to_path_buf());
        match Mounted::start(src, mnt, &opts, env) {
            Ok(m) => {
                if !m.stderr.is_empty() {
                    eprintln!("daemon: {}", m.stderr.trim());
                }
                Ok(Mount {
                    inner: Some(m),
                    mnt: mnt.to_path_buf(),
                })
            }
            Err(e) => {
                registry().mounts.retain(|m| m != mnt);
                Err(e)
            }
        }
    }

    /// Unmounts and waits for the daemon to exit.
    pub fn unmount(mut self) -> Res<()> {
        self.inner.take().map_or(Ok(()), Mounted::unmount)
    }
}

impl Deref for Mount {
    type Target = Mounted;

    fn deref(&self) -> &Mounted {
        self.inner.as_ref().expect("a live mount")
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        drop(self.inner.take());
        registry().mounts.retain(|m| *m != self.mnt);
    }
}

pub fn getxattr(path: &Path, name: &str) -> Res<String> {
    let p = CString::new(path.as_os_str().as_bytes()).map_err(err("path"))?;
    let n = CString::new(name).map_err(err("name"))?;
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: valid C strings and a writable buffer of the given length.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(format!(
            "getxattr {} {name}: {}",
            path.display(),
            io::Error::last_os_error()
        ));
    }
    buf.truncate(r as usize);
    String::from_utf8(buf).map_err(err("xattr value"))
}
