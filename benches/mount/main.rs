//! The mount benchmark: builds its own fixtures, mounts them with the real daemon, and prints one
//! table in which every tensormount figure stands next to a baseline measured in the same run.
//!
//! ```text
//! cargo bench --bench mount                    full sizes (1 GiB tensors, 163 shards / 92,000 tensors)
//! cargo bench --bench mount -- --quick         small sizes, one run per row (a smoke test)
//! options: --dir PATH (fixtures go in PATH/tensormount-bench-PID, default $TMPDIR or /tmp)
//!          --baseline-too (a second table with TENSORMOUNT_TUNING=baseline)
//!          --kernel-cache-too (a second table with -o kernel_cache on every mount)
//!          --runs N (measured runs per row; default 5, quick 1)
//!          --only 1,12 (only these items; the fixtures are all built still)
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
//!    Also the page cache the two reads added (`Cached:` of /proc/meminfo after, minus before; the
//!    source's pages are cached already).
//! 2. The same tensor mmapped (PROT_READ, MAP_SHARED) with one byte of every 4 KiB page read,
//!    mapping and unmapping included; cold and warm (a second mapping); baseline: the same on the
//!    page-aligned window of the source around the tensor; and cold against item 1's 1 MiB
//!    preads of the source (what a reader would do instead).
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
//! 10. `-o dtype=f32`: item 5's model with BF16 instead of F16 matrices, every tensor loaded
//!     with `numpy.load` from its float32 `-o npy` view (cold: a fresh mount; warm: a second
//!     pass), against safetensors (numpy, ml_dtypes' bfloat16) on the source, in GB/s of the
//!     stored bytes; and the widening alone, in memory on one core, of BF16, F16, F8_E4M3 and F4
//!     to float32, 1 MiB of output at a time, against copying as many bytes.
//! 11. PyTorch checkpoints: item 5's model with BF16 matrices saved by the real `torch.save`
//!     (zip format; benches/checkpoints.py writes it once per run), alone in its directory, and
//!     the same state dict saved by `safetensors.torch.save_file` in another: the mount time of
//!     the checkpoint (as item 6's), against `torch.load(weights_only=True, map_location="cpu")`
//!     of it; `safetensors.torch.load_file` of the virtual `model.safetensors` (cold: a fresh
//!     mount; warm: a second pass), against the same `torch.load`, in GB/s of the tensor bytes,
//!     both followed by a read of one byte of every 4 KiB of every tensor (load_file maps the
//!     file lazily); and `numpy.fromfile` on every file of `pytorch_model.tensors/` as in item 5,
//!     against the same on the `model.tensors/` of a mount of the safetensors copy, cold and warm.
//! 12. Integrity: `tensormount verify` of one 1 GiB file and of three files (4 GiB in all, hard
//!     links to the data fixture's, with a SHA256SUMS), page cache hot, against `sha256sum` of
//!     the same files; and 1 MiB preads of item 1's tensor file right after mounting those files
//!     with `-o verify` (which then hashes all three in the background, starting with that
//!     tensor's file), against the same on a mount without it.
//! 13. GGUF: the dequantization of `-o dtype=f32` alone, in memory on one core, of Q4_K, Q6_K,
//!     Q8_0 and Q4_0 blocks (random, with finite scales) to float32, 1 MiB of output at a time,
//!     against gguf-py's numpy `quants.dequantize` of the same blocks in the same 1 MiB pieces,
//!     and against copying as many output bytes.
//! 14. ONNX: a 1 GiB model of float16 initializers with external data (written by
//!     `onnx.save_model`, benches/onnx_models.py): mount + a listing of `model.tensors/` with
//!     every file's dtype and shape, against `onnx.load(load_external_data=False)` and a listing
//!     of its initializers; `safetensors.torch.load_file` of the virtual `model.safetensors` (cold,
//!     warm), against `onnx.load` + `numpy_helper.to_array` of every initializer; and the daemon's
//!     resident memory right after mounting a 1.94 GiB single-file model (sparse), against after
//!     mounting the external-data model.
//! 15. ollama: a store of 20 models written as ollama writes one (benches/ollama_bench.py):
//!     mount + a walk of `by-name/` stat'ing every file, against a script that reads every
//!     manifest, names its model and stats its blobs.
//! 16. DCP: 1 GiB checkpoints written by torch on 4 ranks (FSDP2, 2×2) and one of 10,000 chunks
//!     (benches/dcp_bench.py, which times each row and its baseline): mount until
//!     `model.safetensors` loads, against `dcp_to_torch_save` + `save_file`; full reads of the
//!     virtual file warm and cold, against the `.distcp` files; the daemon's RSS.
//!
//! Layout: `main.rs` parses the arguments, builds the fixtures and prints the tables;
//! `fixtures.rs` builds the fixtures (on the tests' writer, `tests/common/fixtures.rs`, and
//! item 11's with torch, `benches/checkpoints.py`); `mounts.rs` mounts them (on the tests' daemon
//! runner, `tests/common/daemon.rs`) and undoes every mount on exit or signal; `measure.rs` holds
//! the timed operations and the statistics; `cases/` the rows (`reads.rs` items 1-5 and 7,
//! `metadata.rs` 6 and 9, `refresh.rs` 8, `widen.rs` 10, `pickle.rs` 11, `gguf.rs` 13,
//! `onnx.rs` 14, `ollama.rs` 15, `dcp.rs` 16);
//! `report.rs` prints the table.

