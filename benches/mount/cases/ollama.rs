//! Item 15, ollama: a store of 20 models written as ollama writes one (`benches/ollama_bench.py`):
//! the mount time until live plus a walk of `by-name/` that stats every file of every model (its
//! layers, views and Modelfile), against a script that reads every manifest, names its model and
//! stats each layer's blob (what finding a model's `.gguf` by name takes without tensormount).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::Bench;
use crate::mounts::Mount;
use crate::report::{Cell, Row, Unit};
use crate::{MANIFEST_DIR, Res, err};

/// How many models item 15's store holds.
pub const MODELS: usize = 20;

/// Item 15's store: SOURCE (`dir`) holds it at `models/`.
pub struct OllamaFixture {
    pub dir: PathBuf,
    pub layer_bytes: u64,
}

fn script() -> PathBuf {
    Path::new(MANIFEST_DIR).join("benches/ollama_bench.py")
}

/// Writes item 15's store in `root/ollama/models`.
pub fn build_ollama(root: &Path, python: Option<&Path>) -> Res<OllamaFixture> {
    let py = python.ok_or("no Python with gguf + numpy (set TENSORMOUNT_PYTHON)")?;
    let dir = root.join("ollama");
    let store = dir.join("models");
    fs::create_dir_all(&store).map_err(err(store.display()))?;
    let out = Command::new(py)
        .arg(script())
        .args([
            "write".as_ref(),
            store.as_os_str(),
            MODELS.to_string().as_ref(),
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(err(py.display()))?;
    if !out.status.success() {
        let e = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "ollama_bench.py write: {}",
            e.lines().last().unwrap_or("failed")
        ));
    }
    let blobs = store.join("blobs");
    let mut layer_bytes = 0;
    // The layers the manifests name, each counted once per manifest, as the baseline counts.
    for m in walk_files(&store.join("manifests"))? {
        let text = fs::read_to_string(&m).map_err(err(m.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(err(m.display()))?;
        for l in v["layers"].as_array().into_iter().flatten() {
            let digest = l["digest"].as_str().unwrap_or_default().replace(':', "-");
            let meta = fs::metadata(blobs.join(&digest)).map_err(err(&digest))?;
            layer_bytes += meta.len();
        }
    }
    Ok(OllamaFixture { dir, layer_bytes })
}

/// Every file below `dir`.
fn walk_files(dir: &Path) -> Res<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).map_err(err(dir.display()))? {
        let e = e.map_err(err(dir.display()))?;
        let kind = e.file_type().map_err(err(e.path().display()))?;
        match kind.is_dir() {
            true => out.extend(walk_files(&e.path())?),
            false => out.push(e.path()),
        }
    }
    Ok(out)
}

impl Bench {
    /// Item 15.
    pub fn ollama(&self, rows: &mut Vec<Row>) {
        let case =
            format!("ollama: mount + walk by-name/ of a {MODELS}-model store, stat of every file");
        let o = match &self.ollama {
            Ok(o) => o,
            Err(e) => {
                rows.push(Row {
                    id: "15",
                    case,
                    unit: Unit::Secs,
                    tm: Cell::Failed(e.clone()),
                    base: Cell::None,
                    base_what: "",
                });
                return;
            }
        };
        let store = o.dir.join("models");
        let base = self.script_passes(
            "ollama_bench.py",
            "list",
            &store,
            self.runs_total(),
            (o.layer_bytes, MODELS),
        );
        let tm = self.sample(|| {
            let m = Mount::new(&o.dir, &self.mnt, self.tuning, "")?;
            let start = Instant::now();
            let models = count_models(&m.path("models/by-name"))?;
            let took = m.took.as_secs_f64() + start.elapsed().as_secs_f64();
            m.unmount()?;
            match models == MODELS {
                true => Ok(took),
                false => Err(format!("by-name/ shows {models} models, not {MODELS}")),
            }
        });
        rows.push(Row {
            id: "15",
            case,
            unit: Unit::Secs,
            tm: Cell::from(tm),
            base: Cell::from(self.after_warmup(base)),
            base_what: "python: every manifest parsed, named, its blobs stat'ed",
        });
    }
}

/// Walks a `by-name/` tree, stat'ing every entry; counts the model directories (those holding a
/// `Modelfile`).
fn count_models(dir: &Path) -> Res<usize> {
    let mut n = 0;
    for e in fs::read_dir(dir).map_err(err(dir.display()))? {
        let p = e.map_err(err(dir.display()))?.path();
        let meta = fs::metadata(&p).map_err(err(p.display()))?;
        if p.file_name().is_some_and(|f| f == "Modelfile") {
            n += 1;
        }
        if meta.is_dir() {
            n += count_models(&p)?;
        }
    }
    Ok(n)
}
