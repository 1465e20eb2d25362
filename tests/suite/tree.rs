//! The mounted tree: layout, names, attributes and extended attributes, checked with real tools.
//!
//! Every expectation comes from the spec and from the fixtures the tests write themselves (or the
//! source files read directly), never from tensormount's own output.

use crate::common::*;

use std::collections::HashSet;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn example_model_mounts_with_merged_and_per_shard_directories() {
    require_fuse();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tiny-model");
    let m = Mounted::new(&example, "");
    let mut names: Vec<String> = std::fs::read_dir(&m.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00001-of-00002.tensors",
            "model-00002-of-00002.safetensors",
            "model-00002-of-00002.tensors",
            "model.safetensors.index.json",
            "model.tensors"
        ]
    );
}

// ------------------------------------------------------------------------------------ helpers

/// Mounts `source`, asserting that the command succeeded; returns the mount and the command's
/// stderr (its warnings).
fn mount(source: &Path, opts: &str) -> (Mounted, String) {
    let (m, out) = Mounted::try_new(source, opts);
    assert!(
        out.status.success(),
        "mount of {} failed ({}): {}",
        source.display(),
        out.status,
        stderr(&out)
    );
    (m.expect("mounted after exit 0"), stderr(&out))
}

/// Names of a directory in the order readdir returns them (`.` and `..` left out by std).
fn listing(dir: &Path) -> Vec<Vec<u8>> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect()
}

/// Names of a directory as strings, in readdir order.
fn names(dir: &Path) -> Vec<String> {
    listing(dir)
        .into_iter()
        .map(|n| String::from_utf8(n).unwrap())
        .collect()
}

fn byte_sorted(v: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut s = v.to_vec();
    s.sort();
    s
}

/// `stat -c FMT PATH`, trimmed.
fn stat_c(path: &Path, fmt: &str) -> String {
    let out = Command::new("stat")
        .args(["-c", fmt])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stat {}: {}",
        path.display(),
        stderr(&out)
    );
    stdout(&out).trim_end().to_string()
}

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap()
}

/// getxattr(2) with a buffer of `size` bytes: the value, or the errno.
fn getxattr_sized(path: &Path, name: &str, size: usize) -> Result<Vec<u8>, i32> {
    let p = cpath(path);
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: valid C strings; `ptr` is null with size 0 or points to `size` writable bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), ptr, size) };
    if r < 0 {
        return Err(last_errno());
    }
    buf.truncate(r as usize);
    if size == 0 {
        buf = vec![0; r as usize];
    }
    Ok(buf)
}

/// getxattr(2) of a whole value.
fn xattr_raw(path: &Path, name: &str) -> Result<Vec<u8>, i32> {
    getxattr_sized(path, name, 65536)
}

/// listxattr(2) with a buffer of `size` bytes: the raw list (or its length for size 0), or errno.
fn listxattr_sized(path: &Path, size: usize) -> Result<(isize, Vec<u8>), i32> {
    let p = cpath(path);
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: valid C string; `ptr` is null with size 0 or points to `size` writable bytes.
    let r = unsafe { libc::listxattr(p.as_ptr(), ptr, size) };
    if r < 0 {
        return Err(last_errno());
    }
    buf.truncate(if size == 0 { 0 } else { r as usize });
    Ok((r, buf))
}

/// The xattr names of a path, sorted.
fn xattr_names(path: &Path) -> Vec<String> {
    let (_, list) = listxattr_sized(path, 65536).unwrap();
    let mut v: Vec<String> = list
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect();
    v.sort();
    v
}

/// A U8 tensor of `n` pseudo-random bytes. The name and shape are leaked (a few bytes per test
/// tensor) because [`T`] borrows them.
fn u8t(name: &str, n: usize, seed: u64) -> T<'static> {
    let name: &'static str = Box::leak(name.to_string().into_boxed_str());
    let shape: &'static [usize] = Box::leak(vec![n].into_boxed_slice());
    T {
        name,
        dtype: "U8",
        shape,
        data: bytes(n, seed),
    }
}

fn canonical(p: &Path) -> String {
    fs::canonicalize(p)
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap()
        .to_string()
}

/// Data start (8 + header length) of a safetensors file, read from its first 8 bytes.
fn data_start(path: &Path) -> u64 {
    let b = fs::read(path).unwrap();
    8 + u64::from_le_bytes(b[..8].try_into().unwrap())
}