#[path = "../../tests/common/daemon.rs"]
mod daemon;
#[path = "../../tests/common/fixtures.rs"]
mod shared_fixtures;

mod cases;
mod fixtures;
mod measure;
mod mounts;
mod report;

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cases::{Bench, build_gguf, build_ollama, build_onnx};
use fixtures::{Sizes, build_data, build_large, build_pickle};
use mounts::{CleanupGuard, Tuning, install_signal_cleanup, registry};
use report::print_table;

pub const BIN: &str = env!("CARGO_BIN_EXE_tensormount");
const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const PAGE: u64 = 4096;

type Res<T> = Result<T, String>;

fn err<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}
// ---------------------------------------------------------------------------------------------
// Options

pub struct Opts {
    pub quick: bool,
    pub dir: PathBuf,
    pub baseline_too: bool,
    /// `--kernel-cache-too`: a second table with `-o kernel_cache` on every mount.
    pub kernel_cache_too: bool,
    pub runs: usize,
    pub warmup: usize,
    /// `--only`: the items to run (all when `None`).
    pub only: Option<Vec<String>>,
}

fn usage() -> &'static str {
    "usage: cargo bench --bench mount [-- [--quick] [--dir PATH] [--baseline-too] [--kernel-cache-too] [--runs N] [--only ITEM,...]]"
}

fn parse_args() -> Res<Opts> {
    let mut o = Opts {
        quick: false,
        dir: std::env::temp_dir(),
        baseline_too: false,
        kernel_cache_too: false,
        runs: 0,
        warmup: 1,
        only: None,
    };
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        match a.to_str().unwrap_or("") {
            "--quick" => o.quick = true,
            "--baseline-too" => o.baseline_too = true,
            "--kernel-cache-too" => o.kernel_cache_too = true,
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
            "--only" => {
                let list = args.next().ok_or("--only needs ITEM,...")?;
                let list = list
                    .to_string_lossy()
                    .split(',')
                    .map(String::from)
                    .collect();
                o.only = Some(list);
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
    let python = shared_fixtures::find_python();
    let data = build_data(&root, &sz)?;
    let large = build_large(&root, &sz)?;
    let pickle = build_pickle(&root, &sz, python.as_deref());
    let gguf = build_gguf(&root, opts.quick);
    let onnx = build_onnx(&root, opts.quick, python.as_deref());
    let ollama = build_ollama(&root, python.as_deref());
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
    let runs = opts.runs;
    let warmup = opts.warmup;
    let baseline_too = opts.baseline_too;
    let kernel_cache_too = opts.kernel_cache_too;
    let mut bench = Bench {
        opts,
        sz,
        data,
        large,
        pickle,
        gguf,
        onnx,
        ollama,
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
    let mut tunings = vec![Tuning::Inherited];
    if kernel_cache_too {
        tunings.push(Tuning::KernelCache);
    }
    if baseline_too {
        tunings.push(Tuning::Baseline);
    }
    for tuning in tunings {
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
