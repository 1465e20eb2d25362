//! Item 11, PyTorch checkpoints: item 5's model in BF16 saved by `torch.save`, mounted. The mount
//! time and `safetensors.torch.load_file` of the virtual `model.safetensors` (every page of its
//! tensors touched), against `torch.load(weights_only=True)` of the checkpoint; `numpy.fromfile` on
//! `pytorch_model.tensors/`, against the same on the `model.tensors/` of the safetensors file
//! written from the same state dict.

use std::fs;
use std::path::Path;

use super::Bench;
use crate::err;
use crate::mounts::Mount;
use crate::report::{Cell, Row, Unit, fmt_size};

impl Bench {
    /// Item 11.
    pub fn checkpoint(&mut self, rows: &mut Vec<Row>) {
        let p = match &self.pickle {
            Ok(p) => p,
            Err(e) => {
                rows.push(Row {
                    id: "11",
                    case: "write the PyTorch checkpoint (benches/checkpoints.py)".into(),
                    unit: Unit::Secs,
                    tm: Cell::Failed(e.clone()),
                    base: Cell::None,
                    base_what: "",
                });
                return;
            }
        };
        let expected = (p.bytes, p.tensors);
        let gb = Self::gbps(p.bytes);
        let what = format!("{} tensors, {} BF16", p.tensors, fmt_size(p.bytes));
        // Cold and warm: the first and second pass of load_all.py in one process per fresh mount.
        let two_passes = |src: &Path, mode: &str, path: &str| {
            self.cold_warm_on(src, "", p.bytes, |m| {
                let v = self.python_passes_of(mode, &m.path(path), 2, expected)?;
                Ok((v[0], v[1]))
            })
        };
        let warmup = self.opts.warmup;
        let torch_load = self
            .python_passes_of("pt", &p.checkpoint, self.runs_total(), expected)
            .map(|v| v[warmup.min(v.len())..].to_vec());
        let st_len = fs::metadata(&p.st_file).map_or(0, |m| m.len());
        let mount = self.sample(|| {
            let m = Mount::new(&p.dir, &self.mnt, self.tuning, "")?;
            let took = m.took.as_secs_f64();
            let virt = m.path("model.safetensors");
            let len = fs::metadata(&virt).map_err(err(virt.display()))?.len();
            m.unmount()?;
            if len != st_len {
                return Err(format!(
                    "the virtual model.safetensors has {len} B, save_file wrote {st_len} B"
                ));
            }
            Ok(took)
        });
        rows.push(Row {
            id: "11",
            case: format!("mount time of pytorch_model.bin ({what}), until live"),
            unit: Unit::Ms,
            tm: Cell::from(mount),
            base: Cell::from(torch_load.clone()),
            base_what: "torch.load(weights_only=True)",
        });
        let virt = two_passes(&p.dir, "st-torch", "model.safetensors");
        for (warm, w) in [(false, "cold"), (true, "warm")] {
            rows.push(Row {
                id: "11",
                case: format!(
                    "load all ({what}): safetensors.torch.load_file on the virtual \
                     model.safetensors, {w}"
                ),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&virt, warm), &gb),
                base: Self::map(torch_load.clone(), &gb),
                base_what: "torch.load(weights_only=True) on the checkpoint",
            });
        }
        let raw = two_passes(&p.dir, "fromfile", "pytorch_model.tensors");
        let st = two_passes(&p.st_dir, "fromfile", "model.tensors");
        for (warm, w) in [(false, "cold"), (true, "warm")] {
            rows.push(Row {
                id: "11",
                case: format!("load all ({what}): numpy.fromfile on pytorch_model.tensors/, {w}"),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&raw, warm), &gb),
                base: Self::map(Self::pair(&st, warm), &gb),
                base_what: "same on model.tensors/ of save_file's copy",
            });
        }
    }
}
