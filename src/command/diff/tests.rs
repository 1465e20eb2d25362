//! Unit tests of `diff`: checkpoints written with the official crate, compared as a mount shows
//! them.

use super::*;
use crate::base::testing::TempDir;
use ::safetensors::tensor::{Dtype as StDtype, TensorView, serialize};
use std::path::PathBuf;

/// A tensor to write: name, dtype, shape, bytes.
type T<'a> = (&'a str, StDtype, Vec<usize>, Vec<u8>);

/// A tensor read from a JSON description: name, dtype, shape, bytes.
type Owned = (String, StDtype, Vec<usize>, Vec<u8>);

/// Writes a safetensors file of `tensors` with the official crate (creating its directory).
fn write(path: &Path, tensors: &[T<'_>]) {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serialize(views, None).unwrap()).unwrap();
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn u16s(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `(kind, unit, name)` of each finding, kinds spelt as the text output's first column.
fn brief(report: &Report) -> Vec<(&'static str, String, String)> {
    report
        .findings
        .iter()
        .map(|f| {
            let kind = match f {
                Finding::OnlyA(_) => "only in A",
                Finding::OnlyB(_) => "only in B",
                Finding::Renamed { .. } => "renamed",
                Finding::Changed { .. } => "changed",
                Finding::Differ { .. } => "differ",
            };
            (kind, f.found().unit.clone(), f.found().name.clone())
        })
        .collect()
}

fn row(kind: &'static str, unit: &str, name: &str) -> (&'static str, String, String) {
    (kind, unit.to_string(), name.to_string())
}

/// The values found for the one differing tensor of `report`.
fn values_of(report: &Report) -> Values {
    match &report.findings[..] {
        [
            Finding::Differ {
                values: Some(v), ..
            },
        ] => *v,
        other => panic!("not one differing tensor with values: {other:?}"),
    }
}

#[test]
fn a_file_against_a_copy_is_the_same() {
    let tmp = TempDir::new("diff-same");
    let t = [
        ("w", StDtype::F32, vec![2, 2], f32s(&[1.0, 2.0, 3.0, 4.0])),
        ("b", StDtype::I64, vec![], 7i64.to_le_bytes().to_vec()),
        ("e", StDtype::F16, vec![0, 3], vec![]),
    ];
    write(&tmp.join("a.safetensors"), &t);
    write(&tmp.join("b.safetensors"), &t);
    for b in ["a.safetensors", "b.safetensors"] {
        let r = diff(&tmp.join("a.safetensors"), &tmp.join(b), true).unwrap();
        assert!(r.is_same(), "{b}: {:?}", r.findings);
        assert_eq!(r.same, 3);
        assert_eq!(
            r.text(),
            "same: 3 tensors; only in A: 0; only in B: 0; renamed: 0; changed: 0; differ: 0\n"
        );
    }
}

#[test]
fn every_kind_of_finding_sorted_by_name() {
    let tmp = TempDir::new("diff-kinds");
    let moved = f32s(&[5.0, 6.0, 7.0]);
    write(
        &tmp.join("a.safetensors"),
        &[
            ("keep", StDtype::F32, vec![2], f32s(&[1.0, 2.0])),
            ("gone", StDtype::U8, vec![3], vec![1, 2, 3]),
            ("old", StDtype::F32, vec![3], moved.clone()),
            ("cast", StDtype::F32, vec![2], f32s(&[1.0, 2.0])),
            ("bytes", StDtype::I32, vec![2], vec![0, 0, 0, 0, 1, 0, 0, 0]),
            ("reshaped", StDtype::U8, vec![2, 2], vec![1, 2, 3, 4]),
        ],
    );
    write(
        &tmp.join("b.safetensors"),
        &[
            ("keep", StDtype::F32, vec![2], f32s(&[1.0, 2.0])),
            ("added", StDtype::U8, vec![3], vec![1, 2, 4]),
            ("new", StDtype::F32, vec![3], moved),
            ("cast", StDtype::F16, vec![2], u16s(&[0x3c00, 0x4000])),
            ("bytes", StDtype::I32, vec![2], vec![0, 0, 0, 0, 2, 0, 0, 0]),
            ("reshaped", StDtype::U8, vec![4], vec![1, 2, 3, 4]),
        ],
    );
    let r = diff(
        &tmp.join("a.safetensors"),
        &tmp.join("b.safetensors"),
        false,
    )
    .unwrap();
    assert_eq!(
        brief(&r),
        [
            row("only in B", "", "added"),
            row("differ", "", "bytes"),
            row("changed", "", "cast"),
            row("only in A", "", "gone"),
            row("renamed", "", "old"),
            row("changed", "", "reshaped"),
        ]
    );
    assert_eq!(r.same, 1);
    assert_eq!(
        r.text(),
        "only in B  added  U8 [3]\n\
         differ     bytes  I32 [2]\n\
         changed    cast  A: F32 [2]  B: F16 [2]\n\
         only in A  gone  U8 [3]\n\
         renamed    old -> new  F32 [3]\n\
         changed    reshaped  A: U8 [2,2]  B: U8 [4]\n\
         same: 1 tensors; only in A: 1; only in B: 1; renamed: 1; changed: 2; differ: 1\n"
    );
    let json = r.json();
    assert_eq!(json["same"], 1);
    assert_eq!(
        json["renamed"],
        serde_json::json!([{"unit": "", "a": "old", "b": "new", "dtype": "F32", "shape": [3]}])
    );
    assert_eq!(
        json["changed"][0],
        serde_json::json!({"unit": "", "name": "cast",
            "a": {"dtype": "F32", "shape": [2]}, "b": {"dtype": "F16", "shape": [2]}})
    );
    assert_eq!(
        json["differ"],
        serde_json::json!([{"unit": "", "name": "bytes", "dtype": "I32", "shape": [2]}]),
        "no values without --values"
    );
    assert_eq!(json["only_in_a"][0]["name"], "gone");
    assert_eq!(json["only_in_b"][0]["name"], "added");
}

#[test]
fn renames_pair_equal_tensors_in_name_order() {
    let tmp = TempDir::new("diff-renames");
    let same = vec![9u8; 4];
    write(
        &tmp.join("a.safetensors"),
        &[
            ("a1", StDtype::U8, vec![4], same.clone()),
            ("a2", StDtype::U8, vec![4], same.clone()),
            ("a3", StDtype::U8, vec![2, 2], same.clone()),
        ],
    );
    write(
        &tmp.join("b.safetensors"),
        &[
            ("b1", StDtype::U8, vec![4], same.clone()),
            ("b2", StDtype::U8, vec![4], same.clone()),
            ("b3", StDtype::I8, vec![4], same.clone()),
        ],
    );
    let r = diff(
        &tmp.join("a.safetensors"),
        &tmp.join("b.safetensors"),
        false,
    )
    .unwrap();
    let renamed: Vec<(String, String)> = r
        .findings
        .iter()
        .filter_map(|f| match f {
            Finding::Renamed { found, to } => Some((found.name.clone(), to.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        renamed,
        [("a1".into(), "b1".into()), ("a2".into(), "b2".into())]
    );
    assert_eq!(
        brief(&r)[2..],
        [row("only in A", "", "a3"), row("only in B", "", "b3")],
        "another shape or dtype is no rename"
    );
}

#[test]
fn values_compare_floats_as_numbers() {
    let tmp = TempDir::new("diff-values");
    let nan1 = f32::from_bits(0x7fc0_0001);
    let (a, b) = (tmp.join("a.safetensors"), tmp.join("b.safetensors"));
    // +0/-0 and two NaNs are equal; 1 vs 1.5 and 3 vs 1 differ.
    let xs = [0.0, f32::NAN, 1.0, 3.0, 8.0];
    let ys = [-0.0, nan1, 1.5, 1.0, 8.0];
    write(&a, &[("x", StDtype::F32, vec![5], f32s(&xs))]);
    write(&b, &[("x", StDtype::F32, vec![5], f32s(&ys))]);
    let v = values_of(&diff(&a, &b, true).unwrap());
    assert_eq!((v.elements, v.differing, v.max_abs_diff), (5, 2, 2.0));
    let r = diff(&a, &b, false).unwrap();
    assert!(matches!(
        r.findings[..],
        [Finding::Differ { values: None, .. }]
    ));

    // Only signs of zero and NaN payloads differ: the bytes differ, no value does.
    write(
        &b,
        &[(
            "x",
            StDtype::F32,
            vec![5],
            f32s(&[-0.0, nan1, 1.0, 3.0, 8.0]),
        )],
    );
    let r = diff(&a, &b, true).unwrap();
    assert!(!r.is_same());
    assert_eq!(values_of(&r).differing, 0);
    assert!(
        r.text()
            .starts_with("differ     x  F32 [5]  0 of 5 elements differ, max |a-b| 0.0\n")
    );

    // A NaN against a number, and an infinity against a number: infinite.
    write(
        &b,
        &[(
            "x",
            StDtype::F32,
            vec![5],
            f32s(&[0.0, 1.0, 1.0, f32::INFINITY, 8.0]),
        )],
    );
    let r = diff(&a, &b, true).unwrap();
    let v = values_of(&r);
    assert_eq!((v.differing, v.max_abs_diff), (2, f64::INFINITY));
    assert_eq!(r.json()["differ"][0]["max_abs_diff"], "inf");
    assert!(
        r.text().contains("2 of 5 elements differ, max |a-b| inf"),
        "{}",
        r.text()
    );

    // F64, F16, BF16.
    write(
        &a,
        &[("x", StDtype::F64, vec![3], f64s(&[1.0, 2.0, 1e-300]))],
    );
    write(&b, &[("x", StDtype::F64, vec![3], f64s(&[1.0, 2.25, 0.0]))]);
    let v = values_of(&diff(&a, &b, true).unwrap());
    assert_eq!((v.elements, v.differing, v.max_abs_diff), (3, 2, 0.25));
    // F16 1.0 (0x3c00) vs 1.0009765625 (0x3c01); 0x0000 vs 0x8000 (-0).
    write(&a, &[("h", StDtype::F16, vec![2], u16s(&[0x3c00, 0x0000]))]);
    write(&b, &[("h", StDtype::F16, vec![2], u16s(&[0x3c01, 0x8000]))]);
    let v = values_of(&diff(&a, &b, true).unwrap());
    assert_eq!((v.differing, v.max_abs_diff), (1, 2f64.powi(-10)));
    // BF16 1.0 (0x3f80) vs 2.0 (0x4000).
    write(
        &a,
        &[("h", StDtype::BF16, vec![2], u16s(&[0x3f80, 0x3f80]))],
    );
    write(
        &b,
        &[("h", StDtype::BF16, vec![2], u16s(&[0x4000, 0x3f80]))],
    );
    let v = values_of(&diff(&a, &b, true).unwrap());
    assert_eq!((v.differing, v.max_abs_diff), (1, 1.0));
    // An integer tensor differs without values.
    write(&a, &[("i", StDtype::I32, vec![1], vec![1, 0, 0, 0])]);
    write(&b, &[("i", StDtype::I32, vec![1], vec![2, 0, 0, 0])]);
    let r = diff(&a, &b, true).unwrap();
    assert!(matches!(
        r.findings[..],
        [Finding::Differ { values: None, .. }]
    ));
}

#[test]
fn large_tensors_read_together_in_chunks() {
    let tmp = TempDir::new("diff-large");
    let (a, b) = (tmp.join("a.safetensors"), tmp.join("b.safetensors"));
    // 12 MiB: three chunks, B read on its own thread.
    let n = 3 << 20;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut ys = xs.clone();
    ys[n - 1] += 0.5;
    ys[5] = -1.0;
    write(
        &a,
        &[
            ("big", StDtype::F32, vec![n], f32s(&xs)),
            ("s", StDtype::U8, vec![1], vec![0]),
        ],
    );
    write(
        &b,
        &[
            ("big", StDtype::F32, vec![n], f32s(&ys)),
            ("s", StDtype::U8, vec![1], vec![0]),
        ],
    );
    let r = diff(&a, &b, false).unwrap();
    assert_eq!(brief(&r), [row("differ", "", "big")]);
    assert_eq!(r.same, 1);
    let v = values_of(&diff(&a, &b, true).unwrap());
    assert_eq!(
        (v.elements, v.differing, v.max_abs_diff),
        (n as u64, 2, 6.0)
    );
    write(
        &b,
        &[
            ("big", StDtype::F32, vec![n], f32s(&xs)),
            ("s", StDtype::U8, vec![1], vec![0]),
        ],
    );
    assert!(diff(&a, &b, true).unwrap().is_same());
}

#[test]
fn a_sharded_set_is_one_model_and_matches_one_file() {
    let tmp = TempDir::new("diff-sharded");
    let w = ("w", StDtype::F32, vec![2], f32s(&[1.0, 2.0]));
    let b = ("b", StDtype::U8, vec![3], vec![1, 2, 3]);
    let dir = tmp.join("sharded");
    write(
        &dir.join("model-00001-of-00002.safetensors"),
        std::slice::from_ref(&w),
    );
    write(
        &dir.join("model-00002-of-00002.safetensors"),
        std::slice::from_ref(&b),
    );
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        r#"{"metadata": {}, "weight_map": {"w": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors"}}"#,
    )
    .unwrap();
    let model = Model::open(&dir).unwrap();
    let found = units(model.tree().unwrap());
    let keys: Vec<&str> = found.iter().map(|u| u.key.as_str()).collect();
    assert_eq!(
        keys,
        ["model"],
        "the shards' own directories give way to the merged one"
    );
    assert_eq!(found[0].tensors.len(), 2);

    let one = tmp.join("one/model.safetensors");
    write(&one, &[w.clone(), b.clone()]);
    for (x, y) in [
        (&dir, &one),
        (&one, &dir),
        (&dir, &one.parent().unwrap().to_path_buf()),
    ] {
        let r = diff(x, y, false).unwrap();
        assert!(
            r.is_same(),
            "{} vs {}: {:?}",
            x.display(),
            y.display(),
            r.findings
        );
        assert_eq!(r.same, 2);
    }
    // A shard without the index is two models, neither of which is in the other side.
    std::fs::remove_file(dir.join("model.safetensors.index.json")).unwrap();
    let model = Model::open(&dir).unwrap();
    let keys: Vec<String> = units(model.tree().unwrap())
        .into_iter()
        .map(|u| u.key)
        .collect();
    assert_eq!(keys, ["model-00001-of-00002", "model-00002-of-00002"]);
}

#[test]
fn units_pair_by_key_and_a_missing_unit_is_reported_whole() {
    let tmp = TempDir::new("diff-units");
    let t = |v: u8| vec![("w", StDtype::U8, vec![1], vec![v])];
    let (a, b) = (tmp.join("a"), tmp.join("b"));
    write(&a.join("unet/diffusion_pytorch_model.safetensors"), &t(1));
    write(&a.join("text_encoder/model.safetensors"), &t(2));
    write(&a.join("vae/diffusion_pytorch_model.safetensors"), &t(3));
    write(&b.join("unet/diffusion_pytorch_model.safetensors"), &t(1));
    write(&b.join("text_encoder/model.safetensors"), &t(9));
    write(&b.join("safety_checker/model.safetensors"), &t(3));
    let r = diff(&a, &b, false).unwrap();
    assert_eq!(
        brief(&r),
        [
            row("only in B", "safety_checker/model", "w"),
            row("differ", "text_encoder/model", "w"),
            row("only in A", "vae/diffusion_pytorch_model", "w"),
        ],
        "no rename across units"
    );
    assert_eq!(r.same, 1);
    assert!(
        r.text()
            .contains("differ     text_encoder/model:w  U8 [1]\n")
    );
}

/// The committed checkpoint of strided views (`torch.save` of transposed and sliced tensors)
/// and the tensors `torch.load` gave for it.
fn views_checkpoint() -> (PathBuf, Vec<Owned>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/format/pytorch/testdata");
    let text = std::fs::read_to_string(dir.join("views_zip.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let tensors = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let dtype = match t["dtype"].as_str().unwrap() {
                "F32" => StDtype::F32,
                "F64" => StDtype::F64,
                "I16" => StDtype::I16,
                other => panic!("{other}"),
            };
            let shape = t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize);
            let hex = t["hex"].as_str().unwrap();
            let bytes = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                .collect();
            (
                t["name"].as_str().unwrap().to_string(),
                dtype,
                shape.collect(),
                bytes,
            )
        })
        .collect();
    (dir.join("views_zip.pt"), tensors)
}

#[test]
fn a_checkpoint_against_its_tensors_in_safetensors() {
    let tmp = TempDir::new("diff-pickle");
    let (pt, tensors) = views_checkpoint();
    let t: Vec<T<'_>> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.as_str(), *d, s.clone(), b.clone()))
        .collect();
    let (a, b) = (tmp.join("a"), tmp.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::copy(&pt, a.join("pytorch_model.bin")).unwrap();
    write(&b.join("model.safetensors"), &t);
    for (x, y) in [
        (&a, &b),
        (&a.join("pytorch_model.bin"), &b.join("model.safetensors")),
    ] {
        let r = diff(x, y, true).unwrap();
        assert!(r.is_same(), "{:?}", r.findings);
        assert_eq!(r.same, tensors.len() as u64);
    }
    // One element of the transposed view changed.
    let mut changed = t.clone();
    let i = changed.iter().position(|x| x.0 == "transposed").unwrap();
    changed[i].3[4..8].copy_from_slice(&100f32.to_le_bytes());
    write(&b.join("model.safetensors"), &changed);
    let r = diff(&a, &b, true).unwrap();
    assert_eq!(brief(&r), [row("differ", "model", "transposed")]);
    let old = f32::from_le_bytes(t[i].3[4..8].try_into().unwrap());
    assert_eq!(values_of(&r).max_abs_diff, f64::from(100f32 - old).abs());

    // Both beside each other on one side: two units, the checkpoint's under its own name.
    std::fs::copy(&pt, b.join("pytorch_model.bin")).unwrap();
    write(&b.join("model.safetensors"), &t);
    let model = Model::open(&b).unwrap();
    let keys: Vec<String> = units(model.tree().unwrap())
        .into_iter()
        .map(|u| u.key)
        .collect();
    assert_eq!(keys, ["model", "pytorch_model"]);
    // A directory and a single file alike: the file is paired by its conversion name.
    for x in [a.clone(), a.join("pytorch_model.bin")] {
        let r = diff(&x, &b, false).unwrap();
        assert_eq!(r.same, tensors.len() as u64, "{}", x.display());
        assert_eq!(r.findings.len(), tensors.len());
        let only_b = |(k, u, _): &(&str, String, String)| *k == "only in B" && u == "pytorch_model";
        assert!(brief(&r).iter().all(only_b));
    }
}

#[test]
fn errors_name_the_file() {
    let tmp = TempDir::new("diff-errors");
    let good = tmp.join("good.safetensors");
    write(&good, &[("w", StDtype::U8, vec![1], vec![1])]);
    let missing = tmp.join("missing");
    let e = diff(&good, &missing, false).unwrap_err();
    assert!(e.starts_with(&format!("{}: ", missing.display())), "{e}");
    let bad = tmp.join("bad.safetensors");
    std::fs::write(&bad, b"1234567").unwrap();
    let e = diff(&bad, &good, false).unwrap_err();
    assert!(
        e.contains("bad.safetensors: ") && e.contains("[HeaderTooSmall]"),
        "{e}"
    );
    // In a directory, an invalid file is left out (with a warning), not an error; the single
    // file against a side of no model is paired by its name.
    let dir = tmp.join("dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&bad, dir.join("model.safetensors")).unwrap();
    let r = diff(&dir, &good, false).unwrap();
    assert_eq!(brief(&r), [row("only in B", "good", "w")]);
}

#[test]
fn names_stay_on_one_line_and_numbers_read_back() {
    assert_eq!(shown("a\nb\u{1b}c.ü"), "a\\nb\\u{1b}c.ü");
    assert_eq!(number(1e-7), "1e-7");
    assert_eq!(number(0.5), "0.5");
    assert_eq!(number(f64::INFINITY), "inf");
    assert_eq!(shape(&[]), "[]");
    assert_eq!(shape(&[4096, 11008]), "[4096,11008]");
}
