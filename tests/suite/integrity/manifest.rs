//! `tensormount verify --write-manifest` and `--manifest`: file and per-tensor digests.

use super::{
    Fx, assert_ok, by_path, code, flip, hex, integrity, line, lines, sha256sum, str_map, verify,
    verify_json,
};
use crate::common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

/// A tensor's line in a manifest check: status, expected and actual digests.
type Want = (&'static str, Option<String>, Option<String>);

/// `--write-manifest` records hashlib's digest of every file and of every tensor's bytes (a
/// transposed view of a checkpoint by its `contiguous()` bytes); `--manifest` then names the
/// damaged tensor of a file with a flipped byte (the file's other tensors ok), a file gone, and
/// a file rewritten with a tensor less and one more.
#[test]
fn verify_manifest_names_the_damaged_tensor() {
    let fx = Fx::new("integrity-manifest", &["release"]);
    let dir = fx.path("release");
    let weights = fx.weights("release");
    let manifest = fx.path("manifest.json");

    let out = verify(&["--write-manifest", s(&manifest), s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let m = json(&fs::read_to_string(&manifest).unwrap());
    assert_eq!(m["tensormount_manifest"], 1, "{m}");
    let mfiles = m["files"].as_object().unwrap();
    assert_eq!(
        mfiles.keys().collect::<Vec<_>>(),
        weights.keys().collect::<Vec<_>>()
    );
    for (rel, w) in &weights {
        let e = &mfiles[rel];
        assert_eq!(e["sha256"], w["sha256"], "{rel}: {e}");
        assert_eq!(e["bytes"], w["bytes"], "{rel}: {e}");
        assert_eq!(
            str_map(&e["tensors"]),
            fx.tensors(&format!("release/{rel}")),
            "tensor digests of {rel}"
        );
    }

    // One byte inside one tensor; a file removed; a file with a tensor dropped and one added.
    let damaged = "model-00001-of-00002.safetensors";
    let (b, e) = fx.range(&format!("release/{damaged}"), "model.layers.0.w");
    flip(&dir.join(damaged), (b + e) / 2);
    fs::remove_file(dir.join("extra.safetensors")).unwrap();
    let rewritten = "model-00002-of-00002.safetensors";
    let py = python();
    integrity(
        &py,
        &[
            "retensor",
            s(&dir.join(rewritten)),
            "model.norm",
            "model.added",
        ],
    );
    let now = json(&integrity(
        &py,
        &["tensors", s(&dir.join(damaged)), s(&dir.join(rewritten))],
    ));
    let damaged_now = str_map(&now[s(&dir.join(damaged))]);
    let rewritten_now = str_map(&now[s(&dir.join(rewritten))]);

    let (out, v) = verify_json(&["--manifest", s(&manifest), s(&dir)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        weights.keys().collect::<Vec<_>>()
    );
    for (rel, w) in &weights {
        let f = files[rel];
        match rel.as_str() {
            "extra.safetensors" => assert_eq!(f["status"], "missing", "{f}"),
            r if r == damaged || r == rewritten => {
                assert_eq!(f["status"], "mismatch", "{f}");
                assert_eq!(f["expected"], w["sha256"], "{f}");
                assert_eq!(hex(&f["actual"]), sha256sum(&dir.join(rel)), "{f}");
                assert_eq!(f["recorded_as"], "manifest", "{f}");
                assert_eq!(f["recorded_in"], s(&manifest), "{f}");
            }
            _ => {
                let bytes = w["bytes"].as_u64().unwrap();
                assert_ok(f, hex(&w["sha256"]), bytes, "manifest", s(&manifest));
            }
        }
    }

    // Every tensor of every file the manifest lists, and the one added. The tensors of the file
    // that is gone (each `missing`) are checked last.
    let gone = "extra.safetensors";
    let mut want: BTreeMap<(String, String), Want> = BTreeMap::new();
    for rel in weights.keys() {
        for (name, sha) in fx.tensors(&format!("release/{rel}")) {
            let entry = match (rel.as_str(), name.as_str()) {
                ("extra.safetensors", _) => ("missing", Some(sha), None),
                (r, "model.layers.0.w") if r == damaged => {
                    let now = damaged_now[&name].clone();
                    assert_ne!(now, sha);
                    ("mismatch", Some(sha), Some(now))
                }
                (r, "model.norm") if r == rewritten => ("missing", Some(sha), None),
                _ => ("ok", Some(sha.clone()), Some(sha)),
            };
            want.insert((rel.clone(), name), entry);
        }
    }
    want.insert(
        (rewritten.to_string(), "model.added".to_string()),
        ("extra", None, Some(rewritten_now["model.added"].clone())),
    );
    let mut got = BTreeMap::new();
    for t in v["tensors"].as_array().unwrap() {
        let key = (
            t["file"].as_str().unwrap().to_string(),
            t["name"].as_str().unwrap().to_string(),
        );
        let entry = (
            t["status"].as_str().unwrap(),
            t["expected"].as_str(),
            t["actual"].as_str(),
        );
        assert!(got.insert(key.clone(), entry).is_none(), "{key:?} twice");
    }
    let (want_gone, want): (BTreeMap<_, _>, BTreeMap<_, _>) =
        want.into_iter().partition(|((file, _), _)| file == gone);
    let (got_gone, got): (BTreeMap<_, _>, BTreeMap<_, _>) =
        got.into_iter().partition(|((file, _), _)| file == gone);
    for (key, (status, expected, actual)) in &want {
        let Some(&(gs, ge, ga)) = got.get(key) else {
            panic!("tensor {key:?} not in the report: {:#?}", v["tensors"]);
        };
        assert_eq!(gs, *status, "status of tensor {key:?}");
        if *status != "missing" || ge.is_some() {
            assert_eq!(ge, expected.as_deref(), "expected digest of tensor {key:?}");
        }
        if *status != "extra" || ga.is_some() {
            assert_eq!(ga, actual.as_deref(), "actual digest of tensor {key:?}");
        }
    }
    assert_eq!(
        got.keys().collect::<BTreeSet<_>>(),
        want.keys().collect::<BTreeSet<_>>(),
        "the tensors reported"
    );

    // The text: a line per file, then one per tensor that is not ok.
    let out = verify(&["--manifest", s(&manifest), s(&dir)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    let text = lines(&out);
    let file_lines: Vec<String> = weights
        .iter()
        .map(|(rel, w)| {
            let sha = hex(&w["sha256"]);
            match rel.as_str() {
                "extra.safetensors" => line("missing", rel, "(in the manifest, not in SOURCE)"),
                r if r == damaged || r == rewritten => line(
                    "mismatch",
                    rel,
                    &format!(
                        "expected {sha} (manifest: {}), read {}",
                        s(&manifest),
                        sha256sum(&dir.join(rel))
                    ),
                ),
                _ => line("ok", rel, &format!("sha256 {sha} (manifest)")),
            }
        })
        .collect();
    assert!(text.len() >= file_lines.len(), "{text:#?}");
    assert_eq!(text[..file_lines.len()], file_lines[..], "{text:#?}");
    let tensor_lines: BTreeSet<String> = text[file_lines.len()..].iter().cloned().collect();
    assert_eq!(
        tensor_lines.len(),
        text.len() - file_lines.len(),
        "a line twice: {text:#?}"
    );
    let (gone_lines, tensor_lines): (BTreeSet<String>, BTreeSet<String>) = tensor_lines
        .into_iter()
        .partition(|l| l.contains(&format!("  {gone}  ")));
    let want_lines: BTreeSet<String> = want
        .iter()
        .filter(|(_, (status, _, _))| *status != "ok")
        .map(|((file, name), (status, _, _))| line(status, file, &format!("tensor {name}")))
        .collect();
    assert_eq!(tensor_lines, want_lines, "{text:#?}");

    // The file that is gone: its tensors are all listed, and missing.
    let gone_want: BTreeSet<String> = want_gone
        .keys()
        .map(|(file, name)| line("missing", file, &format!("tensor {name}")))
        .collect();
    assert_eq!(
        gone_lines, gone_want,
        "the tensors of {gone}, in the manifest and gone, in the text: {text:#?}"
    );
    for (key, (_, expected, _)) in &want_gone {
        let Some(&(gs, ge, ga)) = got_gone.get(key) else {
            panic!(
                "tensor {key:?} of a file gone, not in the report: {:#?}",
                v["tensors"]
            );
        };
        assert_eq!(gs, "missing", "status of tensor {key:?}");
        assert_eq!(ge, expected.as_deref(), "expected digest of tensor {key:?}");
        assert_eq!(ga, None, "actual digest of tensor {key:?}");
    }
    assert_eq!(
        got_gone.keys().collect::<BTreeSet<_>>(),
        want_gone.keys().collect::<BTreeSet<_>>()
    );
}
