//! The mount benchmark: builds its own fixtures, mounts them with the real daemon, and prints one
//! table in which every tensormount figure stands next to a baseline measured in the same run.
//!
//! ```text
//! cargo bench --bench mount                    full sizes (1 GiB tensors, 163 shards / 92,000 tensors)
//! cargo bench --bench mount -- --quick         small sizes, one run per row (a smoke test)
//! options: --dir PATH (fixtures go in PATH/tensormount-bench-PID, default $TMPDIR or /tmp)
//!          --baseline-too (a second table with TENSORMOUNT_TUNING=baseline)
//!          --runs N (measured runs per row; default 5, quick 1)
//! ```
//!
//! Method: the sources' page cache is hot (each
//! source is read once first); each row is the median of N runs after one discarded warm-up run
//! (quick: one run, no warm-up); "cold" means a fresh mount for every run, and right before each
//! fresh mount about 1.5x the bytes the run will cache are touched as anonymous memory and freed,
//! so the FUSE page cache is not filled from RAM the VM's free-page reporting has handed back to
//! the host. Direct baselines `pread` the source at the tensor's `user.safetensors.offset`. Reads
//! are 1 MiB. GB = 1e9 bytes. Commands (ls, find, getfattr) are timed by wall clock with their
//! output sent to /dev/null. Needs root and /dev/fuse; everything mounted is unmounted and the
//! fixtures removed at the end, on errors and on SIGINT/SIGTERM/SIGHUP.
//!
//! Rows (sizes of the full run; --quick divides the data by 16 and item 6 by about 10):
//! 1. `big.weight`, a 1 GiB F16 tensor at a non-page-aligned offset: open + 1 MiB preads of the
//!    tensor file, first read after a fresh mount (cold) and second read (warm), against 1 MiB
//!    preads of the source at the tensor's offset.
//! 2. The same tensor mmapped (PROT_READ, MAP_SHARED) with one byte of every 4 KiB page read,
//!    mapping and unmapping included; cold and warm (a second mapping); baseline: the same on the
//!    page-aligned window of the source around the tensor.
//! 3. 4 threads, each reading its own 256 MiB tensor with 1 MiB preads, started together;
//!    aggregate = 1 GiB / (last finish - first start); baseline: the 4 source ranges.
//! 4. 20,000 4 KiB preads at random 4 KiB-aligned offsets of the tensor file, 1 thread; cold right
//!    after mount, warm after the whole tensor was read once; baseline: the same offsets plus the
//!    tensor's offset in the source.
//! 5. benches/load_all.py, a 1 GiB model of 147 tensors: `numpy.fromfile` (dtype and shape from
//!    the xattrs) on every file of `model.tensors/`, against `safe_open(..).get_tensor` for every
//!    name on the source file; one Python process per mount, so pass 1 is cold and pass 2 warm.
//! 6. A sparse 163-shard, 92,000-tensor model with an index: mount time (the foreground command's
//!    wall time until the mount is live), the daemon's RssAnon / RssFile, and `ls -l` right after
//!    mount, `ls -f`, `ls -l`, `find`, `getfattr -R -d` (warm) on the merged `model.tensors/`
//!    against the same commands on a local directory of as many empty files carrying the same 6
//!    user xattrs, and the whole `getfattr -d` command on one tensor.
//! 7. The mirrored `model.safetensors` through the mount: safetensors loading it (cold, warm) and
//!    1 MiB preads of the whole file, against the source file; plus which path served it, judged
//!    by how many bytes the daemon wrote to /dev/fuse (/proc/PID/io wchar) during the cold read.
//! 8. Following SOURCE, on a directory of models holding a sparse copy of the item 6 model, all
//!    against the full mount time of that model: one shard replaced by rename (a copy renamed
//!    over it), until a tensor of it shows a new inode through the merged directory (inotify, so
//!    the 100 ms quiet period is included), and an open + 4 KiB read of such a tensor right after
//!    the rename with polling off (the open finds its source replaced and has the directory read
//!    again), against the same on a tensor of an unchanged shard; a second copy of the model
//!    renamed into SOURCE, until a tensor of it can be read by its exact path (the lookup builds
//!    it) and until the root's link count shows it (inotify, no lookup).
//! 9. Storage far away: the item 6 model served by `examples/slowfs.rs`, a FUSE passthrough that
//!    delays every request by 20 ms (requests overlap, as on a network store): the mount time,
//!    against the same mount of the local model. Item 5's first loader also reports the daemon's
//!    resident memory (RssAnon + RssFile) after reading the whole model twice, against right after
//!    mounting.

use std::ffi::{CString, OsString};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tensormount");
const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const PAGE: u64 = 4096;
/// Columns of the random-looking test tensors (F16).
const COLS: u64 = 16384;
/// The real checkpoint item 6 imitates.
const LARGE_SHARDS: usize = 163;
const LARGE_TENSORS: usize = 92_000;

type Res<T> = Result<T, String>;

fn err<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}

// ---------------------------------------------------------------------------------------------
// Options and sizes

struct Opts {
    quick: bool,
    dir: PathBuf,
    baseline_too: bool,
    runs: usize,
    warmup: usize,
}

fn usage() -> &'static str {
    "usage: cargo bench --bench mount [-- [--quick] [--dir PATH] [--baseline-too] [--runs N]]"
}

fn parse_args() -> Res<Opts> {
    let mut o = Opts {
        quick: false,
        dir: std::env::temp_dir(),
        baseline_too: false,
        runs: 0,
        warmup: 1,
    };
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        match a.to_str().unwrap_or("") {
            "--quick" => o.quick = true,
            "--baseline-too" => o.baseline_too = true,
            // cargo bench passes --bench to harness = false targets.
            "--bench" => {}
            "--dir" => o.dir = PathBuf::from(args.next().ok_or("--dir needs a PATH")?),
            "--runs" => {
                o.runs = args
                    .next()
                    .and_then(|v| v.to_str().and_then(|s| s.parse().ok()))
                    .filter(|n| *n > 0)
                    .ok_or("--runs needs a positive number")?
            }
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0)
            }
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    if o.runs == 0 {
        o.runs = if o.quick { 1 } else { 5 };
    }
    if o.quick {
        o.warmup = 0;
    }
    Ok(o)
}

