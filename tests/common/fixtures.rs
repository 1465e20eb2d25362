//! Making safetensors fixtures: the official writer through the Python oracle
//! (`tests/python/oracle.py`), and a hand writer for what numpy cannot make (dtypes it lacks,
//! malformed files, files of GiB that are never held in memory). Shared by every test binary
//! (through `tests/common/mod.rs`) and by the benchmark (`benches/mount/main.rs` includes this
//! file), so it uses nothing else of `tests/common`.
//!
//! The hand writer lays files out as the reference writes them: `__metadata__` first, then the
//! tensors in the given order, back to back, the header padded with spaces to a multiple of 8.
#![allow(dead_code)]

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The Python with the official `safetensors` and numpy: $TENSORMOUNT_PYTHON, else the repo's
/// `.venv`; `None` if it cannot import both.
pub fn find_python() -> Option<PathBuf> {
    let candidate = std::env::var_os("TENSORMOUNT_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"));
    Command::new(&candidate)
        .args(["-c", "import safetensors, numpy"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
        .then_some(candidate)
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

/// The header JSON of tensors given as (name, dtype, shape, byte length), in that order, after
/// `__metadata__` if any, padded with spaces so that the data starts at a multiple of 8; and each
/// tensor's `data_offsets`.
pub fn header_json<'a>(
    metadata: Option<&[(&str, &str)]>,
    tensors: impl IntoIterator<Item = (&'a str, &'a str, &'a [u64], u64)>,
) -> (String, Vec<(u64, u64)>) {
    let q = |s: &str| serde_json::to_string(s).unwrap();
    let mut h = String::from("{");
    if let Some(m) = metadata {
        let fields: Vec<String> = m
            .iter()
            .map(|(k, v)| format!("{}:{}", q(k), q(v)))
            .collect();
        h += &format!(r#""__metadata__":{{{}}}"#, fields.join(","));
    }
    let mut offsets = Vec::new();
    let mut pos = 0;
    for (name, dtype, shape, len) in tensors {
        let end = pos + len;
        let shape: Vec<String> = shape.iter().map(u64::to_string).collect();
        if h.len() > 1 {
            h.push(',');
        }
        h += &format!(
            r#"{}:{{"dtype":{},"shape":[{}],"data_offsets":[{pos},{end}]}}"#,
            q(name),
            q(dtype),
            shape.join(",")
        );
        offsets.push((pos, end));
        pos = end;
    }
    h.push('}');
    while !(8 + h.len()).is_multiple_of(8) {
        h.push(' ');
    }
    (h, offsets)
}

/// One tensor for [`write_safetensors`].
pub struct T<'a> {
    pub name: &'a str,
    pub dtype: &'a str,
    pub shape: &'a [usize],
    pub data: Vec<u8>,
}

/// A tensor of a fixture that the test keeps, bytes and all, to check what the mount serves.
pub struct Tensor {
    pub name: String,
    pub dtype: &'static str,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl Tensor {
    pub fn as_t(&self) -> T<'_> {
        T {
            name: &self.name,
            dtype: self.dtype,
            shape: &self.shape,
            data: self.data.clone(),
        }
    }
}

/// [`write_safetensors`] of kept tensors.
pub fn write_tensors<'a>(
    path: &Path,
    tensors: impl IntoIterator<Item = &'a Tensor>,
    metadata: Option<&[(&str, &str)]>,
) {
    let ts: Vec<T<'_>> = tensors.into_iter().map(Tensor::as_t).collect();
    write_safetensors(path, &ts, metadata);
}

