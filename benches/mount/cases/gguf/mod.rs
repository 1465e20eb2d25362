//! Item 13, GGUF: the dequantization of `-o dtype=f32` alone, in memory on one core, 1 MiB of
//! float32 output at a time, of Q4_K, Q6_K, Q8_0 and Q4_0 blocks, against gguf-py's numpy
//! `quants.dequantize` of the same blocks, and against copying as many output bytes; the mount
//! time of a sparse 4 GiB, 291-tensor Q4_K model (a llama of 32 blocks), until live, against
//! `gguf.GGUFReader` of it and a listing of its tensors' names, types and shapes; `numpy.fromfile`
//! on every file of `model.tensors/` of a 1 GiB model of random Q4_K, Q6_K, Q8_0 and F32 tensors
//! (cold: a fresh mount; warm: a second pass), against `numpy.fromfile` of the same bytes at their
//! offsets in the `.gguf`; and `safetensors.torch.load_file` of the virtual `model.safetensors`
//! beside a Q8_0 model (float32 values, dequantized on read; cold and warm), against
//! `GGUFReader` and `quants.dequantize` of every tensor, in GB/s of float32.
//!
//! The GGUF files are written here (GGUF v3, little-endian, llama.cpp's tensor names and order).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tensormount::format::gguf::{GgmlType, dequantize};

use super::Bench;
use crate::fixtures::warm_file;
use crate::mounts::{Mount, getxattr};
use crate::report::{Cell, Row, Unit, fmt_size};
use crate::shared_fixtures::Fill;
use crate::{MIB, Res, err};

mod files;

use files::write_gguf;

/// Times gguf-py's dequantize of the blocks in argv[1] (type argv[2], argv[3] bytes a block,
/// argv[4] elements a block), 1 MiB of output at a time over the whole buffer (each piece one row:
/// numpy's fastest shape, 4-5x faster than one row per block), argv[5] times
/// after a warm-up; prints GB/s of output, one line each.
const NUMPY: &str = r#"
import sys, time, numpy as np
from gguf import quants, GGMLQuantizationType as T
raw = np.fromfile(sys.argv[1], dtype=np.uint8)
t, bb, be, n = T[sys.argv[2]], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
per = (1 << 20) // 4 // be
blocks = raw.reshape(-1, bb)
chunks = [blocks[i:i + per] for i in range(0, len(blocks) - per + 1, per)]
for k in range(n + 1):
    s = time.perf_counter()
    for c in chunks:
        quants.dequantize(c.reshape(1, -1), t)
    e = time.perf_counter() - s
    if k:
        print(len(chunks) * (1 << 20) / e / 1e9)
"#;

/// The loaders of the model rows, `MODE PATH [TABLE] PASSES`; each pass prints "SECONDS BYTES
/// TENSORS" as `benches/load_all.py` does, timed with perf_counter around the pass only, and drops
/// each array right after loading it (`load_file` returns them all at once).
/// - `list FILE`: `gguf.GGUFReader(FILE)` and a list of its tensors' names, types and shapes
///   (BYTES: the stored bytes gguf-py finds);
/// - `raw DIR`: `numpy.fromfile` on every tensor file of DIR (a mounted `NAME.tensors/`), float32
///   for an F32 tensor (its `user.safetensors.dtype`), bytes for a quantized one;
/// - `slices FILE TABLE`: the same bytes with `numpy.fromfile(FILE, offset=)`, at the offsets of
///   TABLE (lines "OFFSET BYTES TYPE");
/// - `dequantize FILE`: `GGUFReader(FILE)` and `quants.dequantize` of every tensor;
/// - `load_file FILE`: `safetensors.torch.load_file(FILE)` (what PyTorch users load with), which must return as many tensors as
///   `safe_open` lists.
const LOADERS: &str = r#"
import os, sys, time
import numpy as np
import gguf
from gguf import quants

DTYPES = {"F32": "<f4"}


def listing(path):
    r = gguf.GGUFReader(path)
    tensors = [(t.name, t.tensor_type.name, t.shape.tolist()) for t in r.tensors]
    return sum(int(t.n_bytes) for t in r.tensors), len(tensors)


