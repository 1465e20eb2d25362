//! Item 14, ONNX: a 1 GiB model of float16 initializers with external data, as
//! `onnx.save_model(save_as_external_data=True)` writes it: the mount time until live plus a
//! listing of `model.tensors/` with every file's dtype and shape xattrs, against
//! `onnx.load(load_external_data=False)` and a listing of its initializers' names, types and
//! shapes (the parse alone); `safetensors.torch.load_file` of the virtual `model.safetensors`
//! (cold: a fresh mount; warm: a second pass), against `onnx.load` and `numpy_helper.to_array` of
//! every initializer. And the daemon's resident memory right after mounting a 1.94 GiB single-file
//! model (31 initializers of 64 MiB in `raw_data`, the data a hole), against right after mounting
//! the external-data model. The models are written by `benches/onnx_models.py`.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::Bench;
use crate::fixtures::warm_file;
use crate::mounts::{Mount, getxattr};
use crate::report::{Cell, Row, Unit, fmt_size};
use crate::{GIB, MANIFEST_DIR, MIB, Res, err};

/// An ONNX model written alone in its directory as `model.onnx`.
pub struct OnnxModel {
    pub dir: PathBuf,
    pub file: PathBuf,
    pub tensors: usize,
    pub bytes: u64,
}

/// Item 14's models.
pub struct OnnxFixture {
    /// Float16 matrices, 1 GiB (quick: 64 MiB), in `model.onnx_data`.
    pub external: OnnxModel,
    /// Float32 initializers of 64 MiB in `raw_data`, 1.94 GiB (quick: 128 MiB), sparse.
    pub single: OnnxModel,
}

fn script() -> PathBuf {
    Path::new(MANIFEST_DIR).join("benches/onnx_models.py")
}

