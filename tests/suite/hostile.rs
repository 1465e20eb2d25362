//! Hostile input: the corpus of malformed safetensors files (`tests/corpus`, written by
//! `tests/corpus/make_corpus.py`), broken and malicious index files, hostile directory contents
//! (unreadable entries, names that are not UTF-8, link loops, deep trees) and hostile tensor names.
//!
//! Expectations come from `doc/layout.md` and from the reference implementation's rules; the official
//! Python package is the outside oracle for which rule a file breaks.

use crate::common::*;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::mpsc;
use std::time::Duration;

/// The reference implementation's rules (`SafeTensorError` variants) a file can break.
const RULES: [&str; 10] = [
    "HeaderTooSmall",
    "HeaderTooLarge",
    "InvalidHeaderLength",
    "InvalidHeader",
    "InvalidHeaderDeserialization",
    "InvalidOffset",
    "TensorInvalidInfo",
    "ValidationOverflow",
    "MisalignedSlice",
    "MetadataIncompleteBuffer",
];

/// The official Python package's message for each rule (lower-cased substring).
fn python_message(rule: &str) -> &'static str {
    match rule {
        "HeaderTooSmall" => "header too small",
        "HeaderTooLarge" => "header too large",
        "InvalidHeaderLength" => "invalid header length",
        "InvalidHeader" => "invalid utf-8 in header",
        "InvalidHeaderDeserialization" => "invalid json in header",
        "InvalidOffset" => "invalid offset for tensor",
        "TensorInvalidInfo" => "invalid shape, data type, or offset",
        "ValidationOverflow" => "overflow computing buffer size",
        "MisalignedSlice" => "does not end up at a byte boundary",
        "MetadataIncompleteBuffer" => "incomplete metadata",
        other => panic!("unknown rule {other}"),
    }
}

// ------------------------------------------------------------------------------------ helpers

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// One invalid corpus file: `<Rule>--<case>.safetensors`.
struct Case {
    path: PathBuf,
    file: String,
    rule: String,
}

fn invalid_corpus() -> Vec<Case> {
    let mut cases: Vec<Case> = fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().into_string().unwrap())
        .filter(|f| f.ends_with(".safetensors"))
        .map(|file| {
            let (rule, _) = file
                .split_once("--")
                .unwrap_or_else(|| panic!("{file}: not named <Rule>--<case>.safetensors"));
            assert!(RULES.contains(&rule), "{file}: unknown rule {rule}");
            Case {
                path: fs::canonicalize(corpus_dir().join(&file)).unwrap(),
                rule: rule.to_string(),
                file,
            }
        })
        .collect();
    cases.sort_by(|a, b| a.file.cmp(&b.file));
    assert!(cases.len() >= 25, "corpus has only {} files", cases.len());
    cases
}

fn valid_corpus() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(corpus_dir().join("valid"))
        .unwrap()
        .map(|e| fs::canonicalize(e.unwrap().path()).unwrap())
        .filter(|p| p.extension() == Some(OsStr::new("safetensors")))
        .collect();
    v.sort();
    assert!(v.len() >= 7, "only {} valid corpus files", v.len());
    v
}

fn show(o: &Output) -> String {
    format!(
        "status {}\nstdout: {:?}\nstderr: {:?}",
        o.status,
        stdout(o),
        stderr(o)
    )
}

/// What the official Python package says about each file: `Ok((sorted keys, metadata))` or the
/// exception text.
type Probe = Result<(Vec<String>, serde_json::Value), String>;

fn python_probe(py: &Path, paths: &[&Path]) -> Vec<Probe> {
    const SCRIPT: &str = r#"
import json, sys
from safetensors import safe_open
out = []
for p in sys.argv[1:]:
    try:
        with safe_open(p, "numpy") as f:
            out.append({"keys": sorted(f.keys()), "metadata": f.metadata()})
    except Exception as e:
        out.append({"error": "%s: %s" % (type(e).__name__, e)})
print(json.dumps(out))
"#;
    let out = Command::new(py)
        .arg("-c")
        .arg(SCRIPT)
        .args(paths)
        .output()
        .unwrap();
    assert!(out.status.success(), "python probe: {}", show(&out));
    let v: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    v.into_iter()
        .map(|r| match r.get("error") {
            Some(e) => Err(e.as_str().unwrap().to_string()),
            None => Ok((
                serde_json::from_value(r["keys"].clone()).unwrap(),
                r["metadata"].clone(),
            )),
        })
        .collect()
}

/// The rule in the last `[...]` of a message.
fn bracketed_rule(line: &str) -> Option<&str> {
    let open = line.rfind('[')?;
    line[open + 1..].strip_suffix(']')
}

/// Checks the one-line failure of a single-file source: `tensormount: <path>: ... [<rule>]`.
/// Returns a complaint, if any.
fn check_failure_line(what: &str, out: &Output, path: &Path, rule: &str) -> Option<String> {
    let err = stderr(out);
    let lines: Vec<&str> = err.lines().collect();
    let prefix = format!("tensormount: {}: ", path.display());
    if out.status.success() {
        return Some(format!("{what}: exit 0\n{}", show(out)));
    }
    if lines.len() != 1 || !err.ends_with('\n') {
        return Some(format!("{what}: stderr is not exactly one line: {err:?}"));
    }
    if !lines[0].starts_with(&prefix) {
        return Some(format!("{what}: stderr should start {prefix:?}: {err:?}"));
    }
    if bracketed_rule(lines[0]) != Some(rule) {
        return Some(format!("{what}: stderr should end [{rule}]: {err:?}"));
    }
    // "Each rejection names the file, the rule and, where the crate's error names one, the tensor."
    if rule == "InvalidOffset" && !lines[0].contains("tensor `") {
        return Some(format!("{what}: stderr should name the tensor: {err:?}"));
    }
    None
}

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// getxattr(2) of a whole value (probing the size first): the value or the errno.
fn xattr(path: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let p = cpath(path);
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings; a null buffer of size 0 asks for the value's size.
    let size = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
    if size < 0 {
        return Err(io::Error::last_os_error().raw_os_error().unwrap());
    }
    let mut buf = vec![0u8; size as usize + 1];
    // SAFETY: valid C strings; `buf` has `buf.len()` writable bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(io::Error::last_os_error().raw_os_error().unwrap());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

/// Names of a directory as raw bytes, in readdir order.
fn listing(dir: &Path) -> Vec<Vec<u8>> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_vec())
        .collect()
}

