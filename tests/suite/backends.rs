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
//! fails the test, naming `tests/run`, which installs them all. The tests of this file run one at a time,
//! so that the stall tests' limits are not spent waiting on another test's I/O.

use crate::common::*;

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs the tests of this file one at a time (a failed test must not block the others).
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Asserts that FUSE and every command of `tools` are usable.
fn require(tools: &[&str]) {
    require_fuse();
    require_tools(tools);
}

// ------------------------------------------------------------------------------------ fixtures

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

// ------------------------------------------------------------------------------------ backends

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

// ------------------------------------------------------------------------------------ tests

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn squashfuse_backend_serves_every_tensor() {
    let _serial = serial();
    require(&["mksquashfs", "squashfuse", "getfattr"]);
    let start = Instant::now();
    let tmp = TempDir::new("squash");
    let model = small_model(&tmp.join("model"));
    let (backend, _img) = Backend::squashfuse(&model.dir, &tmp, &tmp.join("backend"));
    let tm = Mounted::new(&backend.dir, "");
    let n = check_tree(&tm.dir, &backend.dir, &model);
    assert_eq!(n, 12 + 12 + 5);

    // The official reader, through the mount.
    {
        let py = python();
        let out = oracle(
            &py,
            &["compare", s(&model.dir), s(&tm.path("model.tensors"))],
        );
        assert!(out.starts_with("ok 12 "), "{out}");
        let from_mount = oracle(&py, &["load-all", s(&tm.dir)]);
        let from_source = oracle(&py, &["load-all", s(&model.dir)]);
        assert_eq!(from_mount, from_source);
        eprintln!("the official reader agrees through the mount");
    }
    eprintln!(
        "squashfuse backend: {n} files checked in {:?}",
        start.elapsed()
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn direct_io_backend_is_served_with_pread() {
    let _serial = serial();
    require(&["bindfs", "getfattr"]);
    let start = Instant::now();
    let tmp = TempDir::new("directio");
    let model = small_model(&tmp.join("model"));
    // Files of a direct_io FUSE mount cannot be mapped (mmap fails with ENODEV).
    let backend = Backend::bindfs("direct_io", &model.dir, &tmp.join("backend"));
    let probe = File::open(backend.dir.join(&model.shards[0])).unwrap();
    assert_eq!(
        Map::new(&probe, 0, 4096)
            .err()
            .and_then(|e| e.raw_os_error()),
        Some(libc::ENODEV),
        "bindfs -o direct_io files were expected to refuse mmap"
    );
    drop(probe);

    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let (daemon, _) = Daemon::spawn(&backend.dir, &mnt, &[], &log, Duration::from_secs(30));
    let n = check_tree(&mnt, &backend.dir, &model);

    // --list sees every tensor too, with its source and offset.
    let out = run(&["--list", "--json", s(&backend.dir)]);
    assert!(out.status.success(), "--list: {}", stderr(&out));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let mut want = BTreeSet::new();
    for t in &model.tensors {
        let stem = t.shard.trim_end_matches(".safetensors");
        for dir in [format!("{stem}.tensors"), "model.tensors".to_string()] {
            want.insert((
                format!("{dir}/{}", escaped(&t.name)),
                s(&backend.dir.join(&t.shard)).to_string(),
                t.offset,
                t.data.len() as u64,
            ));
        }
    }
    let got: BTreeSet<(String, String, u64, u64)> = rows
        .as_array()
        .expect("--list --json prints an array")
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap().to_string(),
                r["source"].as_str().unwrap().to_string(),
                r["offset"].as_u64().unwrap(),
                r["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want, "--list --json of {}", backend.dir.display());

    // The daemon says which source it could not map and that it reads it with pread instead.
    let err = daemon.stderr();
    assert!(
        err.lines()
            .any(|l| l.contains(s(&backend.dir)) && l.contains("pread")),
        "no log line names the unmappable source ({}) and pread:\n{err}",
        backend.dir.display()
    );
    drop(daemon);
    eprintln!(
        "direct_io backend: {n} files checked in {:?}",
        start.elapsed()
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_stalled_backend_does_not_freeze_the_mount() {
    let _serial = serial();
    require(&["mksquashfs", "squashfuse", "getfattr"]);
    const READERS: usize = 16;
    let start = Instant::now();
    let tmp = TempDir::new("stall");
    // 17 tensors of 4 MiB in one file; the last one is read before the stall ("cached").
    let model = write_model(&tmp.join("model"), 1, READERS + 1, |_| 4 << 20);
    let (backend, img) = Backend::squashfuse(&model.dir, &tmp, &tmp.join("backend"));
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let (daemon, _) = Daemon::spawn(&backend.dir, &mnt, &[], &log, Duration::from_secs(30));
    let pids = pids_of("squashfuse", &img);
    assert_eq!(
        pids.len(),
        1,
        "squashfuse processes of {}: {pids:?}",
        img.display()
    );
    check_stall(&model, &mnt, &daemon, pids[0], 0..READERS, READERS);
    drop(daemon);
    drop(backend);
    eprintln!("stalled backend: checked in {:?}", start.elapsed());
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

/// The small model behind squashfuse, with tensormount mounted on it with `-o source_idle=2`.
fn idle_fixture(tag: &str) -> (TempDir, Model, Backend, PathBuf, Daemon) {
    let tmp = TempDir::new(tag);
    let model = small_model(&tmp.join("model"));
    let (backend, _img) = Backend::squashfuse(&model.dir, &tmp, &tmp.join("backend"));
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let opts = ["-o", "source_idle=2"];
    let (daemon, _) = Daemon::spawn(&backend.dir, &mnt, &opts, &log, Duration::from_secs(30));
    (tmp, model, backend, mnt, daemon)
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn idle_sources_are_closed_and_the_backend_can_unmount() {
    let _serial = serial();
    require(&["mksquashfs", "squashfuse", "getfattr"]);
    let start = Instant::now();
    let (_tmp, model, backend, mnt, mut daemon) = idle_fixture("idle");
    check_tree(&mnt, &backend.dir, &model);
    eprintln!(
        "held in the backend right after the reads: {:#?}",
        held_in(daemon.pid(), &backend.dir)
    );

    let took = wait_released(daemon.pid(), &backend.dir, Duration::from_secs(10));
    eprintln!("sources released {took:?} after the last read (source_idle=2)");
    unmount_under_idle_mount(&backend.dir, &mnt);
    assert!(daemon.running(), "daemon died: {}", daemon.stderr());
    drop(daemon);
    eprintln!("idle sources: checked in {:?}", start.elapsed());
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn an_open_tensor_keeps_its_source_open_past_the_idle_time() {
    let _serial = serial();
    require(&["mksquashfs", "squashfuse", "getfattr"]);
    let start = Instant::now();
    let (_tmp, model, backend, mnt, daemon) = idle_fixture("idleopen");

    let t = &model.tensors[5];
    let path = mnt.join("model.tensors").join(escaped(&t.name));
    let mut f = File::open(&path).unwrap();
    let mut got = Vec::new();
    f.read_to_end(&mut got).unwrap();
    same("open tensor", &got, &t.data);
    std::thread::sleep(Duration::from_secs(4));
    // Twice the idle time later, the open tensor's source is still open (a descriptor or a
    // mapping of it), and the file still reads right.
    let source = s(&backend.dir.join(&t.shard)).to_string();
    let held = held_in(daemon.pid(), &backend.dir);
    assert!(
        held.iter().any(|h| h.ends_with(&source)),
        "4 s after its last read (source_idle=2), the source {source} of a tensor still open is \
         not held by the daemon; it holds: {held:#?}"
    );
    let mut again = vec![0; t.data.len()];
    f.read_exact_at(&mut again, 0).unwrap();
    same("open tensor, read again", &again, &t.data);

    drop(f);
    let took = wait_released(daemon.pid(), &backend.dir, Duration::from_secs(10));
    eprintln!("source released {took:?} after the last close (source_idle=2)");
    ok(Command::new("umount").arg(&backend.dir));
    drop(daemon);
    eprintln!(
        "idle source held while open: checked in {:?}",
        start.elapsed()
    );
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

/// The 8 bytes of the one tensor of file `i`: distinct for every file.
fn tiny_tensor(i: usize) -> [u8; 8] {
    (i as u64 ^ 0x5DEE_CE66_D1CE_4E5B)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .to_le_bytes()
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn more_files_than_max_map_count() {
    let _serial = serial();
    require_fuse();
    let start = Instant::now();
    let max_map_count: usize = fs::read_to_string("/proc/sys/vm/max_map_count")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let n = max_map_count + 2000;
    let tmp = TempDir::new("manyfiles");
    let src = tmp.join("src");
    fs::create_dir(&src).unwrap();
    // Every file has the same header (padded as the reference writer pads it); only its 8 bytes
    // of data differ.
    let mut header = r#"{"t":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}"#.to_string();
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut prefix = (header.len() as u64).to_le_bytes().to_vec();
    prefix.extend_from_slice(header.as_bytes());
    let file_bytes = |i: usize| [&prefix[..], &tiny_tensor(i)].concat();
    std::thread::scope(|sc| {
        for w in 0..4 {
            let (src, file_bytes) = (&src, &file_bytes);
            sc.spawn(move || {
                for i in (w..n).step_by(4) {
                    fs::write(src.join(format!("f{i}.safetensors")), file_bytes(i)).unwrap();
                }
            });
        }
    });
    let written = start.elapsed();
    eprintln!("{n} files written in {written:?}");

    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    // Warnings go to a log file (a broken daemon may write one per file), shown in part on failure.
    let log_file = tmp.join("records.log");
    let _show = ShowOnPanic(log_file.clone());
    let opts = ["--log-file", s(&log_file)];
    let log = tmp.join("daemon.log");
    let (daemon, mounted) = Daemon::spawn(&src, &mnt, &opts, &log, Duration::from_secs(120));
    let pid = daemon.pid();
    let maps = || {
        fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap()
            .lines()
            .count()
    };

    // Every tensor, by 4 readers; the daemon's mappings are sampled as they go.
    let read_start = Instant::now();
    let most_maps = AtomicUsize::new(maps());
    let failures = Mutex::new(Vec::new());
    let failed = AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for r in 0..4 {
            let (mnt, most_maps, failures, failed) = (&mnt, &most_maps, &failures, &failed);
            sc.spawn(move || {
                for i in (r..n).step_by(4) {
                    let path = mnt.join(format!("f{i}.tensors/t"));
                    let problem = match fs::read(&path) {
                        Ok(b) if b == tiny_tensor(i) => None,
                        Ok(b) => Some(format!("{}: read {b:?}", path.display())),
                        Err(e) => Some(format!("{}: {e}", path.display())),
                    };
                    if let Some(p) = problem
                        && failed.fetch_add(1, Ordering::SeqCst) < 10
                    {
                        failures.lock().unwrap().push(p);
                    }
                    if r == 0 && i % 4096 == 0 {
                        most_maps.fetch_max(maps(), Ordering::SeqCst);
                    }
                }
            });
        }
    });
    let read_took = read_start.elapsed();
    let failed = failed.into_inner();
    assert!(
        failed == 0,
        "{failed} of {n} tensors did not read back; the first ones:\n{}",
        failures.into_inner().unwrap().join("\n"),
    );
    // A sample of mirrored files.
    for i in (0..n).step_by(997) {
        let f = format!("f{i}.safetensors");
        same(&f, &read(&mnt.join(&f)), &file_bytes(i));
    }
    let at_end = maps();
    let most = most_maps.into_inner().max(at_end);
    assert!(
        most <= 10_000,
        "the daemon had {most} mappings ({at_end} at the end) for {n} source files"
    );
    drop(daemon);
    eprintln!(
        "{n} files (max_map_count {max_map_count}): written in {written:?}, mounted in \
         {mounted:?}, every tensor read in {read_took:?}; at most {most} mappings; total {:?}",
        start.elapsed()
    );
}

// ------------------------------------------------------------------------------------ S3

/// Where tests/run installs s3rver (keep in step with it).
const S3RVER_INSTALLED: &str = "/opt/tensormount/s3rver-3.7.1/node_modules/.bin/s3rver";

/// The bucket of the S3 tests, and s3rver's built-in credentials.
const BUCKET: &str = "models";
const S3_CREDENTIALS: &str = "S3RVER:S3RVER";

/// The s3rver command: $TENSORMOUNT_S3RVER, else where tests/run installs it, else `s3rver` on PATH.
fn s3rver_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TENSORMOUNT_S3RVER") {
        return Some(PathBuf::from(p));
    }
    if Path::new(S3RVER_INSTALLED).is_file() {
        return Some(S3RVER_INSTALLED.into());
    }
    on_path("s3rver").then(|| "s3rver".into())
}

/// As [`require`], for the S3 tests: also `s3fs`, `node` and s3rver, whose command it returns.
fn require_s3() -> PathBuf {
    require(&["s3fs", "node", "getfattr"]);
    s3rver_bin().expect(
        "s3rver not found: `tests/run` (as root) installs it, or npm install s3rver@3.7.1 and set \
         TENSORMOUNT_S3RVER to its node_modules/.bin/s3rver",
    )
}

/// A local S3 server (s3rver, serving a directory) on 127.0.0.1 and a port of the kernel's
/// choosing, with one bucket; killed on drop.
struct S3Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl S3Server {
    fn start(bin: &Path, tmp: &TempDir) -> S3Server {
        let data = tmp.join("s3data");
        fs::create_dir_all(&data).unwrap();
        let log = tmp.join("s3rver.log");
        let out = File::create(&log).unwrap();
        let child = Command::new(bin)
            .arg("-d")
            .arg(&data)
            .args(["-a", "127.0.0.1", "-p", "0", "--configure-bucket", BUCKET])
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let mut server = S3Server {
            child,
            port: 0,
            log,
        };
        wait_for("s3rver to listen", || {
            if let Some(st) = server.child.try_wait().unwrap() {
                panic!("s3rver exited ({st}):\n{}", server.log());
            }
            let text = server.log();
            let port = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("S3rver listening on 127.0.0.1:"))
                .and_then(|p| p.trim().parse().ok());
            server.port = port.unwrap_or(0);
            port.is_some()
        });
        server
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A bucket of `server` mounted by s3fs at `dir`, with its temporary files in `tmpdir`; `opts` are
/// more s3fs options (comma-separated, or empty).
fn s3fs(server: &S3Server, tmp: &TempDir, dir: &Path, tmpdir: &Path, opts: &str) -> Backend {
    use std::os::unix::fs::PermissionsExt;
    let passwd = tmp.join("s3fs.passwd");
    fs::write(&passwd, format!("{S3_CREDENTIALS}\n")).unwrap();
    // s3fs refuses a password file others can read.
    fs::set_permissions(&passwd, fs::Permissions::from_mode(0o600)).unwrap();
    fs::create_dir_all(tmpdir).unwrap();
    let mut o = format!(
        "url=http://127.0.0.1:{},use_path_request_style,passwd_file={},tmpdir={}",
        server.port,
        s(&passwd),
        s(tmpdir)
    );
    if !opts.is_empty() {
        o = format!("{o},{opts}");
    }
    Backend::mount(
        Command::new("s3fs").arg(BUCKET).arg(dir).arg("-o").arg(o),
        dir,
    )
}

/// Uploads every file of `model` to the bucket, through its s3fs mount `dir`.
fn upload(model: &Model, dir: &Path) {
    for f in &model.files {
        fs::copy(model.dir.join(f), dir.join(f))
            .unwrap_or_else(|e| panic!("upload of {f} through s3fs: {e}"));
    }
    assert_eq!(
        listing(dir),
        model.files.iter().cloned().collect::<BTreeSet<_>>(),
        "the bucket after the upload"
    );
}

/// The one s3fs process mounted at `dir`.
fn s3fs_pid(dir: &Path) -> i32 {
    let pids = pids_of("s3fs", dir);
    assert_eq!(
        pids.len(),
        1,
        "s3fs processes of {}: {pids:?}",
        dir.display()
    );
    pids[0]
}

/// The deleted temporary files in `tmpdir` that `pid` (s3fs) still holds: s3fs keeps the bytes
/// of every file open through it in one, until the file is released.
fn temporary_files_held(pid: i32, tmpdir: &Path) -> Vec<String> {
    let prefix = format!("{}/", tmpdir.display());
    let mut held = deleted_files_held(pid);
    held.retain(|p| p.starts_with(&prefix));
    held
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn s3_backend_serves_every_tensor() {
    let _serial = serial();
    let s3rver = require_s3();
    let start = Instant::now();
    let tmp = TempDir::new("s3");
    let model = small_model(&tmp.join("model"));
    let server = S3Server::start(&s3rver, &tmp);
    let started = start.elapsed();
    let backend = s3fs(
        &server,
        &tmp,
        &tmp.join("backend"),
        &tmp.join("s3fs.tmp"),
        "",
    );
    upload(&model, &backend.dir);
    let uploaded = start.elapsed();

    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let _show = ShowOnPanic(log.clone());
    let (daemon, _) = Daemon::spawn(&backend.dir, &mnt, &[], &log, Duration::from_secs(30));
    let n = check_tree(&mnt, &backend.dir, &model);
    assert_eq!(n, 12 + 12 + 5);

    // The official reader, through the mount.
    {
        let py = python();
        let out = oracle(
            &py,
            &["compare", s(&model.dir), s(&mnt.join("model.tensors"))],
        );
        assert!(out.starts_with("ok 12 "), "{out}");
        let from_mount = oracle(&py, &["load-all", s(&mnt)]);
        let from_source = oracle(&py, &["load-all", s(&model.dir)]);
        assert_eq!(from_mount, from_source);
        eprintln!("the official reader agrees through the mount");
    }
    drop(daemon);
    drop(backend);
    drop(server);
    eprintln!(
        "s3 backend: server up in {started:?}, model uploaded by {uploaded:?}, {n} files checked; \
         total {:?}",
        start.elapsed()
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn s3fs_temporary_files_are_released_when_sources_go_idle() {
    let _serial = serial();
    let s3rver = require_s3();
    let start = Instant::now();
    let tmp = TempDir::new("s3idle");
    let model = small_model(&tmp.join("model"));
    let server = S3Server::start(&s3rver, &tmp);
    let tmpdir = tmp.join("s3fs.tmp");
    let backend = s3fs(&server, &tmp, &tmp.join("backend"), &tmpdir, "");
    upload(&model, &backend.dir);
    let pid = s3fs_pid(&backend.dir);
    let before = temporary_files_held(pid, &tmpdir);
    assert!(
        before.is_empty(),
        "s3fs holds temporary files once the upload is done: {before:#?}"
    );

    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let _show = ShowOnPanic(log.clone());
    let opts = ["-o", "source_idle=2"];
    let (mut daemon, _) = Daemon::spawn(&backend.dir, &mnt, &opts, &log, Duration::from_secs(30));
    check_tree(&mnt, &backend.dir, &model);
    let during = temporary_files_held(pid, &tmpdir);
    eprintln!(
        "right after the reads: s3fs holds {during:#?}, the daemon holds {:#?}",
        held_in(daemon.pid(), &backend.dir)
    );
    // The sources read last are still open (for 2 s), so s3fs holds their bytes: otherwise this
    // test would prove nothing.
    assert!(
        !during.is_empty(),
        "s3fs held no temporary file right after the reads: it no longer keeps the bytes of open \
         files in them, and this test proves nothing"
    );

    // Once the sources are idle, the daemon lets go of them, and so s3fs of their bytes.
    let took = wait_released(daemon.pid(), &backend.dir, Duration::from_secs(10));
    let released = Instant::now();
    loop {
        let held = temporary_files_held(pid, &tmpdir);
        if held.is_empty() {
            break;
        }
        assert!(
            released.elapsed() < Duration::from_secs(5),
            "the daemon let go of its sources {took:?} after the last read (source_idle=2), but \
             5 s later s3fs still holds these temporary files: {held:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "sources released {took:?} after the last read (source_idle=2), s3fs's temporary files \
         {:?} later",
        released.elapsed()
    );

    unmount_under_idle_mount(&backend.dir, &mnt);
    assert!(daemon.running(), "daemon died: {}", daemon.stderr());
    drop(daemon);
    drop(backend);
    drop(server);
    eprintln!("s3fs temporary files: checked in {:?}", start.elapsed());
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_stalled_s3_server_does_not_freeze_the_mount() {
    let _serial = serial();
    let s3rver = require_s3();
    const READERS: usize = 16;
    let start = Instant::now();
    let tmp = TempDir::new("s3stall");
    // s3fs reads ahead (multipart_size x parallel_count, 50 MB by default, here 5 MB) from every
    // read it makes, and keeps those bytes while the file is open: the mount's read of the header
    // brings in the first 5 MB, so the first tensor (6 MiB) keeps them from the readers' tensors
    // (1 MiB each). The last one, read before the stall, is at the end of the file.
    let model = write_model(&tmp.join("model"), 1, READERS + 2, |i| {
        if i == 0 { 6 << 20 } else { 1 << 20 }
    });
    let server = S3Server::start(&s3rver, &tmp);
    let backend = s3fs(
        &server,
        &tmp,
        &tmp.join("backend"),
        &tmp.join("s3fs.tmp"),
        "multipart_size=5,parallel_count=1",
    );
    upload(&model, &backend.dir);
    let uploaded = start.elapsed();
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let (daemon, _) = Daemon::spawn(&backend.dir, &mnt, &[], &log, Duration::from_secs(30));
    check_stall(
        &model,
        &mnt,
        &daemon,
        server.pid(),
        1..READERS + 1,
        READERS + 1,
    );
    drop(daemon);
    drop(backend);
    drop(server);
    eprintln!(
        "stalled S3 server: model uploaded by {uploaded:?}, checked in {:?}",
        start.elapsed()
    );
}
