//! The naming and layout rules, table-driven: file names in a tensor directory, real and generated
//! entries that want the same name, an unsharded file beside an index, the tree layout, NPY views,
//! `__metadata__`, and the refresh diff for the clashes. Each table row is a source, the expected
//! result written out from the documented rules (not from this code's output), and why.

use std::collections::HashSet;
use std::fs;

use serde_json::{Value, json};

use super::tree::fnv1a_64;
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