def raw(directory):
    total = count = 0
    for entry in sorted(os.listdir(directory)):
        if entry == "__metadata__":
            continue
        path = os.path.join(directory, entry)
        dtype = os.getxattr(path, "user.safetensors.dtype").decode()
        a = np.fromfile(path, dtype=DTYPES.get(dtype, "u1"))
        total += a.nbytes
        count += 1
        del a
    return total, count


def slices(path, table):
    total = count = 0
    for offset, nbytes, dtype in table:
        dt = np.dtype(DTYPES.get(dtype, "u1"))
        a = np.fromfile(path, dtype=dt, count=nbytes // dt.itemsize, offset=offset)
        total += a.nbytes
        count += 1
        del a
    return total, count


def dequantize(path):
    total = count = 0
    for t in gguf.GGUFReader(path).tensors:
        a = quants.dequantize(t.data, t.tensor_type)
        total += a.nbytes
        count += 1
        del a
    return total, count


mode, path, passes = sys.argv[1], sys.argv[2], int(sys.argv[-1])
if mode == "slices":
    with open(sys.argv[3]) as f:
        table = [(int(o), int(n), d) for o, n, d in (line.split() for line in f)]
    load = lambda p: slices(p, table)
elif mode == "load_file":
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(path, framework="pt") as f:
        keys = len(f.keys())

    def load(p):
        d = load_file(p)
        if len(d) != keys:
            sys.exit(f"load_file returned {len(d)} tensors, safe_open lists {keys}")
        return sum(a.numel() * a.element_size() for a in d.values()), len(d)
else:
    load = {"list": listing, "raw": raw, "dequantize": dequantize}[mode]
for _ in range(passes):
    t = time.perf_counter()
    total, count = load(path)
    print(f"{time.perf_counter() - t:.6f} {total} {count}", flush=True)
"#;

/// What the row of the virtual `model.safetensors` shows while the mount has none.
const NO_VIRTUAL: &str = "skipped: no model.safetensors in the mount";

impl Bench {
    pub fn gguf_dequantize(&mut self, rows: &mut Vec<Row>) {
        let stored_elements = if self.opts.quick { 16 * MIB } else { 64 * MIB } as usize;
        let mut out = vec![0f32; (MIB / 4) as usize];
        let dir = self.mnt.parent().map(|p| p.join("gguf-blocks"));
        for ty in [
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::Q8_0,
            GgmlType::Q4_0,
        ] {
            let (be, bb) = (ty.block_elements() as usize, ty.block_bytes() as usize);
            let blocks = random_blocks(stored_elements / be, bb);
            let per = out.len() / be;
            let tm = self.sample(|| {
                let start = Instant::now();
                let mut done = 0;
                for chunk in blocks.chunks_exact(per * bb) {
                    dequantize(ty, chunk, &mut out).map_err(|e| e.to_string())?;
                    black_box(&out);
                    done += MIB;
                }
                Ok(done as f64 / start.elapsed().as_secs_f64() / 1e9)
            });
            let copy = self.sample(|| {
                let src = vec![1u8; MIB as usize];
                let mut dst = vec![0u8; MIB as usize];
                let start = Instant::now();
                let n = blocks.len() / (per * bb);
                for _ in 0..n {
                    dst.copy_from_slice(black_box(&src));
                    black_box(&dst);
                }
                Ok((n as u64 * MIB) as f64 / start.elapsed().as_secs_f64() / 1e9)
            });
            let numpy = match (&self.python, &dir) {
                (Some(py), Some(dir)) => numpy_rate(py, dir, ty, &blocks, self.opts.runs),
                _ => Err("no Python with gguf".into()),
            };
            let name = ty.name();
            rows.push(Row {
                id: "13",
                case: format!(
                    "GGUF: dequantize {name} to float32 in memory, 1 MiB outputs, 1 core"
                ),
                unit: Unit::GBps,
                tm: Cell::from(tm.clone()),
                base: Cell::from(numpy),
                base_what: "gguf-py's numpy quants.dequantize",
            });
            rows.push(Row {
                id: "13",
                case: format!("GGUF: dequantize {name}, against a copy of as many output bytes"),
                unit: Unit::GBps,
                tm: Cell::from(tm),
                base: Cell::from(copy),
                base_what: "copy of as many bytes",
            });
        }
    }
}

impl Bench {
    /// The rows of item 13 on whole models: mount time, raw tensor files, the virtual
    /// `model.safetensors`.
    pub fn gguf_models(&self, rows: &mut Vec<Row>) {
        let g = match &self.gguf {
            Ok(g) => g,
            Err(e) => {
                rows.push(Row {
                    id: "13",
                    case: "GGUF: write the GGUF models".into(),
                    unit: Unit::Secs,
                    tm: Cell::Failed(e.clone()),
                    base: Cell::None,
                    base_what: "",
                });
                return;
            }
        };
        self.gguf_mount_time(&g.sparse, rows);
        self.gguf_fromfile(&g.mixed, rows);
        self.gguf_virtual_safetensors(&g.q8, rows);
    }

    /// The mount time of the sparse Q4_K model, until live, against gguf-py's reader.
    fn gguf_mount_time(&self, g: &GgufModel, rows: &mut Vec<Row>) {
        let reader = self.gguf_passes("list", &[&g.file], (g.stored_bytes(), g.tensors.len()));
        let mount = self.check_mount(g).and_then(|()| {
            self.sample(|| {
                let m = Mount::new(&g.dir, &self.mnt, self.tuning, "")?;
                let took = m.took.as_secs_f64();
                m.unmount()?;
                Ok(took)
            })
        });
        rows.push(Row {
            id: "13",
            case: format!(
                "GGUF: mount time of model.gguf ({}, sparse), until live",
                g.what
            ),
            unit: Unit::Ms,
            tm: Cell::from(mount),
            base: Cell::from(reader),
            base_what: "gguf.GGUFReader + list names, types, shapes",
        });
    }

    /// `numpy.fromfile` on every raw tensor file of the mixed model, cold and warm, against the
    /// same bytes read from the `.gguf` at their offsets (page cache hot), as item 5.
    fn gguf_fromfile(&self, g: &GgufModel, rows: &mut Vec<Row>) {
        let bytes = g.stored_bytes();
        let expected = (bytes, g.tensors.len());
        let gb = Self::gbps(bytes);
        let table = g.dir.with_extension("slices");
        let mut lines = String::new();
        for (t, off) in g.tensors.iter().zip(&g.offsets) {
            let _ = writeln!(lines, "{off} {} {}", t.bytes(), t.ty.name());
        }
        let direct = fs::write(&table, lines)
            .map_err(err(table.display()))
            .and_then(|()| self.gguf_passes("slices", &[&g.file, &table], expected));
        let runs = self.check_mount(g).and_then(|()| {
            self.cold_warm_on(&g.dir, "", bytes, |m| {
                let dir = m.path("model.tensors");
                let v = self.gguf_passes_once("raw", &[&dir], 2, expected)?;
                Ok((v[0], v[1]))
            })
        });
        for (warm, w) in [(false, "cold"), (true, "warm")] {
            rows.push(Row {
                id: "13",
                case: format!(
                    "GGUF: load all ({}): numpy.fromfile on model.tensors/, {w}",
                    g.what
                ),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&runs, warm), &gb),
                base: Self::map(direct.clone(), &gb),
                base_what: "numpy.fromfile of the .gguf at the offsets",
            });
        }
    }

    /// `safetensors.torch.load_file` of the virtual `model.safetensors` of the Q8_0 model, cold
    /// and warm, against gguf-py's reader and dequantize of every tensor, in GB/s of float32.
    fn gguf_virtual_safetensors(&self, g: &GgufModel, rows: &mut Vec<Row>) {
        let bytes = g.f32_bytes();
        let expected = (bytes, g.tensors.len());
        let gb = Self::gbps(bytes);
        let dequantized = self.gguf_passes("dequantize", &[&g.file], expected);
        let present = self.check_mount(g).and_then(|()| {
            let m = Mount::new(&g.dir, &self.mnt, self.tuning, "")?;
            let present = m.path("model.safetensors").exists();
            m.unmount()?;
            Ok(present)
        });
        let runs = present.map(|present| {
            present.then(|| {
                self.cold_warm_on(&g.dir, "", bytes, |m| {
                    let file = m.path("model.safetensors");
                    let v = self.gguf_passes_once("load_file", &[&file], 2, expected)?;
                    Ok((v[0], v[1]))
                })
            })
        });
        for (warm, w) in [(false, "cold"), (true, "warm")] {
            rows.push(Row {
                id: "13",
                case: format!(
                    "GGUF: load all ({}): safetensors.torch.load_file on the virtual \
                     model.safetensors, {w} (GB/s of float32)",
                    g.what
                ),
                unit: Unit::GBps,
                tm: match &runs {
                    Ok(Some(r)) => Self::map(Self::pair(r, warm), &gb),
                    Ok(None) => Cell::Text(NO_VIRTUAL.into()),
                    Err(e) => Cell::Failed(e.clone()),
                },
                base: Self::map(dequantized.clone(), &gb),
                base_what: "GGUFReader + quants.dequantize of each",
            });
        }
    }

    /// Mounts `g` once and checks that `model.tensors/` has a file for every tensor and nothing
    /// else (but `__metadata__`), each with the tensor's type, stored size and offset in the
    /// `.gguf`.
    fn check_mount(&self, g: &GgufModel) -> Res<()> {
        let m = Mount::new(&g.dir, &self.mnt, self.tuning, "")?;
        let dir = m.path("model.tensors");
        let check = || -> Res<()> {
            let mut listed = fs::read_dir(&dir)
                .map_err(err(dir.display()))?
                .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<Result<BTreeSet<_>, _>>()
                .map_err(err(dir.display()))?;
            listed.remove("__metadata__");
            let written: BTreeSet<String> = g.tensors.iter().map(|t| t.name.clone()).collect();
            if listed != written {
                let extra = listed.difference(&written).next();
                let missing = written.difference(&listed).next();
                return Err(format!(
                    "model.tensors/ lists {} files for {} tensors (first extra {extra:?}, first \
                     missing {missing:?})",
                    listed.len(),
                    written.len()
                ));
            }
            for (t, &offset) in g.tensors.iter().zip(&g.offsets) {
                let p = dir.join(&t.name);
                let len = fs::metadata(&p).map_err(err(p.display()))?.len();
                let at = getxattr(&p, "user.safetensors.offset")?;
                let ty = getxattr(&p, "user.safetensors.dtype")?;
                if len != t.bytes() || at != offset.to_string() || ty != t.ty.name() {
                    return Err(format!(
                        "{}: {len} B of {ty} at {at}, written {} B of {} at {offset}",
                        t.name,
                        t.bytes(),
                        t.ty.name()
                    ));
                }
            }
            Ok(())
        };
        let checked = check();
        m.unmount()?;
        checked
    }

    /// [`LOADERS`] in `mode` on `args`, warm-up + N passes in one process, the warm-up dropped.
    fn gguf_passes(&self, mode: &str, args: &[&Path], expected: (u64, usize)) -> Res<Vec<f64>> {
        let v = self.gguf_passes_once(mode, args, self.runs_total(), expected)?;
        Ok(v[self.opts.warmup.min(v.len())..].to_vec())
    }

    /// [`LOADERS`] in `mode` on `args`, `passes` passes in one process.
    fn gguf_passes_once(
        &self,
        mode: &str,
        args: &[&Path],
        passes: usize,
        expected: (u64, usize),
    ) -> Res<Vec<f64>> {
        let mut a: Vec<&OsStr> = vec!["-c".as_ref(), LOADERS.as_ref(), mode.as_ref()];
        a.extend(args.iter().map(|p| p.as_os_str()));
        self.python_script_passes(&a, &format!("GGUF loader {mode}"), passes, expected)
    }
}

