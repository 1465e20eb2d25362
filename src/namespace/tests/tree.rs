//! The tree layout and NPY views: the paths `layout=tree` gives names, by the rules of `doc/layout.md`, every hostile name placed once, and NPY views beside the tensor files numpy can describe.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

use super::*;

/// Tensor names and the paths `layout=tree` gives them, by the rules of `doc/layout.md`.
const TREE: &[(&str, &str, &str)] = &[
    (
        "model.layers.0.self_attn.q_proj.weight",
        "model/layers/0/self_attn/q_proj/weight",
        "split on `.`",
    ),
    (
        "model.layers.0.mlp.down_proj.weight",
        "model/layers/0/mlp/down_proj/weight/__tensor__",
        "bitsandbytes: a tensor that is also a prefix is `__tensor__` in its directory",
    ),
    (
        "model.layers.0.mlp.down_proj.weight.absmax",
        "model/layers/0/mlp/down_proj/weight/absmax",
        "beside it",
    ),
    (
        "model.layers.0.mlp.down_proj.weight.quant_state.bitsandbytes__nf4",
        "model/layers/0/mlp/down_proj/weight/quant_state/bitsandbytes__nf4",
        "deeper",
    ),
    ("lm_head.weight", "lm_head/weight", "two parts"),
    ("top", "top", "one part: a file at the top"),
    (
        "a.b",
        "a/b/__tensor__",
        "a tensor that is also a prefix (of `a.b.c`): file/dir clash",
    ),
    ("a.b.c", "a/b/c", "beside it in `a/b/`"),
    (
        "a/b",
        "a%2Fb",
        "same parts as `a.b`, later in byte order: at the top, flat",
    ),
    (
        "x.y",
        "x/y",
        "of two names with the same parts, the first in byte order gets the path",
    ),
    (
        "x/y",
        "x%2Fy",
        "the other stays at the top under its flat name",
    ),
    ("c/d", "c/d", "`/` splits too"),
    ("n", "n/__tensor__", "a prefix of `n.m`"),
    (
        "n.__tensor__",
        "n/%5F_tensor__",
        "a part `__tensor__` is written %5F_tensor__",
    ),
    ("n.m", "n/m", ""),
    (
        "__metadata__.x",
        "%5F_metadata__/x",
        "a first part `__metadata__` is written %5F_metadata__",
    ),
    (
        "q.__metadata__",
        "q/__metadata__",
        "deeper down it is a part like any other",
    ),
    ("x..y", "x/%/y", "the empty part is `%`"),
    ("100%.v", "100%25/v", "`%` is %25 in a part"),
    (
        "",
        "%/__tensor__",
        "one empty part, `%`; a prefix of `.` and `.f`, so a directory",
    ),
    (".", "%/%", "two empty parts"),
    ("e.", "e/%", "a trailing `.` makes an empty last part"),
    (".f", "%/f", "a leading `.` makes an empty first part"),
];

