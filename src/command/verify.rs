//! `tensormount verify SOURCE`: every weight file of SOURCE hashed once (SHA-256, files in
//! parallel on all cores, front to back) and checked against the digest its source records (see
//! [`crate::source::Recorded`]) or a manifest; with `--write-manifest` / `--manifest`, every
//! tensor's bytes too, so that a damaged tensor is named (under the file that holds them: a
//! model's data file for its external tensors).
//!
//! Each file is `ok`, `mismatch`, `unknown` (nothing recorded: its digest is printed so that it
//! can be), `error` (unreadable, or changed while being verified) or `missing` (in the manifest,
//! not in SOURCE). A file that names data files SOURCE does not hold as it says (a store's
//! manifest naming a blob that is missing or of another size) is a `mismatch`; a store's blob no
//! manifest names is `unreferenced` where it would be `ok`, which fails nothing. Exit status: 2 on a usage or read error, else 1 if anything mismatches or is
//! missing, else 0.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Value, json};

use crate::base::digest::{Hasher, Sha256, hex, parse_hex};
use crate::base::parallel;
use crate::command::cli::VerifyArgs;
use crate::command::model::{Model, WeightFile};
use crate::format::Tensor;
use crate::namespace::tensor_bytes;
use crate::source::{ReadError, Source};

/// The version of the manifest format `--write-manifest` writes.
const MANIFEST_VERSION: u64 = 1;

pub fn main(args: VerifyArgs) -> ExitCode {
    match run(&args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("tensormount: {e}");
            ExitCode::from(2)
        }
    }
}

/// The digest a file should have, and where that is said.
#[derive(Clone)]
struct Expected {
    sha256: Sha256,
    how: &'static str,
    at: String,
}

/// What a manifest says of one file.
struct Listed {
    sha256: Sha256,
    tensors: BTreeMap<String, Sha256>,
}

/// What hashing one file gave.
#[derive(Clone)]
struct Hashed {
    sha256: Sha256,
    bytes: u64,
    /// Its tensors' digests, when asked for, by name; `None` for a file that is not valid.
    tensors: Option<BTreeMap<String, Sha256>>,
}

/// One line of the report.
struct Row {
    path: String,
    status: &'static str,
    expected: Option<Expected>,
    actual: Option<Sha256>,
    bytes: u64,
    error: Option<String>,
}

/// One tensor checked against a manifest.
struct TensorRow {
    file: String,
    name: String,
    status: &'static str,
    expected: Option<Sha256>,
    actual: Option<Sha256>,
}

