//! The naming and layout rules, table-driven: file names in a tensor directory, real and generated
//! entries that want the same name, an unsharded file beside an index, the tree layout, NPY views,
//! `__metadata__`, and the refresh diff for the clashes. Each table row is a source, the expected
//! result written out from the documented rules (not from this code's output), and why.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;

use serde_json::{Value, json};

use super::*;

// ------------------------------------------------------------------------------- flat names

#[test]
fn tensor_files_are_named_by_the_documented_encoding_and_listed_in_byte_order() {
    // (tensor name, file name, rule): the escaping table, and names that show the byte order.
    let table: Vec<(&str, &str, &str)> = crate::namespace::names::ESCAPES
        .iter()
        .copied()
        .chain([
            ("Zeta", "Zeta", "unchanged; sorts before lower case"),
            ("~tilde", "~tilde", "unchanged; sorts after letters"),
            ("nul\0byte", "nul%00byte", "NUL is %00 inside a name too"),
        ])
        .collect();
    let d = Dir::new("namespace");
    let src = d.join("m.safetensors");
    let tensors: Vec<_> = table
        .iter()
        .enumerate()
        .map(|(i, (name, _, _))| u8t(name, i + 1, i as u8))
        .collect();
    let t: Vec<(&str, &str, &[usize], Vec<u8>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, *d, &s[..], b.clone()))
        .collect();
    fs::write(&src, safetensors(&t, Some(json!({"format": "pt"})))).unwrap();
    let s = build(&src, Layout::Flat, false);

    let mut want: Vec<Vec<u8>> = table.iter().map(|r| r.1.as_bytes().to_vec()).collect();
    want.push(b"__metadata__".to_vec());
    want.sort();
    assert_eq!(raw_names(&s, ""), want, "the listing, in byte order");
    for (i, &(name, file, why)) in table.iter().enumerate() {
        assert_eq!(tensor_of(&s, file), Some((name, false)), "{name:?}: {why}");
        assert_eq!(
            s.xattr(at(&s, file).unwrap(), "user.safetensors.name"),
            Some(name.as_bytes().to_vec()),
            "{name:?}: the original name"
        );
        assert_eq!(bytes(&s, file), vec![i as u8; i + 1], "{name:?}: its bytes");
    }
}

