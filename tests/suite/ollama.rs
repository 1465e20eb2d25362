//! ollama's model store, written as ollama writes one (`tests/python/ollama.py`): every
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
        "ollama.py",
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
            (
                v[0].to_string(),
                v[1].parse().unwrap(),
                v[2].parse().unwrap(),
            )
        })
        .collect()
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
        [
            "hf.co",
            "jmorgan",
            "llama3.2:1b",
            "llama3.2:latest",
            "localhost:5000",
            "mlx-model:bf16",
        ]
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
        // A model stored as safetensors, a tensor a blob: every blob's tensors in one directory,
        // each as the official safetensors reads it from its blob.
        if let Some(tensors) = model["tensors"].as_object() {
            want.push("model.tensors".into());
            let tdir = dir.join("model.tensors");
            let mut shown = names(&tdir);
            shown.retain(|n| n != "__metadata__");
            let mut expected: Vec<String> = tensors.keys().map(|t| escaped(t)).collect();
            expected.sort();
            assert_eq!(shown, expected, "{name}");
            for (t, blob) in tensors {
                let want = python_code(
                    &python(),
                    "import sys\nfrom safetensors.numpy import load_file\n\
                     sys.stdout.write(load_file(sys.argv[1])[sys.argv[2]].tobytes().hex())\n",
                    &[blob.as_str().unwrap(), t],
                );
                let got = fs::read(tdir.join(escaped(t))).unwrap();
                let got: String = got.iter().map(|b| format!("{b:02x}")).collect();
                assert_eq!(got, want, "{name}/{t}");
                let source = getxattr(&tdir.join(escaped(t)), "user.safetensors.source");
                assert_eq!(source.as_deref(), blob.as_str(), "{name}/{t}");
            }
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

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn models_pulled_removed_and_retagged_are_followed_and_a_pull_shows_once_complete() {
    let tmp = TempDir::new("ollama-live");
    let (src, expect) = store(&tmp);
    let m = mount_ok(&src, "");
    let mnt = m.path("");
    let manifests = src.join("models/manifests/registry.ollama.ai");
    let by_name = m.path("models/by-name");
    let model_of = |name: &str| -> String {
        let model = expect["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap();
        model["files"]["model.gguf"].as_str().unwrap().to_string()
    };
    let shown_digest = |name: &str| {
        let path = by_name.join(name).join("model.gguf");
        path.exists().then(|| sha256sum(&path))
    };
    // A tag added (`ollama cp`): a new manifest naming blobs already there.
    let tag = manifests.join("library/llama3.2/copy");
    fs::copy(manifests.join("library/llama3.2/1b"), &tag).unwrap();
    wait_refreshed(&mnt, "llama3.2:copy", || {
        by_name.join("llama3.2:copy/model.gguf").exists()
    });
    // A model removed (`ollama rm`): its manifest, then its emptied directories.
    fs::remove_file(manifests.join("library/llama3.2/1b")).unwrap();
    wait_refreshed(&mnt, "llama3.2:1b gone", || {
        !by_name.join("llama3.2:1b").exists()
    });
    // A tag pointed at another model (the manifest replaced, as a pull of a tag replaces it).
    let lora = model_of("jmorgan/lora:v1");
    let other = tmp.join("manifest");
    fs::copy(manifests.join("jmorgan/lora/v1"), &other).unwrap();
    fs::rename(&other, &tag).unwrap();
    let want = Path::new(&lora).file_name().unwrap().to_str().unwrap()[7..].to_string();
    wait_refreshed(&mnt, "llama3.2:copy retagged", || {
        shown_digest("llama3.2:copy").as_deref() == Some(&want[..])
    });
    assert!(by_name.join("llama3.2:copy/adapter.gguf").exists());
    // A manifest rewritten in place (a pull of a tag ollama has), caught half written: the model
    // stays as it was shown, and the manifest says it is being written.
    let latest = manifests.join("library/llama3.2/latest");
    let whole = fs::read(&latest).unwrap();
    let before = shown_digest("llama3.2:latest");
    let seen = generation(&mnt);
    fs::write(&latest, &whole[..whole.len() / 2]).unwrap();
    let mirrored = m.path("models/manifests/registry.ollama.ai/library/llama3.2/latest");
    wait_refreshed(&mnt, "the half-written manifest", || {
        generation(&mnt) > seen
            && getxattr(&mirrored, "user.tensormount.error")
                .is_some_and(|e| e.starts_with("being written"))
    });
    assert!(before.is_some());
    assert_eq!(shown_digest("llama3.2:latest"), before);
    fs::write(&latest, &whole).unwrap();
    wait_refreshed(&mnt, "the rewritten manifest settled", || {
        getxattr(&mirrored, "user.tensormount.error").is_none()
    });
    assert_eq!(shown_digest("llama3.2:latest"), before);
    // A pull in progress: the manifest of a model whose blob is not whole yet is not shown.
    let blob = b"a template, pulled last".to_vec();
    let digest = {
        let f = tmp.join("blob");
        fs::write(&f, &blob).unwrap();
        sha256sum(&f)
    };
    let blobs = src.join("models/blobs");
    fs::write(blobs.join(format!("sha256-{digest}-partial")), &blob[..5]).unwrap();
    let manifest = fs::read_to_string(manifests.join("library/llama3.2/latest")).unwrap();
    let mut json = json(&manifest);
    json["layers"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "mediaType": "application/vnd.ollama.image.template",
            "digest": format!("sha256:{digest}"),
            "size": blob.len(),
        }));
    fs::create_dir_all(manifests.join("library/pulled")).unwrap();
    fs::write(manifests.join("library/pulled/latest"), json.to_string()).unwrap();
    let error = m.path("models/manifests/registry.ollama.ai/library/pulled/latest");
    wait_refreshed(&mnt, "the pulled manifest", || error.exists());
    wait_refreshed(&mnt, "the pulled manifest's error", || {
        getxattr(&error, "user.tensormount.error").is_some_and(|e| e.ends_with("[MissingBlob]"))
    });
    assert!(!by_name.join("pulled:latest").exists());
    // The blob whole, renamed into place: the model is shown, the error gone.
    fs::write(blobs.join(format!("sha256-{digest}-partial")), &blob).unwrap();
    fs::rename(
        blobs.join(format!("sha256-{digest}-partial")),
        blobs.join(format!("sha256-{digest}")),
    )
    .unwrap();
    wait_refreshed(&mnt, "pulled:latest", || {
        by_name.join("pulled:latest/template-2").exists()
    });
    assert_eq!(
        fs::read(by_name.join("pulled:latest/template-2")).unwrap(),
        blob
    );
    assert_eq!(getxattr(&error, "user.tensormount.error"), None);
    m.unmount().unwrap();
}