/// Fixture sizes: full, or a small version for --quick.
struct Sizes {
    /// The single large tensor of items 1, 2, 4 (bytes).
    big: u64,
    /// Each of the 4 tensors of item 3 (bytes).
    par: u64,
    /// Hidden size and vocabulary of the multi-tensor model of items 5 and 7 (16 layers).
    hidden: u64,
    vocab: u64,
    layers: u64,
    /// Shards and tensors of the item 6 model.
    shards: usize,
    tensors: usize,
    /// 4 KiB random reads per run (item 4).
    rand_ops: usize,
    /// Runs and time budget of the slow `getfattr -d` over every tensor.
    getfattr_runs: usize,
    getfattr_budget: Duration,
    /// Runs of `getfattr -d` on one tensor.
    one_getfattr_runs: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            let shards = 16;
            Sizes {
                big: 64 * MIB,
                par: 16 * MIB,
                hidden: 512,
                vocab: 4096,
                layers: 16,
                shards,
                tensors: LARGE_TENSORS * shards / LARGE_SHARDS,
                rand_ops: 2000,
                getfattr_runs: 1,
                getfattr_budget: Duration::ZERO,
                one_getfattr_runs: 5,
            }
        } else {
            Sizes {
                big: GIB,
                par: GIB / 4,
                hidden: 2048,
                vocab: 16384,
                layers: 16,
                shards: LARGE_SHARDS,
                tensors: LARGE_TENSORS,
                rand_ops: 20_000,
                getfattr_runs: 3,
                getfattr_budget: Duration::from_secs(100),
                one_getfattr_runs: 21,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cleanup: every live mount and the fixture root are registered, so a guard, an error path or a
// signal can undo them.

struct Registry {
    mounts: Vec<PathBuf>,
    root: Option<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    mounts: Vec::new(),
    root: None,
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

fn quiet(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Lazily unmounts whatever is still registered, then removes the fixture root unless something is
/// still mounted below it.
fn cleanup_all() {
    let mut reg = registry();
    for m in reg.mounts.drain(..) {
        if !quiet(Command::new("umount").arg(&m)) {
            quiet(Command::new("umount").arg("-l").arg(&m));
        }
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

fn mounted_below(root: &Path) -> bool {
    let prefix = root.as_os_str().as_bytes();
    fs::read_to_string("/proc/self/mountinfo").is_ok_and(|info| {
        info.lines().any(|l| {
            l.split(' ')
                .nth(4)
                .is_some_and(|p| p.as_bytes().starts_with(prefix))
        })
    })
}

/// Removes everything at the end of `main`, also when it returns early or panics.
struct CleanupGuard;

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        cleanup_all();
    }
}

/// Blocks the termination signals in every thread and cleans up from a dedicated thread when one
/// arrives. Must run before any other thread starts; children get the default mask back (std resets
/// it before exec).
fn install_signal_cleanup() {
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
enum Tuning {
    Inherited,
    Baseline,
}

impl Tuning {
    fn short(self) -> &'static str {
        match self {
            Tuning::Inherited => "tuned",
            Tuning::Baseline => "baseline tuning",
        }
    }

    fn label(self) -> String {
        match self {
            Tuning::Baseline => {
                "TENSORMOUNT_TUNING=baseline (1 FUSE thread, fuser defaults)".into()
            }
            Tuning::Inherited => match std::env::var("TENSORMOUNT_TUNING") {
                Ok(v) => format!("TENSORMOUNT_TUNING={v}"),
                Err(_) => "daemon defaults (TENSORMOUNT_TUNING unset)".into(),
            },
        }
    }
}

/// A live mount made by the real binary (background mode). Unmounts on drop.
struct Mount {
    mnt: PathBuf,
    pid: Option<i32>,
    took: Duration,
    live: bool,
}

impl Mount {
    /// Mounts `src` on `mnt`, with `-o opts` unless `opts` is empty.
    fn new(src: &Path, mnt: &Path, tuning: Tuning, opts: &str) -> Res<Mount> {
        let mut cmd = Command::new(BIN);
        cmd.arg(src).arg(mnt).stdin(Stdio::null());
        if !opts.is_empty() {
            cmd.args(["-o", opts]);
        }
        if tuning == Tuning::Baseline {
            cmd.env("TENSORMOUNT_TUNING", "baseline");
        }
        // Registered first, so a signal during the mount still unmounts it.
        registry().mounts.push(mnt.to_path_buf());
        let t = Instant::now();
        let out = cmd.output();
        let took = t.elapsed();
        let out = match out {
            Ok(o) if o.status.success() => o,
            other => {
                registry().mounts.retain(|m| m != mnt);
                return Err(match other {
                    Ok(o) => format!(
                        "mounting {} failed ({}): {}",
                        src.display(),
                        o.status,
                        String::from_utf8_lossy(&o.stderr).trim()
                    ),
                    Err(e) => format!("cannot run {BIN}: {e}"),
                });
            }
        };
        if !out.stderr.is_empty() {
            eprintln!("daemon: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(Mount {
            mnt: mnt.to_path_buf(),
            pid: find_daemon(src, mnt),
            took,
            live: true,
        })
    }

    fn path(&self, p: &str) -> PathBuf {
        self.mnt.join(p)
    }

    /// Unmounts and waits for the daemon to exit.
    fn unmount(mut self) -> Res<()> {
        self.finish()
    }

    fn finish(&mut self) -> Res<()> {
        if !self.live {
            return Ok(());
        }
        self.live = false;
        let mut res = Ok(());
        if !quiet(Command::new("umount").arg(&self.mnt)) {
            res = Err(format!(
                "umount {} failed; detached lazily",
                self.mnt.display()
            ));
            quiet(Command::new("umount").arg("-l").arg(&self.mnt));
        }
        registry().mounts.retain(|m| *m != self.mnt);
        if let Some(pid) = self.pid {
            let t = Instant::now();
            // SAFETY: kill with signal 0 only checks that the process exists.
            while unsafe { libc::kill(pid, 0) } == 0 && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        res
    }

    /// A field of /proc/PID/status in bytes (e.g. RssAnon).
    fn status_bytes(&self, key: &str) -> Option<u64> {
        let s = fs::read_to_string(format!("/proc/{}/status", self.pid?)).ok()?;
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

    /// `wchar` of /proc/PID/io: every byte the daemon wrote, FUSE replies included.
    fn wchar(&self) -> Option<u64> {
        let s = fs::read_to_string(format!("/proc/{}/io", self.pid?)).ok()?;
        s.lines()
            .find_map(|l| l.strip_prefix("wchar: "))?
            .parse()
            .ok()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The background daemon: the only process whose argv is exactly `BIN SRC MNT` once the
/// foreground command has returned.
fn find_daemon(src: &Path, mnt: &Path) -> Option<i32> {
    let want: [&[u8]; 3] = [
        BIN.as_bytes(),
        src.as_os_str().as_bytes(),
        mnt.as_os_str().as_bytes(),
    ];
    fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
        // Any `-o OPTS` comes after the three.
        (args.len() >= 3 && args[..3] == want).then_some(pid)
    })
}

fn getxattr(path: &Path, name: &str) -> Res<String> {
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

fn setxattr(path: &CString, name: &str, value: &str) -> Res<()> {
    let n = CString::new(name).map_err(err("name"))?;
    // SAFETY: valid C strings and a readable value buffer of the given length.
    let r = unsafe {
        libc::setxattr(
            path.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r != 0 {
        return Err(format!("setxattr {name}: {}", io::Error::last_os_error()));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Fixtures

struct TensorSpec {
    name: String,
    dtype: &'static str,
    shape: Vec<u64>,
}

fn dtype_size(dtype: &str) -> u64 {
    match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        _ => 1,
    }
}

impl TensorSpec {
    fn new(name: impl Into<String>, dtype: &'static str, shape: &[u64]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
        }
    }

    fn bytes(&self) -> u64 {
        self.shape.iter().product::<u64>() * dtype_size(self.dtype)
    }
}

/// Header JSON (in the given order, padded with spaces to 8 bytes as the official writer does)
/// and each tensor's data offsets.
fn header(tensors: &[TensorSpec]) -> (String, Vec<(u64, u64)>) {
    let mut h = String::from(r#"{"__metadata__":{"format":"pt"}"#);
    let mut offsets = Vec::with_capacity(tensors.len());
    let mut pos = 0;
    for t in tensors {
        let end = pos + t.bytes();
        let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
        let _ = write!(
            h,
            r#","{}":{{"dtype":"{}","shape":[{}],"data_offsets":[{pos},{end}]}}"#,
            t.name,
            t.dtype,
            shape.join(",")
        );
        offsets.push((pos, end));
        pos = end;
    }
    h.push('}');
    while (h.len()) % 8 != 0 {
        h.push(' ');
    }
    (h, offsets)
}

/// Writes a safetensors file whose data is pseudo-random bytes, synced to disk so no writeback
/// runs during the measurements. Returns the data section's length.
fn write_random_safetensors(path: &Path, tensors: &[TensorSpec], seed: u64) -> Res<u64> {
    let (h, offsets) = header(tensors);
    let data_len = offsets.last().map_or(0, |o| o.1);
    let mut f = File::create(path).map_err(err(path.display()))?;
    f.write_all(&(h.len() as u64).to_le_bytes())
        .and_then(|_| f.write_all(h.as_bytes()))
        .map_err(err(path.display()))?;
    let mut state = seed | 1;
    let mut chunk = vec![0u64; (8 * MIB / 8) as usize];
    let mut left = data_len;
    while left > 0 {
        for w in chunk.iter_mut() {
            // xorshift64
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *w = state;
        }
        // SAFETY: a u64 slice viewed as bytes, same length in bytes, alignment 1 for u8.
        let bytes =
            unsafe { std::slice::from_raw_parts(chunk.as_ptr().cast::<u8>(), chunk.len() * 8) };
        let n = left.min(bytes.len() as u64) as usize;
        f.write_all(&bytes[..n]).map_err(err(path.display()))?;
        left -= n as u64;
    }
    f.sync_all().map_err(err(path.display()))?;
    Ok(data_len)
}

/// Reads a file once so its page cache is hot.
fn warm_file(path: &Path) -> Res<()> {
    let f = File::open(path).map_err(err(path.display()))?;
    let len = f.metadata().map_err(err(path.display()))?.len();
    let mut buf = vec![0u8; MIB as usize];
    read_range(&f, 0, len, &mut buf)
}

/// The data fixtures of items 1-5 and 7, in `root/data`.
struct DataFixture {
    dir: PathBuf,
    big_file: PathBuf,
    model_file: PathBuf,
    model_bytes: u64,
    model_tensors: usize,
}

const PAR: [&str; 4] = [
    "par.0.weight",
    "par.1.weight",
    "par.2.weight",
    "par.3.weight",
];

fn build_data(root: &Path, sz: &Sizes) -> Res<DataFixture> {
    let dir = root.join("data");
    fs::create_dir_all(&dir).map_err(err(dir.display()))?;
    // A small tensor first, so big.weight starts at an offset that is not page-aligned, as in
    // real checkpoints.
    let mut big = vec![
        TensorSpec::new("norm.weight", "F32", &[1000]),
        TensorSpec::new("big.weight", "F16", &[sz.big / 2 / COLS, COLS]),
    ];
    for p in PAR {
        big.push(TensorSpec::new(p, "F16", &[sz.par / 2 / COLS, COLS]));
    }
    let big_file = dir.join("big.safetensors");
    write_random_safetensors(&big_file, &big, 0x9e37_79b9_7f4a_7c15)?;

    let (h, v) = (sz.hidden, sz.vocab);
    let mut model = vec![TensorSpec::new("model.embed_tokens.weight", "F16", &[v, h])];
    for l in 0..sz.layers {
        for p in ["q_proj", "k_proj", "v_proj", "o_proj"] {
            model.push(TensorSpec::new(
                format!("model.layers.{l}.self_attn.{p}.weight"),
                "F16",
                &[h, h],
            ));
        }
        for p in ["gate_proj", "up_proj", "down_proj"] {
            model.push(TensorSpec::new(
                format!("model.layers.{l}.mlp.{p}.weight"),
                "F16",
                &[h, h],
            ));
        }
        for p in ["input_layernorm", "post_attention_layernorm"] {
            model.push(TensorSpec::new(
                format!("model.layers.{l}.{p}.weight"),
                "F32",
                &[h],
            ));
        }
    }
    model.push(TensorSpec::new("model.norm.weight", "F32", &[h]));
    model.push(TensorSpec::new("lm_head.weight", "F16", &[v, h]));
    let model_file = dir.join("model.safetensors");
    let model_bytes = write_random_safetensors(&model_file, &model, 0x2545_f491_4f6c_dd1d)?;
    warm_file(&big_file)?;
    warm_file(&model_file)?;
    Ok(DataFixture {
        dir,
        big_file,
        model_file,
        model_bytes,
        model_tensors: model.len(),
    })
}

/// The item 6 model (sparse shards plus index) and its local baseline directory.
struct LargeFixture {
    dir: PathBuf,
    local: PathBuf,
    entries: usize,
    /// A tensor of the middle shard, and one of the first.
    one_tensor: String,
    first_tensor: String,
}

fn large_names(n: usize) -> Vec<TensorSpec> {
    let mut out = Vec::with_capacity(n);
    'outer: for l in 0.. {
        for e in 0..256 {
            for p in ["gate_proj", "up_proj", "down_proj"] {
                if out.len() >= n {
                    break 'outer;
                }
                let base = format!("model.layers.{l}.mlp.experts.{e}.{p}");
                out.push(TensorSpec::new(
                    format!("{base}.weight"),
                    "F8_E4M3",
                    &[2048, 2048],
                ));
                if out.len() < n {
                    out.push(TensorSpec::new(
                        format!("{base}.weight_scale_inv"),
                        "F32",
                        &[16, 56],
                    ));
                }
            }
        }
    }
    out
}

fn build_large(root: &Path, sz: &Sizes) -> Res<LargeFixture> {
    let dir = root.join("large");
    let local = root.join("local").join("model.tensors");
    fs::create_dir_all(&dir).map_err(err(dir.display()))?;
    fs::create_dir_all(&local).map_err(err(local.display()))?;
    let tensors = large_names(sz.tensors);
    let per = tensors.len().div_ceil(sz.shards);
    let mut weight_map = String::new();
    let mut total = 0u64;
    for (i, shard) in tensors.chunks(per).enumerate() {
        let name = format!("model-{:05}-of-{:05}.safetensors", i + 1, sz.shards);
        let path = dir.join(&name);
        let (h, offsets) = header(shard);
        let data_len = offsets.last().map_or(0, |o| o.1);
        total += data_len;
        let mut f = File::create(&path).map_err(err(path.display()))?;
        f.write_all(&(h.len() as u64).to_le_bytes())
            .and_then(|_| f.write_all(h.as_bytes()))
            // Sparse: the data section is a hole.
            .and_then(|_| f.set_len(8 + h.len() as u64 + data_len))
            .map_err(err(path.display()))?;
        let source = fs::canonicalize(&path).map_err(err(path.display()))?;
        let source = source.to_string_lossy();
        for (t, (b, e)) in shard.iter().zip(offsets) {
            if !weight_map.is_empty() {
                weight_map.push(',');
            }
            let _ = write!(weight_map, r#""{}":"{name}""#, t.name);
            // The local baseline: an empty file with the 6 xattrs the mount shows.
            let file = local.join(&t.name);
            File::create(&file).map_err(err(file.display()))?;
            let c = CString::new(file.as_os_str().as_bytes()).map_err(err("path"))?;
            let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
            setxattr(&c, "user.safetensors.data_offsets", &format!("[{b},{e}]"))?;
            setxattr(&c, "user.safetensors.dtype", t.dtype)?;
            setxattr(&c, "user.safetensors.name", &t.name)?;
            let abs = 8 + h.len() as u64 + b;
            setxattr(&c, "user.safetensors.offset", &abs.to_string())?;
            setxattr(
                &c,
                "user.safetensors.shape",
                &format!("[{}]", shape.join(",")),
            )?;
            setxattr(&c, "user.safetensors.source", &source)?;
        }
    }
    // The merged directory also holds __metadata__ (the index has metadata).
    File::create(local.join("__metadata__")).map_err(err("__metadata__"))?;
    let index = format!(r#"{{"metadata":{{"total_size":{total}}},"weight_map":{{{weight_map}}}}}"#);
    let ipath = dir.join("model.safetensors.index.json");
    fs::write(&ipath, index).map_err(err(ipath.display()))?;
    let one_tensor = tensors
        .get(tensors.len() / 2)
        .map(|t| t.name.clone())
        .unwrap_or_default();
    Ok(LargeFixture {
        dir,
        local,
        entries: tensors.len() + 1,
        one_tensor,
        first_tensor: tensors.first().map(|t| t.name.clone()).unwrap_or_default(),
    })
}

// ---------------------------------------------------------------------------------------------
// Measurement primitives

/// Reads `len` bytes from `off` with `buf`-sized preads.
fn read_range(f: &File, off: u64, len: u64, buf: &mut [u8]) -> Res<()> {
    let mut pos = 0;
    while pos < len {
        let n = (len - pos).min(buf.len() as u64) as usize;
        match f.read_at(&mut buf[..n], off + pos) {
            Ok(0) => return Err(format!("short read at {}", off + pos)),
            Ok(got) => pos += got as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read at {}: {e}", off + pos)),
        }
    }
    Ok(())
}

/// Seconds to open `path` and read `len` bytes at `off` with 1 MiB preads.
fn timed_read(path: &Path, off: u64, len: u64) -> Res<f64> {
    let mut buf = vec![1u8; MIB as usize];
    let t = Instant::now();
    let f = File::open(path).map_err(err(path.display()))?;
    read_range(&f, off, len, &mut buf)?;
    drop(f);
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds to open `path`, mmap `len` bytes at `off` (read-only, shared, as numpy.memmap does),
/// read one byte of every page, and unmap.
fn timed_mmap_touch(path: &Path, off: u64, len: u64) -> Res<f64> {
    let t = Instant::now();
    let f = File::open(path).map_err(err(path.display()))?;
    let aligned = off & !(PAGE - 1);
    let map_len = (len + off - aligned) as usize;
    // SAFETY: a fresh read-only mapping of an open file; unmapped below before returning.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            aligned as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!(
            "mmap {}: {}",
            path.display(),
            io::Error::last_os_error()
        ));
    }
    let base = p.cast::<u8>();
    let mut sum = 0u64;
    let mut i = (off - aligned) as usize;
    while i < map_len {
        // SAFETY: i < map_len, inside the mapping.
        sum = sum.wrapping_add(u64::from(unsafe { std::ptr::read_volatile(base.add(i)) }));
        i = (i / PAGE as usize + 1) * PAGE as usize;
    }
    // SAFETY: the mapping made above, with its length.
    unsafe { libc::munmap(p, map_len) };
    drop(f);
    std::hint::black_box(sum);
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds (first start to last end) for 4 threads each reading its own range with 1 MiB preads.
fn timed_parallel(ranges: &[(PathBuf, u64, u64)]) -> Res<f64> {
    let barrier = Barrier::new(ranges.len());
    let results: Vec<Res<(Instant, Instant)>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranges
            .iter()
            .map(|(path, off, len)| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut buf = vec![1u8; MIB as usize];
                    barrier.wait();
                    let t = Instant::now();
                    let f = File::open(path).map_err(err(path.display()))?;
                    read_range(&f, *off, *len, &mut buf)?;
                    Ok((t, Instant::now()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("reader panicked".into())))
            .collect()
    });
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    for r in results {
        let (a, b) = r?;
        first = Some(first.map_or(a, |f| f.min(a)));
        last = Some(last.map_or(b, |l| l.max(b)));
    }
    match (first, last) {
        (Some(a), Some(b)) => Ok((b - a).as_secs_f64()),
        _ => Err("no readers".into()),
    }
}

/// 4 KiB-aligned (relative to the tensor) offsets within `len`, from a fixed seed.
fn random_offsets(len: u64, ops: usize, seed: u64) -> Vec<u64> {
    let pages = len / PAGE;
    let mut s = seed | 1;
    (0..ops)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % pages) * PAGE
        })
        .collect()
}

/// Seconds for single-threaded 4 KiB preads at `base + o` for each offset.
fn timed_random(path: &Path, base: u64, offsets: &[u64]) -> Res<f64> {
    let f = File::open(path).map_err(err(path.display()))?;
    let mut buf = vec![1u8; PAGE as usize];
    let t = Instant::now();
    for o in offsets {
        let n = f
            .read_at(&mut buf, base + o)
            .map_err(err(format!("random read at {o}")))?;
        if n != PAGE as usize {
            return Err(format!("short random read at {o}"));
        }
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds of wall time of a command with its output sent to /dev/null; fails on a non-zero exit.
fn timed_cmd(args: &[&std::ffi::OsStr]) -> Res<f64> {
    let (prog, rest) = args.split_first().ok_or("empty command")?;
    let t = Instant::now();
    let status = Command::new(prog)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(err(format!("{prog:?}")))?;
    let secs = t.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!("{:?} failed: {status}", args));
    }
    Ok(secs)
}

/// Touches `bytes` of anonymous memory and frees it, so the next allocations (FUSE page cache,
/// loader buffers) reuse RAM that the host has already backed (VM free-page-reporting artifact).
fn pretouch(bytes: u64) {
    let avail = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(bytes, |kb| kb * 1024 / 2);
    let len = bytes.min(avail) as usize;
    if len == 0 {
        return;
    }
    // SAFETY: a private anonymous mapping written page by page and unmapped right after.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return;
        }
        let base = p.cast::<u8>();
        let mut i = 0;
        while i < len {
            std::ptr::write_volatile(base.add(i), 1);
            i += PAGE as usize;
        }
        libc::munmap(p, len);
    }
}

/// Bytes to pre-touch before a cold run that will cache `cached` bytes.
fn pretouch_for(cached: u64) -> u64 {
    (cached / 2 * 3 + 256 * MIB).min(4 * GIB)
}

/// Median, min and max.
fn stats(v: &[f64]) -> Option<(f64, f64, f64)> {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        return None;
    }
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    Some((med, s[0], s[n - 1]))
}

// ---------------------------------------------------------------------------------------------
// Table

#[derive(Clone, Copy, PartialEq)]
enum Unit {
    GBps,
    Iops,
    Secs,
    Ms,
    MiB,
}

#[derive(Clone)]
enum Cell {
    Vals(Vec<f64>),
    Text(String),
    Failed(String),
    None,
}

impl Cell {
    fn from(r: Res<Vec<f64>>) -> Cell {
        match r {
            Ok(v) => Cell::Vals(v),
            Err(e) => Cell::Failed(e),
        }
    }

    fn median(&self) -> Option<f64> {
        match self {
            Cell::Vals(v) => stats(v).map(|s| s.0),
            _ => None,
        }
    }
}

struct Row {
    id: &'static str,
    case: String,
    unit: Unit,
    tm: Cell,
    base: Cell,
    /// What the baseline is, shown after its figure.
    base_what: &'static str,
}

fn fmt_value(unit: Unit, v: f64) -> String {
    match unit {
        Unit::GBps => format!("{v:.2} GB/s"),
        Unit::Iops => format!("{:.1}k IOPS", v / 1000.0),
        Unit::Secs if v < 1.0 => format!("{:.0} ms", v * 1000.0),
        Unit::Secs => format!("{v:.2} s"),
        Unit::Ms => format!("{:.2} ms", v * 1000.0),
        Unit::MiB => format!("{:.1} MiB", v / MIB as f64),
    }
}

fn fmt_cell(unit: Unit, c: &Cell) -> String {
    match c {
        Cell::Vals(v) => match stats(v) {
            Some((m, _, _)) => fmt_value(unit, m),
            None => "-".into(),
        },
        Cell::Text(t) => t.clone(),
        Cell::Failed(e) => format!("FAILED: {e}"),
        Cell::None => "-".into(),
    }
}

/// Spread of the tensormount runs: n and (max - min) / median.
fn fmt_spread(c: &Cell) -> String {
    match c {
        Cell::Vals(v) => match stats(v) {
            Some((m, lo, hi)) if v.len() > 1 && m > 0.0 => {
                format!("{} ±{:.0}%", v.len(), (hi - lo) / m * 50.0)
            }
            Some(_) => format!("{}", v.len()),
            None => "0".into(),
        },
        _ => String::new(),
    }
}

fn fmt_ratio(r: &Row) -> String {
    match (r.tm.median(), r.base.median()) {
        (Some(t), Some(b)) if t > 0.0 && b > 0.0 => {
            let ratio = match r.unit {
                Unit::GBps | Unit::Iops => t / b,
                // Times: baseline / tensormount, so > 1 still means tensormount is faster.
                Unit::Secs | Unit::Ms => b / t,
                Unit::MiB => return String::new(),
            };
            format!("{ratio:.2}")
        }
        _ => String::new(),
    }
}

fn print_table(title: &str, rows: &[Row]) {
    let head = [
        "#",
        "case",
        "tensormount",
        "runs ±half-range",
        "baseline",
        "ratio",
    ];
    let body: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            let base = match (&r.base, r.base_what) {
                (Cell::None, _) => "-".into(),
                (c, "") => fmt_cell(r.unit, c),
                (c, what) => format!("{} ({what})", fmt_cell(r.unit, c)),
            };
            [
                r.id.to_string(),
                r.case.clone(),
                fmt_cell(r.unit, &r.tm),
                fmt_spread(&r.tm),
                base,
                fmt_ratio(r),
            ]
        })
        .collect();
    let mut w = head.map(str::len);
    for b in &body {
        for (i, c) in b.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String; 6]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            // Text columns left-aligned, figures right-aligned.
            if i == 1 || i == 4 {
                let _ = write!(s, "| {c}{} ", " ".repeat(pad));
            } else {
                let _ = write!(s, "| {}{c} ", " ".repeat(pad));
            }
        }
        s.push('|');
        s
    };
    println!("\n{title}");
    println!("{}", line(&head.map(String::from)));
    let sep: Vec<String> = w.iter().map(|n| "-".repeat(n + 2)).collect();
    println!("|{}|", sep.join("|"));
    for b in &body {
        println!("{}", line(b));
    }
}

