//! Item 13, GGUF: the dequantization of `-o dtype=f32` alone, in memory on one core, 1 MiB of
//! float32 output at a time, of Q4_K, Q6_K, Q8_0 and Q4_0 blocks, against gguf-py's numpy
//! `quants.dequantize` of the same blocks, and against copying as many output bytes.

use std::hint::black_box;
use std::process::Command;
use std::time::Instant;

use tensormount::format::gguf::{GgmlType, dequantize};

use super::Bench;
use crate::MIB;
use crate::report::{Cell, Row, Unit};

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

/// `n` blocks of `bytes` random bytes whose first two bytes (the float16 scale of every type
/// measured but Q6_K, whose scale is last) are a float16 near 0.01, so that no block is NaN.
fn random_blocks(n: usize, bytes: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut v: Vec<u8> = (0..n * bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
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