/// The tests' own safetensors writer: the tensors' bytes as given (their length need not match
/// the shape).
pub fn write_safetensors(path: &Path, tensors: &[T<'_>], metadata: Option<&[(&str, &str)]>) {
    let shapes: Vec<Vec<u64>> = tensors
        .iter()
        .map(|t| t.shape.iter().map(|&d| d as u64).collect())
        .collect();
    let (json, _) = header_json(
        metadata,
        tensors
            .iter()
            .zip(&shapes)
            .map(|(t, s)| (t.name, t.dtype, s.as_slice(), t.data.len() as u64)),
    );
    let data: Vec<u8> = tensors
        .iter()
        .flat_map(|t| t.data.iter().copied())
        .collect();
    write_raw(path, &json, &data);
}

/// Writes an index at `path`: `metadata` if given, and the shard of each tensor.
pub fn write_index<'a>(
    path: &Path,
    metadata: Option<serde_json::Value>,
    map: impl IntoIterator<Item = (&'a str, &'a str)>,
) {
    let weight_map: serde_json::Map<String, serde_json::Value> = map
        .into_iter()
        .map(|(t, s)| (t.to_string(), serde_json::Value::from(s)))
        .collect();
    let mut top = serde_json::Map::new();
    if let Some(m) = metadata {
        top.insert("metadata".into(), m);
    }
    top.insert("weight_map".into(), weight_map.into());
    fs::write(path, serde_json::to_vec_pretty(&top).unwrap()).unwrap();
}

/// A file made of an 8-byte length, `header` and `data`: for malformed files.
pub fn write_raw(path: &Path, header: &str, data: &[u8]) {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    fs::write(path, bytes).unwrap();
}

/// Bytes per element of a dtype (1 for the 8-bit and unknown ones).
pub fn dtype_size(dtype: &str) -> u64 {
    match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        _ => 1,
    }
}

/// A tensor whose bytes [`write_generated`] makes up.
pub struct Spec {
    pub name: String,
    pub dtype: &'static str,
    pub shape: Vec<u64>,
}

impl Spec {
    pub fn new(name: impl Into<String>, dtype: &'static str, shape: &[u64]) -> Spec {
        Spec {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
        }
    }

    /// Its length: elements times the dtype's size.
    pub fn nbytes(&self) -> u64 {
        self.shape.iter().product::<u64>() * dtype_size(self.dtype)
    }
}

/// What [`write_generated`] puts in the data section.
#[derive(Clone, Copy)]
pub enum Fill {
    /// Pseudo-random bytes from this seed (xorshift64), written 8 MiB at a time and synced to
    /// disk, so that no writeback runs afterwards.
    Random(u64),
    /// Nothing: the data section is a hole (a sparse file).
    Hole,
}

/// Where [`write_generated`] put things.
pub struct Layout {
    /// The header's JSON length (the data starts at `8 + header_len`).
    pub header_len: u64,
    /// Each tensor's `data_offsets`, in the order given.
    pub offsets: Vec<(u64, u64)>,
}

impl Layout {
    /// The data section's length.
    pub fn data_len(&self) -> u64 {
        self.offsets.last().map_or(0, |o| o.1)
    }
}

/// Writes a safetensors file of `tensors` (in that order) whose data is made up as `fill` says,
/// without holding it in memory: for fixtures of any size.
pub fn write_generated(
    path: &Path,
    tensors: &[Spec],
    metadata: Option<&[(&str, &str)]>,
    fill: Fill,
) -> io::Result<Layout> {
    let (h, offsets) = header_json(
        metadata,
        tensors
            .iter()
            .map(|t| (t.name.as_str(), t.dtype, t.shape.as_slice(), t.nbytes())),
    );
    let layout = Layout {
        header_len: h.len() as u64,
        offsets,
    };
    let data_len = layout.data_len();
    let mut f = File::create(path)?;
    f.write_all(&(h.len() as u64).to_le_bytes())?;
    f.write_all(h.as_bytes())?;
    match fill {
        Fill::Hole => f.set_len(8 + layout.header_len + data_len)?,
        Fill::Random(seed) => {
            let mut state = seed | 1;
            let mut chunk = vec![0u64; (8 << 20) / 8];
            let mut left = data_len;
            while left > 0 {
                for w in chunk.iter_mut() {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    *w = state;
                }
                // SAFETY: a u64 slice viewed as bytes, same length in bytes, alignment 1 for u8.
                let bytes = unsafe {
                    std::slice::from_raw_parts(chunk.as_ptr().cast::<u8>(), chunk.len() * 8)
                };
                let n = left.min(bytes.len() as u64) as usize;
                f.write_all(&bytes[..n])?;
                left -= n as u64;
            }
            f.sync_all()?;
        }
    }
    Ok(layout)
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