/// Writes item 14's models in `root/onnx-*/model.onnx` and reads the external data once, so that
/// its page cache is hot.
pub fn build_onnx(root: &Path, quick: bool, python: Option<&Path>) -> Res<OnnxFixture> {
    let py = python.ok_or("no Python with safetensors + numpy (set TENSORMOUNT_PYTHON)")?;
    let write = |mode: &str, dir: &Path, at: &Path, bytes: u64| -> Res<OnnxModel> {
        fs::create_dir_all(dir).map_err(err(dir.display()))?;
        let out = Command::new(py)
            .arg(script())
            .args([mode.as_ref(), at.as_os_str(), bytes.to_string().as_ref()])
            .stdin(Stdio::null())
            .output()
            .map_err(err(py.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut n = text.split_whitespace().map(str::parse::<u64>);
        let (true, Some(Ok(tensors)), Some(Ok(bytes))) = (out.status.success(), n.next(), n.next())
        else {
            let e = String::from_utf8_lossy(&out.stderr);
            return Err(format!(
                "onnx_models.py {mode}: {}",
                e.lines().last().unwrap_or("no counts printed")
            ));
        };
        Ok(OnnxModel {
            dir: dir.to_path_buf(),
            file: dir.join("model.onnx"),
            tensors: tensors as usize,
            bytes,
        })
    };
    let (ext, single) = (root.join("onnx-external"), root.join("onnx-single"));
    let external = write(
        "write-external",
        &ext,
        &ext,
        if quick { 64 * MIB } else { GIB },
    )?;
    warm_file(&ext.join("model.onnx_data"))?;
    let single = write(
        "write-single",
        &single,
        &single.join("model.onnx"),
        if quick { 128 * MIB } else { 2 * GIB - 64 * MIB },
    )?;
    Ok(OnnxFixture { external, single })
}

impl Bench {
    /// Item 14.
    pub fn onnx(&self, rows: &mut Vec<Row>) {
        let o = match &self.onnx {
            Ok(o) => o,
            Err(e) => {
                rows.push(Row {
                    id: "14",
                    case: "ONNX: write the models (benches/onnx_models.py)".into(),
                    unit: Unit::Secs,
                    tm: Cell::Failed(e.clone()),
                    base: Cell::None,
                    base_what: "",
                });
                return;
            }
        };
        let e = &o.external;
        let expected = (e.bytes, e.tensors);
        let what = format!("{} tensors, {} F16", e.tensors, fmt_size(e.bytes));
        let parse = self.onnx_passes("parse", &e.file, self.runs_total(), expected);
        let listed = self.mount_and_list(e);
        rows.push(Row {
            id: "14",
            case: format!(
                "ONNX: mount + list model.tensors/ with dtype and shape ({what}, external data)"
            ),
            unit: Unit::Secs,
            tm: Cell::from(listed),
            base: Cell::from(self.after_warmup(parse)),
            base_what: "onnx.load(load_external_data=False) + list",
        });

        // As a user at a shell waits for it: a whole command each, interpreter start included.
        let py = self.python.clone().unwrap_or_default();
        let command = |program: &Path, args: &[&OsStr]| {
            self.sample(|| {
                let start = Instant::now();
                let out = Command::new(program)
                    .args(args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .status()
                    .map_err(err(program.display()))?;
                match out.success() {
                    true => Ok(start.elapsed().as_secs_f64()),
                    false => Err(format!("{} failed", program.display())),
                }
            })
        };
        let list_json = command(
            Path::new(crate::BIN),
            &["--list".as_ref(), "--json".as_ref(), e.dir.as_os_str()],
        );
        let s = script();
        let python_cmd = command(
            &py,
            &[
                s.as_os_str(),
                "parse".as_ref(),
                e.file.as_os_str(),
                "1".as_ref(),
            ],
        );
        rows.push(Row {
            id: "14",
            case: format!(
                "ONNX: tensormount --list --json, a whole command ({what}, external data)"
            ),
            unit: Unit::Secs,
            tm: Cell::from(list_json),
            base: Cell::from(python_cmd),
            base_what: "python: import onnx, onnx.load(load_external_data=False) + list",
        });
        // A single-file model: its parse alone reads every byte.
        let single = &o.single;
        let single_parse = self.onnx_passes(
            "parse",
            &single.file,
            self.runs_total(),
            (single.bytes, single.tensors),
        );
        let single_listed = self.mount_and_list(single);
        rows.push(Row {
            id: "14",
            case: format!(
                "ONNX: mount + list model.tensors/ with dtype and shape ({} tensors, {} F32, one \
                 file, sparse)",
                single.tensors,
                fmt_size(single.bytes)
            ),
            unit: Unit::Secs,
            tm: Cell::from(single_listed),
            base: Cell::from(self.after_warmup(single_parse)),
            base_what: "onnx.load(load_external_data=False) + list",
        });

        let gb = Self::gbps(e.bytes);
        let to_array = self.onnx_passes("to_array", &e.file, self.runs_total(), expected);
        let runs = self.cold_warm_on(&e.dir, "", e.bytes, |m| {
            let v = self.onnx_passes("load_file", &m.path("model.safetensors"), 2, expected)?;
            Ok((v[0], v[1]))
        });
        for (warm, w) in [(false, "cold"), (true, "warm")] {
            rows.push(Row {
                id: "14",
                case: format!(
                    "ONNX: load all ({what}): safetensors.torch.load_file on the virtual \
                     model.safetensors, {w}"
                ),
                unit: Unit::GBps,
                tm: Self::map(Self::pair(&runs, warm), &gb),
                base: Self::map(self.after_warmup(to_array.clone()), &gb),
                base_what: "onnx.load + numpy_helper.to_array of each",
            });
        }

        let rss =
            |m: &Mount| Some((m.status_bytes("RssAnon")? + m.status_bytes("RssFile")?) as f64);
        let mounted = |dir: &Path| {
            let m = Mount::new(dir, &self.mnt, self.tuning, "")?;
            let n = list(&m.path("model.tensors"))?;
            let bytes = rss(&m).ok_or("no /proc/PID/status")?;
            m.unmount()?;
            Ok::<_, String>((n, bytes))
        };
        let single = mounted(&o.single.dir).and_then(|(n, bytes)| match n == o.single.tensors {
            true => Ok(vec![bytes]),
            false => Err(format!(
                "model.tensors/ lists {n}, not {}",
                o.single.tensors
            )),
        });
        rows.push(Row {
            id: "14",
            case: format!(
                "ONNX: daemon RssAnon + RssFile right after mounting a {} single-file model",
                fmt_size(o.single.bytes)
            ),
            unit: Unit::MiB,
            tm: Cell::from(single),
            base: Cell::from(mounted(&e.dir).map(|(_, b)| vec![b])),
            base_what: "the external-data model's",
        });
    }

    /// The time to mount `model` until live plus a listing of its `model.tensors/` (every file's
    /// dtype and shape), each run; the listing must hold every tensor.
    fn mount_and_list(&self, model: &OnnxModel) -> Res<Vec<f64>> {
        self.sample(|| {
            let m = Mount::new(&model.dir, &self.mnt, self.tuning, "")?;
            let start = Instant::now();
            let n = list(&m.path("model.tensors"))?;
            let took = m.took.as_secs_f64() + start.elapsed().as_secs_f64();
            m.unmount()?;
            match n == model.tensors {
                true => Ok(took),
                false => Err(format!("model.tensors/ lists {n}, not {}", model.tensors)),
            }
        })
    }

    /// `passes` passes of `benches/onnx_models.py MODE PATH`.
    fn onnx_passes(
        &self,
        mode: &str,
        path: &Path,
        passes: usize,
        expected: (u64, usize),
    ) -> Res<Vec<f64>> {
        self.script_passes("onnx_models.py", mode, path, passes, expected)
    }

    /// The runs of `v` after the warm-up.
    pub(super) fn after_warmup(&self, v: Res<Vec<f64>>) -> Res<Vec<f64>> {
        v.map(|v| v[self.opts.warmup.min(v.len())..].to_vec())
    }
}

/// Lists `dir` and reads every tensor file's dtype and shape xattrs; returns how many files.
fn list(dir: &Path) -> Res<usize> {
    let mut n = 0;
    for e in fs::read_dir(dir).map_err(err(dir.display()))? {
        let p = e.map_err(err(dir.display()))?.path();
        if p.file_name().is_some_and(|f| f == "__metadata__") {
            continue;
        }
        getxattr(&p, "user.safetensors.dtype")?;
        getxattr(&p, "user.safetensors.shape")?;
        n += 1;
    }
    Ok(n)
}