fn listing_set(dir: &Path) -> BTreeSet<String> {
    listing(dir)
        .into_iter()
        .map(|n| String::from_utf8(n).unwrap())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// A U8 tensor of `n` pseudo-random bytes (name and shape leaked: [`T`] borrows them).
fn u8t(name: &str, n: usize, seed: u64) -> T<'static> {
    T {
        name: Box::leak(name.to_string().into_boxed_str()),
        dtype: "U8",
        shape: Box::leak(vec![n].into_boxed_slice()),
        data: bytes(n, seed),
    }
}

fn set_mode(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// Mounts `source` with `opts` in a thread, failing (instead of hanging) after 15 s.
fn try_mount_within(source: &Path, opts: &str) -> (Option<Mounted>, Output) {
    let (tx, rx) = mpsc::channel();
    let (src, o) = (source.to_path_buf(), opts.to_string());
    std::thread::spawn(move || {
        let _ = tx.send(Mounted::try_new(&src, &o));
    });
    rx.recv_timeout(Duration::from_secs(15))
        .unwrap_or_else(|_| panic!("mount of {} hung", source.display()))
}

/// A line of `stderr` naming `path`, if any.
fn line_naming<'a>(stderr: &'a str, path: &Path) -> Option<&'a str> {
    let p = path.to_str().unwrap();
    stderr.lines().find(|l| l.contains(p))
}

/// The header of a safetensors file parsed by the test itself: data start, tensors by name
/// (begin, end) and the `__metadata__` value (`Null` when absent).
fn own_header(path: &Path) -> (usize, BTreeMap<String, (usize, usize)>, serde_json::Value) {
    let b = fs::read(path).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let v: serde_json::Value = serde_json::from_slice(&b[8..8 + n]).unwrap();
    let mut tensors = BTreeMap::new();
    let mut metadata = serde_json::Value::Null;
    for (k, e) in v.as_object().unwrap() {
        if k == "__metadata__" {
            metadata = e.clone();
            continue;
        }
        let o = &e["data_offsets"];
        tensors.insert(
            k.clone(),
            (
                o[0].as_u64().unwrap() as usize,
                o[1].as_u64().unwrap() as usize,
            ),
        );
    }
    (8 + n, tensors, metadata)
}

// --------------------------------------------------------------------------------- the corpus

/// The committed corpus is exactly what its script writes, covers every rule, and the official
/// reader rejects every invalid file with the message of the rule in its name (and opens every
/// valid one).
#[test]
fn corpus_is_regenerated_by_its_script_and_judged_alike_by_the_official_reader() {
    let py = python();
    let cases = invalid_corpus();
    let rules: BTreeSet<&str> = cases.iter().map(|c| c.rule.as_str()).collect();
    assert_eq!(rules, RULES.iter().copied().collect(), "rules covered");

    // Deterministic generator: a fresh run gives the committed bytes, file for file.
    let tmp = TempDir::new("regen");
    let out = Command::new(&py)
        .arg(corpus_dir().join("make_corpus.py"))
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "make_corpus.py: {}", show(&out));
    for sub in ["", "valid"] {
        let files = |d: &Path| -> BTreeMap<String, Vec<u8>> {
            fs::read_dir(d.join(sub))
                .unwrap()
                .map(|e| e.unwrap())
                .filter(|e| e.file_type().unwrap().is_file())
                .map(|e| e.file_name().into_string().unwrap())
                .filter(|f| f.ends_with(".safetensors"))
                .map(|f| (f.clone(), fs::read(d.join(sub).join(&f)).unwrap()))
                .collect()
        };
        let (fresh, committed) = (files(tmp.path()), files(&corpus_dir()));
        assert_eq!(
            fresh.keys().collect::<Vec<_>>(),
            committed.keys().collect::<Vec<_>>(),
            "file set of corpus/{sub}"
        );
        for (f, b) in &fresh {
            assert!(
                &committed[f] == b,
                "corpus/{sub}/{f} differs from make_corpus.py's"
            );
        }
    }
    let total: u64 = walk_sizes(&corpus_dir());
    assert!(total < 100_000, "corpus is {total} bytes");

    let paths: Vec<&Path> = cases.iter().map(|c| c.path.as_path()).collect();
    let mut failures = Vec::new();
    for (c, r) in cases.iter().zip(python_probe(&py, &paths)) {
        match r {
            Ok(_) => failures.push(format!("{}: the official reader accepts it", c.file)),
            Err(e) if !e.to_lowercase().contains(python_message(&c.rule)) => {
                failures.push(format!(
                    "{}: official reader says {e:?}, not {:?}",
                    c.file,
                    python_message(&c.rule)
                ))
            }
            Err(_) => {}
        }
    }
    let valid = valid_corpus();
    let paths: Vec<&Path> = valid.iter().map(PathBuf::as_path).collect();
    for (p, r) in valid.iter().zip(python_probe(&py, &paths)) {
        if let Err(e) = r {
            failures.push(format!("{}: official reader rejects it: {e}", p.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn walk_sizes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walk_sizes(&e.path())
            } else {
                e.metadata().unwrap().len()
            }
        })
        .sum()
}

