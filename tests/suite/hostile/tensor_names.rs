//! Hostile tensor names: each tensor gets one valid, unique file name.

use super::{listing, show, try_mount_within, u8t, xattr};
use crate::common::*;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;

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
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = listed["tensors"].as_array().unwrap();
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
