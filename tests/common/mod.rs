//! Shared helpers of the integration tests: the binary, temporary directories, real mounts, the
//! Python oracle and a small safetensors writer of the tests' own.
#![allow(dead_code)]

mod needs;
pub use needs::*;

use std::fs;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tensormount")
}

/// Runs `tests/python/oracle.py ARGS` and returns its output (asserting success).
pub fn oracle(py: &Path, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/oracle.py");
    let out = Command::new(py).arg(script).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "oracle {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A directory removed on drop (after anything mounted in it is gone).
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

/// Whether `path` is a mount point now (per /proc/self/mountinfo).
pub fn is_mounted(path: &Path) -> bool {
    let path = path.to_str().unwrap().replace(' ', "\\040");
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path.as_str()))
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

/// A live mount made by the real binary in the background; unmounted on drop.
pub struct Mounted {
    pub dir: PathBuf,
    _tmp: TempDir,
}

impl Mounted {
    /// Mounts `source` with `-o opts` (if not empty) and asserts that the command succeeded.
    pub fn new(source: &Path, opts: &str) -> Mounted {
        let (m, out) = Mounted::try_new(source, opts);
        assert!(out.status.success(), "mount failed: {}", stderr(&out));
        m.expect("mounted")
    }

    /// Mounts and returns the command's output; `None` if nothing got mounted.
    pub fn try_new(source: &Path, opts: &str) -> (Option<Mounted>, Output) {
        let tmp = TempDir::new("mnt");
        let dir = tmp.join("mnt");
        fs::create_dir(&dir).unwrap();
        let mut args = vec![source.to_str().unwrap(), dir.to_str().unwrap()];
        if !opts.is_empty() {
            args.extend(["-o", opts]);
        }
        let out = run(&args);
        let mounted = is_mounted(&dir);
        (mounted.then(|| Mounted { dir, _tmp: tmp }), out)
    }

    pub fn path(&self, p: impl AsRef<Path>) -> PathBuf {
        self.dir.join(p)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
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

/// One tensor for [`write_safetensors`].
pub struct T<'a> {
    pub name: &'a str,
    pub dtype: &'a str,
    pub shape: &'a [usize],
    pub data: Vec<u8>,
}

/// The tests' own safetensors writer, laid out as the reference writes files: header padded with
/// spaces to a multiple of 8, tensors back to back in the given order.
pub fn write_safetensors(path: &Path, tensors: &[T<'_>], metadata: Option<&[(&str, &str)]>) {
    let mut header = serde_json::Map::new();
    if let Some(m) = metadata {
        let m: serde_json::Map<String, serde_json::Value> = m
            .iter()
            .map(|(k, v)| (k.to_string(), (*v).into()))
            .collect();
        header.insert("__metadata__".into(), m.into());
    }
    let mut offset = 0;
    let mut data = Vec::new();
    for t in tensors {
        header.insert(
            t.name.to_string(),
            serde_json::json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, offset + t.data.len()]}),
        );
        offset += t.data.len();
        data.extend_from_slice(&t.data);
    }
    let mut json = serde_json::to_string(&header).unwrap();
    while !(8 + json.len()).is_multiple_of(8) {
        json.push(' ');
    }
    write_raw(path, &json, &data);
}

/// A file made of an 8-byte length, `header` and `data`: for malformed files.
pub fn write_raw(path: &Path, header: &str, data: &[u8]) {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    fs::write(path, bytes).unwrap();
}

/// Deterministic pseudo-random bytes.
pub fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The file name the README gives a tensor name, before shortening: an independent statement of
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

/// A small xorshift generator for readers' choices.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-ish in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A foreground daemon (`tensormount -f`) with its stderr in a file. On drop (if the test did not
/// stop it): lazy unmount, then kill.
pub struct Daemon {
    pub child: Child,
    mnt: PathBuf,
    log: PathBuf,
}

impl Daemon {
    /// Spawns `tensormount -f [opts] src mnt` and waits (up to `limit`) for the mount to appear;
    /// also returns how long that took.
    pub fn spawn(
        src: &Path,
        mnt: &Path,
        opts: &[&str],
        log: &Path,
        limit: Duration,
    ) -> (Daemon, Duration) {
        let start = Instant::now();
        let child = Command::new(bin())
            .arg("-f")
            .args(opts)
            .arg(src)
            .arg(mnt)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(log).unwrap())
            .spawn()
            .unwrap();
        let mut d = Daemon {
            child,
            mnt: mnt.to_path_buf(),
            log: log.to_path_buf(),
        };
        while !is_mounted(mnt) {
            if let Some(st) = d.child.try_wait().unwrap() {
                panic!("daemon exited ({st}) before mounting: {}", d.stderr());
            }
            assert!(
                start.elapsed() < limit,
                "no mount after {limit:?}; stderr so far: {}",
                d.stderr()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let took = start.elapsed();
        (d, took)
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
        let st = self.wait(Duration::from_secs(30));
        let err = self.stderr();
        assert_eq!(
            st.code(),
            Some(0),
            "daemon exit after SIGTERM: {st}; stderr:\n{err}"
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