/// Checks a tensor directory against the tensors written to `source`: the listing (readdir order
/// = byte order), each file's bytes, `user.safetensors.name` and `user.safetensors.source`.
fn check_tensor_dir(dir: &Path, tensors: &[&T<'_>], source: &Path, has_metadata: bool) {
    let mut want: Vec<Vec<u8>> = tensors
        .iter()
        .map(|t| escaped(t.name).into_bytes())
        .collect();
    if has_metadata {
        want.push(b"__metadata__".to_vec());
    }
    want.sort();
    assert_eq!(
        listing(dir),
        want,
        "listing of {} (want byte order)",
        dir.display()
    );
    let src = canonical(source);
    for t in tensors {
        let f = dir.join(escaped(t.name));
        assert_eq!(fs::read(&f).unwrap(), t.data, "bytes of {}", f.display());
        assert_eq!(
            xattr_raw(&f, "user.safetensors.name").unwrap(),
            t.name.as_bytes(),
            "name xattr of {}",
            f.display()
        );
        assert_eq!(
            String::from_utf8(xattr_raw(&f, "user.safetensors.source").unwrap()).unwrap(),
            src,
            "source xattr of {}",
            f.display()
        );
    }
}

fn write_index_of(path: &Path, metadata: Option<serde_json::Value>, map: &[(&str, &str)]) {
    write_index(path, metadata, map.iter().copied());
}

fn set_mode(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

// ------------------------------------------------------------------------- names and listing

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn single_file_source_escapes_names_and_lists_in_byte_order() {
    require_fuse();
    let tmp = TempDir::new("names");
    let src = tmp.join("m.safetensors");
    let tensor_names = [
        "a/b",
        "100%",
        "nul\0byte",
        ".",
        "..",
        "",
        "...",
        "%2F",
        "plain.weight",
        "Zeta",
        "é.ünïcode",
        "_under",
        "~tilde",
    ];
    let tensors: Vec<T> = tensor_names
        .iter()
        .enumerate()
        .map(|(i, n)| u8t(n, 3 + i, i as u64 + 1))
        .collect();
    write_safetensors(&src, &tensors, Some(&[("format", "pt")]));
    let (m, _) = mount(&src, "");

    let got = listing(&m.dir);
    assert_eq!(got, byte_sorted(&got), "readdir order is not byte order");
    let mut want: Vec<String> = tensor_names.iter().map(|n| escaped(n)).collect();
    want.push("__metadata__".into());
    let want: HashSet<Vec<u8>> = want.into_iter().map(String::into_bytes).collect();
    assert_eq!(got.iter().cloned().collect::<HashSet<_>>(), want);
    assert_eq!(got.len(), tensor_names.len() + 1);

    // The names themselves are the rule tests' (src/namespace/rules_tests.rs); here, that each
    // file serves its tensor's bytes and name through the kernel.
    for t in &tensors {
        let p = m.path(escaped(t.name));
        assert_eq!(fs::read(&p).unwrap(), t.data, "bytes of {}", p.display());
        assert_eq!(
            getxattr(&p, "user.safetensors.name").as_deref(),
            Some(t.name),
            "user.safetensors.name of {}",
            p.display()
        );
    }
    // `ls -f` (readdir order, nothing sorted by ls) shows the same order.
    let out = Command::new("ls").arg("-f").arg(&m.dir).output().unwrap();
    assert!(out.status.success());
    let ls: Vec<&[u8]> = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && *l != b"." && *l != b"..")
        .collect();
    // `ls -f` prints names with a newline escaped only on a terminal; none of ours has one.
    assert_eq!(
        ls,
        got.iter().map(|v| v.as_slice()).collect::<Vec<_>>(),
        "ls -f order"
    );
}

// --------------------------------------------------------------------------- directory source

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn directory_source_mirrors_files_subdirs_and_adds_tensor_dirs() {
    require_fuse();
    let tmp = TempDir::new("dir");
    let s = tmp.join("src");
    fs::create_dir_all(s.join("unet")).unwrap();
    fs::create_dir_all(s.join("text_encoder/nested/deeper")).unwrap();
    fs::create_dir_all(s.join("text_encoder_2")).unwrap();
    fs::create_dir_all(s.join("empty_dir")).unwrap();
    fs::write(s.join("config.json"), b"{\"model_type\": \"x\"}\n").unwrap();
    fs::write(s.join("model_index.json"), bytes(777, 9)).unwrap();
    fs::write(s.join("unet/config.json"), b"{\"unet\": true}").unwrap();
    fs::write(s.join("text_encoder/nested/deeper/notes.txt"), b"deep\n").unwrap();

    let root_t = [u8t("lm_head.weight", 16, 1), u8t("embed", 9, 2)];
    write_safetensors(
        &s.join("model.safetensors"),
        &root_t,
        Some(&[("format", "pt")]),
    );
    let unet_t = [u8t("conv_in.weight", 33, 3), u8t("down/0", 5, 4)];
    write_safetensors(
        &s.join("unet/diffusion_pytorch_model.safetensors"),
        &unet_t,
        Some(&[("format", "pt"), ("extra", "k")]),
    );
    let te_t = [u8t("text_model.embeddings", 12, 5)];
    write_safetensors(&s.join("text_encoder/model.safetensors"), &te_t, None);
    // A sharded set inside a subfolder.
    let sh1 = [u8t("enc.a", 10, 6), u8t("enc.b", 11, 7)];
    let sh2 = [u8t("enc.c", 12, 8)];
    write_safetensors(
        &s.join("text_encoder_2/model-00001-of-00002.safetensors"),
        &sh1,
        Some(&[("format", "pt")]),
    );
    write_safetensors(
        &s.join("text_encoder_2/model-00002-of-00002.safetensors"),
        &sh2,
        Some(&[("format", "pt")]),
    );
    write_index_of(
        &s.join("text_encoder_2/model.safetensors.index.json"),
        Some(serde_json::json!({"total_size": 33})),
        &[
            ("enc.a", "model-00001-of-00002.safetensors"),
            ("enc.b", "model-00001-of-00002.safetensors"),
            ("enc.c", "model-00002-of-00002.safetensors"),
        ],
    );

    let (m, _) = mount(&s, "");
    assert_eq!(
        names(&m.dir),
        [
            "config.json",
            "empty_dir",
            "model.safetensors",
            "model.tensors",
            "model_index.json",
            "text_encoder",
            "text_encoder_2",
            "unet"
        ]
    );
    assert_eq!(
        names(&m.path("unet")),
        [
            "config.json",
            "diffusion_pytorch_model.safetensors",
            "diffusion_pytorch_model.tensors"
        ]
    );
    assert_eq!(
        names(&m.path("text_encoder")),
        ["model.safetensors", "model.tensors", "nested"]
    );
    assert_eq!(names(&m.path("text_encoder/nested")), ["deeper"]);
    assert_eq!(names(&m.path("text_encoder/nested/deeper")), ["notes.txt"]);
    assert_eq!(names(&m.path("empty_dir")), Vec::<String>::new());
    assert_eq!(
        names(&m.path("text_encoder_2")),
        [
            "model-00001-of-00002.safetensors",
            "model-00001-of-00002.tensors",
            "model-00002-of-00002.safetensors",
            "model-00002-of-00002.tensors",
            "model.safetensors.index.json",
            "model.tensors"
        ]
    );

    // Every regular file byte for byte, the .safetensors files included.
    for rel in [
        "config.json",
        "model_index.json",
        "model.safetensors",
        "unet/config.json",
        "unet/diffusion_pytorch_model.safetensors",
        "text_encoder/model.safetensors",
        "text_encoder/nested/deeper/notes.txt",
        "text_encoder_2/model-00001-of-00002.safetensors",
        "text_encoder_2/model-00002-of-00002.safetensors",
        "text_encoder_2/model.safetensors.index.json",
    ] {
        assert_eq!(
            fs::read(m.path(rel)).unwrap(),
            fs::read(s.join(rel)).unwrap(),
            "mirror of {rel}"
        );
        assert_eq!(stat_c(&m.path(rel), "%F"), "regular file", "{rel}");
    }

    check_tensor_dir(
        &m.path("model.tensors"),
        &root_t.iter().collect::<Vec<_>>(),
        &s.join("model.safetensors"),
        true,
    );
    check_tensor_dir(
        &m.path("unet/diffusion_pytorch_model.tensors"),
        &unet_t.iter().collect::<Vec<_>>(),
        &s.join("unet/diffusion_pytorch_model.safetensors"),
        true,
    );
    check_tensor_dir(
        &m.path("text_encoder/model.tensors"),
        &te_t.iter().collect::<Vec<_>>(),
        &s.join("text_encoder/model.safetensors"),
        false,
    );
    // The merged set in the subfolder, each tensor from its own shard.
    let merged = m.path("text_encoder_2/model.tensors");
    let mut want: Vec<String> = ["enc.a", "enc.b", "enc.c", "__metadata__"]
        .map(String::from)
        .to_vec();
    want.sort();
    assert_eq!(names(&merged), want);
    for (t, shard) in sh1
        .iter()
        .map(|t| (t, "model-00001-of-00002.safetensors"))
        .chain(sh2.iter().map(|t| (t, "model-00002-of-00002.safetensors")))
    {
        let f = merged.join(t.name);
        assert_eq!(fs::read(&f).unwrap(), t.data, "{}", t.name);
        assert_eq!(
            getxattr(&f, "user.safetensors.source"),
            Some(canonical(&s.join("text_encoder_2").join(shard)))
        );
    }

    // Per-file directories carry the header metadata as xattrs.
    assert_eq!(
        getxattr(&m.path("model.tensors"), "user.safetensors.metadata.format").as_deref(),
        Some("pt")
    );
    let unet_dir = m.path("unet/diffusion_pytorch_model.tensors");
    assert_eq!(
        getxattr(&unet_dir, "user.safetensors.metadata.format").as_deref(),
        Some("pt")
    );
    assert_eq!(
        getxattr(&unet_dir, "user.safetensors.metadata.extra").as_deref(),
        Some("k")
    );
    assert_eq!(
        xattr_names(&unet_dir),
        [
            "user.safetensors.metadata.extra",
            "user.safetensors.metadata.format"
        ]
    );
    assert_eq!(
        xattr_names(&m.path("text_encoder/model.tensors")),
        Vec::<String>::new()
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_safetensors_file_also_reached_under_other_names_still_gets_its_tensor_dir() {
    require_fuse();
    let tmp = TempDir::new("alias");
    let s = tmp.join("src");
    fs::create_dir(&s).unwrap();
    let t = [u8t("w", 9, 1), u8t("v", 4, 2)];
    write_safetensors(&s.join("model.safetensors"), &t, None);
    // Names that sort before it and are not `.safetensors`, and a second `.safetensors` name.
    fs::hard_link(s.join("model.safetensors"), s.join("a-hardlink.bin")).unwrap();
    std::os::unix::fs::symlink("model.safetensors", s.join("b-link.dat")).unwrap();
    fs::hard_link(s.join("model.safetensors"), s.join("other.safetensors")).unwrap();
    let (m, _) = mount(&s, "");
    assert_eq!(
        names(&m.dir),
        [
            "a-hardlink.bin",
            "b-link.dat",
            "model.safetensors",
            "model.tensors",
            "other.safetensors",
            "other.tensors"
        ]
    );
    let whole = fs::read(s.join("model.safetensors")).unwrap();
    for f in [
        "a-hardlink.bin",
        "b-link.dat",
        "model.safetensors",
        "other.safetensors",
    ] {
        assert_eq!(fs::read(m.path(f)).unwrap(), whole, "mirror of {f}");
        assert_eq!(getxattr(&m.path(f), "user.safetensors.error"), None, "{f}");
    }
    for d in ["model.tensors", "other.tensors"] {
        let mut want = vec!["v", "w"];
        want.sort();
        assert_eq!(names(&m.path(d)), want, "{d}");
        for t in &t {
            assert_eq!(
                fs::read(m.path(d).join(t.name)).unwrap(),
                t.data,
                "{d}/{}",
                t.name
            );
        }
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn sharded_set_with_odd_shard_names_is_merged_and_served_from_each_shard() {
    require_fuse();
    let tmp = TempDir::new("sharded");
    let s = tmp.join("src");
    fs::create_dir(&s).unwrap();
    let a = [u8t("model.embed", 40, 1), u8t("a/b", 7, 2), u8t("z", 3, 3)];
    let b = [
        u8t("model.layers.0.w", 64, 4),
        u8t("100%", 5, 5),
        u8t("..", 2, 6),
    ];
    let (sa, sb) = (
        "model-1-of-2.safetensors",
        "model_00002-of-00072.safetensors",
    );
    write_safetensors(&s.join(sa), &a, Some(&[("format", "pt")]));
    write_safetensors(&s.join(sb), &b, Some(&[("format", "pt")]));
    let total: usize = a.iter().chain(&b).map(|t| t.data.len()).sum();
    let index_meta =
        serde_json::json!({"total_size": total, "note": "hi", "nested": {"k": [1, 2]}});
    let mut map: Vec<(&str, &str)> = a.iter().map(|t| (t.name, sa)).collect();
    map.extend(b.iter().map(|t| (t.name, sb)));
    write_index_of(
        &s.join("model.safetensors.index.json"),
        Some(index_meta.clone()),
        &map,
    );

    let (m, _) = mount(&s, "");
    assert_eq!(
        names(&m.dir),
        [
            "model-1-of-2.safetensors",
            "model-1-of-2.tensors",
            "model.safetensors.index.json",
            "model.tensors",
            "model_00002-of-00072.safetensors",
            "model_00002-of-00072.tensors",
        ]
    );
    let merged = m.path("model.tensors");
    let mut want: Vec<Vec<u8>> = a
        .iter()
        .chain(&b)
        .map(|t| escaped(t.name).into_bytes())
        .collect();
    want.push(b"__metadata__".to_vec());
    want.sort();
    assert_eq!(listing(&merged), want, "merged listing in byte order");
    for (t, shard) in a.iter().map(|t| (t, sa)).chain(b.iter().map(|t| (t, sb))) {
        let f = merged.join(escaped(t.name));
        assert_eq!(fs::read(&f).unwrap(), t.data, "{}", t.name);
        assert_eq!(
            getxattr(&f, "user.safetensors.source"),
            Some(canonical(&s.join(shard))),
            "source of {}",
            t.name
        );
        assert_eq!(
            getxattr(&f, "user.safetensors.name").as_deref(),
            Some(t.name)
        );
    }
    // __metadata__ of the merged dir is the index's metadata.
    let text = fs::read_to_string(merged.join("__metadata__")).unwrap();
    assert!(text.ends_with('\n'));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        index_meta
    );
    assert_eq!(
        getxattr(&merged, "user.safetensors.metadata.total_size"),
        Some(total.to_string())
    );
    assert_eq!(
        getxattr(&merged, "user.safetensors.metadata.note").as_deref(),
        Some("hi")
    );
    assert_eq!(
        getxattr(&merged, "user.safetensors.metadata.nested").as_deref(),
        Some(r#"{"k":[1,2]}"#)
    );
    // The per-shard dirs hold only their own tensors.
    check_tensor_dir(
        &m.path("model-1-of-2.tensors"),
        &a.iter().collect::<Vec<_>>(),
        &s.join(sa),
        true,
    );
    check_tensor_dir(
        &m.path("model_00002-of-00072.tensors"),
        &b.iter().collect::<Vec<_>>(),
        &s.join(sb),
        true,
    );
}

// ---------------------------------------------------------------------------- invalid sources

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn invalid_safetensors_in_a_directory_is_mirrored_with_its_error() {
    require_fuse();
    let tmp = TempDir::new("invalid");
    let s = tmp.join("src");
    fs::create_dir(&s).unwrap();
    // Header promises 100 bytes of data, 50 are there.
    write_raw(
        &s.join("trunc.safetensors"),
        r#"{"w":{"dtype":"U8","shape":[100],"data_offsets":[0,100]}}"#,
        &bytes(50, 1),
    );
    // A length prefix far over the 100 MB header limit, then junk.
    let mut garbage = vec![0xff; 8];
    garbage.extend(bytes(100, 2));
    fs::write(s.join("garbage.safetensors"), &garbage).unwrap();
    let good = [u8t("ok", 4, 3)];
    write_safetensors(&s.join("good.safetensors"), &good, None);

    let (m, err) = mount(&s, "");
    assert_eq!(
        names(&m.dir),
        [
            "garbage.safetensors",
            "good.safetensors",
            "good.tensors",
            "trunc.safetensors"
        ]
    );
    for (f, rule) in [
        ("trunc.safetensors", "MetadataIncompleteBuffer"),
        ("garbage.safetensors", "HeaderTooLarge"),
    ] {
        assert_eq!(
            fs::read(m.path(f)).unwrap(),
            fs::read(s.join(f)).unwrap(),
            "mirror of {f}"
        );
        let e = getxattr(&m.path(f), "user.safetensors.error")
            .unwrap_or_else(|| panic!("{f} has no user.safetensors.error"));
        assert!(e.contains(rule), "{f}: error {e:?} should name {rule}");
        assert!(err.contains(f), "stderr should warn about {f}: {err:?}");
    }
    assert_eq!(
        getxattr(&m.path("good.safetensors"), "user.safetensors.error"),
        None
    );
    drop(m);

    let (m, out) = Mounted::try_new(&s, "strict");
    assert!(m.is_none(), "strict mount of invalid files mounted");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.starts_with("tensormount: "), "{err:?}");
    assert!(
        err.contains("garbage.safetensors") || err.contains("trunc.safetensors"),
        "{err:?}"
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn invalid_single_file_source_fails_the_mount() {
    require_fuse();
    let tmp = TempDir::new("badsingle");
    let garbage = tmp.join("bad.safetensors");
    let mut b = vec![0xff; 8];
    b.extend(bytes(64, 1));
    fs::write(&garbage, b).unwrap();
    let trunc = tmp.join("short.safetensors");
    write_raw(
        &trunc,
        r#"{"w":{"dtype":"F32","shape":[10],"data_offsets":[0,40]}}"#,
        &bytes(20, 2),
    );
    for (path, file, rule) in [
        (&garbage, "bad.safetensors", "HeaderTooLarge"),
        (&trunc, "short.safetensors", "MetadataIncompleteBuffer"),
    ] {
        let (m, out) = Mounted::try_new(path, "");
        assert!(m.is_none(), "{file}: mounted");
        assert!(!out.status.success(), "{file}: exit 0");
        let err = stderr(&out);
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{file}: stderr is not one line: {err:?}"
        );
        assert!(err.starts_with("tensormount: "), "{err:?}");
        assert!(err.contains(file), "{file}: stderr {err:?}");
        assert!(err.contains(rule), "{file}: stderr {err:?} lacks {rule}");
    }
}

// ------------------------------------------------------------------------------------ symlinks

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn hugging_face_cache_snapshot_links_are_followed() {
    require_fuse();
    let tmp = TempDir::new("hf");
    let repo = tmp.join("models--org--name");
    let blobs = repo.join("blobs");
    let snap = repo.join("snapshots/0123456789abcdef");
    fs::create_dir_all(&blobs).unwrap();
    fs::create_dir_all(snap.join("unet")).unwrap();
    let model_t = [u8t("w", 20, 1), u8t("b", 4, 2)];
    let unet_t = [u8t("conv", 12, 3)];
    let (sha_m, sha_c, sha_u) = ("aaaa1111", "bbbb2222", "cccc3333");
    write_safetensors(&blobs.join(sha_m), &model_t, Some(&[("format", "pt")]));
    fs::write(blobs.join(sha_c), b"{\"hf\": 1}\n").unwrap();
    write_safetensors(&blobs.join(sha_u), &unet_t, None);
    std::os::unix::fs::symlink(
        format!("../../blobs/{sha_m}"),
        snap.join("model.safetensors"),
    )
    .unwrap();
    std::os::unix::fs::symlink(format!("../../blobs/{sha_c}"), snap.join("config.json")).unwrap();
    std::os::unix::fs::symlink(
        format!("../../../blobs/{sha_u}"),
        snap.join("unet/x.safetensors"),
    )
    .unwrap();

    let (m, _) = mount(&snap, "");
    assert_eq!(
        names(&m.dir),
        ["config.json", "model.safetensors", "model.tensors", "unet"]
    );
    assert_eq!(names(&m.path("unet")), ["x.safetensors", "x.tensors"]);
    assert_eq!(stat_c(&m.path("model.safetensors"), "%F"), "regular file");
    assert_eq!(
        fs::read(m.path("model.safetensors")).unwrap(),
        fs::read(blobs.join(sha_m)).unwrap()
    );
    assert_eq!(fs::read(m.path("config.json")).unwrap(), b"{\"hf\": 1}\n");
    check_tensor_dir(
        &m.path("model.tensors"),
        &model_t.iter().collect::<Vec<_>>(),
        &blobs.join(sha_m),
        true,
    );
    check_tensor_dir(
        &m.path("unet/x.tensors"),
        &unet_t.iter().collect::<Vec<_>>(),
        &blobs.join(sha_u),
        false,
    );
    drop(m);

    // A single-file SOURCE that is itself a link is followed too.
    let (m, _) = mount(&snap.join("model.safetensors"), "");
    check_tensor_dir(
        &m.dir,
        &model_t.iter().collect::<Vec<_>>(),
        &blobs.join(sha_m),
        true,
    );
}

/// A cache laid out as `huggingface_hub` writes one: blobs named by hash, revisions of links into
/// them (`../../blobs/HASH`, one level more in a subfolder), refs, a sharded revision and a second
/// revision sharing a blob.
fn write_hf_cache(cache: &Path) -> Vec<(&'static str, Vec<T<'static>>)> {
    let repo = cache.join("models--org--model");
    let blobs = repo.join("blobs");
    let (rev1, rev2) = (
        "0123456789abcdef0123456789abcdef01234567",
        "fedcba9876543210fedcba9876543210fedcba98",
    );
    for d in [
        blobs.clone(),
        repo.join("refs"),
        repo.join("snapshots").join(rev1).join("unet"),
        repo.join("snapshots").join(rev2),
    ] {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(repo.join("refs/main"), rev2).unwrap();
    fs::write(repo.join("refs/v1"), rev1).unwrap();
    let files: Vec<(&str, Vec<T<'static>>)> = vec![
        ("model.safetensors", vec![u8t("w", 20, 1), u8t("b", 4, 2)]),
        ("unet/diffusion.safetensors", vec![u8t("conv", 12, 3)]),
        ("big-00001-of-00002.safetensors", vec![u8t("x", 8, 4)]),
        ("big-00002-of-00002.safetensors", vec![u8t("y", 8, 5)]),
    ];
    let link = |rev: &str, file: &str, blob: &str| {
        let up = "../".repeat(2 + file.matches('/').count());
        let at = repo.join("snapshots").join(rev).join(file);
        std::os::unix::fs::symlink(format!("{up}blobs/{blob}"), at).unwrap();
    };
    for (i, (file, tensors)) in files.iter().enumerate() {
        let blob = format!("{:040x}", i + 1);
        write_safetensors(&blobs.join(&blob), tensors, Some(&[("format", "pt")]));
        link(rev1, file, &blob);
    }
    let index = r#"{"metadata":{"total_size":16},"weight_map":{"x":"big-00001-of-00002.safetensors","y":"big-00002-of-00002.safetensors"}}"#;
    fs::write(blobs.join("index0"), index).unwrap();
    link(rev1, "big.safetensors.index.json", "index0");
    fs::write(blobs.join("config0"), b"{\"hf\": 1}\n").unwrap();
    link(rev1, "config.json", "config0");
    // The second revision keeps the model and changes the config.
    link(rev2, "model.safetensors", &format!("{:040x}", 1));
    fs::write(blobs.join("config1"), b"{\"hf\": 2}\n").unwrap();
    link(rev2, "config.json", "config1");
    files
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn hugging_face_cache_links_stay_links() {
    require_fuse();
    let py = python();
    require_module(&py, "huggingface_hub");
    let tmp = TempDir::new("hfcache");
    let cache = tmp.join("hub");
    let files = write_hf_cache(&cache);
    let (m, err) = mount(&cache, "");
    assert!(err.is_empty(), "stderr: {err}");

    // huggingface_hub sees the same cache through the mount: the same repos, revisions, refs,
    // files, blobs and size on disk, and resolves the same files offline, byte for byte.
    let repo_id = "org/model";
    let on_source = oracle(&py, &["hf-cache", cache.to_str().unwrap(), repo_id]);
    let on_mount = oracle(&py, &["hf-cache", m.dir.to_str().unwrap(), repo_id]);
    assert_eq!(
        on_mount, on_source,
        "huggingface_hub on the mount and on the source"
    );
    let parsed: serde_json::Value = serde_json::from_str(&on_source).unwrap();
    assert_eq!(
        parsed["repos"][repo_id]["revisions"]
            .as_object()
            .map(|r| r.len()),
        Some(2),
        "{on_source}"
    );

    // Each link is the same link, and the tensors of the file it leads to sit beside it.
    let rev1 = "models--org--model/snapshots/0123456789abcdef0123456789abcdef01234567";
    for (file, tensors) in &files {
        let at = format!("{rev1}/{file}");
        assert_eq!(stat_c(&m.path(&at), "%F"), "symbolic link", "{at}");
        assert_eq!(
            fs::read_link(m.path(&at)).unwrap(),
            fs::read_link(cache.join(&at)).unwrap(),
            "{at}"
        );
        let blob = fs::canonicalize(cache.join(&at)).unwrap();
        let dir = at.strip_suffix(".safetensors").unwrap().to_string() + ".tensors";
        check_tensor_dir(
            &m.path(&dir),
            &tensors.iter().collect::<Vec<_>>(),
            &blob,
            true,
        );
    }
    // The sharded set is merged through its linked index.
    assert_eq!(
        names(&m.path(format!("{rev1}/big.tensors"))),
        ["__metadata__", "x", "y"]
    );
    assert_eq!(
        fs::read(m.path(format!("{rev1}/big.tensors/y"))).unwrap(),
        files[3].1[0].data
    );
    // The snapshots hold links only, as on the source: `du`, `cp -a` and `scan_cache_dir` see
    // each blob once.
    let count = |dir: &Path, kind: &str| {
        let out = Command::new("find")
            .arg(dir.join("models--org--model/snapshots"))
            .args([
                "-name",
                "*.tensors",
                "-prune",
                "-o",
                "-type",
                kind,
                "-print",
            ])
            .output()
            .unwrap();
        stdout(&out).lines().count()
    };
    assert_eq!(
        count(&m.dir, "f"),
        0,
        "regular files in the mounted snapshots"
    );
    assert_eq!(count(&m.dir, "l"), count(&cache, "l"));
    assert_eq!(count(&cache, "l"), 8);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn links_leading_out_of_source_are_followed_and_links_inside_kept() {
    require_fuse();
    let tmp = TempDir::new("links");
    let s = tmp.join("src");
    let outside = tmp.join("outside");
    fs::create_dir_all(s.join("real")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    let t = [u8t("w", 6, 1)];
    write_safetensors(&s.join("real/a.safetensors"), &t, None);
    write_safetensors(&outside.join("o.safetensors"), &t, None);
    std::os::unix::fs::symlink("real", s.join("l1")).unwrap();
    std::os::unix::fs::symlink(s.join("real"), s.join("l2")).unwrap();
    std::os::unix::fs::symlink("../outside", s.join("out")).unwrap();
    std::os::unix::fs::symlink("real/a.safetensors", s.join("b.safetensors")).unwrap();
    std::os::unix::fs::symlink("nowhere.safetensors", s.join("dangling-link")).unwrap();
    std::os::unix::fs::symlink(".", s.join("cycle-self")).unwrap();
    std::os::unix::fs::symlink("..", s.join("real/cycle-up")).unwrap();
    std::os::unix::fs::symlink(&s, s.join("real/cycle-abs")).unwrap();

    let start = Instant::now();
    let (m, err) = mount(&s, "");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(
        names(&m.dir),
        [
            "b.safetensors",
            "b.tensors",
            "cycle-self",
            "l1",
            "l2",
            "out",
            "real"
        ]
    );
    // Relative links that stay inside SOURCE are links; the rest are what they lead to.
    for (path, kind) in [
        ("l1", "symbolic link"),
        ("cycle-self", "symbolic link"),
        ("real/cycle-up", "symbolic link"),
        ("b.safetensors", "symbolic link"),
        ("l2", "directory"),
        ("out", "directory"),
    ] {
        assert_eq!(stat_c(&m.path(path), "%F"), kind, "{path}");
    }
    assert_eq!(fs::read_link(m.path("l1")).unwrap(), Path::new("real"));
    assert_eq!(
        fs::read(m.path("b.tensors/w")).unwrap(),
        t[0].data,
        "b.tensors beside the link"
    );
    assert_eq!(
        fs::read(m.path("b.safetensors")).unwrap(),
        fs::read(s.join("real/a.safetensors")).unwrap()
    );
    assert_eq!(names(&m.path("out")), ["o.safetensors", "o.tensors"]);
    // Through a kept link, the mount's own directory.
    assert_eq!(names(&m.path("l1")), names(&m.path("real")));
    assert_eq!(fs::read(m.path("l1/a.tensors/w")).unwrap(), t[0].data);
    // An absolute link back up is still a cycle, left out with a warning; so is a dangling one.
    assert_eq!(
        names(&m.path("real")),
        ["a.safetensors", "a.tensors", "cycle-up"]
    );
    for w in ["dangling-link", "cycle-abs"] {
        assert!(err.contains(w), "stderr should warn about {w}: {err:?}");
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn fifos_sockets_and_device_nodes_are_skipped_without_hanging() {
    require_fuse();
    let tmp = TempDir::new("special");
    let s = tmp.join("src");
    fs::create_dir(&s).unwrap();
    let t = [u8t("w", 6, 1)];
    write_safetensors(&s.join("m.safetensors"), &t, None);
    let fifo = cpath(&s.join("pipe.safetensors"));
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let fifo2 = cpath(&s.join("plainfifo"));
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo2.as_ptr(), 0o644) }, 0);
    let _sock = std::os::unix::net::UnixListener::bind(s.join("sock")).unwrap();
    let dev = cpath(&s.join("null-dev"));
    // SAFETY: valid C string; a character device like /dev/null (1, 3).
    let rc = unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 3)) };
    assert_eq!(
        rc,
        0,
        "mknod of a device node (needs root): {}",
        last_errno()
    );

    // Watch the FIFO and the device node for opens: the daemon may stat them, never open them.
    // SAFETY: plain inotify calls on valid C strings; the descriptor is closed below.
    let inotify = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    assert!(inotify >= 0, "inotify_init1: {}", last_errno());
    for w in [&fifo, &fifo2, &dev] {
        // SAFETY: valid descriptor and C string.
        let wd = unsafe {
            libc::inotify_add_watch(inotify, w.as_ptr(), libc::IN_OPEN | libc::IN_ACCESS)
        };
        assert!(wd >= 0, "inotify_add_watch {w:?}: {}", last_errno());
    }

    let (tx, rx) = std::sync::mpsc::channel();
    let s2 = s.clone();
    std::thread::spawn(move || {
        let r = Mounted::try_new(&s2, "");
        let _ = tx.send(r);
    });
    let (m, out) = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("mount hung on a FIFO, socket or device node");
    assert!(out.status.success(), "mount failed: {}", stderr(&out));
    let m = m.expect("mounted");
    assert_eq!(names(&m.dir), ["m.safetensors", "m.tensors"]);
    assert_eq!(fs::read(m.path("m.tensors/w")).unwrap(), t[0].data);
    let mut buf = [0u8; 4096];
    // SAFETY: reading into a local buffer from our own non-blocking inotify descriptor.
    let n = unsafe { libc::read(inotify, buf.as_mut_ptr().cast(), buf.len()) };
    let err = last_errno();
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(inotify) };
    assert!(
        n < 0 && err == libc::EAGAIN,
        "a FIFO or device node was opened or read during the mount ({n} bytes of inotify events)"
    );
}

// ---------------------------------------------------------------------------------- attributes

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn stat_shows_sizes_modes_owners_times_links_and_blocks() {
    require_fuse();
    let tmp = TempDir::new("attrs");
    let s = tmp.join("src");
    fs::create_dir_all(s.join("sub")).unwrap();
    let ro_t = [
        T {
            name: "w",
            dtype: "F32",
            shape: &[2, 3],
            data: bytes(24, 1),
        },
        u8t("big", 1000, 2),
        u8t("page", 512, 3),
    ];
    write_safetensors(&s.join("ro.safetensors"), &ro_t, None);
    write_safetensors(&s.join("exec.safetensors"), &[u8t("x", 3, 4)], None);
    write_safetensors(&s.join("other.safetensors"), &[u8t("y", 5, 5)], None);
    let ro = s.join("ro.safetensors");
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::chown(cpath(&ro).as_ptr(), 1234, 5678) }, 0);
    set_mode(&ro, 0o640);
    set_mode(&s.join("exec.safetensors"), 0o755);
    set_mode(&s.join("other.safetensors"), 0o604);
    set_mode(&s.join("sub"), 0o751);
    set_mode(&s, 0o775);
    let mtime = 981_173_106i64; // 2001-02-03 04:05:06 UTC
    let st = Command::new("touch")
        .arg("-d")
        .arg(format!("@{mtime}"))
        .arg(&ro)
        .status()
        .unwrap();
    assert!(st.success());
    let src_len = fs::metadata(&ro).unwrap().len();

    let (m, _) = mount(&s, "");
    let fmt = "%s %a %u %g %Y %h %b %F";
    let file = |size: u64, mode: &str, uid: u32, gid: u32, mtime: i64| {
        format!(
            "{size} {mode} {uid} {gid} {mtime} 1 {} regular file",
            size.div_ceil(512)
        )
    };
    for t in &ro_t {
        let p = m.path("ro.tensors").join(t.name);
        assert_eq!(
            stat_c(&p, fmt),
            file(t.data.len() as u64, "440", 1234, 5678, mtime),
            "{}",
            p.display()
        );
    }
    assert_eq!(
        stat_c(&m.path("ro.safetensors"), fmt),
        file(src_len, "440", 1234, 5678, mtime)
    );
    let exec = fs::metadata(s.join("exec.safetensors")).unwrap();
    assert_eq!(
        stat_c(&m.path("exec.safetensors"), "%a %u %g %Y"),
        format!("555 {} {} {}", exec.uid(), exec.gid(), exec.mtime())
    );
    assert_eq!(stat_c(&m.path("exec.tensors/x"), "%a %s"), "555 3");
    assert_eq!(stat_c(&m.path("other.tensors/y"), "%a %s"), "404 5");

    // Tensor dirs: r-x for whoever may read the source.
    assert_eq!(
        stat_c(&m.path("ro.tensors"), "%a %u %g %F %h"),
        "550 1234 5678 directory 2"
    );
    assert_eq!(stat_c(&m.path("other.tensors"), "%a %F"), "505 directory");
    assert_eq!(stat_c(&m.path("exec.tensors"), "%a %F"), "555 directory");
    // Mirrored dirs: the source's mode without write bits; nlink = 2 + subdirectories.
    assert_eq!(stat_c(&m.path("sub"), "%a %F %h"), "551 directory 2");
    // Root: sub, ro.tensors, exec.tensors, other.tensors.
    assert_eq!(stat_c(&m.dir, "%a %F %h"), "555 directory 6");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn inode_numbers_are_stable() {
    require_fuse();
    let tmp = TempDir::new("ino");
    let s = tmp.join("src");
    fs::create_dir_all(s.join("sub")).unwrap();
    write_safetensors(
        &s.join("m.safetensors"),
        &[u8t("a", 3, 1), u8t("b", 4, 2)],
        None,
    );
    fs::write(s.join("sub/f"), b"f").unwrap();
    let (m, _) = mount(&s, "");
    let paths = [
        "m.safetensors",
        "m.tensors",
        "m.tensors/a",
        "m.tensors/b",
        "sub",
        "sub/f",
    ];
    let first: Vec<String> = paths.iter().map(|p| stat_c(&m.path(p), "%i")).collect();
    let second: Vec<String> = paths.iter().map(|p| stat_c(&m.path(p), "%i")).collect();
    assert_eq!(first, second);
    let distinct: HashSet<&String> = first.iter().collect();
    assert_eq!(distinct.len(), first.len(), "inode numbers not distinct");
    // readdir's d_ino agrees with stat.
    for e in fs::read_dir(m.path("m.tensors")).unwrap() {
        let e = e.unwrap();
        use std::os::unix::fs::DirEntryExt;
        assert_eq!(
            e.ino().to_string(),
            stat_c(&e.path(), "%i"),
            "{}",
            e.path().display()
        );
    }
    // A fresh lookup: drop the kernel's dentries where allowed, and look up again in a second
    // mount of the same source.
    if fs::write("/proc/sys/vm/drop_caches", "2").is_ok() {
        let again: Vec<String> = paths.iter().map(|p| stat_c(&m.path(p), "%i")).collect();
        assert_eq!(first, again, "after dropping dentries");
    }
    let (m2, _) = mount(&s, "");
    let fresh: Vec<String> = paths.iter().map(|p| stat_c(&m2.path(p), "%i")).collect();
    assert_eq!(first, fresh, "after a fresh lookup in a second mount");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn statfs_reports_the_source_size_and_nothing_free() {
    require_fuse();
    let tmp = TempDir::new("statfs");
    let s = tmp.join("src");
    fs::create_dir_all(s.join("sub")).unwrap();
    write_safetensors(&s.join("m.safetensors"), &[u8t("a", 10_000, 1)], None);
    fs::write(s.join("sub/blob.bin"), bytes(50_000, 2)).unwrap();
    fs::write(s.join("c.json"), b"{}").unwrap();
    let total: u64 = ["m.safetensors", "sub/blob.bin", "c.json"]
        .iter()
        .map(|p| fs::metadata(s.join(p)).unwrap().len())
        .sum();
    let (m, _) = mount(&s, "");
    let out = Command::new("stat")
        .args(["-f", "-c", "%b %a %S"])
        .arg(&m.dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "stat -f: {}", stderr(&out));
    let v: Vec<u64> = stdout(&out)
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let (blocks, avail, bsize) = (v[0], v[1], v[2]);
    assert!(
        blocks * bsize >= total,
        "statfs total {} < source bytes {total}",
        blocks * bsize
    );
    assert_eq!(avail, 0, "available blocks");
    // `df` works too.
    let df = Command::new("df").arg(&m.dir).output().unwrap();
    assert!(df.status.success(), "df: {}", stderr(&df));
}

// -------------------------------------------------------------------------------------- xattrs

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn tensor_files_carry_exact_xattrs() {
    require_fuse();
    let tmp = TempDir::new("xattr");
    let src = tmp.join("x.safetensors");
    let tensors = [
        T {
            name: "w",
            dtype: "F32",
            shape: &[2, 3],
            data: bytes(24, 1),
        },
        T {
            name: "s",
            dtype: "F64",
            shape: &[],
            data: bytes(8, 2),
        },
        T {
            name: "layer/0.bias",
            dtype: "BF16",
            shape: &[4],
            data: bytes(8, 3),
        },
    ];
    write_safetensors(&src, &tensors, Some(&[("format", "pt")]));
    let start = data_start(&src);
    let abs = canonical(&src);
    let (m, _) = mount(&src, "");

    let mut begin = 0u64;
    for t in &tensors {
        let end = begin + t.data.len() as u64;
        let f = m.path(escaped(t.name));
        let shape = format!(
            "[{}]",
            t.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let want = [
            ("user.safetensors.data_offsets", format!("[{begin},{end}]")),
            ("user.safetensors.dtype", t.dtype.to_string()),
            ("user.safetensors.name", t.name.to_string()),
            ("user.safetensors.offset", (start + begin).to_string()),
            ("user.safetensors.shape", shape),
            ("user.safetensors.source", abs.clone()),
        ];
        for (k, v) in &want {
            assert_eq!(getxattr(&f, k).as_ref(), Some(v), "{k} of {}", t.name);
        }
        // `getfattr -d -m -` (every namespace) lists exactly those six.
        let out = Command::new("getfattr")
            .args(["-d", "-m", "-", "--absolute-names"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(out.status.success(), "getfattr -d: {}", stderr(&out));
        let mut listed: Vec<String> = stdout(&out)
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.split('=').next().unwrap().to_string())
            .collect();
        listed.sort();
        assert_eq!(
            listed,
            want.iter().map(|(k, _)| k.to_string()).collect::<Vec<_>>(),
            "getfattr -d of {}",
            t.name
        );
        // The bytes at `offset` in the source are the file's bytes.
        let src_bytes = fs::read(&src).unwrap();
        let at = (start + begin) as usize;
        assert_eq!(
            fs::read(&f).unwrap(),
            &src_bytes[at..at + t.data.len()],
            "{}",
            t.name
        );
        begin = end;
    }

    // A missing attribute.
    let out = Command::new("getfattr")
        .args(["-n", "user.nope"])
        .arg(m.path("w"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("No such attribute"),
        "{}",
        stderr(&out)
    );
    assert_eq!(xattr_raw(&m.path("w"), "user.nope"), Err(libc::ENODATA));
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn xattr_size_probe_and_erange() {
    require_fuse();
    let tmp = TempDir::new("erange");
    let src = tmp.join("x.safetensors");
    write_safetensors(
        &src,
        &[T {
            name: "w",
            dtype: "F32",
            shape: &[2, 3],
            data: bytes(24, 1),
        }],
        None,
    );
    let (m, _) = mount(&src, "");
    let f = m.path("w");
    // getxattr: size 0 gives the length, a short buffer ERANGE, an exact one the value.
    assert_eq!(
        getxattr_sized(&f, "user.safetensors.dtype", 0).map(|v| v.len()),
        Ok(3)
    );
    assert_eq!(
        getxattr_sized(&f, "user.safetensors.dtype", 2),
        Err(libc::ERANGE)
    );
    assert_eq!(
        getxattr_sized(&f, "user.safetensors.dtype", 3),
        Ok(b"F32".to_vec())
    );
    let src_len = canonical(&src).len();
    assert_eq!(
        getxattr_sized(&f, "user.safetensors.source", 0).map(|v| v.len()),
        Ok(src_len)
    );
    assert_eq!(
        getxattr_sized(&f, "user.safetensors.source", src_len - 1),
        Err(libc::ERANGE)
    );
    // listxattr likewise.
    let want_list: Vec<u8> = ["dtype", "shape", "data_offsets", "offset", "source", "name"]
        .iter()
        .flat_map(|k| format!("user.safetensors.{k}\0").into_bytes())
        .collect();
    let (len, _) = listxattr_sized(&f, 0).unwrap();
    assert_eq!(len as usize, want_list.len(), "listxattr size probe");
    assert_eq!(listxattr_sized(&f, len as usize - 1), Err(libc::ERANGE));
    let (_, list) = listxattr_sized(&f, len as usize).unwrap();
    let mut got: Vec<&[u8]> = list.split(|&b| b == 0).filter(|s| !s.is_empty()).collect();
    let mut want: Vec<&[u8]> = want_list
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn foreign_xattr_namespaces_are_eopnotsupp_and_user_xattrs_keep_working() {
    require_fuse();
    let tmp = TempDir::new("selinux");
    let src = tmp.join("x.safetensors");
    write_safetensors(&src, &[u8t("w", 4, 1)], None);
    let (m, _) = mount(&src, "");
    let f = m.path("w");
    assert_eq!(
        xattr_raw(&f, "security.selinux"),
        Err(libc::EOPNOTSUPP),
        "security.selinux"
    );
    assert_eq!(xattr_raw(&m.dir, "security.selinux"), Err(libc::EOPNOTSUPP));
    // Had the daemon answered ENOSYS, the kernel would now refuse every getxattr of the mount.
    assert_eq!(xattr_raw(&f, "user.safetensors.dtype"), Ok(b"U8".to_vec()));
    assert_eq!(getxattr(&f, "user.safetensors.name").as_deref(), Some("w"));
    assert_eq!(xattr_names(&f).len(), 6);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn huge_metadata_values_are_left_out_of_xattrs_but_kept_in_metadata_file() {
    require_fuse();
    let tmp = TempDir::new("hugemeta");
    let s = tmp.join("src");
    fs::create_dir(&s).unwrap();
    let huge = "h".repeat(70_000);
    let src = s.join("m.safetensors");
    write_safetensors(
        &src,
        &[u8t("w", 4, 1)],
        Some(&[("format", "pt"), ("huge", &huge)]),
    );
    let (single, _) = mount(&src, "");
    let (dir, _) = mount(&s, "");
    for d in [single.dir.clone(), dir.path("m.tensors")] {
        // The root also has the mount's own `user.tensormount.*`.
        let names: Vec<String> = xattr_names(&d)
            .into_iter()
            .filter(|n| n.starts_with("user.safetensors."))
            .collect();
        assert_eq!(
            names,
            ["user.safetensors.metadata.format"],
            "{}",
            d.display()
        );
        assert_eq!(
            xattr_raw(&d, "user.safetensors.metadata.format"),
            Ok(b"pt".to_vec())
        );
        assert_eq!(
            xattr_raw(&d, "user.safetensors.metadata.huge"),
            Err(libc::ENODATA),
            "{}",
            d.display()
        );
        let text = fs::read_to_string(d.join("__metadata__")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v, serde_json::json!({"format": "pt", "huge": huge}));
    }
}

// ----------------------------------------------------------------------------------- read-only

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn every_modification_fails_with_erofs_and_sources_stay_unchanged() {
    require_fuse();
    let tmp = TempDir::new("rofs");
    let s = tmp.join("src");
    fs::create_dir_all(s.join("sub")).unwrap();
    write_safetensors(
        &s.join("m.safetensors"),
        &[u8t("a", 30, 1), u8t("b", 40, 2)],
        Some(&[("format", "pt")]),
    );
    fs::write(s.join("sub/f.txt"), b"text\n").unwrap();
    // Each source file's bytes, mtime and mode.
    let state = || -> Vec<(Vec<u8>, i64, i64, u32)> {
        ["m.safetensors", "sub/f.txt"]
            .iter()
            .map(|f| {
                let md = fs::metadata(s.join(f)).unwrap();
                let bytes = fs::read(s.join(f)).unwrap();
                (bytes, md.mtime(), md.mtime_nsec(), md.mode())
            })
            .collect()
    };
    let before = state();

    let (m, _) = mount(&s, "");
    let tensor = m.path("m.tensors/a");
    let mirror = m.path("m.safetensors");
    let erofs = Some(libc::EROFS);
    let mut failures = Vec::new();
    let mut check = |what: &str, got: Option<i32>| {
        if got != erofs {
            failures.push(format!(
                "{what}: errno {got:?} ({}), want EROFS",
                got.map(|e| io::Error::from_raw_os_error(e).to_string())
                    .unwrap_or_default()
            ));
        }
    };
    let err_of = |r: io::Result<()>| r.err().map(|e| e.raw_os_error().unwrap_or(-1));
    for p in [
        &tensor,
        &mirror,
        &m.path("sub/f.txt"),
        &m.path("m.tensors/__metadata__"),
    ] {
        check(
            &format!("open for write {}", p.display()),
            err_of(fs::OpenOptions::new().write(true).open(p).map(drop)),
        );
        check(
            &format!("open for append {}", p.display()),
            err_of(fs::OpenOptions::new().append(true).open(p).map(drop)),
        );
    }
    check(
        "create",
        err_of(fs::File::create(m.path("new.txt")).map(drop)),
    );
    check(
        "create in tensor dir",
        err_of(fs::File::create(m.path("m.tensors/new")).map(drop)),
    );
    check("mkdir", err_of(fs::create_dir(m.path("newdir"))));
    check("unlink tensor", err_of(fs::remove_file(&tensor)));
    check("unlink mirror", err_of(fs::remove_file(&mirror)));
    check("rmdir", err_of(fs::remove_dir(m.path("sub"))));
    check(
        "rename",
        err_of(fs::rename(&tensor, m.path("m.tensors/renamed"))),
    );
    check("rename mirror", err_of(fs::rename(&mirror, m.path("x"))));
    // SAFETY: valid C string.
    let rc = unsafe { libc::truncate(cpath(&tensor).as_ptr(), 0) };
    check("truncate", (rc != 0).then(last_errno));
    // SAFETY: valid C string.
    let rc = unsafe { libc::truncate(cpath(&mirror).as_ptr(), 1) };
    check("truncate mirror", (rc != 0).then(last_errno));
    check(
        "chmod",
        err_of(fs::set_permissions(
            &tensor,
            fs::Permissions::from_mode(0o777),
        )),
    );
    check(
        "chmod dir",
        err_of(fs::set_permissions(
            &m.dir,
            fs::Permissions::from_mode(0o777),
        )),
    );
    check(
        "symlink",
        err_of(std::os::unix::fs::symlink("a", m.path("m.tensors/link"))),
    );
    check(
        "link",
        err_of(fs::hard_link(&tensor, m.path("m.tensors/hard"))),
    );
    // SAFETY: valid C strings; a plain setxattr.
    let rc = unsafe {
        libc::setxattr(
            cpath(&tensor).as_ptr(),
            c"user.x".as_ptr(),
            b"1".as_ptr().cast(),
            1,
            0,
        )
    };
    check("setxattr", (rc != 0).then(last_errno));
    // SAFETY: valid C strings.
    let rc =
        unsafe { libc::removexattr(cpath(&tensor).as_ptr(), c"user.safetensors.dtype".as_ptr()) };
    check("removexattr", (rc != 0).then(last_errno));

    // setfattr, the real tool.
    let out = Command::new("setfattr")
        .args(["-n", "user.x", "-v", "1"])
        .arg(&tensor)
        .output()
        .unwrap();
    if out.status.success() || !stderr(&out).contains("Read-only file system") {
        failures.push(format!(
            "setfattr: status {}, stderr {:?}",
            out.status,
            stderr(&out)
        ));
    }
    // Nothing changed: the mount still shows the same things.
    assert!(!m.path("new.txt").exists());
    assert!(!m.path("newdir").exists());
    assert!(tensor.exists() && mirror.exists());
    drop(m);

    assert!(before == state(), "source files changed");
    assert_eq!(
        names(&s),
        ["m.safetensors", "sub"].map(String::from).to_vec()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