#[test]
fn tree_layout_places_each_name_where_the_readme_says() {
    let deep64 = vec!["d"; 64].join(".");
    let deep65 = vec!["k"; 65].join(".");
    let long = format!("long.{}", "p".repeat(300));
    let mut table: Vec<(String, String, &str)> = TREE
        .iter()
        .map(|&(n, p, why)| (n.to_string(), p.to_string(), why))
        .collect();
    table.extend([
        (
            deep64.clone(),
            vec!["d"; 64].join("/"),
            "64 parts still nest",
        ),
        (
            deep65.clone(),
            deep65.clone(),
            "over 64 parts: at the top, flat",
        ),
        (
            long.clone(),
            format!(
                "long/{}%#{:016x}",
                "p".repeat(237),
                fnv1a_64(&"p".repeat(300))
            ),
            "a part over 255 bytes is shortened (the hash is of the part)",
        ),
    ]);
    let d = Dir::new("namespace");
    let src = d.join("m.safetensors");
    let t: Vec<(&str, usize, u8)> = table
        .iter()
        .enumerate()
        .map(|(i, r)| (r.0.as_str(), 1 + i, i as u8))
        .collect();
    write_u8(&src, &t);
    let s = build(&src, Layout::Tree, false);
    let got = files(&s, "");
    let want: BTreeMap<Vec<u8>, Option<(String, bool)>> = table
        .iter()
        .map(|(n, p, _)| (p.as_bytes().to_vec(), Some((n.clone(), false))))
        .collect();
    for (i, (name, path, why)) in table.iter().enumerate() {
        assert_eq!(
            got.get(path.as_bytes()),
            Some(&Some((name.clone(), false))),
            "{name:.30?} at {path:.40}: {why}"
        );
        assert_eq!(bytes(&s, path), vec![i as u8; i + 1], "{path:.40}");
    }
    assert_eq!(got, want, "nothing else in the tree");
    // Directories of the tree are generated and have the tensor directory's attributes.
    let root = node(&s, "").attr;
    for dir in [
        "a",
        "a/b",
        "model/layers/0/mlp/down_proj/weight",
        "%5F_metadata__",
    ] {
        let n = node(&s, dir);
        assert_eq!(n.dir().unwrap().origin, Origin::Generated, "{dir}");
        assert_eq!((n.attr.perm, n.attr.uid), (root.perm, root.uid), "{dir}");
    }
}

/// 64-bit FNV-1a, written out here from its definition.
pub(super) fn fnv1a_64(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
fn tree_layout_places_every_hostile_name_exactly_once() {
    let names: Vec<String> = [
        ".".repeat(600),
        "/".repeat(300),
        format!("{}x", "a.".repeat(64)),
        format!("{}x", "a/".repeat(63)),
        ".".into(),
        "..".into(),
        "/".into(),
        "./".into(),
        "".into(),
        "a.".into(),
        ".a".into(),
        "a".into(),
        "__tensor__".into(),
        "__tensor__.__tensor__".into(),
        "__tensor__.__tensor__.x".into(),
        "%5F_tensor__".into(),
        "%".into(),
        "%.%2F".into(),
        "x.npy".into(),
        "x".into(),
        "x/npy".into(),
        "é.ü/\n".into(),
        "__metadata__.__metadata__".into(),
        "__metadata__/x".into(),
        "__metadata__.x".into(),
    ]
    .into();
    let d = Dir::new("namespace");
    let src = d.join("m.safetensors");
    let t: Vec<(&str, usize, u8)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), 1 + i, i as u8))
        .collect();
    write_u8(&src, &t);
    for npy in [false, true] {
        let s = build(&src, Layout::Tree, npy);
        let got = files(&s, "");
        for (file, shows) in &got {
            let file = String::from_utf8_lossy(file);
            for part in file.split('/') {
                assert!(
                    !part.is_empty() && part.len() <= 255 && part != "." && part != "..",
                    "npy={npy}: invalid part {part:.40?} in {file:.80}"
                );
            }
            assert!(shows.is_some(), "npy={npy}: {file:.80} shows no tensor");
        }
        for (i, name) in names.iter().enumerate() {
            let tensor_files: Vec<&Vec<u8>> = got
                .iter()
                .filter(|(_, t)| t.as_ref() == Some(&(name.clone(), false)))
                .map(|(f, _)| f)
                .collect();
            assert_eq!(tensor_files.len(), 1, "npy={npy}: {name:.30?} once");
            let path = String::from_utf8(tensor_files[0].clone()).unwrap();
            assert_eq!(bytes(&s, &path), vec![i as u8; i + 1], "{name:.30?}");
            // U8 has a numpy dtype: each tensor gets one view, beside its file, unless a tensor
            // file has that name. In the tree no tensor file ends in `.npy`: parts hold no `.`.
            let views = got
                .values()
                .filter(|t| t.as_ref() == Some(&(name.clone(), true)))
                .count();
            assert_eq!(views, usize::from(npy), "npy={npy}: {name:.30?} views");
        }
    }
}

