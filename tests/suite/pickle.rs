//! PyTorch checkpoints (`.bin`, `.pt`, `.pth`, `.ckpt` written by `torch.save`, zip or legacy
//! format): each tensor of the pickle as a raw file in `NAME.tensors/`, the virtual safetensors
//! conversion beside the checkpoint, sharded `.bin` sets that transformers loads through the mount,
//! malicious pickles that never run, broken checkpoints that leave the mount working, and the views
//! (`-o npy`, `-o dtype=f32`, `-o layout=tree`), `-o pickle=off`, and checkpoints added, replaced
//! and removed while mounted.
//!
//! The fixtures are written by the real writers (`torch.save`, `torch.jit.save`, huggingface_hub's
//! sharding) in `tests/python/checkpoints.py`; the expected tensors, bytes and conversions come
//! from the same script (`torch.load(weights_only=True)`, `safetensors.torch.save_file` and
//! `safe_open`, pickletools, picklescan), never from tensormount. Expected names (the virtual
//! files', the tensor files') are written out by hand from the rules.

use crate::common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

// ------------------------------------------------------------------------------------ helpers

/// Runs `tests/python/checkpoints.py ARGS` and returns its stdout (asserting success; a module
/// missing from the Python says so, with how to install it).
fn checkpoints(py: &Path, args: &[&str]) -> String {
    python_script(py, "checkpoints.py", args)
}

/// `checkpoints.py check-mount [FLAGS] FILE DIR...`: asserts that the oracle finds every tensor
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

/// The Python of the oracle and a fresh directory `fx` in `tmp` filled by `checkpoints.py ARGS
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