#[test]
fn thousands_of_long_names_each_get_one_short_unique_file() {
    let d = Dir::new("namespace");
    let src = d.join("long.safetensors");
    let prefix = "p".repeat(300);
    let mut all: Vec<String> = (0..2000).map(|i| format!("{prefix}{i:05}")).collect();
    let exact = "e".repeat(255);
    let grows = format!("{}/", "g".repeat(254));
    all.extend([exact.clone(), "o".repeat(256), grows.clone()]);
    let t: Vec<(&str, usize, u8)> = all.iter().map(|n| (n.as_str(), 1, 0)).collect();
    write_u8(&src, &t);
    let s = build(&src, Layout::Flat, false);

    let got = files(&s, "");
    assert_eq!(got.len(), all.len(), "one file per tensor");
    let mut seen = HashSet::new();
    for (file, tensor) in &got {
        let (name, _) = tensor.as_ref().unwrap();
        assert!(seen.insert(name.clone()), "{name:.20} has two files");
        assert!(file.len() <= 255, "{} bytes", file.len());
        let file = std::str::from_utf8(file).unwrap();
        if name == &exact {
            assert_eq!(file, exact, "exactly 255 bytes is kept");
        } else {
            // Every other name is over 255 bytes once escaped: prefix, `%#`, 16 hex digits.
            let (head, hash) = file.rsplit_once("%#").unwrap();
            assert!(hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(name.replace('/', "%2F").starts_with(head), "{file}");
        }
    }
    assert_eq!(seen.len(), all.len(), "every tensor has a file");
    let grown = format!("{}%#{:016x}", "g".repeat(237), fnv1a_64(&grows));
    assert_eq!(
        got[grown.as_bytes()],
        Some((grows, false)),
        "255 bytes grown by escaping"
    );
}

// --------------------------------------------------------------------- clashes in a directory

/// What a directory holds for a clash row: `(path, contents)`, where contents `None` is a
/// directory and `Some` a file's bytes.
type Files<'a> = &'a [(&'a str, Option<&'a [u8]>)];

#[test]
fn real_entries_win_and_an_unsharded_file_wins_over_an_index() {
    // (what the directory holds, safetensors files (name, tensors), indexes (name, weight map),
    // the root listing, what each NAME.tensors/ lists (or holds, for a real one), why)
    type Row<'a> = (
        Files<'a>,
        &'a [(&'a str, &'a [(&'a str, usize, u8)])],
        &'a [(&'a str, &'a [(&'a str, &'a str)])],
        &'a [&'a str],
        &'a [(&'a str, &'a [&'a str])],
        &'a str,
    );
    let rows: &[Row] = &[
        (
            &[
                ("model.tensors", None),
                ("model.tensors/inside.txt", Some(b"real dir\n")),
            ],
            &[("model.safetensors", &[("w", 4, 1)])],
            &[],
            &["model.safetensors", "model.tensors"],
            &[("model.tensors", &["inside.txt"])],
            "a real directory wins over the generated one",
        ),
        (
            &[("other.tensors", Some(b"real file\n"))],
            &[("other.safetensors", &[("v", 4, 2)])],
            &[],
            &["other.safetensors", "other.tensors"],
            &[],
            "a real file wins over the generated directory",
        ),
        (
            &[],
            &[
                ("model.safetensors", &[("a", 5, 1), ("b", 6, 2)]),
                ("model-00001-of-00001.safetensors", &[("c", 7, 3)]),
            ],
            &[(
                "model.safetensors.index.json",
                &[("c", "model-00001-of-00001.safetensors")],
            )],
            &[
                "model-00001-of-00001.safetensors",
                "model-00001-of-00001.tensors",
                "model.safetensors",
                "model.safetensors.index.json",
                "model.tensors",
            ],
            &[
                ("model.tensors", &["a", "b"]),
                ("model-00001-of-00001.tensors", &["c"]),
            ],
            "the unsharded file wins over the index for model.tensors",
        ),
        (
            &[("model.tensors", Some(b"x"))],
            &[("shard.safetensors", &[("c", 7, 3)])],
            &[(
                "model.safetensors.index.json",
                &[("c", "shard.safetensors")],
            )],
            &[
                "model.safetensors.index.json",
                "model.tensors",
                "shard.safetensors",
                "shard.tensors",
            ],
            &[("shard.tensors", &["c"])],
            "a real file wins over a merged set too",
        ),
        (
            &[],
            &[
                ("model.fp16-00001-of-00002.safetensors", &[("w1", 8, 1)]),
                ("model.fp16-00002-of-00002.safetensors", &[("w2", 6, 2)]),
            ],
            &[(
                "model.safetensors.index.fp16.json",
                &[
                    ("w1", "model.fp16-00001-of-00002.safetensors"),
                    ("w2", "model.fp16-00002-of-00002.safetensors"),
                ],
            )],
            &[
                "model.fp16-00001-of-00002.safetensors",
                "model.fp16-00001-of-00002.tensors",
                "model.fp16-00002-of-00002.safetensors",
                "model.fp16-00002-of-00002.tensors",
                "model.fp16.tensors",
                "model.safetensors.index.fp16.json",
            ],
            &[
                ("model.fp16.tensors", &["__metadata__", "w1", "w2"]),
                ("model.fp16-00001-of-00002.tensors", &["w1"]),
            ],
            "a variant index NAME.safetensors.index.VARIANT.json gets NAME.VARIANT.tensors",
        ),
        (
            &[],
            &[
                ("model.fp16.safetensors", &[("u", 3, 9)]),
                ("s.safetensors", &[("w1", 8, 1)]),
            ],
            &[(
                "model.safetensors.index.fp16.json",
                &[("w1", "s.safetensors")],
            )],
            &[
                "model.fp16.safetensors",
                "model.fp16.tensors",
                "model.safetensors.index.fp16.json",
                "s.safetensors",
                "s.tensors",
            ],
            &[("model.fp16.tensors", &["u"])],
            "an unsharded file wins over a variant index wanting its name",
        ),
        (
            &[],
            &[
                (
                    "model-1-of-2.safetensors",
                    &[("a/b", 7, 2), ("model.embed", 40, 1)],
                ),
                (
                    "model_00002-of-00072.safetensors",
                    &[("..", 2, 6), ("100%", 5, 5)],
                ),
            ],
            &[(
                "model.safetensors.index.json",
                &[
                    ("a/b", "model-1-of-2.safetensors"),
                    ("model.embed", "model-1-of-2.safetensors"),
                    ("..", "model_00002-of-00072.safetensors"),
                    ("100%", "model_00002-of-00072.safetensors"),
                ],
            )],
            &[
                "model-1-of-2.safetensors",
                "model-1-of-2.tensors",
                "model.safetensors.index.json",
                "model.tensors",
                "model_00002-of-00072.safetensors",
                "model_00002-of-00072.tensors",
            ],
            &[
                (
                    "model.tensors",
                    &["%2E%2E", "100%25", "__metadata__", "a%2Fb", "model.embed"],
                ),
                ("model_00002-of-00072.tensors", &["%2E%2E", "100%25"]),
            ],
            "shard names are taken from the index, never guessed; names escaped when merged",
        ),
    ];
    for &(real, files_st, indexes, root, dirs, why) in rows {
        let d = Dir::new("namespace");
        for &(path, contents) in real {
            match contents {
                None => fs::create_dir_all(d.join(path)).unwrap(),
                Some(b) => fs::write(d.join(path), b).unwrap(),
            }
        }
        for &(name, tensors) in files_st {
            write_u8(&d.join(name), tensors);
        }
        for &(name, map) in indexes {
            fs::write(d.join(name), index(map)).unwrap();
        }
        let s = build(d.path(), Layout::Flat, false);
        assert_eq!(names(&s, ""), root, "{why}: the root");
        for &(dir, want) in dirs {
            assert_eq!(names(&s, dir), want, "{why}: {dir}");
        }
        // Real entries are mirrored byte for byte, a real directory is the real one.
        for &(path, contents) in real {
            let n = node(&s, path);
            match contents {
                None => assert!(matches!(n.dir().unwrap().origin, Origin::Real(_)), "{why}"),
                Some(b) => assert_eq!(bytes(&s, path), b, "{why}: {path}"),
            }
        }
        // Each tensor of a merged or per-file directory is served from the file that holds it.
        for &(dir, want) in dirs {
            for &file in want {
                let Some((tensor, _)) = tensor_of(&s, &format!("{dir}/{file}")) else {
                    continue;
                };
                let (holder, &(_, n, byte)) = files_st
                    .iter()
                    .flat_map(|(f, ts)| ts.iter().map(move |t| (f, t)))
                    .find(|(_, t)| t.0 == tensor)
                    .unwrap();
                assert_eq!(bytes(&s, &format!("{dir}/{file}")), vec![byte; n], "{why}");
                let source = node(&s, &format!("{dir}/{file}")).source().unwrap();
                assert_eq!(
                    source.path,
                    fs::canonicalize(d.join(holder)).unwrap(),
                    "{why}: {dir}/{file}"
                );
            }
        }
    }
}