/// `n` blocks of `bytes` random bytes whose first two bytes (the float16 scale of every type
/// measured but Q6_K, whose scale is last) are a float16 near 0.01, so that no block is NaN.
fn random_blocks(n: usize, bytes: usize) -> Vec<u8> {
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    let mut v: Vec<u8> = (0..n * bytes).map(|_| rng.next() as u8).collect();
    for block in v.chunks_exact_mut(bytes) {
        let scale = 0x211fu16.to_le_bytes(); // 0.01
        block[..2].copy_from_slice(&scale);
        block[2..4].copy_from_slice(&scale);
        let last = block.len() - 2;
        block[last..].copy_from_slice(&scale);
    }
    v
}

/// The median-ready samples of gguf-py's dequantize of `blocks`, in GB/s of output.
fn numpy_rate(
    py: &std::path::Path,
    dir: &std::path::Path,
    ty: GgmlType,
    blocks: &[u8],
    runs: usize,
) -> Result<Vec<f64>, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let file = dir.join(format!("{}.bin", ty.name()));
    std::fs::write(&file, blocks).map_err(|e| e.to_string())?;
    let out = Command::new(py)
        .args(["-c", NUMPY])
        .arg(&file)
        .args([
            ty.name().to_string(),
            ty.block_bytes().to_string(),
            ty.block_elements().to_string(),
            runs.max(1).to_string(),
        ])
        .output()
        .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&file);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse::<f64>().map_err(|e| e.to_string()))
        .collect()
}