fn run(args: &VerifyArgs) -> Result<u8, String> {
    let manifest = match &args.manifest {
        Some(path) => Some(read_manifest(path)?),
        None => None,
    };
    let model = Model::open(&args.source)?;
    let (files, unopened) = model.weight_files();
    let want_tensors = args.manifest.is_some() || args.write_manifest.is_some();
    let started = Instant::now();
    let (results, hashed_bytes) = hash_all(&files, want_tensors);
    let seconds = started.elapsed().as_secs_f64();

    let mut rows = Vec::new();
    let mut tensor_rows = Vec::new();
    let mut written = BTreeMap::new();
    for (file, result) in files.iter().zip(results) {
        let listed = manifest.as_ref().and_then(|(_, m)| m.get(&file.path));
        let expected = match (listed, &args.manifest) {
            (Some(l), Some(at)) => Some(Expected {
                sha256: l.sha256,
                how: "manifest",
                at: at.display().to_string(),
            }),
            _ => file.source.recorded().map(|r| Expected {
                sha256: r.sha256,
                how: r.how.name(),
                at: r.at.display().to_string(),
            }),
        };
        let hashed = match result {
            Ok(h) => h,
            Err(error) => {
                rows.push(Row {
                    path: file.path.clone(),
                    status: "error",
                    expected,
                    actual: None,
                    bytes: file.source.len(),
                    error: Some(error),
                });
                continue;
            }
        };
        let status = match &expected {
            None => "unknown",
            Some(e) if e.sha256 == hashed.sha256 => "ok",
            Some(_) => "mismatch",
        };
        if let Some(l) = listed {
            tensor_rows.extend(check_tensors(
                &file.path,
                &l.tensors,
                hashed.tensors.as_ref(),
            ));
        }
        written.insert(
            file.path.clone(),
            json!({
                "sha256": hex(&hashed.sha256),
                "bytes": hashed.bytes,
                "tensors": hashed.tensors.iter().flatten()
                    .map(|(n, d)| (n.clone(), Value::String(hex(d))))
                    .collect::<serde_json::Map<_, _>>(),
            }),
        );
        rows.push(Row {
            path: file.path.clone(),
            status,
            expected,
            actual: Some(hashed.sha256),
            bytes: hashed.bytes,
            error: None,
        });
    }
    // Every path SOURCE has, opened or not: a manifest's other paths are missing.
    let present: HashSet<String> = files
        .iter()
        .map(|f| f.path.clone())
        .chain(unopened.iter().map(|(p, _)| p.clone()))
        .collect();
    // What descriptors name that SOURCE does not hold as they say (a store's manifest naming a
    // missing blob, or one of another size; an ONNX model's data file).
    for (path, why) in model.short_of_data() {
        rows.push(Row {
            path,
            status: "mismatch",
            expected: None,
            actual: None,
            bytes: 0,
            error: Some(why),
        });
    }
    // A store's blobs no manifest names: said (in place of `ok`), not a failure.
    for path in model.unreferenced() {
        if let Some(r) = rows.iter_mut().find(|r| r.path == path && r.status == "ok") {
            r.status = "unreferenced";
            r.error = Some("no descriptor of its store names it".into());
        }
    }
    for (path, why) in unopened {
        rows.push(Row {
            path,
            status: "error",
            expected: None,
            actual: None,
            bytes: 0,
            error: Some(why),
        });
    }
    // A file verified under another name that reaches it (a cache's blob, under its snapshot's
    // path) is not missing either.
    let verified: HashSet<&Path> = files.iter().map(|f| f.source.path.as_path()).collect();
    let reached = |path: &str| {
        std::fs::canonicalize(args.source.join(path)).is_ok_and(|p| verified.contains(p.as_path()))
    };
    if let Some((at, m)) = &manifest {
        for (path, listed) in m {
            if present.contains(path) || reached(path) {
                continue;
            }
            tensor_rows.extend(check_tensors(path, &listed.tensors, None));
            rows.push(Row {
                path: path.clone(),
                status: "missing",
                expected: Some(Expected {
                    sha256: listed.sha256,
                    how: "manifest",
                    at: at.display().to_string(),
                }),
                actual: None,
                bytes: 0,
                error: None,
            });
        }
    }
    rows.sort_by(|a, b| a.path.cmp(&b.path));
    tensor_rows.sort_by(|a, b| (&a.file, &a.name).cmp(&(&b.file, &b.name)));

    if let Some(path) = &args.write_manifest {
        let doc = json!({"tensormount_manifest": MANIFEST_VERSION, "files": written});
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())? + "\n";
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    // Each version counted once, read through or not.
    let bytes = hashed_bytes;
    let out = if args.json {
        json_report(&rows, &tensor_rows, bytes, seconds)
    } else {
        text_report(&rows, &tensor_rows)
    };
    std::io::stdout()
        .write_all(out.as_bytes())
        .map_err(|e| format!("stdout: {e}"))?;
    eprintln!(
        "tensormount: verify: {}",
        summary(&rows, &tensor_rows, bytes, seconds)
    );

    let bad_tensor = tensor_rows.iter().any(|t| t.status != "ok");
    Ok(if rows.iter().any(|r| r.status == "error") {
        2
    } else if bad_tensor
        || rows
            .iter()
            .any(|r| matches!(r.status, "mismatch" | "missing"))
    {
        1
    } else {
        0
    })
}

/// Hashes every file, several at a time (one per core), the largest first, each version once
/// however many paths reach it (snapshots linking the same cache blob); with a progress bar on a
/// terminal. Also the bytes read.
fn hash_all(files: &[WeightFile], tensors: bool) -> (Vec<Result<Hashed, String>>, u64) {
    // The first file of each version, and for every file the place of its version's.
    let mut firsts: Vec<usize> = Vec::new();
    let mut by_version: HashMap<*const Source, usize> = HashMap::new();
    let slot: Vec<usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            *by_version.entry(Arc::as_ptr(&f.source)).or_insert_with(|| {
                firsts.push(i);
                firsts.len() - 1
            })
        })
        .collect();
    let total: u64 = firsts.iter().map(|&i| files[i].source.len()).sum();
    let bar = progress_bar(total);
    let mut order: Vec<usize> = (0..firsts.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(files[firsts[k]].source.len()));
    let hashed = parallel::on_cpus(&order, |&k| hash_file(&files[firsts[k]], tensors, &bar));
    bar.finish_and_clear();
    let mut by_slot: Vec<Option<Result<Hashed, String>>> = firsts.iter().map(|_| None).collect();
    for (&k, h) in order.iter().zip(hashed) {
        by_slot[k] = Some(h);
    }
    let results = slot
        .iter()
        .map(|&k| {
            by_slot[k]
                .clone()
                .unwrap_or_else(|| Err("not hashed".into()))
        })
        .collect();
    (results, total)
}

fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} {eta} left",
    ) {
        bar.set_style(style);
    }
    bar
}

/// One file's digest, and (if asked) its tensors' (those whose bytes it holds, a data file's
/// included, and those it describes as gathered from its data files): those stored as one stretch
/// on the same pass, the others (views of a pickle checkpoint, a DCP checkpoint's sharded
/// tensors) gathered after.
fn hash_file(file: &WeightFile, want_tensors: bool, bar: &ProgressBar) -> Result<Hashed, String> {
    let source = &file.source;
    // Looked up here, on the hashing threads: on a network filesystem each lookup waits.
    source.recorded();
    let (data_start, tensors): (u64, Option<Vec<&Arc<Tensor>>>) = match (want_tensors, file.format)
    {
        (false, _) => (0, None),
        (true, None) => (0, Some(file.holds.iter().collect())),
        (true, Some(f)) => match source.describe(f) {
            // Those in its data files are theirs; those computed from its data files are in
            // `file.gathered`, with the data files.
            Ok(d) => (
                d.data_start,
                Some(
                    d.tensors
                        .iter()
                        .filter(|t| t.file.is_none())
                        .filter(|t| d.files.is_empty() || t.computed.is_none())
                        .collect(),
                ),
            ),
            Err(_) => (0, None),
        },
    };
    let (contiguous, gathered): (Vec<&Arc<Tensor>>, Vec<&Arc<Tensor>>) =
        tensors.iter().flatten().partition(|t| t.is_stretch());
    let spans: Vec<(u64, u64)> = contiguous
        .iter()
        .map(|t| (t.start(data_start), t.size()))
        .collect();
    let (sha256, digests) = source.sha256(&spans, &mut |n| bar.inc(n)).map_err(unread)?;
    let tensors = match tensors {
        None => None,
        Some(_) => {
            let mut out: BTreeMap<String, Sha256> = contiguous
                .iter()
                .zip(digests)
                .map(|(t, digest)| (t.name.to_string(), digest))
                .collect();
            let none: Arc<[Arc<Source>]> = Arc::from([]);
            let from_data = file.gathered.iter().map(|(t, data)| (t, data));
            for (t, data) in gathered.into_iter().map(|t| (t, &none)).chain(from_data) {
                let mut h = Hasher::default();
                tensor_bytes(source, t, data, |b| {
                    h.update(b);
                    true
                })
                .map_err(|e| format!("tensor {}: {}", t.name, unread(e)))?;
                out.insert(t.name.to_string(), h.finish());
            }
            Some(out)
        }
    };
    Ok(Hashed {
        sha256,
        bytes: source.len(),
        tensors,
    })
}

/// Why a file could not be hashed, as its report says it.
fn unread(e: ReadError) -> String {
    match e {
        ReadError::Changed(_) => "changed while being verified".into(),
        ReadError::Io(m) => format!("cannot read: {m}"),
    }
}

/// The tensors of one file against what the manifest lists for it.
fn check_tensors(
    file: &str,
    listed: &BTreeMap<String, Sha256>,
    found: Option<&BTreeMap<String, Sha256>>,
) -> Vec<TensorRow> {
    let empty = BTreeMap::new();
    let found = found.unwrap_or(&empty);
    let mut names: Vec<&String> = listed.keys().chain(found.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let (expected, actual) = (listed.get(name).copied(), found.get(name).copied());
            TensorRow {
                file: file.to_string(),
                name: name.clone(),
                status: match (expected, actual) {
                    (Some(e), Some(a)) if e == a => "ok",
                    (Some(_), Some(_)) => "mismatch",
                    (Some(_), None) => "missing",
                    _ => "extra",
                },
                expected,
                actual,
            }
        })
        .collect()
}

