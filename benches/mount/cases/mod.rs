//! The rows of the table: [`Bench`] holds the fixtures and options, runs each case warm-up + N
//! times (fresh mounts for cold figures), and returns rows for `report.rs`. The cases are in
//! `reads.rs` (items 1-5 and 7), `metadata.rs` (6 and 9), `refresh.rs` (8), `widen.rs` (10),
//! `pickle.rs` (11), `integrity.rs` (12), `gguf.rs` (13), `onnx.rs` (14), `ollama.rs` (15) and
//! `dcp.rs` (16).

mod dcp;
mod gguf;
mod integrity;
mod metadata;
mod ollama;
mod onnx;
mod pickle;
mod reads;
mod refresh;
mod widen;

pub use gguf::{GgufFixture, build_gguf};
pub use ollama::{OllamaFixture, build_ollama};
pub use onnx::{OnnxFixture, build_onnx};

use std::ffi::OsStr;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::fixtures::{DataFixture, LargeFixture, PAR, PickleFixture, Sizes};
use crate::measure::{pretouch, pretouch_for, read_range};
use crate::mounts::{Mount, Tuning, getxattr};
use crate::report::{Cell, Row, Unit};
use crate::{MANIFEST_DIR, MIB, Opts, PAGE, Res, err};

/// Runs the cases and collects their rows.
pub struct Bench {
    pub opts: Opts,
    pub sz: Sizes,
    pub data: DataFixture,
    pub large: LargeFixture,
    /// Item 11's checkpoint, or why it could not be written.
    pub pickle: Res<PickleFixture>,
    /// Item 13's GGUF models, or why they could not be written.
    pub gguf: Res<GgufFixture>,
    /// Item 14's ONNX models, or why they could not be written.
    pub onnx: Res<OnnxFixture>,
    /// Item 15's ollama store, or why it could not be written.
    pub ollama: Res<OllamaFixture>,
    pub mnt: PathBuf,
    pub mnt_large: PathBuf,
    pub python: Option<PathBuf>,
    pub tuning: Tuning,
    pub notes: Vec<String>,
    pub started: Instant,
}

/// Where a tensor of the data fixture lies in its source, from the mount's xattrs.
#[derive(Clone)]
pub struct Loc {
    pub file: String,
    pub source: PathBuf,
    pub offset: u64,
    pub len: u64,
}

impl Bench {
    pub fn runs_total(&self) -> usize {
        self.opts.warmup + self.opts.runs
    }

