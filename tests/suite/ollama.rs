//! ollama's model store, written as ollama writes one (`tests/python/ollama_store.py`): every
//! manifest's model shown in `by-name/` by the name `ollama list` gives it, each layer a file of
//! its blob's bytes (`sha256sum` the oracle), the GGUF layers with their tensor files (gguf-py the
//! oracle), the Modelfile `ollama show --modelfile` prints, and every hostile manifest named on
//! its own file while the rest of the store is shown.

use crate::common::*;

use std::fs;
use std::path::{Path, PathBuf};

/// A SOURCE holding a store at `models/`, and what each model must show.
fn store(tmp: &TempDir) -> (PathBuf, serde_json::Value) {
    let py = python();
    require_module(&py, "gguf");
    let src = tmp.join("src");
    fs::create_dir_all(&src).unwrap();
    let expect = tmp.join("expect.json");
    python_script(
        &py,
        "ollama_store.py",
        &["write", s(&src.join("models")), s(&expect)],
    );
    let expect = json(&fs::read_to_string(expect).unwrap());
    (src, expect)
}

/// The tensors of a GGUF file as gguf-py reads them: name, absolute offset, size in bytes.
fn gguf_tensors(file: &Path) -> Vec<(String, u64, u64)> {
    let out = python_code(
        &python(),
        "import sys, gguf\n\
         for t in gguf.GGUFReader(sys.argv[1]).tensors:\n\
         \x20   print(t.name, t.data_offset, t.n_bytes)\n",
        &[s(file)],
    );
    out.lines()
        .map(|l| {
            let v: Vec<&str> = l.split(' ').collect();
            (v[0].to_string(), v[1].parse().unwrap(), v[2].parse().unwrap())
        })
        .collect()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn every_manifest_is_a_model_by_name_with_its_layers_views_and_modelfile() {
    let tmp = TempDir::new("ollama");
    let (src, expect) = store(&tmp);
    let m = mount_ok(&src, "");
    let by_name = m.path("models/by-name");
    // Named as `ollama list` names them; hostile manifests' models are not shown.
    assert_eq!(
        names(&by_name),
        ["hf.co", "jmorgan", "llama3.2:1b", "llama3.2:latest", "localhost:5000"]
    );
    for model in expect["models"].as_array().unwrap() {
        let name = model["name"].as_str().unwrap();
        let dir = by_name.join(name);
        let files = model["files"].as_object().unwrap();
        let mut want: Vec<String> = files.keys().cloned().collect();
        want.push("Modelfile".into());
        for f in files.keys().filter(|f| f.ends_with(".gguf")) {
            let stem = f.strip_suffix(".gguf").unwrap();
            want.push(format!("{stem}.tensors"));
            want.push(format!("{stem}.safetensors"));
        }
        want.sort();
        assert_eq!(names(&dir), want, "{name}");
        for (file, blob) in files {
            let blob = Path::new(blob.as_str().unwrap());
            let digest = blob.file_name().unwrap().to_str().unwrap();
            // Byte for byte the blob, whose name is its SHA-256.
            assert_eq!(
                format!("sha256-{}", sha256sum(&dir.join(file))),
                digest,
                "{name}/{file}"
            );
            if let Some(stem) = file.strip_suffix(".gguf") {
                let tensors = gguf_tensors(blob);
                assert!(!tensors.is_empty());
                let tdir = dir.join(format!("{stem}.tensors"));
                let shown = names(&tdir).into_iter().filter(|n| n != "__metadata__");
                assert_eq!(shown.count(), tensors.len(), "{name}/{file}");
                let whole = fs::read(blob).unwrap();
                for (t, offset, size) in tensors {
                    let path = tdir.join(escaped(&t));
                    let (o, n) = (offset as usize, size as usize);
                    assert!(fs::read(&path).unwrap() == whole[o..o + n], "{name}/{t}");
                    // The source a GPU loader reads is the blob itself.
                    assert_eq!(getxattr(&path, "user.safetensors.source").unwrap(), s(blob));
                    assert_eq!(
                        getxattr(&path, "user.safetensors.offset").unwrap(),
                        offset.to_string()
                    );
                }
            }
        }
        assert_eq!(
            fs::read_to_string(dir.join("Modelfile")).unwrap(),
            model["modelfile"].as_str().unwrap(),
            "{name}"
        );
    }
    // Each hostile manifest names its rule on its own file; nothing of it is shown.
    for (what, bad) in expect["bad"].as_object().unwrap() {
        let manifest = Path::new(bad["manifest"].as_str().unwrap());
        let rel = manifest.strip_prefix(&src).unwrap();
        let error = getxattr(&m.path(rel), "user.tensormount.error")
            .unwrap_or_else(|| panic!("{what}: no error on {}", rel.display()));
        let rule = bad["rule"].as_str().unwrap();
        assert!(error.ends_with(&format!("[{rule}]")), "{what}: {error}");
    }
    // The blobs are mirrored, each with the digest its name says; no other file has one.
    for entry in fs::read_dir(m.path("models/blobs")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let said = getxattr(&path, "user.tensormount.sha256");
        match name.strip_prefix("sha256-").filter(|h| h.len() == 64) {
            Some(hex) => assert_eq!(said.as_deref(), Some(hex), "{name}"),
            None => assert_eq!(said, None, "{name}"),
        }
        assert!(!path.with_extension("tensors").exists(), "{name}");
    }
    m.unmount().unwrap();

    // Turned off, the store is only mirrored.
    let m = mount_ok(&src, "ollama=off");
    assert!(!m.path("models/by-name").exists());
    m.unmount().unwrap();
}