// ------------------------------------------------------------------------------- NPY views

#[test]
fn npy_views_sit_beside_tensor_files_that_numpy_can_describe() {
    let long = "v".repeat(252);
    let d = Dir::new("namespace");
    let src = d.join("m.safetensors");
    fs::write(
        &src,
        safetensors(
            &[
                ("w", "F32", &[3, 2], (0..24).collect()),
                ("bf", "BF16", &[2], vec![1; 4]),
                ("f8", "F8_E4M3", &[3], vec![2; 3]),
                ("x", "U8", &[2], vec![1, 2]),
                ("x.npy", "U8", &[1], vec![9]),
                ("s", "I64", &[], vec![7; 8]),
                ("e", "F16", &[0, 4], vec![]),
                ("a/b", "U8", &[1], vec![5]),
                (&long, "U8", &[1], vec![6]),
                ("n", "U8", &[1], vec![3]),
                ("n.m", "U8", &[1], vec![4]),
            ],
            None,
        ),
    )
    .unwrap();
    let short_view = format!("{}%#{:016x}.npy", "v".repeat(233), fnv1a_64(&long));
    // (layout, path, the tensor it shows and whether it is a view, why)
    type Row<'a> = (Layout, &'a str, Option<(&'a str, bool)>, &'a str);
    let table: &[Row] = &[
        (
            Layout::Flat,
            "w.npy",
            Some(("w", true)),
            "F32 has a numpy dtype",
        ),
        (Layout::Flat, "bf.npy", None, "BF16 has none"),
        (Layout::Flat, "f8.npy", None, "nor F8"),
        (
            Layout::Flat,
            "x.npy",
            Some(("x.npy", false)),
            "a tensor named x.npy wins",
        ),
        (
            Layout::Flat,
            "x.npy.npy",
            Some(("x.npy", true)),
            "and has its own view",
        ),
        (Layout::Flat, "s.npy", Some(("s", true)), "0-d"),
        (Layout::Flat, "e.npy", Some(("e", true)), "empty"),
        (
            Layout::Flat,
            "a%2Fb.npy",
            Some(("a/b", true)),
            "escaped, then `.npy`",
        ),
        (Layout::Flat, &long, Some((&long, false)), "252 bytes fits"),
        (
            Layout::Flat,
            &short_view,
            Some((&long, true)),
            "256 with `.npy`: shortened",
        ),
        (Layout::Tree, "w.npy", Some(("w", true)), ""),
        (
            Layout::Tree,
            "x/npy",
            Some(("x.npy", false)),
            "`x.npy` nests",
        ),
        (
            Layout::Tree,
            "x/__tensor__",
            Some(("x", false)),
            "`x` is its prefix",
        ),
        (
            Layout::Tree,
            "x/__tensor__.npy",
            Some(("x", true)),
            "its view beside it",
        ),
        (Layout::Tree, "x/npy.npy", Some(("x.npy", true)), ""),
        (Layout::Tree, "n/__tensor__.npy", Some(("n", true)), ""),
        (Layout::Tree, "n/m.npy", Some(("n.m", true)), ""),
        (Layout::Tree, "a/b.npy", Some(("a/b", true)), ""),
        (
            Layout::Tree,
            "bf.npy",
            None,
            "BF16 has none in the tree either",
        ),
    ];
    let flat = build(&src, Layout::Flat, true);
    let tree = build(&src, Layout::Tree, true);
    for &(layout, path, want, why) in table {
        let s = if layout == Layout::Flat { &flat } else { &tree };
        match want {
            None => assert_eq!(at(s, path), None, "{layout:?} {path}: {why}"),
            Some(w) => assert_eq!(tensor_of(s, path), Some(w), "{layout:?} {path:.40}: {why}"),
        }
    }
    // `x` has no view in the flat layout: the name is the tensor `x.npy`'s.
    let views: BTreeSet<String> = files(&flat, "")
        .into_values()
        .flatten()
        .filter(|t| t.1)
        .map(|t| t.0)
        .collect();
    let want: BTreeSet<String> = ["w", "x.npy", "s", "e", "a/b", &long, "n", "n.m"]
        .map(String::from)
        .into();
    assert_eq!(views, want, "the tensors with a view");

    // A view is numpy's header, then the tensor bytes; its xattrs are the tensor's.
    let view = at(&flat, "w.npy").unwrap();
    let raw = at(&flat, "w").unwrap();
    let header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }";
    let v = flat.read(view, 0, u32::MAX).unwrap();
    assert_eq!(v.len(), 128 + 24);
    assert_eq!(&v[..10], b"\x93NUMPY\x01\x00\x76\x00");
    assert_eq!(&v[10..10 + header.len()], header);
    assert_eq!(&v[128..], (0..24).collect::<Vec<u8>>());
    assert_eq!(node(&flat, "w.npy").attr.size, 152);
    assert_eq!(
        flat.xattr(view, "user.safetensors.npy_header_len"),
        Some(b"128".to_vec())
    );
    assert_eq!(flat.xattr(raw, "user.safetensors.npy_header_len"), None);
    for key in ["dtype", "shape", "data_offsets", "offset", "source", "name"] {
        let key = format!("user.safetensors.{key}");
        assert_eq!(flat.xattr(view, &key), flat.xattr(raw, &key), "{key}");
    }
}