/// xorshift64, the bench's pseudo-random bytes.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The data alignment of the GGUF files written here (`general.alignment`).
const ALIGN: u64 = 32;

/// A tensor of a GGUF file: its name, type and `ne[]` (fastest dimension first).
struct Tensor {
    name: String,
    ty: GgmlType,
    ne: Vec<u64>,
}

impl Tensor {
    fn elements(&self) -> u64 {
        self.ne.iter().product()
    }

    fn bytes(&self) -> u64 {
        self.elements() / u64::from(self.ty.block_elements()) * u64::from(self.ty.block_bytes())
    }
}

/// A llama-like model: token embedding, `blocks` blocks of 9 tensors (two norms, the attention's
/// 4 matrices and the feed-forward's 3), final norm and output.
struct Llama {
    hidden: u64,
    ffn: u64,
    vocab: u64,
    blocks: u64,
}

impl Llama {
    /// The tensors in llama.cpp's order and names, each matrix of the type `matrix` gives its
    /// role (`token_embd`, `attn_q`, `ffn_down`, `output`, ...), the norms F32.
    fn tensors(&self, matrix: impl Fn(&str) -> GgmlType) -> Vec<Tensor> {
        let (h, f, v) = (self.hidden, self.ffn, self.vocab);
        let tensor = |name: String, role: &str, ne: &[u64]| Tensor {
            name,
            ty: if ne.len() == 1 {
                GgmlType::F32
            } else {
                matrix(role)
            },
            ne: ne.to_vec(),
        };
        let mut out = vec![tensor("token_embd.weight".into(), "token_embd", &[h, v])];
        for b in 0..self.blocks {
            let roles: [(&str, &[u64]); 9] = [
                ("attn_norm", &[h]),
                ("attn_q", &[h, h]),
                ("attn_k", &[h, h]),
                ("attn_v", &[h, h]),
                ("attn_output", &[h, h]),
                ("ffn_norm", &[h]),
                ("ffn_gate", &[h, f]),
                ("ffn_up", &[h, f]),
                ("ffn_down", &[f, h]),
            ];
            for (role, ne) in roles {
                out.push(tensor(format!("blk.{b}.{role}.weight"), role, ne));
            }
        }
        out.push(tensor("output_norm.weight".into(), "output_norm", &[h]));
        out.push(tensor("output.weight".into(), "output", &[h, v]));
        out
    }

