//! PyTorch checkpoints (`.bin`, `.pt`, `.pth`, `.ckpt` written by `torch.save`, zip or legacy
//! format): each tensor of the pickle as a raw file in `NAME.tensors/`, the virtual safetensors
//! conversion beside the checkpoint, sharded `.bin` sets that transformers loads through the mount,
//! malicious pickles that never run, broken checkpoints that leave the mount working, and the views
//! (`-o npy`, `-o dtype=f32`, `-o layout=tree`), `-o pickle=off`, and checkpoints added, replaced
//! and removed while mounted.
//!
//! The fixtures are written by the real writers (`torch.save`, `torch.jit.save`, huggingface_hub's
//! sharding) in `tests/python/pytorch.py`; the expected tensors, bytes and conversions come
//! from the same script (`torch.load(weights_only=True)`, `safetensors.torch.save_file` and
//! `safe_open`, pickletools, picklescan), never from tensormount. Expected names (the virtual
//! files', the tensor files') are written out by hand from the rules.

use crate::common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod broken;
mod live;
mod sets;
mod traps;
mod views;

// ------------------------------------------------------------------------------------ helpers

/// Runs `tests/python/pytorch.py ARGS` and returns its stdout (asserting success; a module
/// missing from the Python says so, with how to install it).
fn checkpoints(py: &Path, args: &[&str]) -> String {
    python_script(py, "pytorch.py", args)
}

/// `pytorch.py check-mount [FLAGS] FILE DIR...`: asserts that the oracle finds every tensor
/// of each FILE in its mounted DIR, bytes, xattrs and source offsets alike.
fn check_mount(py: &Path, flags: &[&str], pairs: &[(PathBuf, PathBuf)]) {
    let mut args = vec!["check-mount"];
    args.extend_from_slice(flags);
    for (file, dir) in pairs {
        args.push(s(file));
        args.push(s(dir));
    }
    let out = checkpoints(py, &args);
    assert!(out.starts_with("ok "), "check-mount {flags:?}: {out}");
}

/// The Python of the oracle and a fresh directory `fx` in `tmp` filled by `pytorch.py ARGS
/// fx...` (whose JSON output is returned).
fn write(tag: &str, args: &[&str]) -> (PathBuf, TempDir, Value) {
    require_fuse();
    let py = python();
    let tmp = TempDir::new(tag);
    let fx = tmp.join("fx");
    fs::create_dir(&fx).unwrap();
    let mut all = vec![args[0], s(&fx)];
    all.extend_from_slice(&args[1..]);
    let wrote = json(&checkpoints(&py, &all));
    (py, tmp, wrote)
}

/// Names in a directory, sorted.
fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn canonical(p: &Path) -> String {
    fs::canonicalize(p).unwrap().to_str().unwrap().to_string()
}

/// `NAME.tensors` for `NAME.EXT` (in the same directory).
fn tensors_dir(rel: &str) -> String {
    let (stem, _ext) = rel.rsplit_once('.').unwrap();
    format!("{stem}.tensors")
}

/// The name of the virtual conversion of a checkpoint, as Hugging Face names it, by hand from the
/// spec: `pytorch_model` becomes `model` (also sharded and with a variant), anything else keeps
/// its stem.
pub(super) fn virtual_name(rel: &str) -> String {
    let (dir, file) = match rel.rsplit_once('/') {
        Some((d, f)) => (format!("{d}/"), f),
        None => (String::new(), rel),
    };
    let (stem, _ext) = file.rsplit_once('.').unwrap();
    let stem = stem
        .strip_prefix("pytorch_model")
        .map_or(stem.to_string(), |rest| format!("model{rest}"));
    format!("{dir}{stem}.safetensors")
}

/// The shape as the xattr spells it: a JSON array without spaces.
fn shape_text(shape: &Value) -> String {
    let dims: Vec<String> = shape
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap().to_string())
        .collect();
    format!("[{}]", dims.join(","))
}

/// The error a mirrored checkpoint carries (`user.tensormount.error`).
pub(super) fn error_of(path: &Path) -> Option<String> {
    // A checkpoint's error is tensormount's own attribute, never safetensors'.
    assert_eq!(
        getxattr(path, "user.safetensors.error"),
        None,
        "{}",
        path.display()
    );
    getxattr(path, "user.tensormount.error")
}

/// Whether `text` names `global` (`module.name`) as a whole: not as the tail of a longer dotted
/// name, nor as the head of a longer identifier.
pub(super) fn names_global(text: &str, global: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(global).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + global.len()..].chars().next();
        !before.is_some_and(|c| ident(c) || c == '.') && !after.is_some_and(ident)
    })
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap().to_string())
        .collect()
}

