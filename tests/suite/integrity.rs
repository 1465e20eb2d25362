//! Integrity: `tensormount verify` (every weight file of a SOURCE against the SHA-256 its source
//! records: a Hugging Face cache's blob names, a `local_dir`'s download metadata, `SHA256SUMS` and
//! `NAME.sha256`; or against a manifest of file and tensor digests), the mount's recorded digest
//! (`user.tensormount.sha256`) and per-tensor digest (`user.safetensors.sha256`), and `-o verify`,
//! which hashes each recorded file in the background and fails reads of a damaged one with `EIO`.
//!
//! The fixtures are written once per run by `tests/python/integrity.py` with the real writers
//! (safetensors' `save_file`, `torch.save`, huggingface_hub's own download-metadata helper, the
//! `sha256sum` command) and their layouts read back by the libraries that own them
//! (`scan_cache_dir`, `read_download_metadata`, `sha256sum -c`); each test copies the part it
//! damages. Every expected digest comes from hashlib (through the script) or from `sha256sum`,
//! never from tensormount. The `verify` tests need only the oracle's Python (with torch and
//! huggingface_hub); the mount tests need root and `/dev/fuse` as the other mount tests do.

use crate::common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

// ------------------------------------------------------------------------------------ helpers

/// Runs `tests/python/integrity.py ARGS` and returns its stdout (asserting success; a module
/// missing from the Python says so, with how to install it).
fn integrity(py: &Path, args: &[&str]) -> String {
    python_script(py, "integrity.py", args)
}

/// The fixtures as `integrity.py write` made them, once per run, and what it said of them.
struct Pristine {
    dir: PathBuf,
    info: Value,
}

static PRISTINE: OnceLock<Pristine> = OnceLock::new();

extern "C" fn remove_pristine() {
    if let Some(p) = PRISTINE.get() {
        let _ = fs::remove_dir_all(&p.dir);
    }
}

fn pristine() -> &'static Pristine {
    PRISTINE.get_or_init(|| {
        let py = python();
        let dir = std::env::temp_dir().join(format!(
            "tensormount-test-integrity-fixtures-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let info = json(&integrity(&py, &["write", s(&dir)]));
        // SAFETY: registers a plain function, run once when the test process exits.
        unsafe { libc::atexit(remove_pristine) };
        Pristine { dir, info }
    })
}

/// A test's own copy of some of the fixtures (`hf`, `local`, `release`, `plain`), in a fresh
/// directory whose path has no links in it.
struct Fx {
    _tmp: TempDir,
    root: PathBuf,
    info: &'static Value,
}

impl Fx {
    fn new(tag: &str, parts: &[&str]) -> Fx {
        let p = pristine();
        let tmp = TempDir::new(tag);
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let root = fs::canonicalize(tmp.path()).unwrap();
        for part in parts {
            let st = Command::new("cp")
                .arg("-a")
                .arg(p.dir.join(part))
                .arg(&root)
                .status()
                .unwrap();
            assert!(st.success(), "cp -a {part}");
        }
        Fx {
            _tmp: tmp,
            root,
            info: &p.info,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The files of fixture `part` as the script wrote them: relative path to its record.
    fn files(&self, part: &str) -> BTreeMap<String, &'static Value> {
        self.info[part]["files"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v))
            .collect()
    }

    /// The weight files of fixture `part`, by relative path.
    fn weights(&self, part: &str) -> BTreeMap<String, &'static Value> {
        let mut w = self.files(part);
        w.retain(|_, v| v["weight"].as_bool().unwrap());
        w
    }

    /// hashlib's digest of each tensor of the file at `path` (relative to the fixtures' root) as
    /// written.
    fn tensors(&self, path: &str) -> BTreeMap<String, String> {
        str_map(&self.info["tensors"][path])
    }

    /// The absolute byte range of tensor `name` in the file at `path` as written.
    fn range(&self, path: &str, name: &str) -> (u64, u64) {
        let r = &self.info["layout"][path][name];
        (r[0].as_u64().unwrap(), r[1].as_u64().unwrap())
    }

    /// The snapshot directory of the Hugging Face cache.
    fn snapshot(&self) -> PathBuf {
        self.path(self.info["hf"]["snapshot"].as_str().unwrap())
    }
}

fn str_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

fn hex(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// `sha256sum PATH`: the oracle of a file's digest after a test changed it.
fn sha256sum(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success(), "sha256sum: {}", stderr(&out));
    stdout(&out)[..64].to_string()
}

/// Flips every bit of the byte at `offset` of `path`.
fn flip(path: &Path, offset: u64) {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(&[!b[0]]).unwrap();
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

/// `tensormount verify ARGS...`.
fn verify(args: &[&str]) -> Output {
    let mut all = vec!["verify"];
    all.extend_from_slice(args);
    run(&all)
}

/// One line of `verify`'s text output: the status padded to 8, then two spaces between columns.
fn line(status: &str, path: &str, rest: &str) -> String {
    format!("{status:<8}  {path}  {rest}")
}

/// The line of a file `verify` found `ok`: its digest (a JSON string), and how it was recorded.
fn ok_line(path: &str, sha256: &Value, how: &str) -> String {
    line("ok", path, &format!("sha256 {} ({how})", hex(sha256)))
}

/// The stdout of `verify` as lines.
fn lines(out: &Output) -> Vec<String> {
    stdout(out).lines().map(str::to_string).collect()
}

/// What stderr must be when it is not a terminal: a summary, and no progress bar.
fn no_progress(out: &Output) {
    let err = stderr(out);
    assert!(
        !err.contains('\r') && !err.contains('\x1b'),
        "a progress bar on a stderr that is not a terminal: {err:?}"
    );
    assert!(!err.trim().is_empty(), "no summary line on stderr");
}

fn is_hex64(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Asserts that `v` is `verify --json`'s object as the contract gives it.
fn check_shape(v: &Value, manifest: bool) {
    let keys = |o: &Value| -> BTreeSet<String> { o.as_object().unwrap().keys().cloned().collect() };
    let set =
        |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| n.to_string()).collect() };
    assert_eq!(
        keys(v),
        set(&["files", "tensors", "bytes", "seconds"]),
        "top-level keys: {v}"
    );
    assert!(v["bytes"].is_u64(), "bytes: {}", v["bytes"]);
    assert!(
        v["seconds"].as_f64().is_some_and(|s| s >= 0.0),
        "seconds: {}",
        v["seconds"]
    );
    let files = v["files"].as_array().expect("files is an array");
    let mut paths = Vec::new();
    for f in files {
        let status = f["status"]
            .as_str()
            .unwrap_or_else(|| panic!("status: {f}"));
        assert!(
            ["ok", "mismatch", "unknown", "error", "missing"].contains(&status),
            "status: {f}"
        );
        let mut want = set(&[
            "path",
            "status",
            "expected",
            "actual",
            "bytes",
            "recorded_as",
            "recorded_in",
        ]);
        if status == "error" {
            want.insert("error".into());
            assert!(f["error"].is_string(), "error: {f}");
        }
        assert_eq!(keys(f), want, "keys of a file: {f}");
        assert!(f["path"].is_string(), "path: {f}");
        for k in ["expected", "actual"] {
            assert!(f[k].is_null() || is_hex64(&f[k]), "{k}: {f}");
        }
        for k in ["recorded_as", "recorded_in"] {
            assert!(f[k].is_null() || f[k].is_string(), "{k}: {f}");
        }
        assert!(f["bytes"].is_u64(), "bytes: {f}");
        paths.push(f["path"].as_str().unwrap().to_string());
    }
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted, "files not sorted by path");
    let tensors = v["tensors"].as_array().expect("tensors is an array");
    if !manifest {
        assert!(tensors.is_empty(), "tensors without --manifest: {v}");
    }
    for t in tensors {
        assert_eq!(
            keys(t),
            set(&["file", "name", "status", "expected", "actual"]),
            "keys of a tensor: {t}"
        );
        let status = t["status"].as_str().unwrap();
        assert!(
            ["ok", "mismatch", "missing", "extra"].contains(&status),
            "tensor status: {t}"
        );
        for k in ["expected", "actual"] {
            assert!(t[k].is_null() || is_hex64(&t[k]), "{k}: {t}");
        }
    }
}