    /// The metadata keys of the model's header.
    fn metadata(&self) -> Vec<(&'static str, Kv)> {
        let n = |v: u64| Kv::U32(v as u32);
        vec![
            ("general.architecture", Kv::Str("llama")),
            ("general.name", Kv::Str("tensormount bench")),
            ("general.alignment", n(ALIGN)),
            ("llama.block_count", n(self.blocks)),
            ("llama.context_length", n(4096)),
            ("llama.embedding_length", n(self.hidden)),
            ("llama.feed_forward_length", n(self.ffn)),
            ("llama.attention.head_count", n(self.hidden / 128)),
            // A vocabulary as llama.cpp's converter writes it: one entry a row of the embedding.
            ("tokenizer.ggml.model", Kv::Str("llama")),
            ("tokenizer.ggml.tokens", Kv::Tokens(self.vocab)),
            ("tokenizer.ggml.scores", Kv::Scores(self.vocab)),
            ("tokenizer.ggml.token_type", Kv::TokenTypes(self.vocab)),
        ]
    }
}

/// A metadata value of the GGUF files written here.
enum Kv {
    U32(u32),
    Str(&'static str),
    /// An array of that many short strings (`<0x00>`-like pieces).
    Tokens(u64),
    /// An array of that many FLOAT32 scores.
    Scores(u64),
    /// An array of that many INT32 token types.
    TokenTypes(u64),
}

/// A GGUF model written alone in its directory as `model.gguf`, and what is in it.
pub struct GgufModel {
    pub dir: PathBuf,
    pub file: PathBuf,
    tensors: Vec<Tensor>,
    /// Each tensor's absolute offset in the file.
    offsets: Vec<u64>,
    /// The tensor count and stored size, for the row names.
    what: String,
}

impl GgufModel {
    fn stored_bytes(&self) -> u64 {
        self.tensors.iter().map(Tensor::bytes).sum()
    }

