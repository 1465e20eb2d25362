//! `tensormount diff A B`: the built binary run on models written by the real writers
//! (`safetensors.torch.save_file`, `torch.save`, huggingface_hub's sharding) in
//! `tests/python/diff_oracle.py`, its JSON checked against the oracle's own comparison of the
//! same models (every tensor loaded with `load_file` or `torch.load(weights_only=True)`, compared
//! with torch and numpy), and against findings written out here by hand. Needs the `.venv` that
//! `tests/run` creates (torch, safetensors, numpy, huggingface_hub); no FUSE, no root.

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

/// Runs `tests/python/diff_oracle.py ARGS` and returns its stdout (asserting success; a module
/// missing from the Python says so, with how to install it).
fn oracle_py(py: &Path, args: &[&str]) -> String {
    python_script(py, "diff_oracle.py", args)
}

/// The cases written by the oracle into a fresh directory: for each, its A and B.
struct Cases {
    py: PathBuf,
    _tmp: TempDir,
    paths: Value,
}

impl Cases {
    fn write(names: &[&str]) -> Cases {
        let py = python();
        let tmp = TempDir::new("diff");
        let mut args = vec!["write", s(tmp.path())];
        args.extend_from_slice(names);
        let paths = json(&oracle_py(&py, &args));
        Cases {
            py,
            _tmp: tmp,
            paths,
        }
    }

    /// A and B of case `name`.
    fn sides(&self, name: &str) -> (PathBuf, PathBuf) {
        let side = |i: usize| PathBuf::from(self.paths[name][i].as_str().unwrap());
        (side(0), side(1))
    }

    /// `tensormount diff --json --values` on case `name`, checked against the oracle's comparison
    /// (findings and exit status); returns tensormount's JSON.
    fn check(&self, name: &str) -> Value {
        let (a, b) = self.sides(name);
        let out = run(&["diff", "--json", "--values", s(&a), s(&b)]);
        let mine = json(&stdout(&out));
        let mut expected = json(&oracle_py(&self.py, &["compare", s(&a), s(&b)]));
        let exit = expected
            .as_object_mut()
            .unwrap()
            .remove("exit")
            .unwrap()
            .as_i64();
        assert_eq!(
            mine,
            expected,
            "{name}: tensormount (left) against the oracle (right); stderr: {}",
            stderr(&out)
        );
        assert_eq!(
            out.status.code().map(i64::from),
            exit,
            "{name}: exit status"
        );
        assert!(stderr(&out).is_empty(), "{name}: {}", stderr(&out));
        mine
    }

    /// `tensormount diff [ARGS] A B` on case `name`, as text.
    fn text(&self, name: &str, args: &[&str]) -> (Output, String) {
        let (a, b) = self.sides(name);
        let mut all = vec!["diff"];
        all.extend_from_slice(args);
        all.extend([s(&a), s(&b)]);
        let out = run(&all);
        let text = stdout(&out);
        (out, text)
    }
}

/// `(kind, unit, name)` of every finding of a diff's JSON, in order.
fn findings(v: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for kind in ["only_in_a", "only_in_b", "renamed", "changed", "differ"] {
        for f in v[kind].as_array().unwrap() {
            let name = f.get("name").unwrap_or(&f["a"]).as_str().unwrap();
            out.push((
                kind.to_string(),
                f["unit"].as_str().unwrap().to_string(),
                name.to_string(),
            ));
        }
    }
    out
}

fn finding(kind: &str, unit: &str, name: &str) -> (String, String, String) {
    (kind.to_string(), unit.to_string(), name.to_string())
}

/// The last line of the text output, for `same` tensors and counts of each kind of finding.
fn summary(same: u64, counts: [u64; 5]) -> String {
    let [a, b, r, c, d] = counts;
    format!(
        "same: {same} tensors; only in A: {a}; only in B: {b}; renamed: {r}; changed: {c}; \
         differ: {d}\n"
    )
}

