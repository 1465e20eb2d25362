//! ONNX models: a raw file per tensor of the main graph, every subgraph and every local function
//! (initializers, `Constant` nodes), the model's producer, opsets and metadata as `user.onnx.*`,
//! a virtual `NAME.safetensors`, `-o dtype=f32` and `-o npy`, and hostile models refused by
//! rule. The oracle is the `onnx` package (`tests/python/onnx_oracle.py`): `onnx.load` and
//! `numpy_helper.to_array` say what each tensor's bytes are; its writer makes the synthetic
//! models, and the real ones come from the registry (the `.onnx` files inside the wheels of
//! rapidocr-onnxruntime 1.4.4 and silero-vad 6.2.3, which `tests/run` downloads).

use crate::common::*;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The oracle's reading of the models in `dir`: {file name: {"tensors", "metadata", "skipped"}}.
fn oracle(py: &Path, dir: &Path) -> BTreeMap<String, Value> {
    let mut models: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
        .collect();
    models.sort();
    let mut args = vec!["tensors"];
    args.extend(models.iter().map(|p| s(p)));
    let read = json(&python_script(py, "onnx_oracle.py", &args));
    read.as_object()
        .unwrap()
        .iter()
        .map(|(path, v)| {
            let name = Path::new(path).file_name().unwrap().to_string_lossy();
            (name.into_owned(), v.clone())
        })
        .collect()
}

/// Every tensor file under `dir` (`NAME.tensors/`), by the tensor name its xattr gives (not the
/// NPY views of `-o npy`).
fn tensor_files(dir: &Path) -> BTreeMap<String, PathBuf> {
    walk(dir)
        .into_iter()
        .filter(|p| p.is_file() && p.extension().is_none_or(|x| x != "npy"))
        .filter_map(|p| Some((getxattr(&p, "user.safetensors.name")?, p)))
        .collect()
}

/// Checks every model of `oracle` on the mount `m` (whose SOURCE is the models' directory): each
/// tensor the oracle reads has one file, of its bytes, dtype and shape, marked `onnx`, and no
/// file is a tensor the oracle does not read; the tensor directory carries the model's
/// metadata; the virtual safetensors file, read by the official reader, holds every tensor of a
/// type safetensors has, with `format: onnx`. Returns the number of tensors checked.
fn models_are_as_onnx_reads_them(
    py: &Path,
    m: &Mounted,
    oracle: &BTreeMap<String, Value>,
) -> usize {
    let mut checked = 0;
    for (model, want) in oracle {
        let stem = model.strip_suffix(".onnx").unwrap();
        let dir = m.path(format!("{stem}.tensors"));
        let files = tensor_files(&dir);
        let tensors = want["tensors"].as_object().unwrap();
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            tensors.keys().collect::<Vec<_>>(),
            "{model}: the tensor files"
        );
        for (name, t) in tensors {
            let f = &files[name];
            assert_eq!(
                sha256sum(f),
                t["sha256"].as_str().unwrap(),
                "{model}: {name}"
            );
            assert_eq!(
                getxattr(f, "user.safetensors.dtype").as_deref(),
                t["dtype"].as_str(),
                "{model}: {name}"
            );
            assert_eq!(
                getxattr(f, "user.safetensors.shape").unwrap(),
                t["shape"].to_string(),
                "{model}: {name}"
            );
            assert_eq!(
                getxattr(f, "user.tensormount.format").as_deref(),
                Some("onnx")
            );
            checked += 1;
        }
        for (key, value) in want["metadata"].as_object().unwrap() {
            assert_eq!(
                getxattr(&dir, &format!("user.onnx.{key}")).as_deref(),
                value.as_str(),
                "{model}: {key}"
            );
        }
        let virt = m.path(format!("{stem}.safetensors"));
        let read = json(&python_script(
            py,
            "onnx_oracle.py",
            &["safetensors", s(&virt)],
        ));
        assert_eq!(read["metadata"]["format"], "onnx", "{model}");
        let convertible: Vec<&String> = tensors
            .iter()
            .filter(|(_, t)| !matches!(t["dtype"].as_str(), Some("C128" | "INT4" | "UINT4")))
            .map(|(n, _)| n)
            .collect();
        let held: Vec<&String> = read["tensors"].as_object().unwrap().keys().collect();
        assert_eq!(held, convertible, "{model}: the virtual safetensors file");
        for name in held {
            assert_eq!(
                read["tensors"][name]["sha256"], tensors[name]["sha256"],
                "{model}: {name} in the virtual file"
            );
        }
    }
    checked
}

