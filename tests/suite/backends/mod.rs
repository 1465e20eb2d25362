//! tensormount stacked on real backends from Debian packages, as models are served in practice:
//! - a squashfs image mounted by `squashfuse` (images are a common way to ship models);
//! - `bindfs -o direct_io`, a FUSE source whose files cannot be mapped (like many network stores);
//! - a `squashfuse` process stopped with SIGSTOP, standing in for a stalled network store: the
//!   mount must keep answering everything that does not need the stalled bytes;
//! - `-o source_idle=SECS`: sources nobody uses are closed, so the backend can be unmounted;
//! - more source files than the kernel allows mappings (`vm.max_map_count`);
//! - an S3 bucket mounted by `s3fs`, served by a local S3 server (`s3rver`, from npm, on
//!   127.0.0.1): every tensor, the temporary files s3fs keeps for open files, and a stalled server.
//!
//! Needs root, /dev/fuse and the commands `squashfuse`, `mksquashfs` (squashfs-tools), `bindfs`,
//! `s3fs` and `getfattr` (attr), and for the S3 tests `node` and the npm package s3rver
//! ($TENSORMOUNT_S3RVER, else where tests/run installs it, else `s3rver` on PATH). A missing one
//! fails the test, naming `tests/run`, which installs them all. The tests of this module run one
//! at a time, so that the stall tests' limits are not spent waiting on another test's I/O.
//!
//! The helpers the submodules share are here; each submodule is one theme.

use crate::common::*;

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

mod idle;
mod map_count;
mod s3;
mod squashfuse;

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs the tests of this module one at a time (a failed test must not block the others).
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Asserts that FUSE and every command of `tools` are usable.
fn require(tools: &[&str]) {
    require_fuse();
    require_tools(tools);
}

/// A tensor of the model, and where it is.
struct Placed {
    tensor: Tensor,
    /// The file name of its shard.
    shard: String,
    /// Absolute offset of its first byte in the shard.
    offset: u64,
}

impl std::ops::Deref for Placed {
    type Target = Tensor;
    fn deref(&self) -> &Tensor {
        &self.tensor
    }
}

/// A model directory written by this test: its tensors, with their bytes, and its files.
struct Model {
    dir: PathBuf,
    shards: Vec<String>,
    tensors: Vec<Placed>,
    /// Every regular file of the directory (shards, index, config.json).
    files: Vec<String>,
}

impl Model {
    fn sharded(&self) -> bool {
        self.shards.len() > 1
    }

    fn tensors_of<'a>(&'a self, shard: &'a str) -> impl Iterator<Item = &'a Placed> + 'a {
        self.tensors.iter().filter(move |t| t.shard == shard)
    }
}

/// Writes a model into `dir`: `shards` shard files (a single `model.safetensors` when 1, else
/// `model-0000K-of-0000N.safetensors` plus `model.safetensors.index.json`) of `per_shard` tensors
/// each, tensor `i` being `size(i)` bytes of distinct pseudo-random data, and a `config.json`.
/// Tensors are written in list order, so the last tensor is at the end of the last shard.
fn write_model(
    dir: &Path,
    shards: usize,
    per_shard: usize,
    size: impl Fn(usize) -> usize,
) -> Model {
    fs::create_dir_all(dir).unwrap();
    let dtypes = [("F32", 4), ("BF16", 2), ("U8", 1)];
    let mut model = Model {
        dir: dir.to_path_buf(),
        shards: Vec::new(),
        tensors: Vec::new(),
        files: Vec::new(),
    };
    let mut weight_map = serde_json::Map::new();
    let mut total = 0;
    for k in 0..shards {
        let shard = if shards == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{:05}.safetensors", k + 1, shards)
        };
        let first = model.tensors.len();
        for j in 0..per_shard {
            let i = first + j;
            let (dtype, width) = dtypes[i % dtypes.len()];
            let len = size(i) / width * width;
            let n = len / width;
            let shape = if n.is_multiple_of(16) {
                vec![n / 16, 16]
            } else {
                vec![n]
            };
            // One name with a slash, which the file name escapes.
            let name = if i == 1 {
                "lm_head/weight".to_string()
            } else {
                format!("model.layers.{i}.weight")
            };
            weight_map.insert(name.clone(), shard.clone().into());
            total += len;
            model.tensors.push(Placed {
                tensor: Tensor {
                    name,
                    dtype,
                    shape,
                    data: bytes(len, 1000 + i as u64),
                },
                shard: shard.clone(),
                offset: 0,
            });
        }
        let path = dir.join(&shard);
        let written = model.tensors[first..].iter().map(|t| &t.tensor);
        write_tensors(&path, written, Some(&[("format", "pt")]));
        // The absolute offsets, from the header as written.
        let mut head = [0u8; 8];
        File::open(&path).unwrap().read_exact(&mut head).unwrap();
        let mut at = 8 + u64::from_le_bytes(head);
        for t in &mut model.tensors[first..] {
            t.offset = at;
            at += t.data.len() as u64;
        }
        model.files.push(shard.clone());
        model.shards.push(shard);
    }
    if shards > 1 {
        let index =
            serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        fs::write(
            dir.join("model.safetensors.index.json"),
            serde_json::to_string_pretty(&index).unwrap(),
        )
        .unwrap();
        model.files.push("model.safetensors.index.json".into());
    }
    fs::write(
        dir.join("config.json"),
        r#"{"architectures": ["TestForCausalLM"], "model_type": "test", "hidden_size": 16}"#,
    )
    .unwrap();
    model.files.push("config.json".into());
    model
}