#[test]
fn identical_models_are_the_same() {
    let cases = Cases::write(&["identical"]);
    let v = cases.check("identical");
    assert_eq!(v["same"], 6);
    assert!(findings(&v).is_empty());
    let (out, text) = cases.text("identical", &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text, summary(6, [0; 5]));
}

#[test]
fn one_element_changed_is_counted_with_numpys_max_difference() {
    let cases = Cases::write(&["one_element", "one_bf16"]);
    for (case, name, shape, elements) in [
        (
            "one_element",
            "embed.weight",
            "F32 [1100,1024]",
            1100 * 1024,
        ),
        ("one_bf16", "layers.0.norm.weight", "BF16 [48]", 48),
    ] {
        let v = cases.check(case);
        assert_eq!(findings(&v), [finding("differ", "model", name)], "{case}");
        let d = &v["differ"][0];
        assert_eq!(
            (d["differing"].as_u64(), d["elements"].as_u64()),
            (Some(1), Some(elements))
        );
        let max = d["max_abs_diff"].as_f64().unwrap();
        assert!(max > 0.0, "{case}: {max}");
        assert_eq!(v["same"], 5);

        let (out, text) = cases.text(case, &["--values"]);
        assert_eq!(out.status.code(), Some(1));
        let line = format!(
            "differ     model:{name}  {shape}  1 of {elements} elements differ, max |a-b| "
        );
        let first = text.lines().next().unwrap();
        let shown = first
            .strip_prefix(&line)
            .unwrap_or_else(|| panic!("{case}: {text}"));
        assert_eq!(
            shown.parse::<f64>().unwrap(),
            max,
            "{case}: the text's X is the JSON's"
        );
        assert!(
            text.ends_with(&summary(5, [0, 0, 0, 0, 1])),
            "{case}: {text}"
        );

        let (out, text) = cases.text(case, &[]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            text,
            format!(
                "differ     model:{name}  {shape}\n{}",
                summary(5, [0, 0, 0, 0, 1])
            )
        );
    }
}

#[test]
fn removed_added_renamed_and_retyped_tensors() {
    let cases = Cases::write(&["removed", "added", "renamed", "dtype"]);
    let v = cases.check("removed");
    assert_eq!(
        findings(&v),
        [finding("only_in_a", "model", "layers.0.attn.q.bias")]
    );
    let v = cases.check("added");
    assert_eq!(
        findings(&v),
        [finding("only_in_b", "model", "lm_head.weight")]
    );
    let v = cases.check("renamed");
    assert_eq!(
        findings(&v),
        [finding("renamed", "model", "layers.0.attn.q.weight")]
    );
    assert_eq!(v["renamed"][0]["b"], "layers.0.attn.query.weight");
    let v = cases.check("dtype");
    assert_eq!(
        findings(&v),
        [finding("changed", "model", "layers.0.attn.q.weight")]
    );
    assert_eq!(v["changed"][0]["b"]["dtype"], "F16");

    let expected = [
        (
            "removed",
            "only in A  model:layers.0.attn.q.bias  F16 [64]\n",
            [1, 0, 0, 0, 0],
        ),
        (
            "added",
            "only in B  model:lm_head.weight  F32 [8,4]\n",
            [0, 1, 0, 0, 0],
        ),
        (
            "renamed",
            "renamed    model:layers.0.attn.q.weight -> layers.0.attn.query.weight  F32 [64,32]\n",
            [0, 0, 1, 0, 0],
        ),
        (
            "dtype",
            "changed    model:layers.0.attn.q.weight  A: F32 [64,32]  B: F16 [64,32]\n",
            [0, 0, 0, 1, 0],
        ),
    ];
    for (case, line, counts) in expected {
        let (out, text) = cases.text(case, &[]);
        assert_eq!(out.status.code(), Some(1), "{case}");
        let same = if case == "added" { 6 } else { 5 };
        assert_eq!(text, format!("{line}{}", summary(same, counts)), "{case}");
    }
}