// ------------------------------------------------------------------------ refresh of clashes

/// Whether the diff tells the kernel to forget `path` of the `old` snapshot: some prefix of it is
/// a name that no longer leads to the inode it led to.
fn forgotten(diff: &Diff, old: &Snapshot, path: &str) -> bool {
    let mut parent = ROOT;
    for name in path.split('/') {
        let Some(ino) = old.lookup(parent, name.as_bytes()) else {
            return false;
        };
        if diff
            .removed
            .iter()
            .any(|r| r.parent == parent && &*r.name == name.as_bytes() && r.ino == ino)
        {
            return true;
        }
        parent = ino;
    }
    false
}

#[test]
fn removing_the_unsharded_file_hands_its_directory_to_the_index_and_back() {
    let d = Dir::new("namespace");
    write_u8(&d.join("shard.safetensors"), &[("c", 1, 3)]);
    fs::write(
        d.join("model.safetensors.index.json"),
        index(&[("c", "shard.safetensors")]),
    )
    .unwrap();
    publish(&d.join("model.safetensors"), &st(&[("a", 2, 1)]));
    let mut m = Mount::new(d.path(), SETTLE);
    assert_eq!(names(&m.snap, "model.tensors"), ["a"]);
    let old = m.snap.clone();
    let a = at(&old, "model.tensors/a").unwrap();

    fs::remove_file(d.join("model.safetensors")).unwrap();
    let diff = m.rescan();
    // The index has a `metadata` object (empty): its merged directory has `__metadata__`.
    assert_eq!(
        names(&m.snap, "model.tensors"),
        ["__metadata__", "c"],
        "the index's set now"
    );
    assert_eq!(bytes(&m.snap, "model.tensors/c"), [3]);
    assert!(forgotten(&diff, &old, "model.safetensors"));
    assert!(
        forgotten(&diff, &old, "model.tensors/a"),
        "the tensor of the removed file"
    );
    assert!(diff.detached.contains(&a));
    assert!(
        !forgotten(&diff, &old, "shard.tensors/c"),
        "the shard is unchanged"
    );
    let old = m.snap.clone();
    let c = at(&old, "model.tensors/c").unwrap();

    publish(&d.join("model.safetensors"), &st(&[("b", 1, 7)]));
    let diff = m.rescan();
    assert_eq!(
        names(&m.snap, "model.tensors"),
        ["b"],
        "the unsharded file wins again"
    );
    assert!(forgotten(&diff, &old, "model.tensors/c"));
    assert_eq!(at(&m.snap, "shard.tensors/c"), at(&old, "shard.tensors/c"));
    assert!(diff.detached.contains(&c), "the merged file of c is gone");
}