/// Each invalid file as a single-file SOURCE: the mount fails with one line naming the file and
/// the rule, nothing is mounted, and the official reader rejects the file for that same rule.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn each_corpus_file_fails_a_single_file_mount_with_its_rule() {
    require_fuse();
    let mut failures = Vec::new();
    let mut reported = Vec::new();
    for c in invalid_corpus() {
        let (m, out) = Mounted::try_new(&c.path, "");
        if m.is_some() {
            failures.push(format!("{}: something got mounted", c.file));
        }
        if let Some(f) = check_failure_line(&c.file, &out, &c.path, &c.rule) {
            failures.push(f);
        }
        reported.push(
            stderr(&out)
                .lines()
                .next()
                .and_then(bracketed_rule)
                .unwrap_or("")
                .to_string(),
        );
    }
    // The rule tensormount reports is the one the official reader's message names.
    {
        let py = python();
        let cases = invalid_corpus();
        let paths: Vec<&Path> = cases.iter().map(|c| c.path.as_path()).collect();
        for ((c, r), rule) in cases.iter().zip(python_probe(&py, &paths)).zip(&reported) {
            if !RULES.contains(&rule.as_str()) {
                continue; // already reported above
            }
            match r {
                Ok(_) => failures.push(format!("{}: official reader accepts it", c.file)),
                Err(e) if !e.to_lowercase().contains(python_message(rule)) => {
                    failures.push(format!(
                        "{}: tensormount says [{rule}], official reader says {e:?}",
                        c.file
                    ))
                }
                Err(_) => {}
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--list FILE` (table and JSON) fails for each invalid file with the same one line.
#[test]
fn each_corpus_file_fails_list_with_its_rule() {
    let mut failures = Vec::new();
    for c in invalid_corpus() {
        for json in [false, true] {
            let mut args = vec!["--list"];
            if json {
                args.push("--json");
            }
            args.push(s(&c.path));
            let out = run(&args);
            let what = format!("{} ({})", c.file, args[..args.len() - 1].join(" "));
            if let Some(f) = check_failure_line(&what, &out, &c.path, &c.rule) {
                failures.push(f);
            }
            if !out.stdout.is_empty() {
                failures.push(format!("{what}: printed {:?}", stdout(&out)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A directory holding the whole corpus mounts: every invalid file is mirrored byte for byte with
/// its reason in `user.safetensors.error`, gets no `.tensors` directory and a warning; the valid
/// ones (in `valid/`) get theirs. With `-o strict` the mount (and `--list`) fails.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn directory_of_the_corpus_mounts_with_each_invalid_file_mirrored_and_flagged() {
    require_fuse();
    let tmp = TempDir::new("corpusdir");
    let src = tmp.join("src");
    fs::create_dir_all(src.join("valid")).unwrap();
    let cases = invalid_corpus();
    for c in &cases {
        fs::copy(&c.path, src.join(&c.file)).unwrap();
    }
    let valid = valid_corpus();
    for v in &valid {
        fs::copy(v, src.join("valid").join(v.file_name().unwrap())).unwrap();
    }
    let src = fs::canonicalize(&src).unwrap();

    let (m, out) = try_mount_within(&src, "");
    assert!(out.status.success(), "mount failed: {}", show(&out));
    let m = m.expect("mounted after exit 0");
    let err = stderr(&out);

    let mut want: BTreeSet<String> = cases.iter().map(|c| c.file.clone()).collect();
    want.insert("valid".into());
    assert_eq!(listing_set(&m.dir), want, "root listing");

    let mut failures = Vec::new();
    for c in &cases {
        let f = m.path(&c.file);
        let stem = c.file.strip_suffix(".safetensors").unwrap();
        match fs::read(&f) {
            Ok(b) if b == fs::read(&c.path).unwrap() => {}
            Ok(_) => failures.push(format!("{}: mirror differs", c.file)),
            Err(e) => failures.push(format!("{}: mirror unreadable: {e}", c.file)),
        }
        if fs::symlink_metadata(m.path(format!("{stem}.tensors"))).is_ok() {
            failures.push(format!("{}: has a .tensors entry", c.file));
        }
        let tag = format!("[{}]", c.rule);
        match xattr(&f, "user.safetensors.error") {
            Ok(v) if String::from_utf8_lossy(&v).contains(&tag) => {}
            other => failures.push(format!(
                "{}: user.safetensors.error is {:?}, want it to contain {tag}",
                c.file,
                other.map(|v| String::from_utf8_lossy(&v).into_owned())
            )),
        }
        match line_naming(&err, &src.join(&c.file)) {
            Some(l) if l.contains(&tag) => {}
            other => failures.push(format!(
                "{}: warning line {other:?} should name the file and {tag}",
                c.file
            )),
        }
    }
    // The valid files beside them.
    let mut want_valid = BTreeSet::new();
    for v in &valid {
        let name = v.file_name().unwrap().to_str().unwrap();
        want_valid.insert(name.to_string());
        want_valid.insert(name.replace(".safetensors", ".tensors"));
        if xattr(&m.path("valid").join(name), "user.safetensors.error").is_ok() {
            failures.push(format!("valid/{name}: has user.safetensors.error"));
        }
        if line_naming(&err, &src.join("valid").join(name)).is_some() {
            failures.push(format!("valid/{name}: warned about"));
        }
    }
    assert_eq!(listing_set(&m.path("valid")), want_valid, "valid/ listing");
    drop(m);

    let (m, out) = try_mount_within(&src, "strict");
    if m.is_some() || out.status.success() {
        failures.push(format!("strict mount succeeded: {}", show(&out)));
    }
    let err = stderr(&out);
    let named = cases.iter().find(|c| {
        err.starts_with(&format!("tensormount: {}: ", src.join(&c.file).display()))
            && err.contains(&format!("[{}]", c.rule))
    });
    if err.lines().count() != 1 || named.is_none() {
        failures.push(format!(
            "strict: want one line `tensormount: <corpus file>: ... [<its rule>]`: {err:?}"
        ));
    }
    let out = run(&["--list", "-o", "strict", s(&src)]);
    if out.status.success() || !stderr(&out).starts_with("tensormount: ") {
        failures.push(format!("--list -o strict: {}", show(&out)));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Each valid edge file mounts as a single file: one tensor file per tensor of the header (the
/// set the official reader sees), each with the tensor's bytes, `__metadata__` only when the
/// header has a metadata object, and `--list --json` names the same tensors.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn valid_corpus_files_mount_and_list_their_tensors() {
    require_fuse();
    let valid = valid_corpus();
    let paths: Vec<&Path> = valid.iter().map(PathBuf::as_path).collect();
    let probes = python_probe(&python(), &paths);
    let mut failures = Vec::new();
    for (i, v) in valid.iter().enumerate() {
        let what = v.file_name().unwrap().to_str().unwrap();
        let (data_start, tensors, metadata) = own_header(v);
        let names: BTreeSet<String> = tensors.keys().cloned().collect();
        match &probes[i] {
            Ok((keys, md)) => {
                let keys: BTreeSet<String> = keys.iter().cloned().collect();
                assert_eq!(keys, names, "{what}: official reader's tensor names");
                assert_eq!(md, &metadata, "{what}: official reader's metadata");
            }
            Err(e) => panic!("{what}: official reader rejects it: {e}"),
        }
        let (m, out) = try_mount_within(v, "");
        let Some(m) = m else {
            failures.push(format!("{what}: did not mount: {}", show(&out)));
            continue;
        };
        if !stderr(&out).is_empty() {
            failures.push(format!("{what}: warnings {:?}", stderr(&out)));
        }
        let mut want = names.clone();
        if metadata.is_object() {
            want.insert("__metadata__".into());
        }
        let got = listing_set(&m.dir);
        if got != want {
            failures.push(format!("{what}: listing {got:?}, want {want:?}"));
        }
        let b = fs::read(v).unwrap();
        for (name, (begin, end)) in &tensors {
            let want = &b[data_start + begin..data_start + end];
            match fs::read(m.path(name)) {
                Ok(got) if got == want => {}
                other => failures.push(format!("{what}: {name}: {other:?}, want {want:?}")),
            }
        }
        drop(m);
        let out = run(&["--list", "--json", s(v)]);
        let listed: Option<BTreeSet<String>> = out
            .status
            .success()
            .then(|| serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).ok())
            .flatten()
            .map(|rows| {
                rows.iter()
                    .map(|r| r["name"].as_str().unwrap_or_default().to_string())
                    .collect()
            });
        if listed.as_ref() != Some(&names) {
            failures.push(format!("{what}: --list --json {}", show(&out)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ------------------------------------------------------------------------------------ indexes

const SHARD1: &str = "model-00001-of-00002.safetensors";
const SHARD2: &str = "model-00002-of-00002.safetensors";
const INDEX: &str = "model.safetensors.index.json";

/// What a case does to its model directory (which already holds SHARD1 with tensor `t`).
enum Setup {
    /// SHARD2 (tensor `u`) is written and the index gets this text.
    Index(String),
    /// SHARD2 is a directory; the index is the valid one.
    Shard2Dir,
    /// SHARD2 is a FIFO; the index is the valid one.
    Shard2Fifo,
    /// SHARD2 is missing; the index is the valid one.
    Shard2Missing,
    /// SHARD1 also holds `extra`, which the valid index does not list.
    Shard1Extra,
}

fn valid_index_text() -> String {
    format!(r#"{{"metadata":{{"total_size":8}},"weight_map":{{"t":"{SHARD1}","u":"{SHARD2}"}}}}"#)
}

/// Each broken or malicious index leaves its merged directory out with a warning naming it (and
/// its reason in `user.safetensors.error`), the rest of its directory mounts, `-o strict` fails,
/// no file outside SOURCE is opened and no FIFO makes the mount hang.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn hostile_indexes_leave_their_set_out_and_fail_strict_mounts() {
    require_fuse();
    let tmp = TempDir::new("hostidx");
    // A real, valid shard holding `u` one level above every SOURCE: an index naming it must not
    // get it opened.
    let outside = tmp.join("x.safetensors");
    let u = u8t("u", 4, 2);
    write_safetensors(&outside, &[u8t("u", 4, 2)], None);
    let outside_abs = fs::canonicalize(&outside).unwrap();
    let outside_c = cpath(&outside_abs);
    // SAFETY: plain inotify calls on a valid C string; the descriptor is closed below.
    let inotify = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    assert!(inotify >= 0);
    // SAFETY: valid descriptor and C string.
    let wd = unsafe {
        libc::inotify_add_watch(inotify, outside_c.as_ptr(), libc::IN_OPEN | libc::IN_ACCESS)
    };
    assert!(wd >= 0);

    let wm = |body: &str| format!(r#"{{"metadata":{{"total_size":8}},"weight_map":{body}}}"#);
    let big = {
        let pad = "x".repeat(50 << 20);
        format!(
            r#"{{"metadata":{{"pad":"{pad}"}},"weight_map":{{"t":"{SHARD1}","u":"{SHARD2}"}}}}"#
        )
    };
    let cases: Vec<(&str, Setup)> = vec![
        (
            "parent-relative shard",
            Setup::Index(wm(&format!(r#"{{"t":"{SHARD1}","u":"../x.safetensors"}}"#))),
        ),
        (
            "absolute shard outside SOURCE",
            Setup::Index(wm(&format!(
                r#"{{"t":"{SHARD1}","u":"{}"}}"#,
                outside_abs.display()
            ))),
        ),
        (
            "/etc/passwd as shard",
            Setup::Index(wm(&format!(r#"{{"t":"{SHARD1}","u":"/etc/passwd"}}"#))),
        ),
        ("shard is a directory", Setup::Shard2Dir),
        ("shard is a FIFO", Setup::Shard2Fifo),
        ("shard is missing", Setup::Shard2Missing),
        (
            "tensor absent from its shard",
            Setup::Index(wm(&format!(
                r#"{{"t":"{SHARD1}","u":"{SHARD2}","ghost":"{SHARD1}"}}"#
            ))),
        ),
        ("shard tensor missing from the index", Setup::Shard1Extra),
        (
            "tensor listed twice, same shard",
            Setup::Index(wm(&format!(
                r#"{{"t":"{SHARD1}","u":"{SHARD2}","t":"{SHARD1}"}}"#
            ))),
        ),
        (
            "tensor listed twice, two shards",
            Setup::Index(wm(&format!(
                r#"{{"t":"{SHARD1}","u":"{SHARD2}","t":"{SHARD2}"}}"#
            ))),
        ),
        (
            "weight_map given twice",
            Setup::Index(format!(
                r#"{{"weight_map":{{"t":"{SHARD1}","u":"{SHARD2}"}},"weight_map":{{"t":"{SHARD1}","u":"{SHARD2}"}}}}"#
            )),
        ),
        (
            "weight_map is an array",
            Setup::Index(wm(&format!(r#"[["t","{SHARD1}"],["u","{SHARD2}"]]"#))),
        ),
        (
            "weight_map is a string",
            Setup::Index(wm(&format!(r#""{SHARD1}""#))),
        ),
        ("weight_map is null", Setup::Index(wm("null"))),
        (
            "index is an HTML page",
            Setup::Index("<!DOCTYPE html><html><body>502 Bad Gateway</body></html>\n".into()),
        ),
        ("index of 50 MB", Setup::Index(big)),
    ];

    let t = u8t("t", 4, 1);
    let mut failures = Vec::new();
    for (i, (what, setup)) in cases.iter().enumerate() {
        let d = tmp.join(format!("case{i}"));
        fs::create_dir(&d).unwrap();
        let extra = matches!(setup, Setup::Shard1Extra);
        let shard1 = [u8t("t", 4, 1), u8t("extra", 4, 3)];
        write_safetensors(&d.join(SHARD1), &shard1[..1 + extra as usize], None);
        let index_text = match setup {
            Setup::Index(text) => {
                write_safetensors(&d.join(SHARD2), &[u8t("u", 4, 2)], None);
                text.clone()
            }
            Setup::Shard1Extra => {
                write_safetensors(&d.join(SHARD2), &[u8t("u", 4, 2)], None);
                valid_index_text()
            }
            Setup::Shard2Missing => valid_index_text(),
            Setup::Shard2Dir => {
                fs::create_dir(d.join(SHARD2)).unwrap();
                write_safetensors(
                    &d.join(SHARD2).join("inner.safetensors"),
                    &[u8t("u", 4, 2)],
                    None,
                );
                valid_index_text()
            }
            Setup::Shard2Fifo => {
                let fifo = cpath(&d.join(SHARD2));
                // SAFETY: valid C string.
                assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
                valid_index_text()
            }
        };
        fs::write(d.join(INDEX), &index_text).unwrap();
        let d = fs::canonicalize(&d).unwrap();
        let index_path = d.join(INDEX);

        let (m, out) = try_mount_within(&d, "");
        let Some(m) = m.filter(|_| out.status.success()) else {
            failures.push(format!("{what}: mount failed: {}", show(&out)));
            continue;
        };
        let mut want = set(&[SHARD1, "model-00001-of-00002.tensors", INDEX]);
        match setup {
            Setup::Index(_) | Setup::Shard1Extra => {
                want.insert(SHARD2.into());
                want.insert("model-00002-of-00002.tensors".into());
            }
            Setup::Shard2Dir => {
                want.insert(SHARD2.into());
            }
            Setup::Shard2Fifo | Setup::Shard2Missing => {}
        }
        let got = listing_set(&m.dir);
        if got != want {
            failures.push(format!("{what}: listing {got:?}, want {want:?}"));
        }
        if fs::read(m.path("model-00001-of-00002.tensors/t"))
            .ok()
            .as_ref()
            != Some(&t.data)
        {
            failures.push(format!("{what}: shard 1's tensor not served"));
        }
        if let Setup::Index(_) | Setup::Shard1Extra = setup
            && fs::read(m.path("model-00002-of-00002.tensors/u"))
                .ok()
                .as_ref()
                != Some(&u.data)
        {
            failures.push(format!("{what}: shard 2's tensor not served"));
        }
        if fs::read(m.path(INDEX)).ok().as_deref() != Some(index_text.as_bytes()) {
            failures.push(format!("{what}: index not mirrored byte for byte"));
        }
        if line_naming(&stderr(&out), &index_path).is_none() {
            failures.push(format!(
                "{what}: no warning names {}: {:?}",
                index_path.display(),
                stderr(&out)
            ));
        }
        match xattr(&m.path(INDEX), "user.safetensors.error") {
            Ok(v) if !v.is_empty() => {}
            other => failures.push(format!(
                "{what}: the index's user.safetensors.error is {:?}",
                other.map(|v| String::from_utf8_lossy(&v).into_owned())
            )),
        }
        drop(m);

        let (m, out) = try_mount_within(&d, "strict");
        let err = stderr(&out);
        if m.is_some() || out.status.success() {
            failures.push(format!("{what}: strict mount succeeded: {}", show(&out)));
        } else if err.lines().count() != 1
            || !err.starts_with(&format!("tensormount: {}", index_path.display()))
        {
            failures.push(format!(
                "{what}: strict: want one line `tensormount: {}...`: {err:?}",
                index_path.display()
            ));
        }
    }

    let mut buf = [0u8; 4096];
    // SAFETY: reading into a local buffer from our own non-blocking inotify descriptor.
    let n = unsafe { libc::read(inotify, buf.as_mut_ptr().cast(), buf.len()) };
    let errno = io::Error::last_os_error().raw_os_error().unwrap();
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(inotify) };
    if !(n < 0 && errno == libc::EAGAIN) {
        failures.push(format!(
            "{} outside SOURCE was opened or read ({n} bytes of inotify events)",
            outside_abs.display()
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// -------------------------------------------------------------------------- directory content

/// As an unprivileged user, unreadable files, unreadable directories and entries of a directory
/// that cannot be searched are skipped with a warning each; everything readable is listed.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn unreadable_files_and_directories_are_skipped_with_warnings() {
    require_fuse();
    require_tools(&["setpriv"]);
    let tmp = TempDir::new("unreadable");
    set_mode(tmp.path(), 0o755);
    // The binary, where uid 65534 can surely run it.
    let bin_copy = tmp.join("tensormount");
    fs::copy(bin(), &bin_copy).unwrap();
    set_mode(&bin_copy, 0o755);
    let src = tmp.join("src");
    fs::create_dir_all(src.join("locked")).unwrap();
    fs::create_dir_all(src.join("open")).unwrap();
    fs::create_dir_all(src.join("nosearch")).unwrap();
    write_safetensors(&src.join("ok.safetensors"), &[u8t("w", 4, 1)], None);
    write_safetensors(&src.join("secret.safetensors"), &[u8t("s", 4, 2)], None);
    fs::write(src.join("secret.json"), b"{}\n").unwrap();
    fs::write(src.join("readme.txt"), b"hello\n").unwrap();
    write_safetensors(
        &src.join("locked/inner.safetensors"),
        &[u8t("i", 4, 3)],
        None,
    );
    write_safetensors(&src.join("open/deep.safetensors"), &[u8t("d", 4, 4)], None);
    write_safetensors(
        &src.join("nosearch/hidden.safetensors"),
        &[u8t("h", 4, 5)],
        None,
    );
    for f in [
        "ok.safetensors",
        "readme.txt",
        "open/deep.safetensors",
        "locked/inner.safetensors",
        "nosearch/hidden.safetensors",
    ] {
        set_mode(&src.join(f), 0o644);
    }
    set_mode(&src, 0o755);
    set_mode(&src.join("open"), 0o755);
    set_mode(&src.join("secret.safetensors"), 0o000);
    set_mode(&src.join("secret.json"), 0o000);
    set_mode(&src.join("locked"), 0o000);
    set_mode(&src.join("nosearch"), 0o644); // readable, not searchable

    let list_paths = |out: &Output| -> BTreeSet<String> {
        serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout)
            .unwrap_or_else(|e| panic!("--list --json output: {e}: {}", show(out)))
            .iter()
            .map(|r| r["path"].as_str().unwrap().to_string())
            .collect()
    };
    // As root everything is readable: the fixture holds what it should.
    let out = run(&["--list", "--json", s(&src)]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        list_paths(&out),
        set(&[
            "locked/inner.tensors/i",
            "nosearch/hidden.tensors/h",
            "ok.tensors/w",
            "open/deep.tensors/d",
            "secret.tensors/s"
        ]),
        "as root"
    );

    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(&bin_copy)
        .args(["--list", "--json"])
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "as uid 65534: {}", show(&out));
    assert_eq!(
        list_paths(&out),
        set(&["ok.tensors/w", "open/deep.tensors/d"]),
        "as uid 65534"
    );
    let err = stderr(&out);
    let mut failures = Vec::new();
    for p in [
        "secret.safetensors",
        "secret.json",
        "locked",
        "nosearch/hidden.safetensors",
    ] {
        let full = src.join(p);
        match line_naming(&err, &full) {
            Some(_) => {}
            None => failures.push(format!("no warning names {}", full.display())),
        }
    }
    for p in ["ok.safetensors", "readme.txt", "open"] {
        let full = format!("{}/{p}:", src.display());
        if err.contains(&full) {
            failures.push(format!("warned about readable {p}: {err:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nstderr: {err}",
        failures.join("\n")
    );
}

/// Names that are not UTF-8 are mirrored byte for byte, in directories too, and a safetensors
/// file so named gets its `.tensors` directory (whose tensors name the source's exact path).
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn non_utf8_names_are_mirrored_byte_exactly() {
    require_fuse();
    let tmp = TempDir::new("nonutf8");
    let src = tmp.join("src");
    fs::create_dir(&src).unwrap();
    let os = |b: &[u8]| OsString::from_vec(b.to_vec());
    fs::write(src.join(os(b"caf\xe9.json")), b"{\"caf\xc3\xa9\": 1}\n").unwrap();
    let w = u8t("w", 5, 1);
    write_safetensors(&src.join(os(b"\xff.safetensors")), &[u8t("w", 5, 1)], None);
    let sub = src.join(os(b"\xfe\xfd"));
    fs::create_dir(&sub).unwrap();
    let v = u8t("v", 7, 2);
    write_safetensors(&sub.join(os(b"n\x80.safetensors")), &[u8t("v", 7, 2)], None);
    let src = fs::canonicalize(&src).unwrap();

    let (m, out) = try_mount_within(&src, "");
    assert!(out.status.success(), "{}", show(&out));
    let m = m.unwrap();
    let want: Vec<Vec<u8>> = vec![
        b"caf\xe9.json".to_vec(),
        b"\xfe\xfd".to_vec(),
        b"\xff.safetensors".to_vec(),
        b"\xff.tensors".to_vec(),
    ];
    assert_eq!(listing(&m.dir), want, "root listing (byte order)");
    assert_eq!(
        listing(&m.dir.join(os(b"\xfe\xfd"))),
        vec![b"n\x80.safetensors".to_vec(), b"n\x80.tensors".to_vec()]
    );
    assert_eq!(
        fs::read(m.dir.join(os(b"caf\xe9.json"))).unwrap(),
        fs::read(src.join(os(b"caf\xe9.json"))).unwrap()
    );
    assert_eq!(
        fs::read(m.dir.join(os(b"\xff.safetensors"))).unwrap(),
        fs::read(src.join(os(b"\xff.safetensors"))).unwrap()
    );
    let wf = m.dir.join(os(b"\xff.tensors")).join("w");
    assert_eq!(fs::read(&wf).unwrap(), w.data);
    let vf = m
        .dir
        .join(os(b"\xfe\xfd"))
        .join(os(b"n\x80.tensors"))
        .join("v");
    assert_eq!(fs::read(&vf).unwrap(), v.data);
    assert_eq!(
        xattr(&wf, "user.safetensors.source").unwrap(),
        src.join(os(b"\xff.safetensors")).as_os_str().as_bytes(),
        "source xattr carries the exact bytes of the path"
    );
    drop(m);
    // `--list --json` shows them lossily, and still succeeds.
    let out = run(&["--list", "--json", s(&src)]);
    assert!(out.status.success(), "{}", show(&out));
    let text = stdout(&out);
    assert!(text.contains("\u{fffd}.tensors/w"), "{text}");
}

/// Link loops (`a -> b -> a`) and self links are skipped with a warning each, without hanging.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn symlink_loops_and_self_links_are_skipped_with_warnings() {
    require_fuse();
    let tmp = TempDir::new("loops");
    let src = tmp.join("src");
    fs::create_dir(&src).unwrap();
    let w = u8t("w", 6, 1);
    write_safetensors(&src.join("m.safetensors"), &[u8t("w", 6, 1)], None);
    std::os::unix::fs::symlink("b", src.join("a")).unwrap();
    std::os::unix::fs::symlink("a", src.join("b")).unwrap();
    std::os::unix::fs::symlink("self", src.join("self")).unwrap();
    std::os::unix::fs::symlink("loop.safetensors", src.join("loop.safetensors")).unwrap();
    std::os::unix::fs::symlink(
        "loop.safetensors.index.json",
        src.join("loop.safetensors.index.json"),
    )
    .unwrap();
    std::os::unix::fs::symlink("a", src.join("into-loop")).unwrap();
    let src = fs::canonicalize(&src).unwrap();

    let (m, out) = try_mount_within(&src, "");
    assert!(out.status.success(), "{}", show(&out));
    let m = m.unwrap();
    assert_eq!(listing_set(&m.dir), set(&["m.safetensors", "m.tensors"]));
    assert_eq!(fs::read(m.path("m.tensors/w")).unwrap(), w.data);
    let err = stderr(&out);
    let mut failures = Vec::new();
    for l in [
        "a",
        "b",
        "self",
        "loop.safetensors",
        "loop.safetensors.index.json",
        "into-loop",
    ] {
        let full = format!("{}/{l}:", src.display());
        if !err.contains(&full) {
            failures.push(format!("no warning names {full}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nstderr: {err}",
        failures.join("\n")
    );
}

/// A 64-level-deep tree mounts, and the tensor at the bottom reads correctly.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_64_level_deep_tree_serves_the_bottom_tensor() {
    require_fuse();
    let tmp = TempDir::new("deep");
    let src = tmp.join("src");
    let rel: PathBuf = (0..64).map(|i| format!("d{i:02}")).collect();
    fs::create_dir_all(src.join(&rel)).unwrap();
    let w = u8t("bottom.weight", 33, 7);
    write_safetensors(
        &src.join(&rel).join("deep.safetensors"),
        &[u8t("bottom.weight", 33, 7)],
        Some(&[("depth", "64")]),
    );
    fs::write(src.join(&rel).join("config.json"), b"{\"depth\": 64}\n").unwrap();

    let (m, out) = try_mount_within(&src, "");
    assert!(out.status.success(), "{}", show(&out));
    let m = m.unwrap();
    assert!(stderr(&out).is_empty(), "{}", show(&out));
    let bottom = m.dir.join(&rel);
    assert_eq!(
        listing_set(&bottom),
        set(&["config.json", "deep.safetensors", "deep.tensors"])
    );
    assert_eq!(
        fs::read(bottom.join("deep.tensors/bottom.weight")).unwrap(),
        w.data
    );
    assert_eq!(
        fs::read(bottom.join("config.json")).unwrap(),
        b"{\"depth\": 64}\n"
    );
    assert_eq!(
        xattr(
            &bottom.join("deep.tensors"),
            "user.safetensors.metadata.depth"
        )
        .unwrap(),
        b"64"
    );
    drop(m);
    let out = run(&["--list", "--json", s(&src)]);
    assert!(out.status.success(), "{}", show(&out));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0]["path"].as_str().unwrap(),
        format!("{}/deep.tensors/bottom.weight", rel.display())
    );
}

// ------------------------------------------------------------------------------- tensor names

/// Hostile tensor names in one file: every tensor gets exactly one file, under a valid, unique
/// name (1 to 255 bytes, no `/`, never `.` or `..`) that follows the documented encoding, with the
/// tensor's bytes; a name over 64 KiB has no name xattr but its file is there and `--list --json`
/// shows the whole name.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn hostile_tensor_names_each_get_one_valid_unique_file() {
    require_fuse();
    let tmp = TempDir::new("hostnames");
    let src = tmp.join("names.safetensors");
    let exact_64k = "K".repeat(65536);
    let over_64k = format!("{}/tail", "M".repeat(65536));
    let mut names: Vec<String> = [
        "",
        ".",
        "..",
        "...",
        "....",
        ". .",
        "/",
        "//",
        "a//b/",
        "/a",
        "a/",
        "\n",
        "\t",
        "\x01",
        "\x7f",
        "a\nb",
        "\r\n",
        " ",
        "%",
        "%#",
        "x%#0123456789abcdef",
        "%2E",
        "%2E%2E",
        "\0",
        "\u{202e}gnp.exe",
        "__metadata__.x",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.extend([
        ".".repeat(255),
        ".".repeat(256),
        ".".repeat(300),
        "/".repeat(300),
        "\n".repeat(300),
        "é".repeat(200),
        exact_64k.clone(),
        over_64k.clone(),
    ]);
    // Thousands of long names sharing a prefix are the rule tests' (src/namespace/rules_tests.rs).
    let tensors: Vec<T> = names
        .iter()
        .enumerate()
        .map(|(i, n)| u8t(n, 4 + i % 5, i as u64 + 1))
        .collect();
    write_safetensors(&src, &tensors, Some(&[("format", "pt")]));

    let (m, out) = try_mount_within(&src, "");
    assert!(out.status.success(), "{}", show(&out));
    let m = m.unwrap();
    let files = listing(&m.dir);
    let by_name: BTreeMap<&str, &T> = tensors.iter().map(|t| (t.name, t)).collect();
    assert_eq!(by_name.len(), names.len(), "test names are distinct");

    let mut failures = Vec::new();
    if files.len() != names.len() + 1 {
        failures.push(format!(
            "{} files for {} tensors + __metadata__",
            files.len(),
            names.len()
        ));
    }
    let distinct: HashSet<&Vec<u8>> = files.iter().collect();
    if distinct.len() != files.len() {
        failures.push("duplicate file names in the listing".into());
    }
    let mut seen = HashSet::new();
    let mut nameless = Vec::new();
    for f in &files {
        let shown = String::from_utf8_lossy(f);
        if f.is_empty() || f.len() > 255 || f.contains(&b'/') || f == b"." || f == b".." {
            failures.push(format!("invalid file name {shown:?} ({} bytes)", f.len()));
            continue;
        }
        if f == b"__metadata__" {
            continue;
        }
        let path = m.dir.join(OsStr::from_bytes(f));
        let name = match xattr(&path, "user.safetensors.name") {
            Ok(n) => String::from_utf8(n).expect("name xattr is UTF-8"),
            Err(e) => {
                nameless.push((f.clone(), e));
                continue;
            }
        };
        let Some(t) = by_name.get(name.as_str()) else {
            failures.push(format!("{shown:?}: name xattr {name:?} is no tensor"));
            continue;
        };
        if !seen.insert(name.clone()) {
            failures.push(format!("tensor {name:?} has two files"));
        }
        let esc = escaped(&name);
        if esc.len() <= 255 {
            if f != esc.as_bytes() {
                failures.push(format!("{name:?}: file {shown:?}, want {esc:?}"));
            }
        } else {
            let text = std::str::from_utf8(f).expect("shortened name is UTF-8");
            let ok = text.rsplit_once("%#").is_some_and(|(head, hash)| {
                hash.len() == 16
                    && hash.bytes().all(|b| b.is_ascii_hexdigit())
                    && !head.is_empty()
                    && esc.starts_with(head)
            });
            if !ok {
                failures.push(format!(
                    "{name:.40?}...: shortened file {text:?} is not <prefix>%#<16 hex>"
                ));
            }
        }
        match fs::read(&path) {
            Ok(b) if b == t.data => {}
            other => failures.push(format!("{shown:?}: read {other:?}, want {:?}", t.data)),
        }
    }
    // The name over 64 KiB: no name xattr, but `--list --json` finds its file.
    let out = run(&["--list", "--json", s(&src)]);
    assert!(out.status.success(), "{}", show(&out));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let listed: BTreeSet<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    if listed.len() != names.len() || listed.iter().any(|n| !by_name.contains_key(n)) {
        failures.push(format!(
            "--list --json shows {} names, not the {} tensor names",
            listed.len(),
            names.len()
        ));
    }
    let row = rows.iter().find(|r| r["name"] == over_64k.as_str());
    match (row, nameless.as_slice()) {
        (Some(r), [(f, _)]) => {
            let path = r["path"].as_str().unwrap();
            if path.as_bytes() != f.as_slice() {
                failures.push(format!(
                    "over-64-KiB name: --list path {path:?}, nameless file {:?}",
                    String::from_utf8_lossy(f)
                ));
            }
            let data = fs::read(m.dir.join(OsStr::from_bytes(f)));
            if data.ok().as_ref() != Some(&by_name[over_64k.as_str()].data) {
                failures.push("over-64-KiB name: wrong bytes".into());
            }
            seen.insert(over_64k.clone());
        }
        (r, n) => failures.push(format!(
            "over-64-KiB name: --list row {}, files without a name xattr: {:?}",
            r.is_some(),
            n.iter()
                .map(|(f, e)| (String::from_utf8_lossy(f).into_owned(), e))
                .collect::<Vec<_>>()
        )),
    }
    if !seen.contains(&exact_64k) {
        failures.push("a name of exactly 64 KiB should still be in user.safetensors.name".into());
    }
    if seen.len() != names.len() {
        let missing: Vec<String> = names
            .iter()
            .filter(|n| !seen.contains(*n))
            .take(10)
            .map(|n| format!("{n:.40?}"))
            .collect();
        failures.push(format!("tensors without a file: {missing:?}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
