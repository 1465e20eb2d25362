//! What a single-file, directory or sharded-set source shows: mirrored files and directories,
//! `.tensors` directories, merged sets, and invalid safetensors files.

use super::{canonical, check_tensor_dir, listing, mount, names, stat_c, u8t, xattr_names};
use crate::common::*;

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::process::Command;

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

fn byte_sorted(v: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut s = v.to_vec();
    s.sort();
    s
}

fn write_index_of(path: &Path, metadata: Option<serde_json::Value>, map: &[(&str, &str)]) {
    write_index(path, metadata, map.iter().copied());
}

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