/// The synthetic models: every element type as `raw_data` and in its typed field (varints,
/// packed floats and doubles, complex numbers, 4-bit types), `Constant` nodes of every attribute,
/// `If` branches and a `Loop` body that reuse names, a local function, a sparse initializer and
/// strings (not shown); and what onnx's writer never writes but protobuf allows (two `graph`
/// fields merged, `raw_data` and `name` given twice, floats split over two packed arrays or given
/// one field each, int64s unpacked). Then `-o dtype=f32` and `-o npy` on them.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn every_kind_of_tensor_is_as_onnx_reads_it() {
    require_fuse();
    let py = python();
    require_module(&py, "onnx");
    let tmp = TempDir::new("onnx-kinds");
    let src = tmp.join("src");
    python_script(&py, "onnx_oracle.py", &["write", s(&src)]);
    let oracle = oracle(&py, &src);
    let m = mount_ok(&src, "");
    let checked = models_are_as_onnx_reads_them(&py, &m, &oracle);
    assert!(checked >= 59, "{checked}");
    // What is not shown is said: the strings and the sparse initializer.
    for what in [
        "tensor `names` is not shown",
        "sparse initializer `sparse_w` is not shown",
    ] {
        assert!(m.stderr.contains(what), "{what}: {}", m.stderr);
    }
    m.unmount().unwrap();

    // -o dtype=f32: every narrower float as float32 (as numpy converts to_array's values), and
    // -o npy: a NAME.npy of each, numpy's own view.
    let m = mount_ok(&src, "dtype=f32,npy");
    let kinds = &oracle["kinds.onnx"]["tensors"];
    let files = tensor_files(&m.path("kinds.tensors"));
    let mut widened = 0;
    for (name, t) in kinds.as_object().unwrap() {
        if let Some(f32) = t["f32_sha256"].as_str() {
            assert_eq!(sha256sum(&files[name]), f32, "{name} as f32");
            assert_eq!(
                getxattr(&files[name], "user.safetensors.dtype").unwrap(),
                "F32"
            );
            widened += 1;
        }
    }
    assert!(widened >= 10, "{widened}");
    let npy = files["raw_int64"].with_extension("npy");
    let out = python_code(
        &py,
        "import hashlib, numpy, sys\na = numpy.load(sys.argv[1])\nassert a.shape == (3, 4) and \
         a.dtype == numpy.int64, (a.shape, a.dtype)\nprint(hashlib.sha256(a.tobytes()).hexdigest())",
        &[s(&npy)],
    );
    assert_eq!(out.trim(), sha256sum(&files["raw_int64"]));
    m.unmount().unwrap();
}

/// The `.onnx` files inside rapidocr-onnxruntime's and silero-vad's wheels: PP-OCR det's
/// constants in `raw_data`, cls's in `float_data` and `int64_data`, silero-vad's inside the
/// branches of an `If`. Every tensor is the oracle's, byte for byte.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn the_models_registry_packages_ship_are_as_onnx_reads_them() {
    require_fuse();
    let py = python();
    require_module(&py, "onnx");
    let tmp = TempDir::new("onnx-real");
    let src = tmp.join("src");
    fs::create_dir_all(&src).unwrap();
    let wheels = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/wheels");
    for wheel in [
        "rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
        "silero_vad-6.2.3-py3-none-any.whl",
    ] {
        let wheel = wheels.join(wheel);
        assert!(wheel.exists(), "{}: run tests/run", wheel.display());
        python_code(
            &py,
            "import os, sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nfor n in z.namelist():\n    \
             if n.endswith('.onnx'):\n        open(os.path.join(sys.argv[2], os.path.basename(n)), \
             'wb').write(z.read(n))",
            &[s(&wheel), s(&src)],
        );
    }
    let oracle = oracle(&py, &src);
    assert!(oracle.len() >= 9, "{:?}", oracle.keys());
    let m = mount_ok(&src, "");
    let checked = models_are_as_onnx_reads_them(&py, &m, &oracle);
    assert!(checked >= 1900, "{checked}");
    m.unmount().unwrap();
}