    /// The bytes of every tensor as float32.
    fn f32_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.elements() * 4).sum()
    }
}

/// Item 13's models (full sizes; --quick divides each dimension by 4, so the data by 16).
pub struct GgufFixture {
    /// 291 tensors, 3.94 GiB: Q4_K matrices (hidden 4096, feed-forward 12288, vocabulary 65536,
    /// 32 blocks); the data section a hole.
    pub sparse: GgufModel,
    /// 201 tensors, 1.00 GiB of random bytes, as llama.cpp's Q4_K_M mixes types: a Q8_0
    /// embedding, Q6_K `attn_v`, `ffn_down` and output, Q4_K for the other matrices (hidden
    /// 2048, feed-forward 8192, vocabulary 32000, 22 blocks).
    pub mixed: GgufModel,
    /// 147 tensors, 275 MiB (1.01 GiB as float32): random Q8_0 matrices (hidden 1024,
    /// feed-forward 2816, vocabulary 32000, 16 blocks).
    pub q8: GgufModel,
}

/// Writes item 13's models in `root/gguf-*/model.gguf` and reads the two real ones once, so
/// that their page cache is hot.
pub fn build_gguf(root: &Path, quick: bool) -> Res<GgufFixture> {
    let q = if quick { 4 } else { 1 };
    let model = |name: &str, llama: Llama, matrix: fn(&str) -> GgmlType, fill: Fill| {
        let dir = root.join(name);
        fs::create_dir_all(&dir).map_err(err(dir.display()))?;
        let file = dir.join("model.gguf");
        let tensors = llama.tensors(matrix);
        let offsets = write_gguf(&file, &llama.metadata(), &tensors, fill)?;
        if let Fill::Random(_) = fill {
            warm_file(&file)?;
        }
        let types: BTreeSet<&str> = tensors.iter().map(|t| t.ty.name()).collect();
        let stored = tensors.iter().map(Tensor::bytes).sum();
        let what = format!(
            "{} tensors, {} {}",
            tensors.len(),
            fmt_size(stored),
            types.into_iter().collect::<Vec<_>>().join("/")
        );
        Ok::<_, String>(GgufModel {
            dir,
            file,
            tensors,
            offsets,
            what,
        })
    };
    let sparse = Llama {
        hidden: 4096 / q,
        ffn: 12288 / q,
        vocab: 65536 / q,
        blocks: 32,
    };
    let mixed = Llama {
        hidden: 2048 / q,
        ffn: 8192 / q,
        vocab: 32000 / q,
        blocks: 22,
    };
    let q8 = Llama {
        hidden: 1024 / q,
        ffn: 2816 / q,
        vocab: 32000 / q,
        blocks: 16,
    };
    Ok(GgufFixture {
        sparse: model("gguf-sparse", sparse, |_| GgmlType::Q4_K, Fill::Hole)?,
        mixed: model(
            "gguf-mixed",
            mixed,
            |role| match role {
                "token_embd" => GgmlType::Q8_0,
                "attn_v" | "ffn_down" | "output" => GgmlType::Q6_K,
                _ => GgmlType::Q4_K,
            },
            Fill::Random(0x2545_f491_4f6c_dd1d),
        )?,
        q8: model(
            "gguf-q8",
            q8,
            |_| GgmlType::Q8_0,
            Fill::Random(0x5851_f42d_4c95_7f2d),
        )?,
    })
}