/// `tensormount verify --json ARGS...`: the output, and the one JSON object on stdout (checked
/// against the contract's shape).
fn verify_json(args: &[&str]) -> (Output, Value) {
    let mut all = vec!["verify", "--json"];
    all.extend_from_slice(args);
    let out = run(&all);
    let text = stdout(&out);
    let mut stream = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
    let v = match stream.next() {
        Some(Ok(v)) => v,
        other => panic!(
            "verify --json {args:?}: no JSON object on stdout ({other:?}): {text}\nstderr: {}",
            stderr(&out)
        ),
    };
    assert!(
        stream.next().is_none(),
        "more than one JSON value on stdout: {text}"
    );
    check_shape(&v, args.contains(&"--manifest"));
    (out, v)
}

/// The files of a `--json` report by path.
fn by_path(v: &Value) -> BTreeMap<String, &Value> {
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap().to_string(), f))
        .collect()
}

/// Asserts that the report says `ok` for file `rel`, with `sha` recorded `as_` in `in_`.
fn assert_ok(f: &Value, sha: &str, bytes: u64, as_: &str, in_: &str) {
    assert_eq!(f["status"], "ok", "{f}");
    assert_eq!(hex(&f["expected"]), sha, "expected: {f}");
    assert_eq!(hex(&f["actual"]), sha, "actual: {f}");
    assert_eq!(f["bytes"].as_u64(), Some(bytes), "bytes: {f}");
    assert_eq!(f["recorded_as"], as_, "recorded_as: {f}");
    assert_eq!(f["recorded_in"], in_, "recorded_in: {f}");
}

fn canonical(p: &Path) -> String {
    s(&fs::canonicalize(p).unwrap()).to_string()
}