/// External data, as `onnx.save_model` writes it: all tensors in one file, one file per tensor, a
/// file in a subdirectory. Every tensor is the oracle's, its `source` and `offset` xattrs say
/// where its bytes are (what a GPU loader reads), and the virtual safetensors file holds them.
/// Refused, each by its rule: a location that is absolute or leaves the model's directory (the
/// file there exists; nothing is opened), an offset past the data file's end, a missing data
/// file, a length that is not the tensor's. Then a data file replaced while mounted, beside the
/// model or in a subdirectory: its tensors follow it.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn external_data_is_read_from_the_files_the_model_names() {
    require_fuse();
    let py = python();
    require_module(&py, "onnx");
    let tmp = TempDir::new("onnx-external");
    let src = tmp.join("src");
    let wrote = json(&python_script(
        &py,
        "onnx_oracle.py",
        &["write-external", s(&src)],
    ));
    let m = mount_ok(&src, "");
    for sub in wrote["good"].as_array().unwrap() {
        let sub = sub.as_str().unwrap();
        let oracle = oracle(&py, &src.join(sub));
        let want = &oracle["model.onnx"]["tensors"];
        let files = tensor_files(&m.path(format!("{sub}/model.tensors")));
        assert_eq!(files.len(), want.as_object().unwrap().len(), "{sub}");
        for (name, t) in want.as_object().unwrap() {
            let f = &files[name];
            assert_eq!(sha256sum(f), t["sha256"].as_str().unwrap(), "{sub}: {name}");
            // The bytes where the xattrs say they are, read directly.
            let source = getxattr(f, "user.safetensors.source").unwrap();
            let offset: u64 = getxattr(f, "user.safetensors.offset")
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                source.starts_with(s(&src.join(sub))),
                "{sub}: {name}: {source}"
            );
            assert!(!source.ends_with("model.onnx"), "{sub}: {name}: {source}");
            let mut direct = vec![0; t["size"].as_u64().unwrap() as usize];
            std::os::unix::fs::FileExt::read_exact_at(
                &fs::File::open(&source).unwrap(),
                &mut direct,
                offset,
            )
            .unwrap();
            assert_eq!(direct, fs::read(f).unwrap(), "{sub}: {name}");
        }
        let virt = m.path(format!("{sub}/model.safetensors"));
        let read = json(&python_script(
            &py,
            "onnx_oracle.py",
            &["safetensors", s(&virt)],
        ));
        for (name, t) in want.as_object().unwrap() {
            assert_eq!(
                read["tensors"][name]["sha256"], t["sha256"],
                "{sub}: {name}"
            );
        }
    }
    for (file, rule) in wrote["bad"].as_object().unwrap() {
        let rule = rule.as_str().unwrap();
        let error = getxattr(&m.path(format!("bad/{file}")), "user.tensormount.error")
            .unwrap_or_else(|| panic!("{file}: no error"));
        assert!(error.contains(rule), "{file}: {error}");
        let stem = file.strip_suffix(".onnx").unwrap();
        assert!(!m.path(format!("bad/{stem}.tensors")).exists(), "{file}");
        assert!(
            !m.path(format!("bad/{stem}.safetensors")).exists(),
            "{file}"
        );
    }

    // A data file replaced (renamed into place) while mounted, beside the model and in a
    // subdirectory of its directory: the tensors follow it.
    for (sub, data) in [("one", "model.onnx_data"), ("nested", "weights/data.bin")] {
        let data = src.join(sub).join(data);
        let w0 = m.path(format!("{sub}/model.tensors/w0"));
        let before = fs::read(&w0).unwrap();
        let offset: u64 = getxattr(&w0, "user.safetensors.offset")
            .unwrap()
            .parse()
            .unwrap();
        let mut bytes = fs::read(&data).unwrap();
        for b in &mut bytes[offset as usize..offset as usize + before.len()] {
            *b ^= 0x5a;
        }
        let tmp_data = data.with_extension("tmp");
        fs::write(&tmp_data, &bytes).unwrap();
        fs::rename(&tmp_data, &data).unwrap();
        let want: Vec<u8> = before.iter().map(|b| b ^ 0x5a).collect();
        wait_refreshed(&m.dir, "w0 from the new data file", || {
            fs::read(&w0).is_ok_and(|now| now == want)
        });
    }
    m.unmount().unwrap();
}