// ---------------------------------------------------------------------------------------------
// The cases

struct Bench {
    opts: Opts,
    sz: Sizes,
    data: DataFixture,
    large: LargeFixture,
    mnt: PathBuf,
    mnt_large: PathBuf,
    python: Option<PathBuf>,
    tuning: Tuning,
    notes: Vec<String>,
    started: Instant,
}

/// Where a tensor of the data fixture lies in its source, from the mount's xattrs.
#[derive(Clone)]
struct Loc {
    file: String,
    source: PathBuf,
    offset: u64,
    len: u64,
}

impl Bench {
    fn runs_total(&self) -> usize {
        self.opts.warmup + self.opts.runs
    }

    /// `f` run warm-up + N times; the warm-up results are dropped.
    fn sample(&self, mut f: impl FnMut() -> Res<f64>) -> Res<Vec<f64>> {
        let mut out = Vec::new();
        for i in 0..self.runs_total() {
            let v = f()?;
            if i >= self.opts.warmup {
                out.push(v);
            }
        }
        Ok(out)
    }

    /// Cold/warm pairs: for each run, pre-touch memory, mount the data fixture fresh, and let `f`
    /// return (first-after-mount, second) figures; then unmount.
    fn cold_warm(
        &self,
        cached: u64,
        f: impl FnMut(&Mount) -> Res<(f64, f64)>,
    ) -> Res<(Vec<f64>, Vec<f64>)> {
        self.cold_warm_with("", cached, f)
    }

