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
//!
//! The helpers the submodules share are here; each submodule is one theme.

use crate::common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

mod damage;
mod manifest;
mod mount;
mod verify;

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