#[test]
fn removing_a_real_entry_gives_the_name_to_the_generated_directory() {
    let d = Dir::new("namespace");
    publish(&d.join("a.safetensors"), &st(&[("w", 1, 1)]));
    fs::write(d.join("a.tensors"), b"real").unwrap();
    let mut m = Mount::new(d.path(), SETTLE);
    let real = at(&m.snap, "a.tensors").unwrap();
    assert_eq!(bytes(&m.snap, "a.tensors"), b"real");
    let old = m.snap.clone();

    fs::remove_file(d.join("a.tensors")).unwrap();
    let diff = m.rescan();
    assert_eq!(names(&m.snap, "a.tensors"), ["w"]);
    assert!(forgotten(&diff, &old, "a.tensors"));
    assert_eq!(removed_names(&diff), ["a.tensors"], "nothing else");
    assert!(diff.detached.contains(&real));
    assert_eq!(diff.changed_dirs, [ROOT]);
}

#[test]
fn a_file_turned_invalid_keeps_its_mirror_and_loses_its_directory() {
    let d = Dir::new("namespace");
    publish(&d.join("a.safetensors"), &st(&[("w", 1, 1)]));
    publish(&d.join("b.safetensors"), &st(&[("v", 1, 2)]));
    let mut m = Mount::new(d.path(), SETTLE);
    let b = (at(&m.snap, "b.safetensors"), at(&m.snap, "b.tensors/v"));

    publish(&d.join("a.safetensors"), b"not a safetensors file");
    let diff = m.rescan();
    assert_eq!(
        names(&m.snap, ""),
        ["a.safetensors", "b.safetensors", "b.tensors"]
    );
    assert_eq!(bytes(&m.snap, "a.safetensors"), b"not a safetensors file");
    let a = at(&m.snap, "a.safetensors").unwrap();
    assert!(m.snap.xattr(a, "user.safetensors.error").is_some());
    assert_eq!(removed_names(&diff), ["a.safetensors", "a.tensors"]);
    assert_eq!(
        (at(&m.snap, "b.safetensors"), at(&m.snap, "b.tensors/v")),
        b,
        "the other file keeps its inodes"
    );
}

#[test]
fn a_removed_subdirectory_is_reported_gone_with_everything_below_it() {
    let d = Dir::new("namespace");
    fs::create_dir_all(d.join("sub/deeper")).unwrap();
    publish(&d.join("sub/m.safetensors"), &st(&[("w", 1, 1)]));
    fs::write(d.join("sub/deeper/x.txt"), b"x").unwrap();
    fs::write(d.join("keep.txt"), b"k").unwrap();
    let mut m = Mount::new(d.path(), SETTLE);
    let sub = at(&m.snap, "sub").unwrap();
    let deeper = at(&m.snap, "sub/deeper").unwrap();
    let below: Vec<Ino> = [
        "sub/m.safetensors",
        "sub/m.tensors",
        "sub/m.tensors/w",
        "sub/deeper/x.txt",
    ]
    .iter()
    .map(|p| at(&m.snap, p).unwrap())
    .collect();

    fs::remove_dir_all(d.join("sub")).unwrap();
    let diff = m.rescan();
    assert_eq!(names(&m.snap, ""), ["keep.txt"]);
    assert_eq!(removed_names(&diff), ["sub"]);
    let mut gone = diff.gone_dirs.clone();
    gone.sort();
    assert_eq!(gone, [sub, deeper], "both directories of SOURCE left");
    for ino in below.iter().chain([&sub, &deeper]) {
        assert!(diff.detached.contains(ino), "{ino} detached");
    }
    assert!(diff.new_dirs.is_empty());
}