    /// [`Self::cold_warm`] on a mount made with `-o opts`.
    fn cold_warm_with(
        &self,
        opts: &str,
        cached: u64,
        mut f: impl FnMut(&Mount) -> Res<(f64, f64)>,
    ) -> Res<(Vec<f64>, Vec<f64>)> {
        let (mut cold, mut warm) = (Vec::new(), Vec::new());
        for i in 0..self.runs_total() {
            pretouch(pretouch_for(cached));
            let m = Mount::new(&self.data.dir, &self.mnt, self.tuning, opts)?;
            let (c, w) = f(&m)?;
            m.unmount()?;
            if i >= self.opts.warmup {
                cold.push(c);
                warm.push(w);
            }
        }
        Ok((cold, warm))
    }

    /// Mounts once and reads each test tensor's location from its xattrs; checks that the first
    /// and last MiB read through the mount equal the source bytes at that offset.
    fn locate(&self) -> Res<Vec<Loc>> {
        let m = Mount::new(&self.data.dir, &self.mnt, self.tuning, "")?;
        let mut out = Vec::new();
        for name in std::iter::once("big.weight").chain(PAR) {
            let file = format!("big.tensors/{name}");
            let p = m.path(&file);
            let offset: u64 = getxattr(&p, "user.safetensors.offset")?
                .parse()
                .map_err(err("offset xattr"))?;
            let source = PathBuf::from(getxattr(&p, "user.safetensors.source")?);
            let len = fs::metadata(&p).map_err(err(p.display()))?.len();
            let (a, b) = (File::open(&p), File::open(&source));
            let (a, b) = (a.map_err(err(p.display()))?, b.map_err(err("source"))?);
            let chunk = MIB.min(len);
            for at in [0, len - chunk] {
                let (mut x, mut y) = (vec![0u8; chunk as usize], vec![0u8; chunk as usize]);
                read_range(&a, at, chunk, &mut x)?;
                read_range(&b, offset + at, chunk, &mut y)?;
                if x != y {
                    return Err(format!("{file}: bytes at {at} differ from the source"));
                }
            }
            out.push(Loc {
                file,
                source,
                offset,
                len,
            });
        }
        m.unmount()?;
        if out[0].source != fs::canonicalize(&self.data.big_file).map_err(err("source"))? {
            return Err("user.safetensors.source is not the fixture".into());
        }
        Ok(out)
    }