#[test]
fn a_sharded_set_against_one_file() {
    let cases = Cases::write(&["sharded", "sharded_changed"]);
    let (a, _) = cases.sides("sharded");
    let shards = std::fs::read_dir(&a)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_str().unwrap().ends_with(".safetensors")
        })
        .count();
    assert!(shards >= 2, "the fixture is sharded");
    let v = cases.check("sharded");
    assert_eq!(v["same"], 6);
    assert!(findings(&v).is_empty());
    let v = cases.check("sharded_changed");
    assert_eq!(findings(&v), [finding("differ", "model", "position_ids")]);
    assert!(
        v["differ"][0].get("differing").is_none(),
        "no values for an integer tensor"
    );
    // The merged set is one model: B against A says the same.
    let (a, b) = cases.sides("sharded_changed");
    let out = run(&["diff", s(&b), s(&a)]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        format!(
            "differ     model:position_ids  I64 [77]\n{}",
            summary(5, [0, 0, 0, 0, 1])
        )
    );
}

#[test]
fn a_pytorch_checkpoint_against_its_conversion() {
    let cases = Cases::write(&["pickle", "pickle_changed"]);
    let v = cases.check("pickle");
    assert_eq!(v["same"], 8, "with the transposed view and its tied copy");
    assert!(findings(&v).is_empty());
    let (out, _) = cases.text("pickle", &[]);
    assert_eq!(out.status.code(), Some(0));
    // The checkpoint file against the safetensors file, not their directories.
    let (a, b) = cases.sides("pickle");
    let out = run(&[
        "diff",
        s(&a.join("pytorch_model.bin")),
        s(&b.join("model.safetensors")),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let v = cases.check("pickle_changed");
    assert_eq!(findings(&v), [finding("differ", "model", "lm_head.weight")]);
    assert_eq!(v["differ"][0]["differing"], 1);
}

#[test]
fn a_file_against_a_directory_of_two_models() {
    let cases = Cases::write(&["file_vs_both"]);
    let v = cases.check("file_vs_both");
    let found = findings(&v);
    assert_eq!(found.len(), 9, "{v}");
    assert!(
        found[..8]
            .iter()
            .all(|(kind, unit, _)| kind == "only_in_b" && unit == "pytorch_model"),
        "the checkpoint beside the conversion is a model of its own: {v}"
    );
    assert_eq!(found[8], finding("differ", "model", "position_ids"));
    assert_eq!(v["same"], 7);
}

#[test]
fn units_are_paired_by_folder() {
    let cases = Cases::write(&["folders"]);
    let v = cases.check("folders");
    let units: Vec<(String, String)> = findings(&v)
        .into_iter()
        .map(|(kind, unit, _)| (kind, unit))
        .collect();
    let mut expected = vec![
        (
            "only_in_a".to_string(),
            "vae/diffusion_pytorch_model".to_string()
        );
        5
    ];
    expected.extend(vec![
        (
            "only_in_b".to_string(),
            "safety_checker/model".to_string()
        );
        5
    ]);
    expected.push(("differ".to_string(), "text_encoder/model".to_string()));
    assert_eq!(units, expected);
    assert_eq!(v["differ"][0]["name"], "layers.0.scale");
    assert_eq!(v["differ"][0]["max_abs_diff"], 0.25);
    assert_eq!(v["same"], 9, "unet's five and text_encoder's other four");
}

#[test]
fn errors_exit_2_naming_the_file() {
    let tmp = TempDir::new("diff-errors");
    let bad = tmp.join("bad.safetensors");
    std::fs::write(&bad, b"1234567").unwrap();
    let missing = tmp.join("missing.safetensors");
    for (a, b, named, what) in [
        (&bad, &bad, &bad, "[HeaderTooSmall]"),
        (&bad, &missing, &missing, "No such file or directory"),
        (&missing, &bad, &missing, "No such file or directory"),
    ] {
        let out = run(&["diff", s(a), s(b)]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.starts_with(&format!("tensormount: {}: ", named.display())) && err.contains(what),
            "{err}"
        );
        assert!(stdout(&out).is_empty());
    }
}