    /// `f` run warm-up + N times; the warm-up results are dropped.
    pub fn sample(&self, mut f: impl FnMut() -> Res<f64>) -> Res<Vec<f64>> {
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
    pub fn cold_warm(
        &self,
        cached: u64,
        f: impl FnMut(&Mount) -> Res<(f64, f64)>,
    ) -> Res<(Vec<f64>, Vec<f64>)> {
        self.cold_warm_with("", cached, f)
    }

    /// [`Self::cold_warm`] on a mount made with `-o opts`.
    pub fn cold_warm_with(
        &self,
        opts: &str,
        cached: u64,
        f: impl FnMut(&Mount) -> Res<(f64, f64)>,
    ) -> Res<(Vec<f64>, Vec<f64>)> {
        self.cold_warm_on(&self.data.dir, opts, cached, f)
    }

    /// [`Self::cold_warm_with`] on mounts of `src` instead of the data fixture.
    pub fn cold_warm_on(
        &self,
        src: &Path,
        opts: &str,
        cached: u64,
        mut f: impl FnMut(&Mount) -> Res<(f64, f64)>,
    ) -> Res<(Vec<f64>, Vec<f64>)> {
        let (mut cold, mut warm) = (Vec::new(), Vec::new());
        for i in 0..self.runs_total() {
            pretouch(pretouch_for(cached));
            let m = Mount::new(src, &self.mnt, self.tuning, opts)?;
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
    pub fn locate(&self) -> Res<Vec<Loc>> {
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

    pub fn python_passes(&self, mode: &str, path: &Path, passes: usize) -> Res<Vec<f64>> {
        let expected = (self.data.model_bytes, self.data.model_tensors);
        self.python_passes_of(mode, path, passes, expected)
    }

    /// [`Self::python_passes`] of a model that loads as `expected` (bytes, tensors).
    pub fn python_passes_of(
        &self,
        mode: &str,
        path: &Path,
        passes: usize,
        expected: (u64, usize),
    ) -> Res<Vec<f64>> {
        self.script_passes("load_all.py", mode, path, passes, expected)
    }

    /// `passes` passes of `benches/SCRIPT MODE PATH` (see [`Self::python_script_passes`]).
    pub fn script_passes(
        &self,
        script: &str,
        mode: &str,
        path: &Path,
        passes: usize,
        expected: (u64, usize),
    ) -> Res<Vec<f64>> {
        let script_path = Path::new(MANIFEST_DIR).join("benches").join(script);
        let args = [script_path.as_os_str(), mode.as_ref(), path.as_os_str()];
        self.python_script_passes(&args, &format!("{script} {mode}"), passes, expected)
    }

    /// The seconds of each pass of a Python script that takes PASSES after `args` and prints one
    /// line "SECONDS BYTES TENSORS" a pass, as `benches/load_all.py` does; every pass must load
    /// `expected` (bytes, tensors). `label` names the script in errors.
    pub fn python_script_passes(
        &self,
        args: &[&OsStr],
        label: &str,
        passes: usize,
        (bytes_expected, tensors_expected): (u64, usize),
    ) -> Res<Vec<f64>> {
        let py = self
            .python
            .as_ref()
            .ok_or("no Python with safetensors + numpy (set TENSORMOUNT_PYTHON)")?;
        let out = Command::new(py)
            .args(args)
            .arg(passes.to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(err(py.display()))?;
        if !out.status.success() {
            let e = String::from_utf8_lossy(&out.stderr);
            return Err(format!("{label}: {}", e.lines().last().unwrap_or("failed")));
        }
        let mut secs = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(s), Some(b), Some(n)) = (f.first(), f.get(1), f.get(2)) else {
                return Err(format!("{label}: bad line {line:?}"));
            };
            let bytes: u64 = b.parse().map_err(err(format!("{label} bytes")))?;
            let count: usize = n.parse().map_err(err(format!("{label} count")))?;
            if bytes != bytes_expected || count != tensors_expected {
                return Err(format!(
                    "{label} loaded {count} tensors / {bytes} B, expected \
                     {tensors_expected} / {bytes_expected}"
                ));
            }
            secs.push(s.parse().map_err(err(format!("{label} seconds")))?);
        }
        if secs.len() != passes {
            return Err(format!(
                "{label}: {} passes reported, {passes} expected",
                secs.len()
            ));
        }
        Ok(secs)
    }

    pub fn gbps(len: u64) -> impl Fn(f64) -> f64 {
        move |s| len as f64 / s / 1e9
    }

    pub fn run_table(&mut self) -> Vec<Row> {
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
        if self.wants(&["1", "2"]) {
            self.progress("1-2: sequential reads and mmap");
            self.seq_and_mmap(&big, &mut rows);
        }
        if self.wants(&["3"]) {
            self.progress("3: parallel readers");
            self.parallel(&locs[1..], &mut rows);
        }
        if self.wants(&["4"]) {
            self.progress("4: random reads");
            self.random(&big, &mut rows);
        }
        if self.wants(&["5", "7"]) {
            self.progress("5, 7: Python loaders");
            self.loaders(&mut rows);
        }
        if self.wants(&["7"]) {
            self.progress("7: whole mirrored file");
            self.whole_file(&mut rows);
        }
        if self.wants(&["6", "9"]) {
            self.progress("6: large model metadata");
            self.metadata(&mut rows);
        }
        if self.wants(&["8"]) {
            self.progress("8: following SOURCE");
            self.refresh(&mut rows);
        }
        if self.wants(&["9"]) {
            self.progress("9: storage far away");
            self.far_away(&mut rows);
        }
        if self.wants(&["10"]) {
            self.progress("10: -o dtype=f32");
            self.widening(&mut rows);
        }
        if self.wants(&["11"]) {
            self.progress("11: PyTorch checkpoint");
            self.checkpoint(&mut rows);
        }
        if self.wants(&["12"]) {
            self.progress("12: integrity");
            self.integrity(&mut rows);
        }
        if self.wants(&["13"]) {
            self.progress("13: GGUF dequantization");
            self.gguf_dequantize(&mut rows);
            self.progress("13: GGUF models");
            self.gguf_models(&mut rows);
        }
        if self.wants(&["14"]) {
            self.progress("14: ONNX");
            self.onnx(&mut rows);
        }
        if self.wants(&["15"]) {
            self.progress("15: ollama");
            self.ollama(&mut rows);
        }
        if self.wants(&["16"]) {
            self.progress("16: DCP");
            if let Some(root) = self.mnt.parent().map(Path::to_path_buf) {
                self.dcp(&root, &mut rows);
            }
        }
        self.progress("done");
        // Items in order; within an item, the order they were measured in.
        rows.sort_by_key(|r| r.id.parse::<u32>().unwrap_or(0));
        rows
    }

    /// Whether `--only` leaves any of `items` in.
    fn wants(&self, items: &[&str]) -> bool {
        match &self.opts.only {
            None => true,
            Some(only) => items.iter().any(|i| only.iter().any(|o| o == i)),
        }
    }

    pub fn progress(&self, what: &str) {
        eprintln!(
            "[{:>4.0} s] {}: {what}",
            self.started.elapsed().as_secs_f64(),
            self.tuning.short()
        );
    }

    pub fn map(v: Res<Vec<f64>>, f: impl Fn(f64) -> f64) -> Cell {
        Cell::from(v.map(|v| v.into_iter().map(f).collect()))
    }

    pub fn pair(r: &Res<(Vec<f64>, Vec<f64>)>, warm: bool) -> Res<Vec<f64>> {
        match r {
            Ok((c, w)) => Ok(if warm { w.clone() } else { c.clone() }),
            Err(e) => Err(e.clone()),
        }
    }
}