#[test]
fn verify_checks_every_blob_against_its_name_and_every_manifest_against_its_blobs() {
    let tmp = TempDir::new("ollama-verify");
    let (src, expect) = store(&tmp);
    let verify = |want: i32| {
        let out = run(&["verify", "--json", s(&src)]);
        assert_eq!(out.status.code(), Some(want), "{}", stderr(&out));
        json(&stdout(&out))
    };
    let report = verify(1);
    let rows = report["files"].as_array().unwrap();
    let row = |path: &str| rows.iter().find(|r| r["path"] == path);
    let blobs = src.join("models/blobs");
    let unreferenced: Vec<&str> = expect["unreferenced"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let mut checked = 0;
    for entry in fs::read_dir(&blobs).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap();
        let rel = format!("models/blobs/{name}");
        let Some(hex) = name.strip_prefix("sha256-").filter(|h| h.len() == 64) else {
            // Partial downloads and temporary files are not blobs.
            assert!(row(&rel).is_none(), "{rel}");
            continue;
        };
        let r = row(&rel).unwrap_or_else(|| panic!("{rel} not verified"));
        assert_eq!(r["actual"].as_str(), Some(&sha256sum(&path)[..]), "{rel}");
        assert_eq!(r["expected"].as_str(), Some(hex), "{rel}");
        assert_eq!(r["recorded_as"], "blob-name");
        let status = match unreferenced.contains(&s(&path)) {
            true => "unreferenced",
            false => "ok",
        };
        assert_eq!(r["status"], status, "{rel}");
        checked += 1;
    }
    assert!(checked >= 20, "{checked} blobs");
    // Each manifest naming a blob that is missing or of another size is a mismatch.
    for what in ["missing", "size"] {
        let bad = &expect["bad"][what];
        let rel = Path::new(bad["manifest"].as_str().unwrap())
            .strip_prefix(&src)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let r = row(&rel).unwrap_or_else(|| panic!("{rel} not reported"));
        assert_eq!(r["status"], "mismatch", "{rel}");
        let rule = format!("[{}]", bad["rule"].as_str().unwrap());
        assert!(r["error"].as_str().unwrap().ends_with(&rule), "{r}");
    }
    // A flipped byte in a blob is a mismatch against its name.
    let model = expect["models"][0]["files"]["template"].as_str().unwrap();
    let mut bytes = fs::read(model).unwrap();
    bytes[0] ^= 1;
    fs::write(model, bytes).unwrap();
    let report = verify(1);
    let name = Path::new(model).file_name().unwrap().to_str().unwrap();
    let r = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == format!("models/blobs/{name}"))
        .unwrap();
    assert_eq!(r["status"], "mismatch");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_verify_fails_reads_of_a_model_whose_blob_is_not_its_name() {
    let tmp = TempDir::new("ollama-mount-verify");
    let (src, expect) = store(&tmp);
    let model = &expect["models"][0];
    let blob = model["files"]["model.gguf"].as_str().unwrap();
    let mut bytes = fs::read(blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::write(blob, bytes).unwrap();
    let m = mount_ok(&src, "verify");
    let dir = m
        .path("models/by-name")
        .join(model["name"].as_str().unwrap());
    let verified = |p: &Path| {
        let mut v = None;
        wait_for("user.tensormount.verified", || {
            v = getxattr(p, "user.tensormount.verified");
            v.is_some()
        });
        v.unwrap()
    };
    assert_eq!(verified(&dir.join("model.gguf")), "mismatch");
    let err = fs::read(dir.join("model.gguf")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    // Its other layers are their names' bytes.
    assert_eq!(verified(&dir.join("template")), "ok");
    assert_eq!(
        fs::read(dir.join("template")).unwrap(),
        fs::read(model["files"]["template"].as_str().unwrap()).unwrap()
    );
    m.unmount().unwrap();
}