#[test]
fn metadata_is_sorted_json_with_a_final_newline_and_index_metadata_in_a_merged_dir() {
    let d = Dir::new("namespace");
    let meta = json!({"zeta": "last", "alpha": "first", "mid": "q\"\\\n", "Upper": "U"});
    fs::write(
        d.join("m.safetensors"),
        safetensors(&[("w", "U8", &[1], vec![1])], Some(meta.clone())),
    )
    .unwrap();
    write_u8(&d.join("bare.safetensors"), &[("only", 2, 2)]);
    write_u8(&d.join("shard.safetensors"), &[("c", 1, 3)]);
    let index_meta = json!({"total_size": 1, "nested": {"k": [1, 2]}, "note": "hi"});
    fs::write(
        d.join("set.safetensors.index.json"),
        serde_json::to_vec(
            &json!({"metadata": index_meta, "weight_map": {"c": "shard.safetensors"}}),
        )
        .unwrap(),
    )
    .unwrap();
    let s = build(d.path(), Layout::Flat, false);

    // (file, the JSON it holds, its keys in the order of the text)
    let table: &[(&str, &Value, &[&str])] = &[
        (
            "m.tensors/__metadata__",
            &meta,
            &["Upper", "alpha", "mid", "zeta"],
        ),
        (
            "set.tensors/__metadata__",
            &index_meta,
            &["nested", "note", "total_size"],
        ),
    ];
    for &(path, want, order) in table {
        let text = String::from_utf8(bytes(&s, path)).unwrap();
        assert!(text.ends_with("}\n"), "{path}: a final newline: {text:?}");
        assert_eq!(
            &serde_json::from_str::<Value>(&text).unwrap(),
            want,
            "{path}"
        );
        let at: Vec<usize> = order
            .iter()
            .map(|k| text.find(&format!("\"{k}\":")).unwrap())
            .collect();
        assert!(at.is_sorted(), "{path}: keys sorted in the text: {text}");
        assert_eq!(node(&s, path).attr.size, text.len() as u64, "{path}: size");
    }
    assert_eq!(names(&s, "bare.tensors"), ["only"], "no metadata, no file");
    // Index metadata values that are not strings are compact JSON in the xattrs.
    let set = at(&s, "set.tensors").unwrap();
    for (key, value) in [
        ("total_size", "1"),
        ("nested", r#"{"k":[1,2]}"#),
        ("note", "hi"),
    ] {
        assert_eq!(
            s.xattr(set, &format!("user.safetensors.metadata.{key}")),
            Some(value.as_bytes().to_vec()),
            "{key}"
        );
    }
}

// ------------------------------------------------------------------------------- tree layout

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
fn fnv1a_64(s: &str) -> u64 {
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