/// Item 8's sharded set: the `.bin` shards of a BERT written as transformers 4 wrote them get
/// virtual `model-0000N-of-0000M.safetensors` shards and a virtual index naming them, and
/// `AutoModel.from_pretrained(mount, use_safetensors=True)` loads the source's weights.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn sharded_bin_sets_load_with_transformers_from_the_virtual_safetensors() {
    let (py, tmp, wrote) = write("pickle-sharded", &["write-fixtures", "--only", "sharded"]);
    let bert = tmp.join("fx/bert");
    let m = mount_ok(&bert, "");

    let shards: Vec<String> = wrote
        .as_object()
        .unwrap()
        .keys()
        .filter_map(|k| k.strip_prefix("bert/pytorch_model-"))
        .map(|rest| format!("pytorch_model-{rest}"))
        .collect();
    assert!(shards.len() >= 2, "{wrote}");
    let mut want = set(&[
        "config.json",
        "model.safetensors.index.json",
        "pytorch_model.bin.index.json",
    ]);
    for shard in &shards {
        want.insert(shard.clone());
        want.insert(tensors_dir(shard));
        want.insert(virtual_name(shard));
    }
    let got = names(&m.dir);
    // Merged directories of the two indexes are not what this test is about.
    let extra: BTreeSet<&String> = got
        .difference(&want)
        .filter(|n| *n != "pytorch_model.tensors" && *n != "model.tensors")
        .collect();
    assert!(
        want.is_subset(&got) && extra.is_empty(),
        "listing {got:?}, want {want:?}"
    );

    // The virtual index maps every tensor to its virtual shard, where the source's index (written
    // by huggingface_hub's split) maps it to the `.bin` shard; each shard's tensor directory
    // lists its tensors.
    let source_index =
        json(&fs::read_to_string(bert.join("pytorch_model.bin.index.json")).unwrap());
    let mut weight_map = BTreeMap::new();
    let mut per_shard: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, shard) in source_index["weight_map"].as_object().unwrap() {
        let shard = shard.as_str().unwrap();
        weight_map.insert(name.clone(), Value::from(virtual_name(shard)));
        per_shard
            .entry(shard.to_string())
            .or_default()
            .insert(escaped(name));
    }
    assert_eq!(
        per_shard.keys().collect::<Vec<_>>(),
        shards.iter().collect::<Vec<_>>()
    );
    for (shard, want) in &per_shard {
        assert_eq!(&names(&m.path(tensors_dir(shard))), want, "{shard}");
    }
    let index = json(&fs::read_to_string(m.path("model.safetensors.index.json")).unwrap());
    let got_map: BTreeMap<String, Value> = index["weight_map"]
        .as_object()
        .unwrap_or_else(|| panic!("no weight_map: {index}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(got_map, weight_map);

    // Each virtual shard is the official conversion of its shard.
    let refs = tmp.join("reference");
    fs::create_dir(&refs).unwrap();
    let mut args = vec!["convert".to_string()];
    for shard in &shards {
        args.push(s(&bert.join(shard)).to_string());
        args.push(s(&refs.join(virtual_name(shard))).to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    checkpoints(&py, &args);
    for shard in &shards {
        let v = virtual_name(shard);
        assert!(
            fs::read(m.path(&v)).unwrap() == fs::read(refs.join(&v)).unwrap(),
            "{v}: differs from save_file's conversion of {shard}"
        );
        assert_eq!(
            getxattr(&m.path(&v), "user.tensormount.converted_from"),
            Some(canonical(&bert.join(shard))),
            "{v}"
        );
    }

    let out = checkpoints(&py, &["from-pretrained", s(&m.dir), s(&bert)]);
    assert!(out.starts_with("ok "), "{out}");
}

/// Item 4: pickles that call `os.system` & co. never run, in the mount or anywhere; the checkpoint
/// is mirrored with an error naming exactly the globals that `torch.load(weights_only=True)` would
/// refuse (between what picklescan calls dangerous and what it does in strict mode); no virtual
/// file; the real tensors beside the calls are still served.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn malicious_pickles_never_run_and_their_globals_are_named() {
    let marker_dir = TempDir::new("pickle-marker");
    let marker = marker_dir.join("MARKER");
    let (py, tmp, kept) = write("pickle-malicious", &["write-malicious", s(&marker)]);
    let fx = tmp.join("fx");
    assert!(!marker.exists(), "writing the fixtures ran them");
    let m = mount_ok(&fx, "");
    touch_everything(&m.dir);
    assert!(
        !marker.exists(),
        "a malicious pickle ran: {} exists after mounting and reading everything",
        marker.display()
    );

    let kept = kept.as_object().unwrap();
    let evil: Vec<&String> = kept.keys().filter(|k| k.starts_with("evil_")).collect();
    assert_eq!(evil.len(), 5, "{kept:?}");
    let mut args = vec!["globals".to_string()];
    args.extend(evil.iter().map(|f| s(&fx.join(f)).to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let globals = json(&checkpoints(&py, &args));
    assert!(
        !marker.exists(),
        "the oracle's globals command ran a pickle"
    );

    // The plain pickle last, so that a failure there leaves the checkpoints checked.
    let mut order: Vec<(&String, &Value)> = kept.iter().collect();
    order.sort_by_key(|(file, _)| *file == "evil_plain.pth");
    for (file, want) in order {
        let mirrored = m.path(file);
        assert!(
            fs::read(&mirrored).unwrap() == fs::read(fx.join(file)).unwrap(),
            "{file}: mirrored bytes differ"
        );
        // The real tensors, with their bytes.
        let tensors = want["tensors"].as_object().unwrap();
        if !tensors.is_empty() {
            let dir = m.path(tensors_dir(file));
            let names_want: BTreeSet<String> = tensors.keys().map(|p| escaped(p)).collect();
            assert_eq!(names(&dir), names_want, "{file}");
            for (tpath, t) in tensors {
                let path = dir.join(escaped(tpath));
                let hex: String = fs::read(&path)
                    .unwrap()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                assert_eq!(hex, t["hex"].as_str().unwrap(), "{file}: {tpath}");
                assert_eq!(
                    getxattr(&path, "user.safetensors.dtype").as_deref(),
                    t["dtype"].as_str(),
                    "{file}: {tpath}"
                );
                assert_eq!(
                    getxattr(&path, "user.safetensors.shape"),
                    Some(shape_text(&t["shape"])),
                    "{file}: {tpath}"
                );
            }
        }
        let virt = m.path(virtual_name(file));
        if !file.starts_with("evil_") {
            // The control: a clean checkpoint beside them is converted, with no error.
            assert!(virt.is_file(), "{file}: no {}", virt.display());
            assert_eq!(error_of(&mirrored), None, "{file}");
            continue;
        }
        assert!(
            !virt.exists(),
            "{file}: a virtual {} is offered for a malicious pickle",
            virt.display()
        );
        let error = getxattr(&mirrored, "user.tensormount.error").unwrap_or_else(|| {
            let plain = match file.as_str() {
                "evil_plain.pth" => " (a plain pickle, not a torch checkpoint, calling os.system)",
                _ => "",
            };
            panic!("{file}{plain}: no user.tensormount.error")
        });
        let g = &globals[s(&fx.join(file))];
        let found = strings(&g["globals"]);
        let allowed = strings(&g["allowed"]);
        let dangerous: BTreeSet<String> = found.difference(&allowed).cloned().collect();
        assert!(!dangerous.is_empty(), "{file}: {g}");
        let named: BTreeSet<String> = found
            .iter()
            .filter(|x| names_global(&error, x))
            .cloned()
            .collect();
        assert_eq!(
            named, dangerous,
            "{file}: the error names these of the pickle's globals {found:?}: {error}"
        );
        let scan = strings(&g["picklescan"]);
        let strict = strings(&g["picklescan_strict"]);
        assert!(
            scan.is_subset(&named) && named.is_subset(&strict),
            "{file}: named {named:?}; picklescan: {scan:?}, strict: {strict:?}"
        );
    }
    // What pickle actually writes, by hand: os.system as posix.system, builtins as __builtin__
    // (protocol 2), subprocess.Popen as commands.Popen (Python 2's name).
    for (file, g) in [
        ("evil_os.bin", "posix.system"),
        ("evil_legacy.pt", "__builtin__.eval"),
        ("evil_popen.ckpt", "commands.Popen"),
        ("evil_popen.ckpt", "runpy._run_code"),
        ("evil_popen.ckpt", "__builtin__.__import__"),
        ("evil_proto4.pth", "builtins.exec"),
        ("evil_plain.pth", "os.system"),
    ] {
        let error = getxattr(&m.path(file), "user.tensormount.error").unwrap_or_default();
        assert!(names_global(&error, g), "{file}: {g} not named: {error}");
    }
    assert!(!marker.exists(), "a malicious pickle ran");
    // The daemon still serves.
    assert_eq!(fs::read(m.path("good.tensors/fine")).unwrap().len(), 12);
}

/// Item 5: truncated, deflated, big-endian and TorchScript checkpoints, random bytes and text
/// named `.bin`: the mount works, each is mirrored without tensors or virtual file, the broken
/// checkpoints say why, and the daemon still serves the good one beside them.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn broken_checkpoints_are_mirrored_with_their_error_and_the_mount_lives() {
    let (py, tmp, wrote) = write("pickle-broken", &["write-broken"]);
    let fx = tmp.join("fx");
    let m = mount_ok(&fx, "");
    let pid = m.pid().expect("the daemon's pid");

    assert_eq!(
        names(&m.dir),
        set(&[
            "bigendian.bin",
            "deflated.bin",
            "good.pt",
            "good.safetensors",
            "good.tensors",
            "notes.bin",
            "random.bin",
            "scripted.pt",
            "trunc_legacy.pt",
            "trunc_zip.bin",
        ])
    );
    // What each error must mention (any of these, case-insensitive).
    let cases: [(&str, &[&str]); 7] = [
        (
            "trunc_zip.bin",
            &[
                "truncat",
                "ends",
                "end of",
                "short",
                "incomplete",
                "central director",
                "cut",
            ],
        ),
        (
            "trunc_legacy.pt",
            &[
                "truncat",
                "ends",
                "end of",
                "short",
                "incomplete",
                "cut",
                "missing",
            ],
        ),
        ("deflated.bin", &["compress", "deflat"]),
        (
            "bigendian.bin",
            &["big", "endian", "byte order", "byteorder"],
        ),
        ("scripted.pt", &["torchscript", "script", "jit"]),
        ("random.bin", &[]),
        ("notes.bin", &[]),
    ];
    assert_eq!(wrote.as_object().unwrap().len(), cases.len() + 1, "{wrote}");
    for (file, words) in cases {
        let mirrored = m.path(file);
        assert!(
            fs::read(&mirrored).unwrap() == fs::read(fx.join(file)).unwrap(),
            "{file} ({}): mirrored bytes differ",
            wrote[file]
        );
        let error = error_of(&mirrored);
        match file {
            "random.bin" => assert_eq!(error, None, "a .bin may be anything"),
            "notes.bin" => {}
            _ => {
                let error =
                    error.unwrap_or_else(|| panic!("{file} ({}): no error xattr", wrote[file]));
                let lower = error.to_lowercase();
                assert!(
                    words.iter().any(|w| lower.contains(w)),
                    "{file} ({}): the error mentions none of {words:?}: {error}",
                    wrote[file]
                );
            }
        }
    }
    // Alive, and right.
    // SAFETY: kill with signal 0 only checks that the process exists.
    assert_eq!(unsafe { libc::kill(pid, 0) }, 0, "the daemon died");
    check_mount(&py, &[], &[(fx.join("good.pt"), m.path("good.tensors"))]);
}

/// Items 6 and 7: `-o npy`, `-o dtype=f32` and `-o layout=tree` apply to checkpoint tensors as
/// to safetensors tensors; `-o pickle=off` leaves checkpoints plain mirrored files.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn views_apply_to_checkpoint_tensors_and_pickle_off_leaves_plain_files() {
    let (py, tmp, _) = write("pickle-views", &["write-fixtures", "--only", "core"]);
    let fx = tmp.join("fx");
    let pairs = |m: &Mounted| -> Vec<(PathBuf, PathBuf)> {
        ["pytorch_model.bin", "legacy.pt", "lightning.ckpt"]
            .iter()
            .map(|rel| (fx.join(rel), m.path(tensors_dir(rel))))
            .collect()
    };

    // -o npy,layout=tree: names split on `.` and `/` into directories, and numpy.load of each
    // X.npy equals torch's tensor, for the dtypes numpy has.
    let m = mount_ok(&fx, "npy,layout=tree");
    for (path, name) in [
        (
            "lightning.tensors/state_dict/model/layer/weight",
            "state_dict.model.layer.weight",
        ),
        (
            "lightning.tensors/optimizer_states/0/state/0/exp_avg",
            "optimizer_states.0.state.0.exp_avg",
        ),
        ("pytorch_model.tensors/weird%25name/x", "weird%name/x"),
        ("pytorch_model.tensors/tied/twin", "tied.twin"),
        ("pytorch_model.tensors/f32.npy", "f32"),
    ] {
        assert_eq!(
            getxattr(&m.path(path), "user.safetensors.name").as_deref(),
            Some(name),
            "{path}"
        );
    }
    assert!(!m.path("pytorch_model.tensors/bf16.npy").exists());
    check_mount(&py, &["--npy"], &pairs(&m));
    drop(m);

    // -o dtype=f32: BF16, F16 and F8 as torch's .float().
    let m = mount_ok(&fx, "dtype=f32");
    let bf16 = m.path("pytorch_model.tensors/bf16");
    assert_eq!(
        getxattr(&bf16, "user.safetensors.dtype").as_deref(),
        Some("F32")
    );
    assert_eq!(
        getxattr(&bf16, "user.safetensors.source_dtype").as_deref(),
        Some("BF16")
    );
    check_mount(&py, &["--widen", "f32"], &pairs(&m));
    drop(m);

    // -o pickle=off: the source's entries, and nothing for the checkpoints.
    let m = mount_ok(&fx, "pickle=off");
    assert_eq!(
        names(&m.dir),
        set(&[
            "legacy.pt",
            "lightning.ckpt",
            "nested.pth",
            "pytorch_model.bin",
            "pytorch_model.fp16.bin",
            "realwins",
            "unet",
        ])
    );
    assert_eq!(
        names(&m.path("unet")),
        set(&["diffusion_pytorch_model.bin"])
    );
    assert_eq!(
        names(&m.path("realwins")),
        set(&["model.safetensors", "model.tensors", "pytorch_model.bin"])
    );
    for rel in [
        "pytorch_model.bin",
        "legacy.pt",
        "unet/diffusion_pytorch_model.bin",
    ] {
        assert!(
            fs::read(m.path(rel)).unwrap() == fs::read(fx.join(rel)).unwrap(),
            "{rel}"
        );
        assert_eq!(error_of(&m.path(rel)), None, "{rel}");
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn checkpoints_added_replaced_and_removed_while_mounted_follow_the_source() {
    require_fuse();
    let py = python();
    let tmp = TempDir::new("pickle-refresh");
    let (src, stage) = (tmp.join("src"), tmp.join("stage"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir_all(&stage).unwrap();
    let save = |file: &Path, seed: &str, legacy: bool| {
        let mut args = vec!["save", s(file), seed];
        if legacy {
            args.push("--legacy");
        }
        checkpoints(&py, &args);
    };
    save(&src.join("a.bin"), "1", false);
    let m = mount_ok(&src, "refresh=inotify");
    check_mount(&py, &[], &[(src.join("a.bin"), m.path("a.tensors"))]);
    // The conversion of a checkpoint, as the official writer makes it, against the virtual file.
    let same_as_reference = |file: &Path, virtual_file: &Path| {
        let reference = tmp.join("reference.safetensors");
        let _ = fs::remove_file(&reference);
        checkpoints(&py, &["convert", s(file), s(&reference)]);
        fs::read(virtual_file).ok() == Some(fs::read(&reference).unwrap())
    };
    assert!(same_as_reference(
        &src.join("a.bin"),
        &m.path("a.safetensors")
    ));

    // Added (written elsewhere, renamed in, as downloaders do), in the legacy format.
    save(&stage.join("b.pt"), "2", true);
    fs::rename(stage.join("b.pt"), src.join("b.pt")).unwrap();
    wait_refreshed(&m.path(""), "b.safetensors to appear", || {
        m.path("b.safetensors").exists()
    });
    assert_eq!(
        getxattr(&m.path("b.tensors/w"), "user.tensormount.format").as_deref(),
        Some("pytorch-legacy")
    );
    check_mount(&py, &[], &[(src.join("b.pt"), m.path("b.tensors"))]);
    assert!(same_as_reference(
        &src.join("b.pt"),
        &m.path("b.safetensors")
    ));

    // Replaced by rename: new tensors and a new conversion, from the new bytes.
    let old = fs::read(m.path("a.tensors/w")).unwrap();
    save(&stage.join("a.bin"), "3", false);
    fs::rename(stage.join("a.bin"), src.join("a.bin")).unwrap();
    wait_refreshed(&m.path(""), "a.bin's new tensors", || {
        fs::read(m.path("a.tensors/w")).is_ok_and(|b| b != old)
    });
    check_mount(&py, &[], &[(src.join("a.bin"), m.path("a.tensors"))]);
    assert!(same_as_reference(
        &src.join("a.bin"),
        &m.path("a.safetensors")
    ));

    // Removed: its tensors and its conversion go with it.
    fs::remove_file(src.join("b.pt")).unwrap();
    wait_refreshed(&m.path(""), "b.pt's entries to go", || {
        !m.path("b.tensors").exists() && !m.path("b.safetensors").exists()
    });
    assert_eq!(
        names(&m.path("")),
        set(&["a.bin", "a.safetensors", "a.tensors"])
    );
    m.unmount().unwrap();
}