/// The small sharded model of most tests: 3 shards of 4 tensors, about 5 MiB.
fn small_model(dir: &Path) -> Model {
    write_model(dir, 3, 4, |i| 256 * 1024 * (1 + i % 3) + 1000 + 37 * i)
}

/// Asserts `got == want` without printing megabytes: lengths and the first differing offset.
fn same(what: &str, got: &[u8], want: &[u8]) {
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: {} bytes read, {} expected; first difference at {first:?}",
            got.len(),
            want.len()
        );
    }
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn listing(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

/// Checks a tensormount of `model` whose source is `source`: every tensor file in each shard's
/// `.tensors/` and in the merged `model.tensors/` (exact listings, bytes, and for the merged one the
/// source and offset attributes), and every mirrored file. Returns the number of files read.
fn check_tree(mnt: &Path, source: &Path, model: &Model) -> usize {
    let mut read_files = 0;
    let mut dirs: Vec<(PathBuf, Vec<&Placed>)> = Vec::new();
    for shard in &model.shards {
        let stem = shard.trim_end_matches(".safetensors");
        dirs.push((
            mnt.join(format!("{stem}.tensors")),
            model.tensors_of(shard).collect(),
        ));
    }
    if model.sharded() {
        dirs.push((mnt.join("model.tensors"), model.tensors.iter().collect()));
    }
    for (dir, tensors) in &dirs {
        let mut want: BTreeSet<String> = tensors.iter().map(|t| escaped(&t.name)).collect();
        want.insert("__metadata__".into());
        assert_eq!(listing(dir), want, "listing of {}", dir.display());
        for t in tensors {
            let path = dir.join(escaped(&t.name));
            same(&path.display().to_string(), &read(&path), &t.data);
            read_files += 1;
        }
    }
    if model.sharded() {
        for t in &model.tensors {
            let path = mnt.join("model.tensors").join(escaped(&t.name));
            let src = getxattr(&path, "user.safetensors.source");
            assert_eq!(
                src.as_deref(),
                Some(s(&source.join(&t.shard))),
                "{}",
                t.name
            );
            let offset = getxattr(&path, "user.safetensors.offset");
            assert_eq!(offset, Some(t.offset.to_string()), "{}", t.name);
        }
    }
    for f in &model.files {
        same(
            &format!("mirrored {f}"),
            &read(&mnt.join(f)),
            &read(&model.dir.join(f)),
        );
        read_files += 1;
    }
    read_files
}

/// Runs a command to completion, asserting success.
fn ok(cmd: &mut Command) -> Output {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A backend FUSE mount (squashfuse, bindfs), unmounted on drop if still mounted.
struct Backend {
    dir: PathBuf,
}

impl Backend {
    /// Mounts with `cmd` (which daemonizes once mounted) and waits for the mount.
    fn mount(cmd: &mut Command, dir: &Path) -> Backend {
        fs::create_dir_all(dir).unwrap();
        ok(cmd);
        wait_for(&format!("{cmd:?} to mount"), || is_mounted(dir));
        Backend {
            dir: dir.to_path_buf(),
        }
    }

    /// `mksquashfs src IMG`, then `squashfuse IMG dir`; returns the backend and the image path.
    fn squashfuse(src: &Path, tmp: &TempDir, dir: &Path) -> (Backend, PathBuf) {
        let img = tmp.join("model.squashfs");
        ok(Command::new("mksquashfs")
            .arg(src)
            .arg(&img)
            .args(["-noappend", "-quiet"]));
        let b = Backend::mount(Command::new("squashfuse").arg(&img).arg(dir), dir);
        (b, img)
    }

    fn bindfs(opts: &str, src: &Path, dir: &Path) -> Backend {
        Backend::mount(
            Command::new("bindfs").args(["-o", opts]).arg(src).arg(dir),
            dir,
        )
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if !is_mounted(&self.dir) {
            return;
        }
        let ok = Command::new("umount")
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// The pids of running `exe` processes with `arg` among their arguments.
fn pids_of(exe: &str, arg: &Path) -> Vec<i32> {
    let arg = arg.as_os_str().as_encoded_bytes();
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = fs::read(e.path().join("cmdline")).ok()?;
            let mut argv = cmdline.split(|&b| b == 0);
            let argv0 = Path::new(std::str::from_utf8(argv.next()?).ok()?);
            (argv0.file_name()? == std::ffi::OsStr::new(exe) && argv.any(|a| a == arg))
                .then_some(pid)
        })
        .collect()
}

/// The state letter of /proc/PID/stat (`T` when stopped).
fn proc_state(pid: i32) -> char {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    after.trim_start().chars().next().unwrap()
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid found by this test.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill {pid}: {}", std::io::Error::last_os_error());
}

/// A process stopped with SIGSTOP; SIGCONT on drop, so that a failing test never leaves it stopped.
struct Stopped(i32);

impl Stopped {
    fn new(pid: i32) -> Stopped {
        kill(pid, libc::SIGSTOP);
        let stopped = Stopped(pid);
        wait_for("the backend to stop", || proc_state(pid) == 'T');
        stopped
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the process this guard stopped.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// What `pid` holds inside `dir`: open descriptors and mapped files.
fn held_in(pid: i32, dir: &Path) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    let inside = |p: &str| p.starts_with(&prefix) || p == s(dir);
    let mut held: Vec<String> = fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| fs::read_link(e.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .filter(|t| inside(t))
        .map(|t| format!("fd {t}"))
        .collect();
    held.extend(
        fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap()
            .lines()
            .filter_map(|l| l.find('/').map(|i| &l[i..]))
            .filter(|p| inside(p.trim_end_matches(" (deleted)")))
            .map(|p| format!("mapping {p}")),
    );
    held.sort();
    held.dedup();
    held
}

/// Waits up to `limit` for `pid` to hold nothing inside `dir`; panics with what it still holds.
fn wait_released(pid: i32, dir: &Path, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let held = held_in(pid, dir);
        if held.is_empty() {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "after {limit:?} the daemon still holds sources in the backend {}: {held:#?}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `cmd` for at most `limit`. On timeout the child is killed but not waited for (a process
/// blocked in a FUSE request the daemon has taken cannot die before it is answered): it is
/// returned in `Err` to be reaped later.
fn run_limited(cmd: &mut Command, limit: Duration) -> Result<Output, Child> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            return Err(child);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(child.wait_with_output().unwrap())
}

/// With the backend's process `stop` stopped (SIGSTOP), as a network store that stalls: readers
/// of the tensors `readers` of the merged `model.tensors/` of `mnt` (never read before) wait on it,
/// and meanwhile everything that does not need the stalled bytes answers within LIMIT each: a
/// listing, a stat, the attributes, and the tensor `cached`, read before the stall. Once the backend
/// resumes, every reader completes with the right bytes.
fn check_stall(
    model: &Model,
    mnt: &Path,
    daemon: &Daemon,
    stop: i32,
    readers: std::ops::Range<usize>,
    cached: usize,
) {
    const LIMIT: Duration = Duration::from_secs(1);
    let dir = mnt.join("model.tensors");
    let path_of = |t: &Placed| dir.join(escaped(&t.name));

    let cached = &model.tensors[cached];
    same("cached tensor", &read(&path_of(cached)), &cached.data);
    // Pinned in the page cache: this machine's proactive reclaim evicts a few cached pages every
    // second, and a page evicted would have to come from the stalled backend.
    let pinned = Map::whole(&File::open(path_of(cached)).unwrap());
    pinned.lock().unwrap();

    let stopped = Stopped::new(stop);

    // The readers of tensors never read before: they wait on the stopped backend.
    let finished = Arc::new(AtomicUsize::new(0));
    let (tx, results) = mpsc::channel();
    for i in readers.clone() {
        let (tx, finished, path) = (tx.clone(), finished.clone(), path_of(&model.tensors[i]));
        std::thread::spawn(move || {
            let r = fs::read(&path);
            finished.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send((i, r));
        });
    }
    drop(tx);
    std::thread::sleep(Duration::from_millis(300));

    // Meanwhile everything that does not need the stalled bytes answers within LIMIT each.
    let mut failures = Vec::new();
    let mut stuck = Vec::new();
    let tensor = path_of(&model.tensors[readers.start]);
    let mut check = |what: &str, cmd: &mut Command, want: &[&str]| match run_limited(cmd, LIMIT) {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                failures.push(format!("{what}: {}: {}", out.status, stderr(&out)));
            } else if let Some(w) = want.iter().find(|w| !text.contains(**w)) {
                failures.push(format!("{what}: no {w:?} in its output:\n{text}"));
            }
        }
        Err(child) => {
            failures.push(format!("{what}: no answer within {LIMIT:?}"));
            stuck.push(child);
        }
    };
    let names: Vec<String> = model.tensors.iter().map(|t| escaped(&t.name)).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    check(
        "ls -l model.tensors",
        Command::new("ls").arg("-l").arg(&dir),
        &names,
    );
    check(
        "stat of a tensor",
        Command::new("stat").arg(&tensor),
        &["Size"],
    );
    check(
        "getfattr -d of a tensor",
        Command::new("getfattr").arg("-d").arg(&tensor),
        &["user.safetensors.dtype"],
    );
    let (ctx, crx) = mpsc::channel();
    let cached_path = path_of(cached);
    let cached_reader = std::thread::spawn(move || {
        let _ = ctx.send(fs::read(cached_path));
    });
    match crx.recv_timeout(LIMIT) {
        Ok(Ok(b)) if b == cached.data => {}
        Ok(Ok(b)) => failures.push(format!("cached tensor: {} wrong bytes", b.len())),
        Ok(Err(e)) => failures.push(format!("cached tensor: {e}")),
        Err(_) => failures.push(format!("cached tensor: not read within {LIMIT:?}")),
    }
    let done_while_stopped = finished.load(Ordering::SeqCst);

    // Resume the backend: every reader then completes with the right bytes.
    drop(stopped);
    for mut child in stuck {
        let _ = child.wait();
    }
    let _ = cached_reader.join();
    let mut got = 0;
    while let Ok((i, r)) = results.recv_timeout(Duration::from_secs(60)) {
        got += 1;
        match r {
            Ok(b) if b == model.tensors[i].data => {}
            Ok(b) => failures.push(format!("reader {i}: {} wrong bytes", b.len())),
            Err(e) => failures.push(format!("reader {i}: {e}")),
        }
    }
    if got != readers.len() {
        failures.push(format!("{} readers never finished", readers.len() - got));
    }
    if done_while_stopped != 0 {
        failures.push(format!(
            "{done_while_stopped} readers finished while the backend was stopped: the stall did \
             not happen, so this test proves nothing"
        ));
    }
    assert!(
        failures.is_empty(),
        "with the backend stopped and {} readers waiting on it:\n{}\ndaemon log:\n{}",
        readers.len(),
        failures.join("\n"),
        daemon.stderr()
    );
    drop(pinned);
}

/// Unmounts the backend at `backend` while tensormount stays mounted on it at `mnt`: the backend is
/// not busy once the sources are idle. The mount must still answer `ls` afterwards.
fn unmount_under_idle_mount(backend: &Path, mnt: &Path) {
    let out = Command::new("umount").arg(backend).output().unwrap();
    assert!(
        out.status.success(),
        "umount of the backend under an idle tensormount: {}",
        stderr(&out)
    );
    assert!(!is_mounted(backend));
    match run_limited(Command::new("ls").arg(mnt), Duration::from_secs(10)) {
        Ok(out) => assert!(
            out.status.success(),
            "ls of the mount once its backend is gone: {}",
            stderr(&out)
        ),
        Err(mut child) => {
            let _ = Command::new("umount").arg("-l").arg(mnt).status();
            let _ = child.wait();
            panic!("ls of the mount once its backend is gone: no answer within 10 s");
        }
    }
}

/// Prints the first lines of a log file if the test fails.
struct ShowOnPanic(PathBuf);

impl Drop for ShowOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let text = fs::read_to_string(&self.0).unwrap_or_default();
            let head: Vec<&str> = text.lines().take(20).collect();
            let total = text.lines().count();
            eprintln!(
                "{} ({total} lines), first lines:\n{}",
                self.0.display(),
                head.join("\n")
            );
        }
    }
}