/// Reads every file and every xattr under `dir` (what a curious user or an indexer does), so that
/// whatever the daemon parses lazily is parsed.
pub(super) fn touch_everything(dir: &Path) {
    let out = Command::new("getfattr")
        .args(["-R", "-d", "-m", "-", "--absolute-names"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "getfattr -R: {}", stderr(&out));
    for p in walk(dir).into_iter().filter(|p| !p.is_dir()) {
        fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    }
}

// ------------------------------------------------------------------------------------ tests

/// Items 1 to 3 on one mount of the fixtures (every dtype, views, tied weights, both formats,
/// nested Lightning checkpoints, a variant, a diffusers folder, a real file beside): see
/// [`tensor_files`] and [`virtual_files`].
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn checkpoints_mount_as_tensor_files_and_as_their_safetensors_conversion() {
    let (py, tmp, wrote) = write("pickle-mount", &["write-fixtures", "--only", "core"]);
    let m = mount_ok(&tmp.join("fx"), "");
    tensor_files(&py, &tmp, &m, &wrote);
    virtual_files(&py, &tmp, &m);
}

/// Items 1 and 2: the checkpoint mirrored byte for byte, and `NAME.tensors/` with one file per
/// tensor path, named and tagged as the spec says; the oracle checks each file's bytes against
/// `torch.load` and the bytes at `user.safetensors.offset` of the source.
fn tensor_files(py: &Path, tmp: &TempDir, m: &Mounted, wrote: &Value) {
    let fx = tmp.join("fx");
    let wrote = wrote.as_object().unwrap();

    // Every source file is mirrored with its bytes.
    for rel in wrote.keys() {
        assert!(
            fs::read(m.path(rel)).unwrap() == fs::read(fx.join(rel)).unwrap(),
            "{rel}: the mirrored bytes differ"
        );
    }

    let ckpts: Vec<(&String, &str)> = wrote
        .iter()
        .filter_map(|(rel, what)| {
            let what = what.as_str().unwrap();
            what.starts_with("pytorch-").then_some((rel, what))
        })
        .collect();
    assert_eq!(ckpts.len(), 7, "{wrote:?}");
    let mut args = vec!["tensors".to_string()];
    args.extend(ckpts.iter().map(|(rel, _)| s(&fx.join(rel)).to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let expected = json(&checkpoints(py, &args));

    for (rel, format) in &ckpts {
        let source = fx.join(rel);
        let dir = m.path(tensors_dir(rel));
        let tensors = expected[s(&source)].as_object().unwrap();
        let want: BTreeSet<String> = tensors.keys().map(|p| escaped(p)).collect();
        assert_eq!(names(&dir), want, "{}", dir.display());
        for (tpath, t) in tensors {
            let file = dir.join(escaped(tpath));
            let x = |key: &str| getxattr(&file, key);
            assert_eq!(x("user.safetensors.name").as_deref(), Some(tpath.as_str()));
            assert_eq!(x("user.safetensors.dtype").as_deref(), t["dtype"].as_str());
            assert_eq!(
                x("user.safetensors.shape"),
                Some(shape_text(&t["shape"])),
                "{rel}: {tpath}"
            );
            assert_eq!(
                x("user.tensormount.format").as_deref(),
                Some(*format),
                "{rel}: {tpath}"
            );
            assert_eq!(x("user.safetensors.data_offsets"), None, "{rel}: {tpath}");
            assert_eq!(
                fs::metadata(&file).unwrap().len(),
                t["nbytes"].as_u64().unwrap(),
                "{rel}: {tpath}"
            );
            if t["contiguous"].as_bool().unwrap() {
                assert_eq!(
                    x("user.safetensors.source"),
                    Some(canonical(&source)),
                    "{rel}: {tpath}"
                );
                let offset: u64 = x("user.safetensors.offset")
                    .unwrap_or_else(|| panic!("{rel}: {tpath}: no offset"))
                    .parse()
                    .unwrap();
                assert!(offset <= fs::metadata(&source).unwrap().len());
            } else {
                assert_eq!(x("user.safetensors.source"), None, "{rel}: {tpath}");
                assert_eq!(x("user.safetensors.offset"), None, "{rel}: {tpath}");
            }
        }
    }

    // The paths of nested pickles, by hand.
    for p in [
        "lightning.tensors/state_dict.model.layer.weight",
        "lightning.tensors/optimizer_states.0.state.0.exp_avg",
        "nested.tensors/state_dict.a%2Fb",
        "pytorch_model.tensors/weird%25name%2Fx",
        "pytorch_model.tensors/tied.twin",
        "pytorch_model.tensors/transposed",
    ] {
        assert!(m.path(p).is_file(), "{p}");
    }
    // Tied weights: two files, the same bytes.
    assert!(
        fs::read(m.path("pytorch_model.tensors/tied.weight")).unwrap()
            == fs::read(m.path("pytorch_model.tensors/tied.twin")).unwrap()
    );

    // The bytes of each file, and those at its offset in the source (what a GPU loader reads).
    let pairs: Vec<(PathBuf, PathBuf)> = ckpts
        .iter()
        .map(|(rel, _)| (fx.join(rel), m.path(tensors_dir(rel))))
        .collect();
    check_mount(py, &[], &pairs);
}

/// Item 3: the virtual safetensors file beside each checkpoint: Hugging Face's name, the bytes of
/// the official conversion of the state dict, `converted_from`, loadable by `safe_open`; a real
/// file of that name wins; no tensor directory of its own.
fn virtual_files(py: &Path, tmp: &TempDir, m: &Mounted) {
    let fx = tmp.join("fx");

    assert_eq!(
        names(&m.dir),
        set(&[
            "legacy.pt",
            "legacy.safetensors",
            "legacy.tensors",
            "lightning.ckpt",
            "lightning.safetensors",
            "lightning.tensors",
            "model.fp16.safetensors",
            "model.safetensors",
            "nested.pth",
            "nested.safetensors",
            "nested.tensors",
            "pytorch_model.bin",
            "pytorch_model.fp16.bin",
            "pytorch_model.fp16.tensors",
            "pytorch_model.tensors",
            "realwins",
            "unet",
        ])
    );
    assert_eq!(
        names(&m.path("unet")),
        set(&[
            "diffusion_pytorch_model.bin",
            "diffusion_pytorch_model.safetensors",
            "diffusion_pytorch_model.tensors",
        ])
    );
    // The real model.safetensors wins (with its own tensor directory, as always).
    assert_eq!(
        names(&m.path("realwins")),
        set(&[
            "model.safetensors",
            "model.tensors",
            "pytorch_model.bin",
            "pytorch_model.tensors",
        ])
    );
    assert!(
        fs::read(m.path("realwins/model.safetensors")).unwrap()
            == fs::read(fx.join("realwins/model.safetensors")).unwrap()
    );
    assert_eq!(
        getxattr(
            &m.path("realwins/model.safetensors"),
            "user.tensormount.converted_from"
        ),
        None
    );

    let ckpts = [
        "pytorch_model.bin",
        "pytorch_model.fp16.bin",
        "legacy.pt",
        "lightning.ckpt",
        "nested.pth",
        "unet/diffusion_pytorch_model.bin",
    ];
    let refs = tmp.join("reference");
    fs::create_dir(&refs).unwrap();
    let mut args = vec!["convert".to_string()];
    for (i, rel) in ckpts.iter().enumerate() {
        args.push(s(&fx.join(rel)).to_string());
        args.push(s(&refs.join(format!("{i}.safetensors"))).to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let shas = json(&checkpoints(py, &args));

    let mut safe_open = vec!["safe-open".to_string()];
    for (i, rel) in ckpts.iter().enumerate() {
        let virt = m.path(virtual_name(rel));
        let want = fs::read(refs.join(format!("{i}.safetensors"))).unwrap();
        let sha = &shas[s(&fx.join(rel))];
        let got = fs::read(&virt).unwrap_or_else(|e| panic!("{}: {e}", virt.display()));
        assert_eq!(
            got.len(),
            want.len(),
            "{}: length (the reference's sha256 is {sha})",
            virt.display()
        );
        let first = got.iter().zip(&want).position(|(a, b)| a != b);
        assert_eq!(
            first,
            None,
            "{}: differs from save_file's bytes (sha256 {sha}) first at byte {first:?}",
            virt.display()
        );
        assert_eq!(fs::metadata(&virt).unwrap().len(), want.len() as u64);
        // Reads that start and end anywhere, past the page cache.
        let dd_bytes = dd(&virt, &["bs=4099", "iflag=direct"]).unwrap();
        assert!(
            dd_bytes == want,
            "{}: dd bs=4099 iflag=direct",
            virt.display()
        );
        assert_eq!(
            getxattr(&virt, "user.tensormount.converted_from"),
            Some(canonical(&fx.join(rel))),
            "{}",
            virt.display()
        );
        safe_open.push(s(&virt).to_string());
        safe_open.push(s(&fx.join(rel)).to_string());
    }
    let args: Vec<&str> = safe_open.iter().map(String::as_str).collect();
    let out = checkpoints(py, &args);
    assert!(out.starts_with("ok "), "{out}");
}
