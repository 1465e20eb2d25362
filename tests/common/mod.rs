//! Shared helpers of the integration tests. Running the daemon is in `daemon.rs` and making
//! fixtures in `fixtures.rs`, both shared with the benchmark; here are the rest: CI and FUSE
//! checks, temporary directories, running the command line, extended attributes, refresh
//! generations and memory mappings.
#![allow(dead_code)]

mod daemon;
mod fixtures;
mod needs;

pub use daemon::*;
pub use fixtures::*;
pub use needs::*;

use std::fs;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A path as the `&str` a command line takes.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `dd if=PATH ARGS... status=none`: the bytes, or the error text.
pub fn dd(path: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = Command::new("dd")
        .arg(format!("if={}", path.display()))
        .args(args)
        .arg("status=none")
        .output()
        .unwrap();
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A directory removed on drop (after anything mounted in it is gone).
/// Runs the script `tests/python/SCRIPT ARGS` with `py` and returns its stdout, asserting
/// success; a module missing from the Python fails the test naming it, and what installs it.
pub fn python_script(py: &Path, script: &str, args: &[&str]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    run_python(
        py,
        &format!("tests/python/{script}"),
        [path.as_os_str()],
        args,
    )
}

/// Runs `code` with `py -c`, `args` as `sys.argv[1:]`, and returns its stdout, as
/// [`python_script`] does.
pub fn python_code(py: &Path, code: &str, args: &[&str]) -> String {
    run_python(py, "python -c", ["-c".as_ref(), code.as_ref()], args)
}

fn run_python<'a>(
    py: &Path,
    what: &str,
    first: impl IntoIterator<Item = &'a std::ffi::OsStr>,
    args: &[&str],
) -> String {
    let out = Command::new(py).args(first).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if let Some(line) = err.lines().find(|l| l.starts_with("ModuleNotFoundError")) {
        panic!(
            "{} cannot run {what} ({line}): `tests/run` installs tests/python/requirements.txt \
             into .venv",
            py.display()
        );
    }
    assert!(
        out.status.success(),
        "{what} {args:?} failed:\n{}\n{err}",
        String::from_utf8_lossy(&out.stdout),
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Mounts `source` with `-o opts` (none if empty), asserting success.
pub fn mount_ok(source: &Path, opts: &str) -> Mounted {
    let (m, out) = Mounted::try_new(source, opts);
    assert!(
        out.status.success(),
        "mount of {} -o {opts:?} failed ({}): {}",
        source.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    m.expect("mounted after exit 0")
}

/// `text` parsed as JSON, or a failure that shows it.
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "tensormount-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Runs the binary with `args`, capturing everything.
pub fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `sha256sum PATH`: the oracle of a file's digest.
pub fn sha256sum(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success(), "sha256sum: {}", stderr(&out));
    stdout(&out)[..64].to_string()
}

/// Every entry below `dir` (files, directories, links, not followed), sorted.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
            out.push(e.path());
        }
    }
    out.sort();
    out
}

/// The names of the entries of `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Polls `cond` for up to 10 s.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads an extended attribute as text (None if absent).
pub fn getxattr(path: &Path, name: &str) -> Option<String> {
    let out = Command::new("getfattr")
        .args(["--only-values", "-n", name])
        .arg(path)
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap())
}

/// The file name `doc/layout.md` gives a tensor name, before shortening: an independent statement of
/// the encoding (not the daemon's code).
pub fn escaped(name: &str) -> String {
    match name {
        "" => "%".into(),
        "." => "%2E".into(),
        ".." => "%2E%2E".into(),
        _ => name
            .replace('%', "%25")
            .replace('/', "%2F")
            .replace('\0', "%00"),
    }
}

/// The root's `user.tensormount.refresh_generation`: counts the refreshes whose kernel
/// notifications have been sent.
pub fn generation(mnt: &Path) -> u64 {
    let path = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes()).unwrap();
    let name = c"user.tensormount.refresh_generation";
    let mut buf = [0u8; 32];
    // SAFETY: valid NUL-terminated strings and a writable buffer of the given length.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert!(
        n > 0,
        "{}: no refresh generation: {}",
        mnt.display(),
        io::Error::last_os_error()
    );
    std::str::from_utf8(&buf[..n as usize])
        .unwrap()
        .parse()
        .unwrap()
}

/// Waits until `cond` holds, checking it again after each refresh of the mount (never on a
/// timer); fails after 10 s.
pub fn wait_refreshed(mnt: &Path, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    loop {
        let seen = generation(mnt);
        if cond() {
            return;
        }
        while generation(mnt) == seen {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "timed out waiting for {what} (refresh generation {seen})"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Waits for one more refresh of the mount than `seen`.
pub fn wait_generation_after(mnt: &Path, seen: u64) {
    wait_refreshed(mnt, &format!("a refresh after generation {seen}"), || {
        generation(mnt) > seen
    });
}

/// The files `pid` holds (open descriptors and mappings) that have been deleted or replaced
/// since: what a daemon must let go of once nothing uses them.
pub fn deleted_files_held(pid: i32) -> Vec<String> {
    let mut held: Vec<String> = fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| fs::read_link(e.path()).ok())
                .map(|t| t.to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    held.extend(
        fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once('/').map(|(_, p)| format!("/{p}"))),
    );
    held.retain(|t| t.ends_with(" (deleted)"));
    held.sort();
    held.dedup();
    held
}

/// A read-only shared mapping of a file, as a loader using `mmap` makes.
pub struct Map {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Map {
    /// `len` bytes from `offset` (a multiple of the page size).
    pub fn new(f: &File, offset: u64, len: usize) -> io::Result<Map> {
        use std::os::unix::io::AsRawFd;
        // SAFETY: a fresh read-only mapping of an open descriptor; checked below, and unmapped
        // only by `drop`.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map { ptr, len })
    }

    /// The whole file.
    pub fn whole(f: &File) -> Map {
        Map::new(f, 0, f.metadata().unwrap().len() as usize).unwrap()
    }

    /// Locks the mapped pages in memory (faulting them in): the kernel then keeps them cached, even
    /// under the proactive reclaim of a shared VM.
    pub fn lock(&self) -> io::Result<()> {
        // SAFETY: `ptr..ptr + len` is this mapping; mlock only pins its pages.
        match unsafe { libc::mlock(self.ptr, self.len) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// A copy of the mapped bytes (touching every page).
    pub fn bytes(&self) -> Vec<u8> {
        // SAFETY: the mapping is `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }.to_vec()
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}