    fn python_passes(&self, mode: &str, path: &Path, passes: usize) -> Res<Vec<f64>> {
        let py = self
            .python
            .as_ref()
            .ok_or("no Python with safetensors + numpy (set TENSORMOUNT_PYTHON)")?;
        let script = Path::new(MANIFEST_DIR).join("benches/load_all.py");
        let out = Command::new(py)
            .arg(&script)
            .arg(mode)
            .arg(path)
            .arg(passes.to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(err(py.display()))?;
        if !out.status.success() {
            let e = String::from_utf8_lossy(&out.stderr);
            return Err(format!(
                "load_all.py {mode}: {}",
                e.lines().last().unwrap_or("failed")
            ));
        }
        let mut secs = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(s), Some(b), Some(n)) = (f.first(), f.get(1), f.get(2)) else {
                return Err(format!("load_all.py: bad line {line:?}"));
            };
            let bytes: u64 = b.parse().map_err(err("load_all.py bytes"))?;
            let count: usize = n.parse().map_err(err("load_all.py count"))?;
            if bytes != self.data.model_bytes || count != self.data.model_tensors {
                return Err(format!(
                    "load_all.py {mode} loaded {count} tensors / {bytes} B, expected {} / {}",
                    self.data.model_tensors, self.data.model_bytes
                ));
            }
            secs.push(s.parse().map_err(err("load_all.py seconds"))?);
        }
        if secs.len() != passes {
            return Err(format!(
                "load_all.py {mode}: {} passes reported, {passes} expected",
                secs.len()
            ));
        }
        Ok(secs)
    }

    fn gbps(len: u64) -> impl Fn(f64) -> f64 {
        move |s| len as f64 / s / 1e9
    }

    fn run_table(&mut self) -> Vec<Row> {
        let mut rows = Vec::new();
        let locs = match self.locate() {
            Ok(l) => l,
            Err(e) => {
                rows.push(Row {
                    id: "0",
                    case: "mount the data fixture and read tensor offsets".into(),
                    unit: Unit::Secs,
                    tm: Cell::Failed(e),
                    base: Cell::None,
                    base_what: "",
                });
                return rows;
            }
        };
        let big = locs[0].clone();
        self.notes.push(format!(
            "{} starts at source offset {} (from user.safetensors.offset; {} mod 4096)",
            big.file,
            big.offset,
            big.offset % PAGE
        ));
        self.progress("1-2: sequential reads and mmap");
        self.seq_and_mmap(&big, &mut rows);
        self.progress("3: parallel readers");
        self.parallel(&locs[1..], &mut rows);
        self.progress("4: random reads");
        self.random(&big, &mut rows);
        self.progress("5, 7: Python loaders");
        self.loaders(&mut rows);
        self.progress("7: whole mirrored file");
        self.whole_file(&mut rows);
        self.progress("6: large model metadata");
        self.metadata(&mut rows);
        self.progress("8: following SOURCE");
        self.refresh(&mut rows);
        self.progress("9: storage far away");
        self.far_away(&mut rows);
        self.progress("done");
        // Items in order; within an item, the order they were measured in.
        rows.sort_by_key(|r| r.id);
        rows
    }

    fn progress(&self, what: &str) {
        eprintln!(
            "[{:>4.0} s] {}: {what}",
            self.started.elapsed().as_secs_f64(),
            self.tuning.short()
        );
    }

    fn map(v: Res<Vec<f64>>, f: impl Fn(f64) -> f64) -> Cell {
        Cell::from(v.map(|v| v.into_iter().map(f).collect()))
    }

    fn pair(r: &Res<(Vec<f64>, Vec<f64>)>, warm: bool) -> Res<Vec<f64>> {
        match r {
            Ok((c, w)) => Ok(if warm { w.clone() } else { c.clone() }),
            Err(e) => Err(e.clone()),
        }
    }

    /// Items 1 and 2.
    fn seq_and_mmap(&mut self, big: &Loc, rows: &mut Vec<Row>) {
        let size = fmt_size(big.len);
        let gb = Self::gbps(big.len);
        let direct = self.sample(|| timed_read(&big.source, big.offset, big.len));
        let mut served = None;
        let fuse = self.cold_warm(big.len, |m| {
            let p = m.path(&big.file);
            let w0 = m.wchar();
            let c = timed_read(&p, 0, big.len)?;
            if let (Some(a), Some(b)) = (w0, m.wchar()) {
                served = Some(b.saturating_sub(a));
            }
            Ok((c, timed_read(&p, 0, big.len)?))
        });
        if let Some(s) = served {
            self.notes.push(format!(
                "daemon wrote {} (/proc/PID/io wchar) while serving the cold read of the {size} tensor file",
                fmt_size(s)
            ));
        }
        for (warm, what) in [
            (false, "cold (first read after mount)"),
            (true, "warm (2nd read)"),
        ] {
            rows.push(Row {
                id: "1",
                case: format!("seq read {size} tensor, 1 MiB reads, {what}"),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&fuse, warm), &gb),
                base: Self::map(direct.clone(), &gb),
                base_what: "pread source",
            });
        }
        let direct = self.sample(|| timed_mmap_touch(&big.source, big.offset, big.len));
        let fuse = self.cold_warm(big.len, |m| {
            let p = m.path(&big.file);
            Ok((
                timed_mmap_touch(&p, 0, big.len)?,
                timed_mmap_touch(&p, 0, big.len)?,
            ))
        });
        for (warm, what) in [(false, "cold"), (true, "warm (2nd mapping)")] {
            rows.push(Row {
                id: "2",
                case: format!("mmap {size} tensor, touch every page, {what}"),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&fuse, warm), &gb),
                base: Self::map(direct.clone(), &gb),
                base_what: "mmap source",
            });
        }
    }

    /// Item 3.
    fn parallel(&mut self, par: &[Loc], rows: &mut Vec<Row>) {
        let total: u64 = par.iter().map(|l| l.len).sum();
        let gb = Self::gbps(total);
        let direct_ranges: Vec<_> = par
            .iter()
            .map(|l| (l.source.clone(), l.offset, l.len))
            .collect();
        let direct = self.sample(|| timed_parallel(&direct_ranges));
        let fuse = self.cold_warm(total, |m| {
            let ranges: Vec<_> = par.iter().map(|l| (m.path(&l.file), 0, l.len)).collect();
            Ok((timed_parallel(&ranges)?, timed_parallel(&ranges)?))
        });
        for (warm, what) in [(false, "cold"), (true, "warm")] {
            rows.push(Row {
                id: "3",
                case: format!(
                    "{} readers on {} tensors of {}, aggregate, {what}",
                    par.len(),
                    par.len(),
                    fmt_size(par[0].len)
                ),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&fuse, warm), &gb),
                base: Self::map(direct.clone(), &gb),
                base_what: "pread source",
            });
        }
    }

    /// Item 4.
    fn random(&mut self, big: &Loc, rows: &mut Vec<Row>) {
        let ops = self.sz.rand_ops;
        let cold_offsets = random_offsets(big.len, ops, 0x1234_5678);
        let warm_offsets = random_offsets(big.len, ops, 0x8765_4321);
        let iops = move |s: f64| ops as f64 / s;
        let direct = self.sample(|| timed_random(&big.source, big.offset, &warm_offsets));
        let fuse = self.cold_warm(big.len, |m| {
            let p = m.path(&big.file);
            let c = timed_random(&p, 0, &cold_offsets)?;
            // Warm = the whole tensor in the FUSE page cache, like the hot source.
            timed_read(&p, 0, big.len)?;
            Ok((c, timed_random(&p, 0, &warm_offsets)?))
        });
        for (warm, what) in [
            (false, "cold (fresh mount)"),
            (true, "warm (tensor fully cached)"),
        ] {
            rows.push(Row {
                id: "4",
                case: format!(
                    "4 KiB random reads over {} tensor, 1 thread, {what}",
                    fmt_size(big.len)
                ),
                unit: Unit::Iops,
                tm: Self::map(Self::pair(&fuse, warm), iops),
                base: Self::map(direct.clone(), iops),
                base_what: "pread source",
            });
        }
    }

    /// Item 5, and the safetensors loader half of item 7.
    fn loaders(&mut self, rows: &mut Vec<Row>) {
        let bytes = self.data.model_bytes;
        let gb = Self::gbps(bytes);
        let model = self.data.model_file.clone();
        let direct = self
            .python_passes("st", &model, self.runs_total())
            .map(|v| v[self.opts.warmup.min(v.len())..].to_vec());
        let what = format!("{} tensors, {}", self.data.model_tensors, fmt_size(bytes));
        // (item, how it loads, mount options, load_all.py mode, path in the mount, baseline)
        let loaders = [
            (
                "5",
                "numpy.fromfile on mount",
                "",
                "fromfile",
                "model.tensors",
                "safetensors on source",
            ),
            (
                "5",
                "numpy.load on -o npy views",
                "npy",
                "npy",
                "model.tensors",
                "safetensors on source",
            ),
            (
                "7",
                "safetensors on mirrored file",
                "",
                "st",
                "model.safetensors",
                "same on source",
            ),
        ];
        // The daemon's resident memory (anonymous and file-backed) right after mounting and
        // after numpy has read every tensor twice, for the first loader.
        let rss = |m: &Mount| Some(m.status_bytes("RssAnon")? + m.status_bytes("RssFile")?);
        let (mut rss_mounted, mut rss_loaded) = (Vec::new(), Vec::new());
        for (i, (id, how, opts, mode, path, base_what)) in loaders.into_iter().enumerate() {
            let first = i == 0;
            let runs = self.cold_warm_with(opts, bytes, |m| {
                let before = rss(m);
                let v = self.python_passes(mode, &m.path(path), 2)?;
                if first && let (Some(b), Some(a)) = (before, rss(m)) {
                    rss_mounted.push(b as f64);
                    rss_loaded.push(a as f64);
                }
                Ok((v[0], v[1]))
            });
            if first {
                rows.push(Row {
                    id,
                    case: format!("daemon RssAnon + RssFile after {how} read all {what} twice"),
                    unit: Unit::MiB,
                    tm: Cell::Vals(rss_loaded.clone()),
                    base: Cell::Vals(rss_mounted.clone()),
                    base_what: "right after mount",
                });
            }
            for (warm, w) in [(false, "cold"), (true, "warm")] {
                rows.push(Row {
                    id,
                    case: format!("load all ({what}): {how}, {w}"),
                    unit: Unit::GBps,
                    tm: Self::map(Self::pair(&runs, warm), &gb),
                    base: Self::map(direct.clone(), &gb),
                    base_what,
                });
            }
        }
    }

    /// Item 7: the whole mirrored file read with 1 MiB reads, and which path served it.
    fn whole_file(&mut self, rows: &mut Vec<Row>) {
        let model = self.data.model_file.clone();
        let len = match fs::metadata(&model) {
            Ok(m) => m.len(),
            Err(e) => {
                self.notes.push(format!("item 7: {e}"));
                return;
            }
        };
        let gb = Self::gbps(len);
        let direct = self.sample(|| timed_read(&model, 0, len));
        let mut served = None;
        let fuse = self.cold_warm(len, |m| {
            let p = m.path("model.safetensors");
            let w0 = m.wchar();
            let c = timed_read(&p, 0, len)?;
            if let (Some(a), Some(b)) = (w0, m.wchar()) {
                served = Some(b.saturating_sub(a));
            }
            Ok((c, timed_read(&p, 0, len)?))
        });
        for (warm, w) in [(false, "cold"), (true, "warm")] {
            rows.push(Row {
                id: "7",
                case: format!(
                    "whole mirrored model.safetensors ({}), 1 MiB reads, {w}",
                    fmt_size(len)
                ),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&fuse, warm), &gb),
                base: Self::map(direct.clone(), &gb),
                base_what: "pread source",
            });
        }
        let path = match served {
            // A daemon that passes the file through to the kernel replies to no READ.
            Some(s) if s < len / 100 => {
                format!("passthrough (daemon replied {})", fmt_size(s))
            }
            Some(s) => format!("daemon reads (replied {})", fmt_size(s)),
            None => "unknown (daemon pid or /proc/PID/io not found)".into(),
        };
        rows.push(Row {
            id: "7",
            case: format!(
                "path that served the whole mirrored file (cold {} read)",
                fmt_size(len)
            ),
            unit: Unit::Secs,
            tm: Cell::Text(path),
            base: Cell::None,
            base_what: "",
        });
    }

    /// Item 6.
    fn metadata(&mut self, rows: &mut Vec<Row>) {
        let shape = format!(
            "{} shards, {} tensors",
            self.sz.shards,
            self.large.entries - 1
        );
        let merged = self.mnt_large.join("model.tensors");
        let local = self.large.local.clone();
        let n = self.large.entries;
        // Mount time and the first `ls -l` of a fresh mount.
        let mut mount_secs = Vec::new();
        let mut first_ls = Vec::new();
        let mut rss = None;
        let mut failure = None;
        for i in 0..self.runs_total() {
            let m = match Mount::new(&self.large.dir, &self.mnt_large, self.tuning, "") {
                Ok(m) => m,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            if rss.is_none() {
                rss = Some((m.status_bytes("RssAnon"), m.status_bytes("RssFile")));
            }
            let ls = timed_cmd(&["ls".as_ref(), "-l".as_ref(), merged.as_os_str()]);
            if i >= self.opts.warmup {
                mount_secs.push(m.took.as_secs_f64());
                match ls {
                    Ok(s) => first_ls.push(s),
                    Err(e) => failure = Some(e),
                }
            }
            if let Err(e) = m.unmount() {
                failure = Some(e);
            }
        }
        if let Some(e) = failure {
            rows.push(Row {
                id: "6",
                case: format!("mount {shape}"),
                unit: Unit::Secs,
                tm: Cell::Failed(e),
                base: Cell::None,
                base_what: "",
            });
            return;
        }
        rows.push(Row {
            id: "6",
            case: format!("mount time ({shape}, sparse)"),
            unit: Unit::Secs,
            tm: Cell::Vals(mount_secs.clone()),
            base: Cell::None,
            base_what: "",
        });
        // The same with both views, against the default mount measured above.
        let views = "npy,layout=tree";
        let mut view_secs = Vec::new();
        let mut view_anon = None;
        for i in 0..self.runs_total() {
            match Mount::new(&self.large.dir, &self.mnt_large, self.tuning, views) {
                Ok(m) => {
                    if i >= self.opts.warmup {
                        view_secs.push(m.took.as_secs_f64());
                    }
                    view_anon = view_anon.or(Some(m.status_bytes("RssAnon")));
                    if let Err(e) = m.unmount() {
                        failure = Some(e);
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let anon_default = rss.and_then(|r| r.0);
        for (unit, case, tm, base) in [
            (
                Unit::Secs,
                format!("mount time with -o {views}"),
                failure.clone().map_or(Cell::Vals(view_secs), Cell::Failed),
                Cell::Vals(mount_secs),
            ),
            (
                Unit::MiB,
                format!("daemon RssAnon right after mount, -o {views}"),
                view_anon
                    .flatten()
                    .map_or(Cell::Failed("no /proc/PID/status".into()), |b| {
                        Cell::Vals(vec![b as f64])
                    }),
                anon_default.map_or(Cell::None, |b| Cell::Vals(vec![b as f64])),
            ),
        ] {
            rows.push(Row {
                id: "6",
                case,
                unit,
                tm,
                base,
                base_what: "default mount",
            });
        }
        let (anon, file) = rss.unwrap_or((None, None));
        for (what, v) in [("RssAnon", anon), ("RssFile", file)] {
            rows.push(Row {
                id: "6",
                case: format!("daemon {what} right after mount"),
                unit: Unit::MiB,
                tm: v.map_or(Cell::Failed("no /proc/PID/status".into()), |b| {
                    Cell::Vals(vec![b as f64])
                }),
                base: Cell::None,
                base_what: "",
            });
        }
        let lsl_local =
            self.sample(|| timed_cmd(&["ls".as_ref(), "-l".as_ref(), local.as_os_str()]));
        rows.push(Row {
            id: "6",
            case: format!("ls -l merged dir ({n} entries), first after mount"),
            unit: Unit::Secs,
            tm: Cell::Vals(first_ls),
            base: Cell::from(lsl_local.clone()),
            base_what: "local dir, warm",
        });

        // Warm commands on one mount, each against the same command on the local directory.
        let m = match Mount::new(&self.large.dir, &self.mnt_large, self.tuning, "") {
            Ok(m) => m,
            Err(e) => {
                rows.push(Row {
                    id: "6",
                    case: "mount for the warm commands".into(),
                    unit: Unit::Secs,
                    tm: Cell::Failed(e),
                    base: Cell::None,
                    base_what: "",
                });
                return;
            }
        };
        let cmds: [(&str, &[&str]); 3] = [
            ("ls -f (names only)", &["ls", "-f"]),
            ("ls -l", &["ls", "-l"]),
            ("find", &["find"]),
        ];
        for (label, argv) in cmds {
            let run = |dir: &Path| {
                let mut a: Vec<&std::ffi::OsStr> = argv.iter().map(|s| s.as_ref()).collect();
                a.push(dir.as_os_str());
                self.sample(|| timed_cmd(&a))
            };
            let tm = run(&merged);
            let base = run(&local);
            rows.push(Row {
                id: "6",
                case: format!("{label} merged dir ({n} entries), warm"),
                unit: Unit::Secs,
                tm: Cell::from(tm),
                base: Cell::from(base),
                base_what: "local dir",
            });
        }
        // getfattr -d over every tensor: slow through FUSE (no xattr cache), so fewer runs, within a
        // time budget, and no separate warm-up (the listings above warmed the dentries).
        let getfattr_all = |dir: &Path| -> Res<Vec<f64>> {
            let a: [&std::ffi::OsStr; 5] = [
                "getfattr".as_ref(),
                "-R".as_ref(),
                "-d".as_ref(),
                "--absolute-names".as_ref(),
                dir.as_os_str(),
            ];
            let t = Instant::now();
            let mut v = Vec::new();
            while v.len() < self.sz.getfattr_runs
                && (v.is_empty() || t.elapsed() < self.sz.getfattr_budget)
            {
                v.push(timed_cmd(&a)?);
            }
            Ok(v)
        };
        let tm = getfattr_all(&merged);
        let base = getfattr_all(&local);
        rows.push(Row {
            id: "6",
            case: format!("getfattr -R -d on every tensor ({n} entries)"),
            unit: Unit::Secs,
            tm: Cell::from(tm),
            base: Cell::from(base),
            base_what: "local, 6 user xattrs each",
        });
        let one = |dir: &Path| -> Res<Vec<f64>> {
            let p = dir.join(&self.large.one_tensor);
            let a: [&std::ffi::OsStr; 4] = [
                "getfattr".as_ref(),
                "-d".as_ref(),
                "--absolute-names".as_ref(),
                p.as_os_str(),
            ];
            timed_cmd(&a)?;
            (0..self.sz.one_getfattr_runs)
                .map(|_| timed_cmd(&a))
                .collect()
        };
        let tm = one(&merged);
        let base = one(&local);
        rows.push(Row {
            id: "6",
            case: "getfattr -d on one tensor (whole command)".into(),
            unit: Unit::Ms,
            tm: Cell::from(tm),
            base: Cell::from(base),
            base_what: "local file",
        });
        let anon = m.status_bytes("RssAnon");
        rows.push(Row {
            id: "6",
            case: "daemon RssAnon after all the commands above".into(),
            unit: Unit::MiB,
            tm: anon.map_or(Cell::Failed("no /proc/PID/status".into()), |b| {
                Cell::Vals(vec![b as f64])
            }),
            base: Cell::None,
            base_what: "",
        });
        if let Err(e) = m.unmount() {
            self.notes.push(e);
        }
    }
}

/// Item 9's added latency per request, in milliseconds.
const FAR_DELAY_MS: u64 = 20;

/// Builds `examples/slowfs.rs` (item 9's storage far away) and returns its path, beside the
/// daemon's binary.
fn build_slowfs() -> Res<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let ok = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--example", "slowfs"])
        .current_dir(MANIFEST_DIR)
        .status()
        .map_err(err("cargo build --example slowfs"))?
        .success();
    let bin = Path::new(BIN)
        .parent()
        .map(|d| d.join("examples/slowfs"))
        .ok_or("no directory for the daemon's binary")?;
    match ok && bin.exists() {
        true => Ok(bin),
        false => Err("cargo build --release --example slowfs failed".into()),
    }
}

impl Bench {
    /// Item 9: mount time of the item 6 model served by slowfs, which delays every request by
    /// [`FAR_DELAY_MS`], against the same mount of the local model, in the same run.
    fn far_away(&mut self, rows: &mut Vec<Row>) {
        let case = format!(
            "mount time ({} shards, {} tensors) behind slowfs, +{FAR_DELAY_MS} ms per request",
            self.sz.shards,
            self.large.entries - 1
        );
        let (mut far, mut local) = (Vec::new(), Vec::new());
        let res = (|| -> Res<()> {
            let slowfs = build_slowfs()?;
            let dir = self.mnt_large.with_file_name("far");
            fs::create_dir_all(&dir).map_err(err(dir.display()))?;
            for i in 0..self.runs_total() {
                let m = Mount::new(&self.large.dir, &self.mnt_large, self.tuning, "")?;
                let took = m.took.as_secs_f64();
                m.unmount()?;
                registry().mounts.push(dir.clone());
                let mut child = Command::new(&slowfs)
                    .arg(&self.large.dir)
                    .arg(&dir)
                    .args(["--delay-ms", &FAR_DELAY_MS.to_string()])
                    .stdin(Stdio::null())
                    .spawn()
                    .map_err(err(slowfs.display()))?;
                let t = Instant::now();
                while !mounted_below(&dir) {
                    if t.elapsed() > Duration::from_secs(10) {
                        let _ = child.kill();
                        return Err("slowfs did not mount".into());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let far_took = Mount::new(&dir, &self.mnt_large, self.tuning, "").and_then(|m| {
                    let took = m.took.as_secs_f64();
                    m.unmount().map(|()| took)
                });
                quiet(Command::new("umount").arg(&dir));
                registry().mounts.retain(|m| *m != dir);
                let _ = child.wait();
                if i >= self.opts.warmup {
                    far.push(far_took?);
                    local.push(took);
                }
            }
            Ok(())
        })();
        rows.push(Row {
            id: "9",
            case,
            unit: Unit::Secs,
            tm: match res {
                Ok(()) => Cell::Vals(far),
                Err(e) => Cell::Failed(e),
            },
            base: Cell::Vals(local),
            base_what: "same mount, local source",
        });
    }

    /// Item 8.
    fn refresh(&mut self, rows: &mut Vec<Row>) {
        if let Err(e) = self.refresh_rows(rows) {
            rows.push(Row {
                id: "8",
                case: "following SOURCE".into(),
                unit: Unit::Secs,
                tm: Cell::Failed(e),
                base: Cell::None,
                base_what: "",
            });
        }
    }

    fn refresh_rows(&mut self, rows: &mut Vec<Row>) -> Res<()> {
        let shape = format!("{} shards", self.sz.shards);
        let root = self
            .large
            .dir
            .parent()
            .ok_or("fixture without a parent")?
            .to_path_buf();
        let models = root.join("models");
        let staging = root.join("staging");
        for d in [&models, &staging] {
            let _ = fs::remove_dir_all(d);
            fs::create_dir_all(d).map_err(err(d.display()))?;
        }
        let copy_model = |to: &Path| -> Res<()> {
            let ok = Command::new("cp")
                .args(["-r", "--sparse=always"])
                .arg(&self.large.dir)
                .arg(to)
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                Ok(())
            } else {
                Err(format!("cp -r {} failed", self.large.dir.display()))
            }
        };
        copy_model(&models.join("m0"))?;
        // The full mount of the same model, the baseline of every row.
        let mount_secs = self.sample(|| {
            let m = Mount::new(&models.join("m0"), &self.mnt_large, self.tuning, "")?;
            let took = m.took.as_secs_f64();
            m.unmount()?;
            Ok(took)
        })?;
        let base = Cell::Vals(mount_secs);
        let base_what = "full mount of the model";
        let one = self.large.one_tensor.clone();
        let merged = |mnt: &Path| mnt.join("m0/model.tensors").join(&one);

        // A shard replaced by rename, until the merged directory shows it.
        let m = Mount::new(&models, &self.mnt_large, self.tuning, "")?;
        let one_model = m.status_bytes("RssAnon");
        let source = PathBuf::from(getxattr(
            &merged(&self.mnt_large),
            "user.safetensors.source",
        )?);
        let shard_name = source.file_name().ok_or("no shard name")?.to_owned();
        let shard = models.join("m0").join(&shard_name);
        let header_len = {
            let f = File::open(&shard).map_err(err(shard.display()))?;
            let mut n = [0u8; 8];
            f.read_exact_at(&mut n, 0).map_err(err(shard.display()))?;
            8 + u64::from_le_bytes(n)
        };
        // A copy of the shard with a new inode: its header, the data left a hole.
        let stage_shard = || -> Res<PathBuf> {
            let tmp = models.join("m0").join(".tmpBENCH");
            let mut head = vec![0u8; header_len as usize];
            let f = File::open(&shard).map_err(err(shard.display()))?;
            f.read_exact_at(&mut head, 0)
                .map_err(err(shard.display()))?;
            let len = f.metadata().map_err(err(shard.display()))?.len();
            let mut out = File::create(&tmp).map_err(err(tmp.display()))?;
            out.write_all(&head)
                .and_then(|_| out.set_len(len))
                .map_err(err(tmp.display()))?;
            Ok(tmp)
        };
        let ino = |p: &Path| -> Res<u64> {
            Ok(std::os::unix::fs::MetadataExt::ino(
                &fs::metadata(p).map_err(err(p.display()))?,
            ))
        };
        let replaced = self.sample(|| {
            let before = ino(&merged(&self.mnt_large))?;
            let tmp = stage_shard()?;
            let t = Instant::now();
            fs::rename(&tmp, &shard).map_err(err(shard.display()))?;
            while ino(&merged(&self.mnt_large))? == before {
                if t.elapsed() > Duration::from_secs(30) {
                    return Err("the replaced shard never showed".into());
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            Ok(t.elapsed().as_secs_f64())
        });
        rows.push(Row {
            id: "8",
            case: format!("one shard replaced by rename: new inode served, inotify ({shape})"),
            unit: Unit::Secs,
            tm: Cell::from(replaced),
            base: base.clone(),
            base_what,
        });

        // A second copy of the model appears: by its exact path, and in the root listing.
        let mut exact = Vec::new();
        let mut listed = Vec::new();
        for i in 0..self.runs_total() {
            for (k, out) in [(0, &mut exact), (1, &mut listed)] {
                let name = format!("new{i}-{k}");
                let staged = staging.join(&name);
                copy_model(&staged)?;
                let nlink = std::os::unix::fs::MetadataExt::nlink(
                    &fs::metadata(&self.mnt_large).map_err(err("mount root"))?,
                );
                let t = Instant::now();
                fs::rename(&staged, models.join(&name)).map_err(err(staged.display()))?;
                let target = self.mnt_large.join(&name).join("model.tensors").join(&one);
                loop {
                    let seen = if k == 0 {
                        fs::metadata(&target).is_ok()
                    } else {
                        std::os::unix::fs::MetadataExt::nlink(
                            &fs::metadata(&self.mnt_large).map_err(err("mount root"))?,
                        ) > nlink
                    };
                    if seen {
                        break;
                    }
                    if t.elapsed() > Duration::from_secs(60) {
                        return Err(format!("{name} never showed"));
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                if i >= self.opts.warmup {
                    out.push(t.elapsed().as_secs_f64());
                }
            }
        }
        let anon = m.status_bytes("RssAnon");
        m.unmount()?;
        for (case, v) in [
            (
                format!("a new model ({shape}) renamed in: readable by its exact path"),
                exact,
            ),
            (
                format!("a new model ({shape}) renamed in: in the root listing, inotify"),
                listed,
            ),
        ] {
            rows.push(Row {
                id: "8",
                case,
                unit: Unit::Secs,
                tm: Cell::Vals(v),
                base: base.clone(),
                base_what,
            });
        }
        let models_now = 1 + 2 * self.runs_total();
        rows.push(Row {
            id: "8",
            case: format!(
                "daemon RssAnon with {models_now} copies of the model, added while mounted"
            ),
            unit: Unit::MiB,
            tm: anon.map_or(Cell::Failed("no /proc/PID/status".into()), |b| {
                Cell::Vals(vec![b as f64])
            }),
            base: one_model.map_or(Cell::None, |b| {
                Cell::Vals(vec![(b * models_now as u64) as f64])
            }),
            base_what: "that many times one copy's",
        });

        // An open right after a rename, with polling off: the open finds the source replaced.
        let m = Mount::new(
            &models,
            &self.mnt_large,
            self.tuning,
            "refresh=poll,refresh_interval=3600",
        )?;
        let read4k = |p: &Path| -> Res<()> {
            let f = File::open(p).map_err(err(p.display()))?;
            let mut b = [0u8; 4096];
            f.read_at(&mut b, 0).map_err(err(p.display()))?;
            Ok(())
        };
        let unchanged_path = self
            .mnt_large
            .join("m0/model.tensors")
            .join(&self.large.first_tensor);
        read4k(&unchanged_path)?;
        let opened = self.sample(|| {
            let tmp = stage_shard()?;
            let target = merged(&self.mnt_large);
            read4k(&target)?;
            fs::rename(&tmp, &shard).map_err(err(shard.display()))?;
            let t = Instant::now();
            read4k(&target)?;
            Ok(t.elapsed().as_secs_f64())
        });
        let unchanged = self.sample(|| {
            let t = Instant::now();
            read4k(&unchanged_path)?;
            Ok(t.elapsed().as_secs_f64())
        });
        m.unmount()?;
        rows.push(Row {
            id: "8",
            case: format!("open + 4 KiB read of a replaced shard's tensor, right after ({shape})"),
            unit: Unit::Ms,
            tm: Cell::from(opened),
            base: Cell::from(unchanged),
            base_what: "same on an unchanged tensor",
        });
        let _ = fs::remove_dir_all(&models);
        let _ = fs::remove_dir_all(&staging);
        Ok(())
    }
}

fn fmt_size(b: u64) -> String {
    if b >= GIB && b.is_multiple_of(GIB) {
        format!("{} GiB", b / GIB)
    } else if b >= GIB {
        format!("{:.2} GiB", b as f64 / GIB as f64)
    } else if b >= MIB {
        format!("{:.0} MiB", b as f64 / MIB as f64)
    } else {
        format!("{b} B")
    }
}

fn find_python() -> Option<PathBuf> {
    let candidate = std::env::var_os("TENSORMOUNT_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(MANIFEST_DIR).join(".venv/bin/python"));
    Command::new(&candidate)
        .args(["-c", "import safetensors, numpy"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
        .then_some(candidate)
}

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn main() {
    let code = match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("bench mount: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn run() -> Res<()> {
    let opts = parse_args()?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/dev/fuse").exists() {
        return Err("needs root and /dev/fuse (it mounts for real)".into());
    }
    if !Path::new(BIN).exists() {
        return Err(format!("{BIN} not found"));
    }
    install_signal_cleanup();
    let _guard = CleanupGuard;
    let started = Instant::now();
    let dir = std::path::absolute(&opts.dir).map_err(err(opts.dir.display()))?;
    let root = dir.join(format!("tensormount-bench-{}", std::process::id()));
    fs::create_dir_all(&root).map_err(err(root.display()))?;
    registry().root = Some(root.clone());
    let root = fs::canonicalize(&root).map_err(err(root.display()))?;

    let mut command: Vec<OsString> = vec!["cargo bench --bench mount".into()];
    let extra: Vec<OsString> = std::env::args_os()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if !extra.is_empty() {
        command.push("--".into());
        command.extend(extra);
    }
    let command: Vec<String> = command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mem = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_string())
        })
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or("?".into(), |kb| format!("{:.1} GiB", kb as f64 / 1048576.0));
    println!("tensormount mount benchmark: {}", command.join(" "));
    println!(
        "machine: nproc {nproc}, Linux {}, RAM {mem}, load average at start {}",
        kernel.trim(),
        loadavg()
    );
    println!("daemon: {BIN}");
    println!("fixtures: {}", root.display());

    let sz = Sizes::new(opts.quick);
    let t = Instant::now();
    let data = build_data(&root, &sz)?;
    let large = build_large(&root, &sz)?;
    // Flush the local baseline's inodes and xattr blocks now, so no writeback runs during the
    // measurements (and the final removal does not wait for it).
    let rootf = File::open(&root).map_err(err(root.display()))?;
    // SAFETY: syncfs on a valid descriptor.
    if unsafe { libc::syncfs(rootf.as_raw_fd()) } != 0 {
        return Err(format!("syncfs: {}", io::Error::last_os_error()));
    }
    drop(rootf);
    eprintln!("fixtures built in {:.1} s", t.elapsed().as_secs_f64());
    let mnt = root.join("mnt");
    let mnt_large = root.join("mnt-large");
    for m in [&mnt, &mnt_large] {
        fs::create_dir_all(m).map_err(err(m.display()))?;
    }
    let python = find_python();
    let runs = opts.runs;
    let warmup = opts.warmup;
    let baseline_too = opts.baseline_too;
    let mut bench = Bench {
        opts,
        sz,
        data,
        large,
        mnt,
        mnt_large,
        python,
        tuning: Tuning::Inherited,
        notes: Vec::new(),
        started,
    };
    println!(
        "method: source page cache hot; median of {runs} run(s){}; cold = fresh mount per run, \
         after pre-touching and freeing ~1.5x the bytes it caches; 1 MiB reads; GB = 1e9 B; \
         commands timed by wall clock, output to /dev/null",
        if warmup > 0 {
            format!(" after {warmup} discarded warm-up")
        } else {
            String::new()
        }
    );
    println!(
        "ratio = tensormount speed / baseline speed (for times: baseline time / tensormount time); \
         > 1 means tensormount is faster; runs ±half-range = tensormount runs kept, and \
         (max - min) / 2 as a share of their median"
    );
    if bench.python.is_none() {
        println!("note: no Python with safetensors + numpy; the loader rows will fail");
    }
    let tunings: &[Tuning] = if baseline_too {
        &[Tuning::Inherited, Tuning::Baseline]
    } else {
        &[Tuning::Inherited]
    };
    for &tuning in tunings {
        bench.tuning = tuning;
        bench.notes.clear();
        let t = Instant::now();
        let rows = bench.run_table();
        print_table(
            &format!(
                "tensormount: {} (table took {:.0} s)",
                tuning.label(),
                t.elapsed().as_secs_f64()
            ),
            &rows,
        );
        for n in &bench.notes {
            println!("note: {n}");
        }
    }
    println!(
        "load average at end {}; total {:.0} s",
        loadavg(),
        started.elapsed().as_secs_f64()
    );
    io::stdout().flush().map_err(err("stdout"))?;
    Ok(())
}
