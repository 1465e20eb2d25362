//! GGUF files: tensor files with the stored bytes and gguf-py's names, types and row-major shapes,
//! the metadata as `user.gguf.*`, and `-o dtype=f32` bit for bit as gguf-py's
//! `quants.dequantize`. The oracle is gguf-py (its writer makes the fixture, its reader and
//! dequantizer say what the mount must show).

use crate::common::*;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

mod commands;
mod converted;

/// The fixture (a tensor of random blocks for every type gguf-py dequantizes, special scales
/// included, and metadata of every value type) and what gguf-py reads in it: its header, and
/// each tensor's dequantized values in `expect/NAME.f32`.
fn fixture(tmp: &TempDir, seed: &str) -> (PathBuf, serde_json::Value) {
    let py = python();
    require_module(&py, "gguf");
    let src = tmp.join("src");
    fs::create_dir_all(&src).unwrap();
    let file = src.join("model.gguf");
    let expect = tmp.join("expect");
    python_script(&py, "gguf_fixture.py", &["write", s(&file), "--seed", seed]);
    python_script(&py, "gguf_fixture.py", &["expect", s(&file), s(&expect)]);
    let header = json(&fs::read_to_string(expect.join("header.json")).unwrap());
    (src, header)
}

/// The tensors of the header gguf-py read: name, type, dims as stored, absolute offset, size.
fn tensors(header: &serde_json::Value) -> Vec<(String, String, Vec<u64>, u64, u64)> {
    header["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let dims = t["dims"].as_array().unwrap();
            (
                t["name"].as_str().unwrap().to_string(),
                t["type"].as_str().unwrap().to_string(),
                dims.iter().map(|d| d.as_u64().unwrap()).collect(),
                t["offset"].as_u64().unwrap(),
                t["size"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `len` bytes of `path` at `offset`, read directly.
fn source_bytes(path: &Path, offset: u64, len: u64) -> Vec<u8> {
    let mut buf = vec![0; len as usize];
    fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut buf, offset)
        .unwrap();
    buf
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn tensor_files_are_the_stored_bytes_with_gguf_py_types_and_shapes() {
    let tmp = TempDir::new("gguf-files");
    let (src, header) = fixture(&tmp, "1");
    let file = src.join("model.gguf");
    let m = mount_ok(&src, "");
    // The file itself is mirrored byte for byte.
    assert_eq!(
        fs::read(m.path("model.gguf")).unwrap(),
        fs::read(&file).unwrap()
    );
    let dir = m.path("model.tensors");
    let all = tensors(&header);
    assert!(all.len() >= 20, "{} tensors", all.len());
    for (name, ty, dims, offset, size) in &all {
        let t = dir.join(escaped(name));
        let got = fs::read(&t).unwrap();
        assert_eq!(got.len() as u64, *size, "{name}");
        assert!(got == source_bytes(&file, *offset, *size), "{name}: bytes");
        let shape: Vec<String> = dims.iter().rev().map(u64::to_string).collect();
        let xattr = |n: &str| getxattr(&t, n);
        assert_eq!(
            xattr("user.safetensors.dtype").as_deref(),
            Some(&ty[..]),
            "{name}"
        );
        assert_eq!(
            xattr("user.safetensors.shape").unwrap(),
            format!("[{}]", shape.join(",")),
            "{name}"
        );
        assert_eq!(
            xattr("user.safetensors.offset").unwrap(),
            offset.to_string()
        );
        assert_eq!(xattr("user.safetensors.source").unwrap(), s(&file));
        assert_eq!(xattr("user.tensormount.format").as_deref(), Some("gguf"));
        assert_eq!(xattr("user.safetensors.data_offsets"), None, "{name}");
        let plain = ["F32", "F16", "BF16"].contains(&&ty[..]);
        let block = xattr("user.gguf.block");
        assert_eq!(block.is_none(), plain, "{name}: user.gguf.block {block:?}");
    }
    // The metadata, strings as themselves, the rest as JSON; a 100000-token array does not fit.
    let xattr = |n: &str| getxattr(&dir, n);
    assert_eq!(
        xattr("user.gguf.general.architecture").as_deref(),
        Some("llama")
    );
    let listed = std::process::Command::new("getfattr")
        .args(["-d", "-m", "^user\\.gguf\\.", s(&dir)])
        .output()
        .unwrap();
    let listed = stdout(&listed);
    assert!(
        listed.contains("user.gguf.general.architecture=\"llama\""),
        "{listed}"
    );
    assert!(!listed.contains("tokenizer.ggml.tokens"), "{listed}");
    // The oracle's own view of the same keys.
    let py = python();
    let keys = python_code(
        &py,
        "import sys, gguf\n\
         r = gguf.GGUFReader(sys.argv[1])\n\
         for f in r.fields.values():\n\
         \x20   if f.name.startswith('GGUF.'): continue\n\
         \x20   if f.types == [gguf.GGUFValueType.UINT32]:\n\
         \x20       print(f.name, int(f.parts[f.data[0]][0]))\n",
        &[s(&file)],
    );
    for line in keys.lines() {
        let (key, value) = line.split_once(' ').unwrap();
        assert_eq!(
            xattr(&format!("user.gguf.{key}")).as_deref(),
            Some(value),
            "{key}"
        );
    }
    m.unmount().unwrap();
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn dtype_f32_is_gguf_py_dequantize_bit_for_bit() {
    let tmp = TempDir::new("gguf-f32");
    let (src, header) = fixture(&tmp, "2");
    let m = mount_ok(&src, "dtype=f32,npy");
    let dir = m.path("model.tensors");
    let mut checked = 0;
    for (name, ty, dims, _, _) in tensors(&header) {
        let expected = tmp.join("expect").join(format!("{name}.f32"));
        let Ok(want) = fs::read(&expected) else {
            continue;
        };
        let t = dir.join(escaped(&name));
        let got = fs::read(&t).unwrap();
        assert_eq!(got.len(), want.len(), "{name} ({ty})");
        let differ = got.chunks(4).zip(want.chunks(4)).position(|(g, w)| g != w);
        assert_eq!(differ, None, "{name} ({ty}): first differing element");
        if ty != "F32" {
            assert_eq!(
                getxattr(&t, "user.safetensors.dtype").as_deref(),
                Some("F32")
            );
            assert_eq!(
                getxattr(&t, "user.safetensors.source_dtype").as_deref(),
                Some(&ty[..])
            );
        }
        // A read that starts and ends inside elements of a block, through dd.
        let (skip, count) = (want.len() / 3 + 1, want.len() / 3);
        let mid = dd(
            &t,
            &["bs=1", &format!("skip={skip}"), &format!("count={count}")],
        )
        .unwrap();
        assert!(
            mid == want[skip..skip + count],
            "{name}: a read in the middle"
        );
        // The NPY view has the logical (row-major) shape, read by numpy.
        let npy = dir.join(format!("{}.npy", escaped(&name)));
        let out = python_code(
            &python(),
            "import sys, numpy as np\n\
             a = np.load(sys.argv[1])\n\
             b = np.fromfile(sys.argv[2], dtype='<f4').reshape(a.shape)\n\
             print(list(a.shape), a.dtype, a.view('<u4').tobytes() == b.view('<u4').tobytes())\n",
            &[s(&npy), s(&expected)],
        );
        let shape: Vec<String> = dims.iter().rev().map(u64::to_string).collect();
        assert_eq!(
            out.trim(),
            format!("[{}] float32 True", shape.join(", ")),
            "{name}"
        );
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} types checked");
    m.unmount().unwrap();
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn quantized_tensors_have_no_npy_view_without_dtype_f32_and_gguf_off_mirrors_only() {
    let tmp = TempDir::new("gguf-npy");
    let (src, _) = fixture(&tmp, "3");
    let m = mount_ok(&src, "npy");
    let dir = m.path("model.tensors");
    assert!(dir.join("f32.weight.npy").exists());
    assert!(dir.join("q4_k.weight").exists());
    assert!(!dir.join("q4_k.weight.npy").exists());
    m.unmount().unwrap();
    let m = mount_ok(&src, "gguf=off");
    let names: Vec<String> = fs::read_dir(m.path(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["model.gguf"]);
    m.unmount().unwrap();
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_broken_gguf_is_refused_naming_the_rule_and_the_rest_is_served() {
    let tmp = TempDir::new("gguf-broken");
    let (src, _) = fixture(&tmp, "4");
    let good = fs::read(src.join("model.gguf")).unwrap();
    // Version 1, a big-endian version 3, and the file cut inside its header.
    let mut v1 = good.clone();
    v1[4..8].copy_from_slice(&1u32.to_le_bytes());
    fs::write(src.join("v1.gguf"), &v1).unwrap();
    let mut be = good.clone();
    be[4..8].copy_from_slice(&3u32.to_be_bytes());
    fs::write(src.join("be.gguf"), &be).unwrap();
    fs::write(src.join("cut.gguf"), &good[..200]).unwrap();
    let m = mount_ok(&src, "");
    assert!(m.path("model.tensors/q8_0.weight").exists());
    for (file, rule, words) in [
        ("v1.gguf", "UnsupportedVersion", "version"),
        ("be.gguf", "BigEndian", "big-endian"),
        ("cut.gguf", "Truncated", "ends"),
    ] {
        let stem = file.strip_suffix(".gguf").unwrap();
        assert!(!m.path(format!("{stem}.tensors")).exists(), "{file}");
        let why = getxattr(&m.path(file), "user.tensormount.error").unwrap();
        assert!(why.contains(&format!("[{rule}]")), "{file}: {why}");
        assert!(
            why.contains("GGUF") && !why.contains("safetensors"),
            "{file}: {why}"
        );
        assert!(why.contains(words), "{file}: {why}");
    }
    m.unmount().unwrap();
}

/// The real GGUF files llama.cpp ships with its vocabularies (`ggml-vocab-*.gguf`, from
/// llama-cpp-python's source archive, which `tests/run` saves in `.venv/sdist`): every one gets
/// its tensor directory, with each tensor gguf-py lists (name, type, row-major shape, offset) and
/// each metadata key gguf-py reads whose value fits, with its value.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn the_vocabulary_files_llama_cpp_ships_read_as_gguf_py_reads_them() {
    let py = python();
    require_module(&py, "gguf");
    let sdist =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/sdist/llama_cpp_python-0.3.16.tar.gz");
    assert!(
        sdist.exists(),
        "{}: missing; tests/run downloads it",
        sdist.display()
    );
    let tmp = TempDir::new("gguf-vocab");
    let src = tmp.join("src");
    // The files, and what gguf-py reads in each: per tensor name, type, dims as stored and
    // absolute offset; per metadata key whose value is a scalar or a short array, its JSON.
    let expected = python_code(
        &py,
        "import sys, json, tarfile, pathlib, gguf\n\
         out = pathlib.Path(sys.argv[2]); out.mkdir()\n\
         with tarfile.open(sys.argv[1]) as t:\n\
         \x20   for m in t.getmembers():\n\
         \x20       n = pathlib.PurePath(m.name).name\n\
         \x20       if n.startswith('ggml-vocab-') and n.endswith('.gguf'):\n\
         \x20           (out / n).write_bytes(t.extractfile(m).read())\n\
         V = gguf.GGUFValueType\n\
         res = {}\n\
         for f in sorted(out.iterdir()):\n\
         \x20   r = gguf.GGUFReader(f)\n\
         \x20   keys = {}\n\
         \x20   for k in r.fields.values():\n\
         \x20       if k.name.startswith('GGUF.'): continue\n\
         \x20       v = k.contents()\n\
         \x20       if k.types[0] == V.ARRAY and len(v) > 16: continue\n\
         \x20       keys[k.name] = v\n\
         \x20   ts = [[t.name, t.tensor_type.name, [int(d) for d in t.shape], int(t.data_offset)] for t in r.tensors]\n\
         \x20   res[f.name] = {'keys': keys, 'tensors': ts}\n\
         print(json.dumps(res))\n",
        &[s(&sdist), s(&src)],
    );
    let expected = json(&expected);
    let files = expected.as_object().unwrap();
    assert!(files.len() >= 10, "{} vocabulary files", files.len());
    let m = mount_ok(&src, "");
    for (file, want) in files {
        let dir = m.path(format!("{}.tensors", file.strip_suffix(".gguf").unwrap()));
        assert!(dir.is_dir(), "{file}: no tensor directory");
        for t in want["tensors"].as_array().unwrap() {
            let name = t[0].as_str().unwrap();
            let path = dir.join(escaped(name));
            let dims: Vec<String> = t[2]
                .as_array()
                .unwrap()
                .iter()
                .rev()
                .map(|d| d.to_string())
                .collect();
            assert_eq!(
                getxattr(&path, "user.safetensors.dtype").as_deref(),
                t[1].as_str(),
                "{file}: {name}"
            );
            assert_eq!(
                getxattr(&path, "user.safetensors.shape").unwrap(),
                format!("[{}]", dims.join(","))
            );
            assert_eq!(
                getxattr(&path, "user.safetensors.offset").unwrap(),
                t[3].to_string()
            );
        }
        let mut seen = 0;
        for (key, value) in want["keys"].as_object().unwrap() {
            let got = getxattr(&dir, &format!("user.gguf.{key}"))
                .unwrap_or_else(|| panic!("{file}: no user.gguf.{key}"));
            match value {
                serde_json::Value::String(text) => assert_eq!(&got, text, "{file}: {key}"),
                // Numbers, booleans and short arrays as JSON, equal as values.
                other => assert_eq!(&json(&got), other, "{file}: {key}"),
            }
            seen += 1;
        }
        assert!(seen >= 3, "{file}: only {seen} keys");
        assert_eq!(
            getxattr(&dir, "user.gguf.tokenizer.ggml.tokens"),
            None,
            "{file}: a whole vocabulary does not fit an xattr"
        );
    }
    m.unmount().unwrap();
}

/// `tensormount diff` between two GGUF files, and between a GGUF file and a safetensors file of
/// the same tensors (written by the official safetensors from gguf-py's arrays): equal tensors are
/// the same, across formats too.
#[test]
fn diff_compares_gguf_files_with_each_other_and_with_safetensors() {
    let tmp = TempDir::new("gguf-diff");
    let (src, _) = fixture(&tmp, "5");
    let a = src.join("model.gguf");
    let b = tmp.join("other.gguf");
    python_script(
        &python(),
        "gguf_fixture.py",
        &["write", s(&b), "--seed", "6"],
    );
    let out = run(&["diff", s(&a), s(&a)]);
    assert!(
        stdout(&out).contains("changed: 0; differ: 0"),
        "{}",
        stdout(&out)
    );
    let out = run(&["diff", s(&a), s(&b)]);
    let text = stdout(&out);
    assert!(
        text.contains("differ     q4_k.weight  Q4_K [4,1024]"),
        "{text}"
    );
    let st = tmp.join("model.safetensors");
    python_code(
        &python(),
        "import sys, gguf, numpy as np\n\
         from safetensors.numpy import save_file\n\
         r = gguf.GGUFReader(sys.argv[1])\n\
         keep = {t.name: np.ascontiguousarray(t.data) for t in r.tensors\n\
         \x20       if t.tensor_type.name in ('F32', 'F16')}\n\
         save_file(keep, sys.argv[2])\n",
        &[s(&a), s(&st)],
    );
    let out = run(&["diff", s(&a), s(&st)]);
    let text = stdout(&out);
    for same in ["f32.weight", "f16.weight"] {
        assert!(
            !text.contains(&format!(" {same} ")),
            "{same} differs:\n{text}"
        );
    }
    assert!(
        text.contains(
            "same: 2 tensors; only in A: 24; only in B: 0; renamed: 0; changed: 0; differ: 0"
        ),
        "{text}"
    );
}

/// A GGUF file added to a mounted directory, then replaced by another (renamed over it), then
/// rewritten in place: its tensor directory appears, then serves the new file's bytes.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn gguf_files_added_replaced_and_rewritten_are_followed() {
    let tmp = TempDir::new("gguf-refresh");
    let (made, header) = fixture(&tmp, "7");
    let other = tmp.join("other.gguf");
    python_script(
        &python(),
        "gguf_fixture.py",
        &["write", s(&other), "--seed", "8"],
    );
    let src = tmp.join("live");
    fs::create_dir_all(&src).unwrap();
    let m = mount_ok(&src, "settle=0");
    let q = m.path("model.tensors/q4_k.weight");
    let offset_size = |h: &serde_json::Value| {
        let t = tensors(h);
        let (_, _, _, offset, size) = t.iter().find(|t| t.0 == "q4_k.weight").unwrap().clone();
        (offset, size)
    };
    let (offset, size) = offset_size(&header);
    // Added: written beside, renamed into place.
    fs::copy(made.join("model.gguf"), src.join(".model.gguf.part")).unwrap();
    fs::rename(src.join(".model.gguf.part"), src.join("model.gguf")).unwrap();
    let first = source_bytes(&made.join("model.gguf"), offset, size);
    wait_refreshed(&m.path(""), "the added GGUF's tensors", || {
        fs::read(&q).is_ok_and(|b| b == first)
    });
    // Replaced by another file of the same layout (another seed), renamed over it.
    fs::copy(&other, src.join(".model.gguf.part")).unwrap();
    fs::rename(src.join(".model.gguf.part"), src.join("model.gguf")).unwrap();
    let second = source_bytes(&other, offset, size);
    assert_ne!(first, second);
    wait_refreshed(&m.path(""), "the replaced GGUF's tensors", || {
        fs::read(&q).is_ok_and(|b| b == second)
    });
    // Rewritten in place: the first file's bytes written over the second's.
    fs::write(
        src.join("model.gguf"),
        fs::read(made.join("model.gguf")).unwrap(),
    )
    .unwrap();
    wait_refreshed(&m.path(""), "the rewritten GGUF's tensors", || {
        fs::read(&q).is_ok_and(|b| b == first)
    });
    m.unmount().unwrap();
}