/// Polls `cond` every 20 ms for up to `limit`.
fn poll(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `user.tensormount.verified` of `path`, once it is there (up to 30 s).
fn verified(path: &Path) -> String {
    let mut v = None;
    poll(
        &format!("user.tensormount.verified on {}", path.display()),
        Duration::from_secs(30),
        || {
            v = getxattr(path, "user.tensormount.verified");
            v.is_some()
        },
    );
    v.unwrap()
}

/// The error of reading all of `path` with read(2), asserting that there is one.
fn read_errno(path: &Path) -> Option<i32> {
    match fs::read(path) {
        Ok(b) => panic!("{}: read {} bytes, expected EIO", path.display(), b.len()),
        Err(e) => e.raw_os_error(),
    }
}

/// Bytes `begin..end` of `path`.
fn slice(path: &Path, (begin, end): (u64, u64)) -> Vec<u8> {
    fs::read(path).unwrap()[begin as usize..end as usize].to_vec()
}

/// `getfattr -R -n user.safetensors.sha256 --absolute-names ROOT`: each tensor file's value
/// (found under a `.tensors/` directory, `__metadata__` left out) by path relative to `root`.
fn tensor_digests_by_getfattr(root: &Path) -> BTreeMap<String, String> {
    let out = Command::new("getfattr")
        .args(["-R", "-n", "user.safetensors.sha256", "--absolute-names"])
        .arg(root)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let text = stdout(&out);
    let mut map = BTreeMap::new();
    let mut file = None;
    for l in text.lines() {
        if let Some(p) = l.strip_prefix("# file: ") {
            file = Some(p.to_string());
        } else if let Some(v) = l.strip_prefix("user.safetensors.sha256=") {
            let p = file.clone().expect("a value before its file");
            let rel = Path::new(&p).strip_prefix(root).unwrap().to_str().unwrap();
            let in_tensor_dir = rel.split('/').any(|c| c.ends_with(".tensors"));
            if in_tensor_dir && !rel.ends_with("/__metadata__") {
                map.insert(rel.to_string(), v.trim_matches('"').to_string());
            }
        }
    }
    map
}

// ------------------------------------------------------------------------------------ verify

/// A Hugging Face cache's snapshot: each weight file is checked against the name of the blob its
/// link reaches (`recorded_as` blob-name, `recorded_in` the blob), which is hashlib's digest; small
/// files (named by git's SHA-1) and the virtual conversion of a checkpoint are not weight files.
#[test]
fn verify_hf_cache_snapshot_against_blob_names() {
    let fx = Fx::new("integrity-hf", &["hf"]);
    let snap = fx.snapshot();
    let weights = fx.weights("hf");
    assert_eq!(weights.len(), 4);

    let out = verify(&[s(&snap)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    no_progress(&out);
    let want: Vec<String> = weights
        .iter()
        .map(|(rel, v)| {
            let sha = hex(&v["sha256"]);
            assert_eq!(
                sha256sum(&snap.join(rel)),
                sha,
                "the oracles disagree on {rel}"
            );
            line("ok", rel, &format!("sha256 {sha} (blob-name)"))
        })
        .collect();
    assert_eq!(lines(&out), want, "stderr: {}", stderr(&out));

    let (out, v) = verify_json(&[s(&snap)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        weights.keys().collect::<Vec<_>>()
    );
    let mut total = 0;
    for (rel, w) in &weights {
        let bytes = w["bytes"].as_u64().unwrap();
        total += bytes;
        let blob = canonical(&fx.path(hex(&w["blob"])));
        assert_ok(files[rel], hex(&w["sha256"]), bytes, "blob-name", &blob);
    }
    assert_eq!(v["bytes"].as_u64(), Some(total), "total bytes hashed");
}

/// A `local_dir` download: each weight file's etag in huggingface_hub's download metadata (one in
/// a sub-folder, whose metadata is `.cache/huggingface/download/unet/NAME.metadata`).
#[test]
fn verify_local_dir_against_download_metadata() {
    let fx = Fx::new("integrity-local", &["local"]);
    let dir = fx.path("local");
    let weights = fx.weights("local");
    assert!(weights.contains_key("unet/diffusion_pytorch_model.safetensors"));

    let out = verify(&[s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let want: Vec<String> = weights
        .iter()
        .map(|(rel, v)| ok_line(rel, &v["sha256"], "download-metadata"))
        .collect();
    assert_eq!(lines(&out), want, "stderr: {}", stderr(&out));

    let (out, v) = verify_json(&[s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    assert_eq!(files.len(), weights.len(), "{v}");
    for (rel, w) in &weights {
        assert_eq!(w["etag"], w["sha256"]);
        let meta = dir.join(hex(&w["metadata"]));
        assert_eq!(
            meta,
            dir.join(".cache/huggingface/download")
                .join(format!("{rel}.metadata"))
        );
        let bytes = w["bytes"].as_u64().unwrap();
        assert_ok(
            files[rel],
            hex(&w["sha256"]),
            bytes,
            "download-metadata",
            s(&meta),
        );
    }
}

/// A release folder: `SHA256SUMS` written by `sha256sum` (with `unet/x.safetensors` relative to
/// it) and `extra.safetensors.sha256` in BSD format (`sha256sum --tag`), which wins over the
/// folder's `SHA256SUMS` line for the same file.
#[test]
fn verify_release_folder_against_sha256sums() {
    let fx = Fx::new("integrity-release", &["release"]);
    let dir = fx.path("release");
    let weights = fx.weights("release");

    let out = verify(&[s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    no_progress(&out);
    let want: Vec<String> = weights
        .iter()
        .map(|(rel, v)| ok_line(rel, &v["sha256"], "sha256sum"))
        .collect();
    assert_eq!(lines(&out), want, "stderr: {}", stderr(&out));

    let (out, v) = verify_json(&[s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        weights.keys().collect::<Vec<_>>()
    );
    for (rel, w) in &weights {
        let at = dir.join(hex(&w["recorded_in"]));
        let bytes = w["bytes"].as_u64().unwrap();
        assert_ok(files[rel], hex(&w["sha256"]), bytes, "sha256sum", s(&at));
    }
}

/// Nothing recorded: every weight file, an invalid one too, is hashed and `unknown` (exit 0), its
/// digest `sha256sum`'s; `--write-manifest` gives the invalid one no tensors, the others hashlib's
/// digest of each tensor's bytes.
#[test]
fn verify_unrecorded_files_are_unknown_and_still_hashed() {
    let fx = Fx::new("integrity-plain", &["plain"]);
    let dir = fx.path("plain");
    let weights = fx.weights("plain");
    assert_eq!(weights.len(), 3);

    let out = verify(&[s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let want: Vec<String> = weights
        .keys()
        .map(|rel| {
            line(
                "unknown",
                rel,
                &format!("sha256 {}", sha256sum(&dir.join(rel))),
            )
        })
        .collect();
    assert_eq!(lines(&out), want, "stderr: {}", stderr(&out));

    let manifest = fx.path("manifest.json");
    let (out, v) = verify_json(&["--write-manifest", s(&manifest), s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    assert_eq!(files.len(), weights.len(), "{v}");
    for (rel, w) in &weights {
        let f = files[rel];
        assert_eq!(f["status"], "unknown", "{f}");
        assert_eq!(hex(&f["actual"]), sha256sum(&dir.join(rel)), "{f}");
        assert!(f["expected"].is_null(), "{f}");
        assert!(
            f["recorded_as"].is_null() && f["recorded_in"].is_null(),
            "{f}"
        );
        assert_eq!(f["bytes"], w["bytes"], "{f}");
    }

    let m = json(&fs::read_to_string(&manifest).unwrap());
    assert_eq!(m["tensormount_manifest"], 1, "{m}");
    let mfiles = m["files"].as_object().unwrap();
    assert_eq!(
        mfiles.keys().collect::<Vec<_>>(),
        weights.keys().collect::<Vec<_>>()
    );
    for (rel, w) in &weights {
        let e = &mfiles[rel];
        assert_eq!(e["sha256"], w["sha256"], "{rel}: {e}");
        assert_eq!(e["bytes"], w["bytes"], "{rel}: {e}");
        let want = if w["valid"].as_bool().unwrap() {
            fx.tensors(&format!("plain/{rel}"))
        } else {
            BTreeMap::new()
        };
        assert_eq!(str_map(&e["tensors"]), want, "tensors of {rel}");
    }
}

/// A byte flipped in one blob of the cache: exit 1, exactly that file `mismatch` (expected: its
/// blob name; read: `sha256sum`'s digest of the damaged bytes), the others ok.
#[test]
fn verify_names_the_one_damaged_blob() {
    let fx = Fx::new("integrity-hf-flip", &["hf"]);
    let snap = fx.snapshot();
    let weights = fx.weights("hf");
    let rel = "model-00001-of-00002.safetensors";
    let blob = fx.path(hex(&weights[rel]["blob"]));
    let (b, e) = fx.range(
        "local/model-00001-of-00002.safetensors",
        "model.embed.weight",
    );
    flip(&blob, (b + e) / 2);
    let read = sha256sum(&blob);
    let expected = hex(&weights[rel]["sha256"]);
    assert_ne!(read, expected);

    let out = verify(&[s(&snap)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    let want: Vec<String> = weights
        .iter()
        .map(|(r, v)| match r.as_str() {
            r if r == rel => line(
                "mismatch",
                r,
                &format!(
                    "expected {expected} (blob-name: {}), read {read}",
                    canonical(&blob)
                ),
            ),
            r => ok_line(r, &v["sha256"], "blob-name"),
        })
        .collect();
    assert_eq!(lines(&out), want, "stderr: {}", stderr(&out));

    let (out, v) = verify_json(&[s(&snap)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    for (r, f) in by_path(&v) {
        if r == rel {
            assert_eq!(f["status"], "mismatch", "{f}");
            assert_eq!(hex(&f["expected"]), expected, "{f}");
            assert_eq!(hex(&f["actual"]), read, "{f}");
            assert_eq!(f["recorded_as"], "blob-name", "{f}");
            assert_eq!(f["recorded_in"], canonical(&blob).as_str(), "{f}");
        } else {
            assert_eq!(f["status"], "ok", "{f}");
        }
    }
}

/// A byte flipped in one shard of a folder with `SHA256SUMS`.
#[test]
fn verify_names_the_one_damaged_shard_of_sha256sums() {
    let fx = Fx::new("integrity-release-flip", &["release"]);
    let dir = fx.path("release");
    let rel = "model-00002-of-00002.safetensors";
    let (b, _) = fx.range(&format!("release/{rel}"), "lm_head.weight");
    flip(&dir.join(rel), b + 3);
    let read = sha256sum(&dir.join(rel));
    let weights = fx.weights("release");
    let expected = hex(&weights[rel]["sha256"]);

    let out = verify(&[s(&dir)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    let mismatch = line(
        "mismatch",
        rel,
        &format!(
            "expected {expected} (sha256sum: {}), read {read}",
            s(&dir.join("SHA256SUMS"))
        ),
    );
    let got = lines(&out);
    assert!(got.contains(&mismatch), "no line {mismatch:?} in {got:#?}");
    let (out, v) = verify_json(&[s(&dir)]);
    assert_eq!(code(&out), Some(1));
    let bad: Vec<String> = by_path(&v)
        .into_iter()
        .filter(|(_, f)| f["status"] != "ok")
        .map(|(p, _)| p)
        .collect();
    assert_eq!(bad, vec![rel.to_string()], "{v}");
    let f = by_path(&v)[rel];
    assert_eq!(hex(&f["actual"]), read, "{f}");
    assert_eq!(f["recorded_in"], s(&dir.join("SHA256SUMS")), "{f}");
}

/// A tensor's line in a manifest check: status, expected and actual digests.
type Want = (&'static str, Option<String>, Option<String>);

/// `--write-manifest` records hashlib's digest of every file and of every tensor's bytes (a
/// transposed view of a checkpoint by its `contiguous()` bytes); `--manifest` then names the
/// damaged tensor of a file with a flipped byte (the file's other tensors ok), a file gone, and
/// a file rewritten with a tensor less and one more.
#[test]
fn verify_manifest_names_the_damaged_tensor() {
    let fx = Fx::new("integrity-manifest", &["release"]);
    let dir = fx.path("release");
    let weights = fx.weights("release");
    let manifest = fx.path("manifest.json");

    let out = verify(&["--write-manifest", s(&manifest), s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let m = json(&fs::read_to_string(&manifest).unwrap());
    assert_eq!(m["tensormount_manifest"], 1, "{m}");
    let mfiles = m["files"].as_object().unwrap();
    assert_eq!(
        mfiles.keys().collect::<Vec<_>>(),
        weights.keys().collect::<Vec<_>>()
    );
    for (rel, w) in &weights {
        let e = &mfiles[rel];
        assert_eq!(e["sha256"], w["sha256"], "{rel}: {e}");
        assert_eq!(e["bytes"], w["bytes"], "{rel}: {e}");
        assert_eq!(
            str_map(&e["tensors"]),
            fx.tensors(&format!("release/{rel}")),
            "tensor digests of {rel}"
        );
    }

    // One byte inside one tensor; a file removed; a file with a tensor dropped and one added.
    let damaged = "model-00001-of-00002.safetensors";
    let (b, e) = fx.range(&format!("release/{damaged}"), "model.layers.0.w");
    flip(&dir.join(damaged), (b + e) / 2);
    fs::remove_file(dir.join("extra.safetensors")).unwrap();
    let rewritten = "model-00002-of-00002.safetensors";
    let py = python();
    integrity(
        &py,
        &[
            "retensor",
            s(&dir.join(rewritten)),
            "model.norm",
            "model.added",
        ],
    );
    let now = json(&integrity(
        &py,
        &["tensors", s(&dir.join(damaged)), s(&dir.join(rewritten))],
    ));
    let damaged_now = str_map(&now[s(&dir.join(damaged))]);
    let rewritten_now = str_map(&now[s(&dir.join(rewritten))]);

    let (out, v) = verify_json(&["--manifest", s(&manifest), s(&dir)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        weights.keys().collect::<Vec<_>>()
    );
    for (rel, w) in &weights {
        let f = files[rel];
        match rel.as_str() {
            "extra.safetensors" => assert_eq!(f["status"], "missing", "{f}"),
            r if r == damaged || r == rewritten => {
                assert_eq!(f["status"], "mismatch", "{f}");
                assert_eq!(f["expected"], w["sha256"], "{f}");
                assert_eq!(hex(&f["actual"]), sha256sum(&dir.join(rel)), "{f}");
                assert_eq!(f["recorded_as"], "manifest", "{f}");
                assert_eq!(f["recorded_in"], s(&manifest), "{f}");
            }
            _ => {
                let bytes = w["bytes"].as_u64().unwrap();
                assert_ok(f, hex(&w["sha256"]), bytes, "manifest", s(&manifest));
            }
        }
    }

    // Every tensor of every file the manifest lists, and the one added. The tensors of the file
    // that is gone (each `missing`) are checked last.
    let gone = "extra.safetensors";
    let mut want: BTreeMap<(String, String), Want> = BTreeMap::new();
    for rel in weights.keys() {
        for (name, sha) in fx.tensors(&format!("release/{rel}")) {
            let entry = match (rel.as_str(), name.as_str()) {
                ("extra.safetensors", _) => ("missing", Some(sha), None),
                (r, "model.layers.0.w") if r == damaged => {
                    let now = damaged_now[&name].clone();
                    assert_ne!(now, sha);
                    ("mismatch", Some(sha), Some(now))
                }
                (r, "model.norm") if r == rewritten => ("missing", Some(sha), None),
                _ => ("ok", Some(sha.clone()), Some(sha)),
            };
            want.insert((rel.clone(), name), entry);
        }
    }
    want.insert(
        (rewritten.to_string(), "model.added".to_string()),
        ("extra", None, Some(rewritten_now["model.added"].clone())),
    );
    let mut got = BTreeMap::new();
    for t in v["tensors"].as_array().unwrap() {
        let key = (
            t["file"].as_str().unwrap().to_string(),
            t["name"].as_str().unwrap().to_string(),
        );
        let entry = (
            t["status"].as_str().unwrap(),
            t["expected"].as_str(),
            t["actual"].as_str(),
        );
        assert!(got.insert(key.clone(), entry).is_none(), "{key:?} twice");
    }
    let (want_gone, want): (BTreeMap<_, _>, BTreeMap<_, _>) =
        want.into_iter().partition(|((file, _), _)| file == gone);
    let (got_gone, got): (BTreeMap<_, _>, BTreeMap<_, _>) =
        got.into_iter().partition(|((file, _), _)| file == gone);
    for (key, (status, expected, actual)) in &want {
        let Some(&(gs, ge, ga)) = got.get(key) else {
            panic!("tensor {key:?} not in the report: {:#?}", v["tensors"]);
        };
        assert_eq!(gs, *status, "status of tensor {key:?}");
        if *status != "missing" || ge.is_some() {
            assert_eq!(ge, expected.as_deref(), "expected digest of tensor {key:?}");
        }
        if *status != "extra" || ga.is_some() {
            assert_eq!(ga, actual.as_deref(), "actual digest of tensor {key:?}");
        }
    }
    assert_eq!(
        got.keys().collect::<BTreeSet<_>>(),
        want.keys().collect::<BTreeSet<_>>(),
        "the tensors reported"
    );

    // The text: a line per file, then one per tensor that is not ok.
    let out = verify(&["--manifest", s(&manifest), s(&dir)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    let text = lines(&out);
    let file_lines: Vec<String> = weights
        .iter()
        .map(|(rel, w)| {
            let sha = hex(&w["sha256"]);
            match rel.as_str() {
                "extra.safetensors" => line("missing", rel, "(in the manifest, not in SOURCE)"),
                r if r == damaged || r == rewritten => line(
                    "mismatch",
                    rel,
                    &format!(
                        "expected {sha} (manifest: {}), read {}",
                        s(&manifest),
                        sha256sum(&dir.join(rel))
                    ),
                ),
                _ => line("ok", rel, &format!("sha256 {sha} (manifest)")),
            }
        })
        .collect();
    assert!(text.len() >= file_lines.len(), "{text:#?}");
    assert_eq!(text[..file_lines.len()], file_lines[..], "{text:#?}");
    let tensor_lines: BTreeSet<String> = text[file_lines.len()..].iter().cloned().collect();
    assert_eq!(
        tensor_lines.len(),
        text.len() - file_lines.len(),
        "a line twice: {text:#?}"
    );
    let (gone_lines, tensor_lines): (BTreeSet<String>, BTreeSet<String>) = tensor_lines
        .into_iter()
        .partition(|l| l.contains(&format!("  {gone}  ")));
    let want_lines: BTreeSet<String> = want
        .iter()
        .filter(|(_, (status, _, _))| *status != "ok")
        .map(|((file, name), (status, _, _))| line(status, file, &format!("tensor {name}")))
        .collect();
    assert_eq!(tensor_lines, want_lines, "{text:#?}");

    // The file that is gone: its tensors are all listed, and missing.
    let gone_want: BTreeSet<String> = want_gone
        .keys()
        .map(|(file, name)| line("missing", file, &format!("tensor {name}")))
        .collect();
    assert_eq!(
        gone_lines, gone_want,
        "the tensors of {gone}, in the manifest and gone, in the text: {text:#?}"
    );
    for (key, (_, expected, _)) in &want_gone {
        let Some(&(gs, ge, ga)) = got_gone.get(key) else {
            panic!(
                "tensor {key:?} of a file gone, not in the report: {:#?}",
                v["tensors"]
            );
        };
        assert_eq!(gs, "missing", "status of tensor {key:?}");
        assert_eq!(ge, expected.as_deref(), "expected digest of tensor {key:?}");
        assert_eq!(ga, None, "actual digest of tensor {key:?}");
    }
    assert_eq!(
        got_gone.keys().collect::<BTreeSet<_>>(),
        want_gone.keys().collect::<BTreeSet<_>>()
    );
}

/// A truncated file is a mismatch whose read digest is `sha256sum`'s of what is left: cut inside
/// the data (the header still parses) or inside the header (no longer a valid file).
#[test]
fn verify_truncated_files_are_hashed_as_they_are() {
    let fx = Fx::new("integrity-truncated", &["release"]);
    let dir = fx.path("release");
    let weights = fx.weights("release");
    let cuts = [
        (
            "model-00001-of-00002.safetensors",
            weights["model-00001-of-00002.safetensors"]["bytes"]
                .as_u64()
                .unwrap()
                / 2,
        ),
        ("model-00002-of-00002.safetensors", 5),
    ];
    for (rel, len) in cuts {
        OpenOptions::new()
            .write(true)
            .open(dir.join(rel))
            .unwrap()
            .set_len(len)
            .unwrap();
    }
    let (out, v) = verify_json(&[s(&dir)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    for (rel, len) in cuts {
        let f = files[rel];
        assert_eq!(f["status"], "mismatch", "{f}");
        assert_eq!(f["expected"], weights[rel]["sha256"], "{f}");
        assert_eq!(hex(&f["actual"]), sha256sum(&dir.join(rel)), "{f}");
        assert_eq!(f["bytes"].as_u64(), Some(len), "{f}");
    }
    for (rel, f) in files {
        if !cuts.iter().any(|(r, _)| *r == rel) {
            assert_eq!(f["status"], "ok", "{f}");
        }
    }
}

/// A file verify cannot read (0600, another owner) is `error` with the reason, and exit 2; the
/// others are still checked. Run as nobody (`setpriv`) when root, who reads any file.
#[test]
fn verify_unreadable_file_is_an_error() {
    let fx = Fx::new("integrity-unreadable", &["release"]);
    let dir = fx.path("release");
    let rel = "model-00002-of-00002.safetensors";
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    fs::set_permissions(
        dir.join(rel),
        fs::Permissions::from_mode(if root { 0o600 } else { 0o000 }),
    )
    .unwrap();
    let out = if root {
        require_tools(&["setpriv"]);
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(bin())
            .args(["verify", "--json"])
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    } else {
        verify(&["--json", s(&dir)])
    };
    assert_eq!(
        code(&out),
        Some(2),
        "stdout: {}\nstderr: {}",
        stdout(&out),
        stderr(&out)
    );
    let v = json(&stdout(&out));
    check_shape(&v, false);
    let weights = fx.weights("release");
    for (r, f) in by_path(&v) {
        if r == rel {
            assert_eq!(f["status"], "error", "{f}");
            assert!(f["actual"].is_null(), "{f}");
            let e = f["error"].as_str().unwrap().to_lowercase();
            assert!(e.contains("permission denied"), "error of {r}: {f}");
        } else {
            let w = weights[&r];
            let at = dir.join(hex(&w["recorded_in"]));
            let bytes = w["bytes"].as_u64().unwrap();
            assert_ok(f, hex(&w["sha256"]), bytes, "sha256sum", s(&at));
        }
    }
    assert!(by_path(&v).contains_key(rel), "{v}");
}

/// A file appended to while it is hashed is `error` ("changed while being verified"), exit 2.
/// Appends go on every 10 ms until verify exits, so that one lands while it reads, however fast.
#[test]
fn verify_file_changing_while_hashed_is_an_error() {
    let fx = Fx::new("integrity-changing", &["release"]);
    let dir = fx.path("src");
    fs::create_dir(&dir).unwrap();
    fs::copy(
        fx.path("release/extra.safetensors"),
        dir.join("ok.safetensors"),
    )
    .unwrap();
    let big = dir.join("big.safetensors");
    OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&big)
        .unwrap()
        .set_len(256 << 20)
        .unwrap();
    let ok_sha = sha256sum(&dir.join("ok.safetensors"));
    fs::write(
        dir.join("SHA256SUMS"),
        format!(
            "{ok_sha}  ok.safetensors\n{}  big.safetensors\n",
            "0".repeat(64)
        ),
    )
    .unwrap();

    let mut child = Command::new(bin())
        .args(["verify", "--json"])
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut f = OpenOptions::new().append(true).open(&big).unwrap();
    let start = Instant::now();
    let mut appends = 0;
    while child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "verify still running after 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
        f.write_all(&[1u8; 4096]).unwrap();
        appends += 1;
    }
    let out = child.wait_with_output().unwrap();
    assert!(appends > 1, "verify was done before the file changed");
    assert_eq!(
        code(&out),
        Some(2),
        "stdout: {}\nstderr: {}",
        stdout(&out),
        stderr(&out)
    );
    let v = json(&stdout(&out));
    check_shape(&v, false);
    let files = by_path(&v);
    let b = files["big.safetensors"];
    assert_eq!(b["status"], "error", "{b}");
    assert!(
        b["error"]
            .as_str()
            .unwrap()
            .contains("changed while being verified"),
        "{b}"
    );
    let ok = files["ok.safetensors"];
    assert_eq!(ok["status"], "ok", "{ok}");
    assert_eq!(hex(&ok["actual"]), ok_sha, "{ok}");
}

/// A single file as SOURCE: its path in the report is its name; its record is found as for a
/// directory (the `SHA256SUMS` above it, the blob behind a snapshot link, none).
#[test]
fn verify_single_file_source() {
    let fx = Fx::new("integrity-single", &["release", "plain", "hf"]);
    let release = fx.weights("release");

    let x = fx.path("release/unet/x.safetensors");
    let sha = hex(&release["unet/x.safetensors"]["sha256"]);
    let out = verify(&[s(&x)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        lines(&out),
        vec![line(
            "ok",
            "x.safetensors",
            &format!("sha256 {sha} (sha256sum)")
        )]
    );
    let (out, v) = verify_json(&[s(&x)]);
    assert_eq!(code(&out), Some(0));
    let files = by_path(&v);
    assert_eq!(files.len(), 1, "{v}");
    let bytes = release["unet/x.safetensors"]["bytes"].as_u64().unwrap();
    let sums = fx.path("release/SHA256SUMS");
    assert_ok(files["x.safetensors"], sha, bytes, "sha256sum", s(&sums));

    let a = fx.path("plain/a.safetensors");
    let out = verify(&[s(&a)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        lines(&out),
        vec![line(
            "unknown",
            "a.safetensors",
            &format!("sha256 {}", sha256sum(&a))
        )]
    );

    let rel = "model-00002-of-00002.safetensors";
    let w = &fx.weights("hf")[rel];
    let (out, v) = verify_json(&[s(&fx.snapshot().join(rel))]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let blob = canonical(&fx.path(hex(&w["blob"])));
    let bytes = w["bytes"].as_u64().unwrap();
    assert_ok(
        by_path(&v)[rel],
        hex(&w["sha256"]),
        bytes,
        "blob-name",
        &blob,
    );
}

/// Usage errors exit 2: no SOURCE, an unknown option, a SOURCE that does not exist, a manifest
/// that does not exist.
#[test]
fn verify_usage_errors_exit_2() {
    let fx = Fx::new("integrity-usage", &["plain"]);
    let dir = fx.path("plain");
    let missing = fx.path("nothing-here");
    let cases: [&[&str]; 4] = [
        &[],
        &["--no-such-option", s(&dir)],
        &[s(&missing)],
        &["--manifest", s(&missing), s(&dir)],
    ];
    for args in cases {
        let out = verify(args);
        assert_eq!(
            code(&out),
            Some(2),
            "verify {args:?}: stdout {}\nstderr {}",
            stdout(&out),
            stderr(&out)
        );
        assert!(
            !stderr(&out).trim().is_empty(),
            "verify {args:?}: no message"
        );
    }
}

// ------------------------------------------------------------------------------------ mount

/// `user.tensormount.sha256` on every mirrored weight file whose digest the source records (by a
/// blob name, through the snapshot's links and through a mount of the whole cache; by download
/// metadata), and on nothing else; `user.safetensors.sha256` on every tensor file, hashlib's
/// digest of the bytes safetensors and torch read, the same in two mounts of the same model.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_shows_recorded_and_tensor_digests() {
    require_fuse();
    require_tools(&["getfattr"]);
    let fx = Fx::new("integrity-xattrs", &["hf", "local", "plain"]);
    let snap = fx.snapshot();
    let a = mount_ok(&snap, "");
    let b = mount_ok(&fx.path("local"), "");
    let c = mount_ok(&fx.path("plain"), "");
    let d = mount_ok(&fx.path("hf"), "");

    let weights = fx.weights("hf");
    let rel_snap = snap.strip_prefix(fx.path("hf")).unwrap();
    for (rel, w) in &weights {
        let sha = hex(&w["sha256"]);
        for m in [&a, &b] {
            assert_eq!(
                getxattr(&m.path(rel), "user.tensormount.sha256").as_deref(),
                Some(sha),
                "{}",
                m.path(rel).display()
            );
        }
        // Through the snapshot's link, in a mount of the whole cache.
        let linked = d.path(rel_snap).join(rel);
        assert_eq!(
            getxattr(&linked, "user.tensormount.sha256").as_deref(),
            Some(sha),
            "{}",
            linked.display()
        );
    }
    for rel in fx.weights("plain").keys() {
        let p = c.path(rel);
        assert_eq!(
            getxattr(&p, "user.tensormount.sha256"),
            None,
            "{}",
            p.display()
        );
        let out = Command::new("getfattr")
            .args(["-d", "-m", "-"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(
            !stdout(&out).contains("user.tensormount.sha256"),
            "{} lists {}",
            p.display(),
            stdout(&out)
        );
    }

    // Every tensor file against hashlib of an independent reader's bytes.
    let local = |rel: &str| s(&fx.path("local").join(rel)).to_string();
    let shard1 = local("model-00001-of-00002.safetensors");
    let shard2 = local("model-00002-of-00002.safetensors");
    let unet = local("unet/diffusion_pytorch_model.safetensors");
    let encoder = local("text_encoder/pytorch_model.bin");
    let spec = serde_json::json!({
        s(&a.path("model.tensors")): [shard1, shard2],
        s(&a.path("model-00001-of-00002.tensors")): [shard1],
        s(&a.path("model-00002-of-00002.tensors")): [shard2],
        s(&a.path("unet/diffusion_pytorch_model.tensors")): [unet],
        s(&a.path("text_encoder/pytorch_model.tensors")): [encoder],
    });
    let out = integrity(&python(), &["check-digests", &spec.to_string()]);
    assert!(out.starts_with("ok "), "{out}");

    // Not listed before it is asked for by name (`getfattr -d` reads no tensor), then listed.
    let fresh = c.path("a.tensors");
    let first = fs::read_dir(&fresh)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap() != "__metadata__")
        .unwrap();
    let listed = |p: &Path| {
        let out = Command::new("getfattr")
            .args(["-d", "-m", "-"])
            .arg(p)
            .output()
            .unwrap();
        stdout(&out).contains("user.safetensors.sha256")
    };
    assert!(
        !listed(&first),
        "{} lists its digest before it is computed",
        first.display()
    );
    assert!(getxattr(&first, "user.safetensors.sha256").is_some());
    assert!(
        listed(&first),
        "{} does not list its digest once computed",
        first.display()
    );

    // getfattr -R over two mounts of the same model: the same values, for every tensor file.
    let on_a = tensor_digests_by_getfattr(&a.dir);
    let on_b = tensor_digests_by_getfattr(&b.dir);
    let count: usize = ["model-00001-of-00002", "model-00002-of-00002"]
        .iter()
        .map(|n| 2 * fx.tensors(&format!("local/{n}.safetensors")).len())
        .sum::<usize>()
        + fx.tensors("local/unet/diffusion_pytorch_model.safetensors")
            .len()
        + fx.tensors("local/text_encoder/pytorch_model.bin").len();
    assert_eq!(on_a.len(), count, "{on_a:#?}");
    assert_eq!(on_a, on_b);
    assert!(
        on_a.values().all(|v| is_hex64(&Value::from(v.as_str()))),
        "{on_a:#?}"
    );
}

/// `-o verify`: a shard with a flipped byte is marked `mismatch` (it and its tensor files, in its
/// own directory and in the merged one) and reads of them fail with EIO; the good shard is `ok`
/// and reads as its source; the daemon logs the mismatch.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_verify_fails_reads_of_a_damaged_shard() {
    require_fuse();
    require_tools(&["getfattr", "dd"]);
    let fx = Fx::new("integrity-mount-verify", &["hf"]);
    let snap = fx.snapshot();
    let weights = fx.weights("hf");
    let bad = "model-00001-of-00002.safetensors";
    let good = "model-00002-of-00002.safetensors";
    let blob = fx.path(hex(&weights[bad]["blob"]));
    let (b, e) = fx.range(&format!("local/{bad}"), "model.embed.weight");
    flip(&blob, (b + e) / 2);
    let read = sha256sum(&blob);

    let mnt = fx.path("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = fx.path("daemon.log");
    let (mut daemon, _) = Daemon::spawn(
        &snap,
        &mnt,
        &["-o", "verify"],
        &log,
        Duration::from_secs(10),
    );

    assert_eq!(verified(&mnt.join(bad)), "mismatch");
    for rel in weights.keys().filter(|r| r.as_str() != bad) {
        assert_eq!(verified(&mnt.join(rel)), "ok", "{rel}");
    }

    // The damaged file and every tensor file of it fail with EIO, whichever tensor was damaged.
    let err = dd(&mnt.join(bad), &["bs=1M"]).unwrap_err();
    assert!(err.contains("Input/output error"), "dd: {err}");
    assert_eq!(read_errno(&mnt.join(bad)), Some(libc::EIO));
    let py = python();
    let out = Command::new(&py)
        .args([
            "-c",
            concat!(
                "import sys\ntry:\n open(sys.argv[1], 'rb').read()\n",
                "except OSError as e:\n print(e.errno)",
            ),
        ])
        .arg(mnt.join(bad))
        .output()
        .unwrap();
    assert_eq!(stdout(&out).trim(), "5", "python read: {}", stderr(&out));
    let shard1 = fx.tensors(&format!("local/{bad}"));
    for name in shard1.keys() {
        for tdir in ["model-00001-of-00002.tensors", "model.tensors"] {
            let t = mnt.join(tdir).join(name);
            assert_eq!(verified(&t), "mismatch", "{}", t.display());
            assert_eq!(read_errno(&t), Some(libc::EIO), "{}", t.display());
        }
    }

    // The good shard: ok, and its bytes.
    let good_blob = fx.path(hex(&weights[good]["blob"]));
    assert_eq!(
        fs::read(mnt.join(good)).unwrap(),
        fs::read(&good_blob).unwrap()
    );
    for name in fx.tensors(&format!("local/{good}")).keys() {
        let range = fx.range(&format!("local/{good}"), name);
        for tdir in ["model-00002-of-00002.tensors", "model.tensors"] {
            let t = mnt.join(tdir).join(name);
            assert_eq!(verified(&t), "ok", "{}", t.display());
            assert_eq!(
                fs::read(&t).unwrap(),
                slice(&good_blob, range),
                "{}",
                t.display()
            );
        }
    }

    let log_text = daemon.stderr();
    let want = format!(
        "tensormount: {bad}: SHA-256 mismatch: expected {}, read {read}",
        hex(&weights[bad]["sha256"])
    );
    assert!(
        log_text.lines().any(|l| l.starts_with(&want)),
        "no line starting {want:?} in the daemon's log:\n{log_text}"
    );
    daemon.stop();
}

/// `-o verify` again after a file is replaced (written elsewhere and renamed over): a damaged
/// shard replaced by a good copy reads again, under a new inode, once verified ok.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_verify_rechecks_a_replaced_file() {
    require_fuse();
    require_tools(&["getfattr"]);
    let fx = Fx::new("integrity-mount-replace", &["release"]);
    let dir = fx.path("release");
    let rel = "model-00001-of-00002.safetensors";
    let w = fx.weights("release")[rel];
    let good = fs::read(dir.join(rel)).unwrap();
    let (b, e) = fx.range(&format!("release/{rel}"), "model.pos_ids");
    flip(&dir.join(rel), b);

    let mnt = fx.path("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = fx.path("daemon.log");
    let (mut daemon, _) =
        Daemon::spawn(&dir, &mnt, &["-o", "verify"], &log, Duration::from_secs(10));
    let file = mnt.join(rel);
    let tensor = mnt.join("model-00001-of-00002.tensors/model.pos_ids");
    assert_eq!(
        getxattr(&file, "user.tensormount.sha256").as_deref(),
        Some(hex(&w["sha256"]))
    );
    assert_eq!(verified(&file), "mismatch");
    assert_eq!(read_errno(&file), Some(libc::EIO));
    assert_eq!(read_errno(&tensor), Some(libc::EIO));
    let old_ino = fs::metadata(&file).unwrap().ino();

    let tmp = fx.path("replacement.tmp");
    fs::write(&tmp, &good).unwrap();
    fs::rename(&tmp, dir.join(rel)).unwrap();
    poll(
        "the replaced file verified ok under a new inode",
        Duration::from_secs(30),
        || {
            fs::metadata(&file).is_ok_and(|m| m.ino() != old_ino)
                && getxattr(&file, "user.tensormount.verified").as_deref() == Some("ok")
        },
    );
    assert_eq!(fs::read(&file).unwrap(), good);
    assert_eq!(verified(&tensor), "ok");
    assert_eq!(fs::read(&tensor).unwrap(), good[b as usize..e as usize]);
    daemon.stop();
}

/// A blob that two snapshots of a cache link to is one version: hashed once (the report's bytes
/// are one blob's), and reported under each path, `ok` against its name (`sha256sum`'s digest).
#[test]
fn verify_hashes_a_blob_of_two_snapshots_once() {
    let tmp = TempDir::new("integrity-two-snapshots");
    let repo = tmp.path().join("models--org--m");
    let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let staged = tmp.path().join("staged.safetensors");
    write_raw(
        &staged,
        r#"{"w":{"dtype":"U8","shape":[3000000],"data_offsets":[0,3000000]}}"#,
        &bytes,
    );
    let sha = sha256sum(&staged);
    fs::create_dir_all(repo.join("blobs")).unwrap();
    fs::rename(&staged, repo.join("blobs").join(&sha)).unwrap();
    for rev in ["r1", "r2"] {
        let dir = repo.join("snapshots").join(rev);
        fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/{sha}"), dir.join("model.safetensors"))
            .unwrap();
    }
    let (out, v) = verify_json(&[s(&repo)]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let files = by_path(&v);
    let blob_len = fs::metadata(repo.join("blobs").join(&sha)).unwrap().len();
    for rev in ["r1", "r2"] {
        let f = files[&format!("snapshots/{rev}/model.safetensors")];
        assert_eq!(f["status"], "ok");
        assert_eq!(hex(&f["actual"]), sha);
        assert_eq!(f["recorded_as"], "blob-name");
    }
    assert_eq!(v["bytes"].as_u64(), Some(blob_len), "hashed once");
}

/// `-o verify` on a file in a sub-folder whose `SHA256SUMS` line (written by `sha256sum` for
/// other bytes) does not match: the log names it by its path in the mount, with the recorded
/// digest and what `sha256sum` reads now; a frozen mount (`refresh=off`) refuses its reads too.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_verify_logs_a_sub_folders_file_by_its_path() {
    require_fuse();
    let tmp = TempDir::new("integrity-sub-folder");
    let src = tmp.join("src");
    fs::create_dir_all(src.join("unet")).unwrap();
    let file = src.join("unet/model.safetensors");
    let header = r#"{"w":{"dtype":"U8","shape":[4096],"data_offsets":[0,4096]}}"#;
    write_raw(&file, header, &[7u8; 4096]);
    let recorded = sha256sum(&file);
    let sums = Command::new("sha256sum")
        .current_dir(&src)
        .arg("unet/model.safetensors")
        .output()
        .unwrap();
    fs::write(src.join("SHA256SUMS"), &sums.stdout).unwrap();
    write_raw(&file, header, &[8u8; 4096]);
    let read = sha256sum(&file);
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let opts = ["-o", "verify,refresh=off"];
    let (mut daemon, _) = Daemon::spawn(&src, &mnt, &opts, &log, Duration::from_secs(10));
    assert_eq!(verified(&mnt.join("unet/model.safetensors")), "mismatch");
    assert_eq!(
        read_errno(&mnt.join("unet/model.tensors/w")),
        Some(libc::EIO)
    );
    let want = format!(
        "tensormount: unet/model.safetensors: SHA-256 mismatch: expected {recorded}, read {read}"
    );
    let text = daemon.stderr();
    assert!(
        text.lines().any(|l| l.starts_with(&want)),
        "no line starting {want:?} in the daemon's log:\n{text}"
    );
    daemon.stop();
}
