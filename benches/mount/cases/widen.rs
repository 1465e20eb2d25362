//! Item 10, `-o dtype=f32`: the BF16 model loaded with `numpy.load` from its float32 views,
//! against safetensors (numpy with ml_dtypes' bfloat16) on the source; and the widening itself
//! in memory, 1 MiB of output at a time on one core, against copying as many bytes.

use std::hint::black_box;
use std::time::Instant;

use tensormount::format::Dtype;
use tensormount::format::widen::{Target, Widening};

use super::Bench;
use crate::MIB;
use crate::report::{Cell, Row, Unit, fmt_size};

impl Bench {
    pub fn widening(&mut self, rows: &mut Vec<Row>) {
        let stored = self.data.model_bytes; // the BF16 model has the F16 model's shapes
        let widened = self.data.bf16_f32_bytes;
        let gb = Self::gbps(stored);
        let what = format!(
            "BF16 model, {} tensors, {}",
            self.data.model_tensors,
            fmt_size(stored)
        );
        let warmup = self.opts.warmup;
        let tensors = self.data.model_tensors;
        let direct = self
            .python_passes_of(
                "st",
                &self.data.bf16_file,
                self.runs_total(),
                (stored, tensors),
            )
            .map(|v| v[warmup.min(v.len())..].to_vec());
        let runs = self.cold_warm_on(&self.data.bf16_dir, "dtype=f32,npy", widened, |m| {
            let v =
                self.python_passes_of("npy", &m.path("model.tensors"), 2, (widened, tensors))?;
            Ok((v[0], v[1]))
        });
        for (warm, w) in [(false, "cold"), (true, "warm")] {
            rows.push(Row {
                id: "10",
                case: format!(
                    "load all ({what}): numpy.load on -o dtype=f32,npy float32 views, {w} \
                     (GB/s of the stored bytes)"
                ),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&runs, warm), &gb),
                base: Self::map(direct.clone(), &gb),
                base_what: "safetensors on source (bfloat16)",
            });
        }

        // The widening alone: 1 MiB outputs from a buffer of random stored bytes.
        let total = if self.opts.quick { 64 * MIB } else { 512 * MIB };
        let stored_bytes: Vec<u8> = {
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            (0..64 * MIB)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        };
        let mut out = vec![0u8; MIB as usize];
        for (name, dtype) in [
            ("BF16", Dtype::BF16),
            ("F16", Dtype::F16),
            ("F8_E4M3", Dtype::F8_E4M3),
            ("F4", Dtype::F4),
        ] {
            let Some(w) = Widening::new(dtype, Target::F32) else {
                continue;
            };
            let span = w.presented_len(stored_bytes.len() as u64) - MIB;
            let tm = self.sample(|| {
                let start = Instant::now();
                let mut off = 0;
                while off < total {
                    let at = off % span;
                    let r = w.stored_range(at, MIB);
                    let s = &stored_bytes[r.start as usize..(r.start + r.len) as usize];
                    if !w.convert(s, at, &mut out) {
                        return Err(format!("{name}: stored range too short"));
                    }
                    black_box(&out);
                    off += MIB;
                }
                Ok(total as f64 / start.elapsed().as_secs_f64() / 1e9)
            });
            let base = self.sample(|| {
                let start = Instant::now();
                let mut off = 0;
                while off < total {
                    let at = (off % (stored_bytes.len() as u64 - MIB)) as usize;
                    out.copy_from_slice(&stored_bytes[at..at + MIB as usize]);
                    black_box(&out);
                    off += MIB;
                }
                Ok(total as f64 / start.elapsed().as_secs_f64() / 1e9)
            });
            rows.push(Row {
                id: "10",
                case: format!("widen {name} to float32 in memory, 1 MiB outputs, 1 core"),
                unit: Unit::GBps,
                tm: Cell::from(tm),
                base: Cell::from(base),
                base_what: "copy of as many bytes",
            });
        }
    }
}