/// A manifest written by `--write-manifest`: each file's digest and its tensors', by path.
fn read_manifest(path: &Path) -> Result<(&Path, BTreeMap<String, Listed>), String> {
    let bad = |what: &str| format!("{}: not a tensormount manifest: {what}", path.display());
    let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let doc: Value = serde_json::from_slice(&text).map_err(|e| bad(&e.to_string()))?;
    if doc.get("tensormount_manifest").and_then(Value::as_u64) != Some(MANIFEST_VERSION) {
        return Err(bad("no \"tensormount_manifest\": 1"));
    }
    let files = doc
        .get("files")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no \"files\" object"))?;
    let digest = |v: Option<&Value>, what: &str| {
        v.and_then(Value::as_str)
            .and_then(parse_hex)
            .ok_or_else(|| bad(&format!("{what}: no 64-hex-digit SHA-256")))
    };
    let mut out = BTreeMap::new();
    for (file, entry) in files {
        let sha256 = digest(entry.get("sha256"), file)?;
        let mut tensors = BTreeMap::new();
        if let Some(listed) = entry.get("tensors").and_then(Value::as_object) {
            for (name, d) in listed {
                tensors.insert(name.clone(), digest(Some(d), &format!("{file}: {name}"))?);
            }
        }
        out.insert(file.clone(), Listed { sha256, tensors });
    }
    Ok((path, out))
}

fn text_report(rows: &[Row], tensors: &[TensorRow]) -> String {
    let mut out = String::new();
    for r in rows {
        let detail = match (r.status, &r.expected, &r.actual) {
            ("ok", Some(e), _) => format!("sha256 {} ({})", hex(&e.sha256), e.how),
            ("unreferenced", Some(e), _) => format!(
                "sha256 {} ({}); no descriptor of its store names it",
                hex(&e.sha256),
                e.how
            ),
            ("mismatch", Some(e), Some(a)) => format!(
                "expected {} ({}: {}), read {}",
                hex(&e.sha256),
                e.how,
                e.at,
                hex(a)
            ),
            ("unknown", _, Some(a)) => format!("sha256 {}", hex(a)),
            ("missing", _, _) => "(in the manifest, not in SOURCE)".into(),
            _ => r.error.clone().unwrap_or_default(),
        };
        out.push_str(&format!("{:<8}  {}  {detail}\n", r.status, r.path));
    }
    for t in tensors.iter().filter(|t| t.status != "ok") {
        out.push_str(&format!("{:<8}  {}  tensor {}\n", t.status, t.file, t.name));
    }
    out
}

fn json_report(rows: &[Row], tensors: &[TensorRow], bytes: u64, seconds: f64) -> String {
    let files: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut o = json!({
                "path": r.path,
                "status": r.status,
                "expected": r.expected.as_ref().map(|e| hex(&e.sha256)),
                "actual": r.actual.as_ref().map(hex),
                "bytes": r.bytes,
                "recorded_as": r.expected.as_ref().map(|e| e.how),
                "recorded_in": r.expected.as_ref().map(|e| e.at.clone()),
            });
            if let Some(e) = &r.error {
                o["error"] = Value::String(e.clone());
            }
            o
        })
        .collect();
    let tensors: Vec<Value> = tensors
        .iter()
        .map(|t| {
            json!({
                "file": t.file,
                "name": t.name,
                "status": t.status,
                "expected": t.expected.as_ref().map(hex),
                "actual": t.actual.as_ref().map(hex),
            })
        })
        .collect();
    let doc = json!({"files": files, "tensors": tensors, "bytes": bytes, "seconds": seconds});
    format!("{doc}\n")
}

fn summary(rows: &[Row], tensors: &[TensorRow], bytes: u64, seconds: f64) -> String {
    let count = |s: &str| rows.iter().filter(|r| r.status == s).count();
    let mut text = format!(
        "{} files: {} ok, {} mismatch, {} unknown, {} error",
        rows.len(),
        count("ok"),
        count("mismatch"),
        count("unknown"),
        count("error")
    );
    for extra in ["missing", "unreferenced"] {
        if count(extra) > 0 {
            text.push_str(&format!(", {} {extra}", count(extra)));
        }
    }
    if !tensors.is_empty() {
        let bad = tensors.iter().filter(|t| t.status != "ok").count();
        text.push_str(&format!("; {} tensors, {bad} not ok", tensors.len()));
    }
    let rate = bytes as f64 / seconds.max(1e-9) / 1e9;
    text.push_str(&format!(
        "; {bytes} bytes in {seconds:.2} s ({rate:.2} GB/s)"
    ));
    text
}
