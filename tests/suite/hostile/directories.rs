//! Hostile directory contents: unreadable entries, names that are not UTF-8, link loops and a
//! 64-level-deep tree.

use super::{line_naming, listing, listing_set, set, show, try_mount_within, u8t, xattr};
use crate::common::*;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn set_mode(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

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
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("--list --json output: {e}: {}", show(out)))["tensors"]
            .as_array()
            .unwrap_or_else(|| panic!("--list --json: no tensors: {}", show(out)))
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
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = listed["tensors"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0]["path"].as_str().unwrap(),
        format!("{}/deep.tensors/bottom.weight", rel.display())
    );
}