/// A model's data file is a weight file to `verify` and `-o verify`: recorded in `SHA256SUMS`
/// (written by `sha256sum`), it is `ok`; `--write-manifest` lists each tensor under the data
/// file with the digest of the bytes the oracle reads; with a byte flipped, the data file is a
/// `mismatch`, `--manifest` names the tensors whose bytes the oracle now reads otherwise, and
/// under `-o verify` the tensor files it holds fail reads with EIO while the model file itself
/// stays readable. A model that also holds a tensor in typed fields lists that one under itself.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn verify_checks_the_data_files_a_model_names() {
    require_fuse();
    let py = python();
    require_module(&py, "onnx");
    let tmp = TempDir::new("onnx-verify");
    let src = tmp.join("src");
    python_script(&py, "onnx_oracle.py", &["write-external", s(&src)]);
    let dir = src.join("one");
    let out = std::process::Command::new("sha256sum")
        .args(["model.onnx", "model.onnx_data"])
        .current_dir(&dir)
        .output()
        .unwrap();
    fs::write(dir.join("SHA256SUMS"), &out.stdout).unwrap();
    let verify = |want: &[&str]| {
        let out = run(&["verify", s(&dir)]);
        let text = stdout(&out);
        for line in want {
            assert!(text.lines().any(|l| l.starts_with(line)), "{line}: {text}");
        }
    };
    verify(&["ok        model.onnx ", "ok        model.onnx_data "]);
    let digests = |read: &BTreeMap<String, Value>| -> BTreeMap<String, Value> {
        let tensors = read["model.onnx"]["tensors"].as_object().unwrap();
        let digest = |(n, t): (&String, &Value)| (n.clone(), t["sha256"].clone());
        tensors.iter().map(digest).collect()
    };
    let before = digests(&oracle(&py, &dir));
    let manifest = tmp.join("manifest.json");
    let out = run(&["verify", "--write-manifest", s(&manifest), s(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let written = json(&fs::read_to_string(&manifest).unwrap());
    let files = &written["files"];
    assert_eq!(files["model.onnx"]["tensors"], json("{}"), "{written}");
    let listed: BTreeMap<String, Value> =
        serde_json::from_value(files["model.onnx_data"]["tensors"].clone()).unwrap();
    assert_eq!(listed, before, "{written}");

    // A tensor in the model's typed fields (computed on read) beside external data: listed under
    // the model file, with the oracle's digest; the rest under the data file.
    let mixed = src.join("mixed");
    let mut want = digests(&oracle(&py, &mixed));
    let typed = want.remove("typed").expect("the oracle reads `typed`");
    let mixed_manifest = tmp.join("mixed.json");
    let out = run(&["verify", "--write-manifest", s(&mixed_manifest), s(&mixed)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let written = json(&fs::read_to_string(&mixed_manifest).unwrap());
    let files = &written["files"];
    assert_eq!(
        files["model.onnx"]["tensors"],
        serde_json::json!({ "typed": typed }),
        "{written}"
    );
    let listed: BTreeMap<String, Value> =
        serde_json::from_value(files["model.onnx_data"]["tensors"].clone()).unwrap();
    assert_eq!(listed, want, "{written}");

    let data = dir.join("model.onnx_data");
    let mut bytes = fs::read(&data).unwrap();
    bytes[100] ^= 1;
    fs::write(&data, &bytes).unwrap();
    verify(&["ok        model.onnx ", "mismatch  model.onnx_data "]);
    let after = digests(&oracle(&py, &dir));
    let changed: Vec<&String> = before.keys().filter(|n| before[*n] != after[*n]).collect();
    assert_eq!(changed.len(), 1, "{after:?}");
    let out = run(&["verify", "--json", "--manifest", s(&manifest), s(&dir)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&stdout(&out));
    let damaged: Vec<(&str, &str)> = report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["status"] != "ok")
        .map(|t| (t["file"].as_str().unwrap(), t["name"].as_str().unwrap()))
        .collect();
    assert_eq!(
        damaged,
        [("model.onnx_data", changed[0].as_str())],
        "{report}"
    );

    let m = mount_ok(&dir, "verify");
    let w0 = m.path("model.tensors/w0");
    wait_for("the data file's verdict", || {
        getxattr(&m.path("model.onnx_data"), "user.tensormount.verified").as_deref()
            == Some("mismatch")
    });
    assert_eq!(
        fs::read(&w0).unwrap_err().raw_os_error(),
        Some(libc::EIO),
        "a tensor of the damaged data file"
    );
    assert!(fs::read(m.path("model.onnx")).is_ok());
    m.unmount().unwrap();
}

/// Hostile models, each refused with its rule in `user.tensormount.error` on the mirrored file
/// and a warning, while the good model beside them is served: a file cut short, `raw_data` of
/// the wrong length, more values than the shape, graphs nested past the bound, a group field.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn hostile_models_are_refused_by_rule_and_the_rest_is_served() {
    require_fuse();
    let py = python();
    require_module(&py, "onnx");
    let tmp = TempDir::new("onnx-hostile");
    let src = tmp.join("src");
    let rules = json(&python_script(
        &py,
        "onnx_oracle.py",
        &["write-hostile", s(&src)],
    ));
    let m = mount_ok(&src, "");
    for (file, rule) in rules.as_object().unwrap() {
        let stem = file.strip_suffix(".onnx").unwrap();
        let error = getxattr(&m.path(file), "user.tensormount.error");
        match rule.as_str() {
            None => {
                assert_eq!(error, None, "{file}");
                assert_eq!(
                    fs::read(m.path(format!("{stem}.tensors/w"))).unwrap().len(),
                    16
                );
            }
            Some(rule) => {
                let error = error.unwrap_or_else(|| panic!("{file}: no error"));
                assert!(error.contains(&format!("[{rule}]")), "{file}: {error}");
                assert!(!m.path(format!("{stem}.tensors")).exists(), "{file}");
                assert!(!m.path(format!("{stem}.safetensors")).exists(), "{file}");
            }
        }
        // Mirrored byte for byte all the same.
        assert_eq!(
            fs::read(m.path(file)).unwrap(),
            fs::read(src.join(file)).unwrap()
        );
    }
    m.unmount().unwrap();
}
