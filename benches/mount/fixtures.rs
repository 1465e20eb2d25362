//! The benchmark's fixtures, written with the tests' hand writer (`tests/common/fixtures.rs`):
//! their sizes, the data fixture of items 1-5 and 7 (random bytes, synced to disk, read once so
//! the source's page cache is hot), the sparse many-shard model of items 6, 8 and 9 with its
//! local baseline directory, and the PyTorch checkpoint of item 11 (written by torch itself, with
//! `benches/checkpoints.py`).

use std::ffi::CString;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::measure::read_range;
use crate::shared_fixtures::{Fill, Spec, write_generated};
use crate::{GIB, MANIFEST_DIR, MIB, Res, err};

/// Columns of the random-looking test tensors (F16).
pub const COLS: u64 = 16384;
/// The real checkpoint item 6 imitates.
pub const LARGE_SHARDS: usize = 163;
pub const LARGE_TENSORS: usize = 92_000;
/// The header metadata of every fixture, as torch's writer puts it.
pub const METADATA: &[(&str, &str)] = &[("format", "pt")];

/// Fixture sizes: full, or a small version for --quick.
pub struct Sizes {
    /// The single large tensor of items 1, 2, 4 (bytes).
    pub big: u64,
    /// Each of the 4 tensors of item 3 (bytes).
    pub par: u64,
    /// Hidden size and vocabulary of the multi-tensor model of items 5 and 7 (16 layers).
    pub hidden: u64,
    pub vocab: u64,
    pub layers: u64,
    /// Shards and tensors of the item 6 model.
    pub shards: usize,
    pub tensors: usize,
    /// 4 KiB random reads per run (item 4).
    pub rand_ops: usize,
    /// Runs and time budget of the slow `getfattr -d` over every tensor.
    pub getfattr_runs: usize,
    pub getfattr_budget: Duration,
    /// Runs of `getfattr -d` on one tensor.
    pub one_getfattr_runs: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
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

pub fn setxattr(path: &CString, name: &str, value: &str) -> Res<()> {
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

/// Reads a file once so its page cache is hot.
pub fn warm_file(path: &Path) -> Res<()> {
    let f = File::open(path).map_err(err(path.display()))?;
    let len = f.metadata().map_err(err(path.display()))?.len();
    let mut buf = vec![0u8; MIB as usize];
    read_range(&f, 0, len, &mut buf)
}

/// The data fixtures of items 1-5, 7 and 10: `root/data`, and the BF16 copy of the model in
/// `root/bf16`.
pub struct DataFixture {
    pub dir: PathBuf,
    pub big_file: PathBuf,
    pub model_file: PathBuf,
    pub model_bytes: u64,
    pub model_tensors: usize,
    /// The model with BF16 instead of F16 tensors (item 10), and its size under `-o dtype=f32`.
    pub bf16_dir: PathBuf,
    pub bf16_file: PathBuf,
    pub bf16_f32_bytes: u64,
}

pub const PAR: [&str; 4] = [
    "par.0.weight",
    "par.1.weight",
    "par.2.weight",
    "par.3.weight",
];

pub fn build_data(root: &Path, sz: &Sizes) -> Res<DataFixture> {
    let dir = root.join("data");
    fs::create_dir_all(&dir).map_err(err(dir.display()))?;
    // A small tensor first, so big.weight starts at an offset that is not page-aligned, as in
    // real checkpoints.
    let mut big = vec![
        Spec::new("norm.weight", "F32", &[1000]),
        Spec::new("big.weight", "F16", &[sz.big / 2 / COLS, COLS]),
    ];
    for p in PAR {
        big.push(Spec::new(p, "F16", &[sz.par / 2 / COLS, COLS]));
    }
    let big_file = dir.join("big.safetensors");
    write_generated(
        &big_file,
        &big,
        Some(METADATA),
        Fill::Random(0x9e37_79b9_7f4a_7c15),
    )
    .map_err(err(big_file.display()))?;

    let model = model_specs(sz, "F16");
    let model_file = dir.join("model.safetensors");
    let model_bytes = write_generated(
        &model_file,
        &model,
        Some(METADATA),
        Fill::Random(0x2545_f491_4f6c_dd1d),
    )
    .map_err(err(model_file.display()))?
    .data_len();
    let bf16_dir = root.join("bf16");
    fs::create_dir_all(&bf16_dir).map_err(err(bf16_dir.display()))?;
    let bf16 = model_specs(sz, "BF16");
    let bf16_file = bf16_dir.join("model.safetensors");
    write_generated(
        &bf16_file,
        &bf16,
        Some(METADATA),
        Fill::Random(0x5851_f42d_4c95_7f2d),
    )
    .map_err(err(bf16_file.display()))?;
    let bf16_f32_bytes = bf16
        .iter()
        .map(|s| s.nbytes() * if s.dtype == "BF16" { 2 } else { 1 })
        .sum();
    warm_file(&big_file)?;
    warm_file(&model_file)?;
    warm_file(&bf16_file)?;
    Ok(DataFixture {
        dir,
        big_file,
        model_file,
        model_bytes,
        model_tensors: model.len(),
        bf16_dir,
        bf16_file,
        bf16_f32_bytes,
    })
}

/// The tensors of the 16-layer model of items 5, 7 and 10, its matrices of `dtype`.
fn model_specs(sz: &Sizes, dtype: &'static str) -> Vec<Spec> {
    let (h, v) = (sz.hidden, sz.vocab);
    let mut model = vec![Spec::new("model.embed_tokens.weight", dtype, &[v, h])];
    for l in 0..sz.layers {
        for p in ["q_proj", "k_proj", "v_proj", "o_proj"] {
            model.push(Spec::new(
                format!("model.layers.{l}.self_attn.{p}.weight"),
                dtype,
                &[h, h],
            ));
        }
        for p in ["gate_proj", "up_proj", "down_proj"] {
            model.push(Spec::new(
                format!("model.layers.{l}.mlp.{p}.weight"),
                dtype,
                &[h, h],
            ));
        }
        for p in ["input_layernorm", "post_attention_layernorm"] {
            model.push(Spec::new(
                format!("model.layers.{l}.{p}.weight"),
                "F32",
                &[h],
            ));
        }
    }
    model.push(Spec::new("model.norm.weight", "F32", &[h]));
    model.push(Spec::new("lm_head.weight", dtype, &[v, h]));
    model
}

/// The fixture of item 11: item 5's model in BF16 saved by `torch.save` alone in `root/pickle`,
/// and the same state dict saved by `safetensors.torch.save_file` in `root/pickle-st`.
pub struct PickleFixture {
    pub dir: PathBuf,
    pub checkpoint: PathBuf,
    pub st_dir: PathBuf,
    pub st_file: PathBuf,
    /// Tensor bytes and tensors, as the writer counted them.
    pub bytes: u64,
    pub tensors: usize,
}

/// Writes the item 11 fixture with `benches/checkpoints.py` and reads both files once.
pub fn build_pickle(root: &Path, sz: &Sizes, python: Option<&Path>) -> Res<PickleFixture> {
    let py = python.ok_or("no Python with safetensors + numpy (set TENSORMOUNT_PYTHON)")?;
    let dir = root.join("pickle");
    let st_dir = root.join("pickle-st");
    for d in [&dir, &st_dir] {
        fs::create_dir_all(d).map_err(err(d.display()))?;
    }
    let out = Command::new(py)
        .arg(Path::new(MANIFEST_DIR).join("benches/checkpoints.py"))
        .arg("write")
        .args([&dir, &st_dir])
        .args([sz.hidden, sz.vocab, sz.layers].map(|n| n.to_string()))
        .stdin(Stdio::null())
        .output()
        .map_err(err(py.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut counts = stdout.split_whitespace().map(str::parse::<u64>);
    let (true, Some(Ok(bytes)), Some(Ok(tensors))) =
        (out.status.success(), counts.next(), counts.next())
    else {
        let e = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "checkpoints.py write: {}",
            e.lines().last().unwrap_or("no counts printed")
        ));
    };
    let checkpoint = dir.join("pytorch_model.bin");
    let st_file = st_dir.join("model.safetensors");
    warm_file(&checkpoint)?;
    warm_file(&st_file)?;
    Ok(PickleFixture {
        dir,
        checkpoint,
        st_dir,
        st_file,
        bytes,
        tensors: tensors as usize,
    })
}

/// The item 6 model (sparse shards plus index) and its local baseline directory.
pub struct LargeFixture {
    pub dir: PathBuf,
    pub local: PathBuf,
    pub entries: usize,
    /// A tensor of the middle shard, and one of the first.
    pub one_tensor: String,
    pub first_tensor: String,
}

pub fn large_names(n: usize) -> Vec<Spec> {
    let mut out = Vec::with_capacity(n);
    'outer: for l in 0.. {
        for e in 0..256 {
            for p in ["gate_proj", "up_proj", "down_proj"] {
                if out.len() >= n {
                    break 'outer;
                }
                let base = format!("model.layers.{l}.mlp.experts.{e}.{p}");
                out.push(Spec::new(
                    format!("{base}.weight"),
                    "F8_E4M3",
                    &[2048, 2048],
                ));
                if out.len() < n {
                    out.push(Spec::new(
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

pub fn build_large(root: &Path, sz: &Sizes) -> Res<LargeFixture> {
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
        // Sparse: the data section is a hole.
        let layout = write_generated(&path, shard, Some(METADATA), Fill::Hole)
            .map_err(err(path.display()))?;
        total += layout.data_len();
        let source = fs::canonicalize(&path).map_err(err(path.display()))?;
        let source = source.to_string_lossy();
        for (t, &(b, e)) in shard.iter().zip(&layout.offsets) {
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
            let abs = 8 + layout.header_len + b;
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
