//! torch.distributed.checkpoint (DCP) checkpoints: every tensor consolidated from its chunks as
//! `dcp_to_torch_save` consolidates it, the virtual `model.safetensors` as
//! `safetensors.torch.save_file` writes the model's tensors, traps named with nothing run, a
//! checkpoint shown once its `.metadata` lands, and broken checkpoints named on their
//! `.metadata`. The checkpoints are written by torch itself, in multi-process gloo runs on
//! 127.0.0.1 (`tests/python/dcp.py`), and torch's own reader is the oracle.

use crate::common::*;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde_json::Value;

/// Checks checkpoint `name` of the mount `m` (of the directory `src` of checkpoints) against
/// torch's consolidation: every tensor's bytes, dtype and shape, marked `dcp`; the objects listed
/// on the directory; the virtual file equal to `save_file` of the model's tensors (`prefix`, as
/// the script takes it). Returns the number of tensors checked.
fn consolidated_as_torch_does(
    py: &Path,
    m: &Mounted,
    src: &Path,
    name: &str,
    prefix: &str,
) -> usize {
    let oracle = json(&python_script(
        py,
        "dcp.py",
        &["oracle", s(&src.join(name))],
    ));
    let dir = m.path(name).join("checkpoint.tensors");
    let tensors = oracle["tensors"].as_object().unwrap();
    // The tensor files (beside `__metadata__`, the metadata's JSON).
    let files: Vec<String> = names(&dir)
        .into_iter()
        .filter(|n| n != "__metadata__")
        .collect();
    let mut keys: Vec<String> = tensors.keys().cloned().collect();
    keys.sort();
    assert_eq!(files, keys, "{name}: the tensor files");
    for (key, t) in tensors {
        let f = dir.join(key);
        assert_eq!(
            sha256sum(&f),
            t["sha256"].as_str().unwrap(),
            "{name}: {key}"
        );
        assert_eq!(
            getxattr(&f, "user.safetensors.dtype").as_deref(),
            t["dtype"].as_str(),
            "{name}: {key}"
        );
        assert_eq!(
            getxattr(&f, "user.safetensors.shape").unwrap(),
            t["shape"].to_string(),
            "{name}: {key}"
        );
        assert_eq!(
            getxattr(&f, "user.tensormount.format").as_deref(),
            Some("dcp")
        );
    }
    // Objects are listed by key, in order, as torch's metadata classes read them.
    let objects: Value = json(&getxattr(&dir, "user.dcp.objects").unwrap());
    assert_eq!(objects, oracle["metadata_objects"], "{name}: the objects");
    let want = src.join(format!("{name}.safetensors"));
    python_script(
        py,
        "dcp.py",
        &["safetensors", s(&src.join(name)), prefix, s(&want)],
    );
    assert_eq!(
        sha256sum(&m.path(name).join("model.safetensors")),
        sha256sum(&want),
        "{name}: the virtual model.safetensors"
    );
    fs::remove_file(&want).unwrap();
    tensors.len()
}

/// FSDP2 on 2 ranks (dim-0 chunks, even and uneven, an optimizer's state, objects), DTensor
/// `Shard(1)`, a zero-size chunk, `Replicate`, 0-dim, bf16/fp16/fp32/fp8/integer tensors on 2
/// ranks, a 2×2 mesh of grids on 4 ranks, and torchtitan's flat layout on 1: every tensor is
/// byte for byte `dcp_to_torch_save`'s, and `model.safetensors` is `save_file`'s.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn every_sharding_is_consolidated_as_dcp_to_torch_save_does() {
    require_fuse();
    let py = python();
    require_module(&py, "torch");
    let tmp = TempDir::new("dcp-shardings");
    let src = tmp.join("src");
    python_script(&py, "dcp.py", &["write", s(&src)]);
    let m = mount_ok(&src, "");
    let mut checked = 0;
    for (name, prefix) in [
        ("fsdp2", "model."),
        ("tp", "model."),
        ("mesh", "model."),
        ("flat", "top"),
    ] {
        checked += consolidated_as_torch_does(&py, &m, &src, name, prefix);
    }
    assert!(checked >= 40, "{checked}");
    // A tensor held by one chunk is a stretch of its data file, with its place; a gathered one
    // has none.
    let replicated = m.path("tp/checkpoint.tensors/model.norm.weight");
    let source = getxattr(&replicated, "user.safetensors.source").unwrap();
    let offset: u64 = getxattr(&replicated, "user.safetensors.offset")
        .unwrap()
        .parse()
        .unwrap();
    let stored = fs::read(&source).unwrap();
    let bytes = fs::read(&replicated).unwrap();
    assert_eq!(
        &stored[offset as usize..offset as usize + bytes.len()],
        &bytes[..]
    );
    let gathered = m.path("tp/checkpoint.tensors/model.wq.weight");
    assert_eq!(getxattr(&gathered, "user.safetensors.offset"), None);
    // The optimizer's state is there, and the objects are listed, never unpickled.
    assert!(
        m.path("fsdp2/checkpoint.tensors/optim.state.0.weight.exp_avg")
            .exists()
    );
    let objects = getxattr(&m.path("fsdp2/checkpoint.tensors"), "user.dcp.objects").unwrap();
    for key in ["step", "lr_scheduler.last_epoch", "extra.names.run"] {
        assert!(objects.contains(&format!("\"{key}\"")), "{key}: {objects}");
    }
    // And in --list --json, by tensor directory.
    let listed = json(&stdout(&run(&["--list", "--json", s(&src.join("fsdp2"))])));
    assert_eq!(
        listed["metadata"]["checkpoint.tensors"]["objects"].to_string(),
        objects
    );
    m.unmount().unwrap();

    // layout=tree: the keys as directories.
    let m = mount_ok(&src, "layout=tree");
    let tree = m.path("mesh/checkpoint.tensors/model/grid/weight");
    let mesh = json(&python_script(
        &py,
        "dcp.py",
        &["oracle", s(&src.join("mesh"))],
    ));
    assert_eq!(
        sha256sum(&tree),
        mesh["tensors"]["model.grid.weight"]["sha256"]
            .as_str()
            .unwrap()
    );
    m.unmount().unwrap();

    // verify --write-manifest: every tensor once, with torch's digest; a sharded one under
    // .metadata (gathered from the data files), one held in one chunk under its .distcp.
    let manifest = tmp.join("manifest.json");
    let out = run(&[
        "verify",
        "--write-manifest",
        s(&manifest),
        s(&src.join("mesh")),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let written = json(&fs::read_to_string(&manifest).unwrap());
    let mut digests = BTreeMap::new();
    for (file, f) in written["files"].as_object().unwrap() {
        for (name, sha) in f["tensors"].as_object().unwrap() {
            let again = digests.insert(name.clone(), sha.clone());
            assert_eq!(again, None, "{name} twice ({file})");
        }
    }
    let want: BTreeMap<String, Value> = mesh["tensors"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, t)| (k.clone(), t["sha256"].clone()))
        .collect();
    assert_eq!(digests, want, "the manifest's tensors");
    assert!(written["files"][".metadata"]["tensors"]["model.grid.weight"].is_string());
    // Every data file is a weight file, hashed whole.
    for rank in 0..4 {
        let name = format!("__{rank}_0.distcp");
        let file = &written["files"][&name];
        assert_eq!(
            file["sha256"].as_str(),
            Some(&*sha256sum(&src.join("mesh").join(&name))),
            "{name}: {file}"
        );
    }

    // -o dcp_model=: every tensor, or another group (its prefix removed).
    for (option, prefix) in [("all", "all"), ("optim", "optim.")] {
        let m = mount_ok(&src, &format!("dcp_model={option}"));
        let want = src.join("want.safetensors");
        python_script(
            &py,
            "dcp.py",
            &["safetensors", s(&src.join("fsdp2")), prefix, s(&want)],
        );
        assert_eq!(
            sha256sum(&m.path("fsdp2/model.safetensors")),
            sha256sum(&want),
            "dcp_model={option}"
        );
        m.unmount().unwrap();
    }
}

/// A benign 1-rank checkpoint (a 4 × 3 float32 `model.w`, no object) written by torch into
/// `tmp/made/benign/`.
fn benign(py: &Path, tmp: &TempDir) -> std::path::PathBuf {
    let made = tmp.join("made");
    python_script(py, "dcp.py", &["traps", s(&made), s(&tmp.join("c"))]);
    made.join("benign")
}

/// A `.metadata` that calls a command before its `Metadata` object, and an object item whose
/// unpickling calls one: torch's own reader runs each (its canary appears, in a child process);
/// the mount names the call on `.metadata`, runs nothing, and shows no tensors and no virtual
/// file, while a benign checkpoint beside them (with an object) shows its model.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn traps_in_metadata_or_objects_are_named_and_nothing_runs() {
    require_fuse();
    let py = python();
    require_module(&py, "torch");
    let tmp = TempDir::new("dcp-traps");
    let src = tmp.join("src");
    let canary = tmp.join("canary");
    python_script(&py, "dcp.py", &["traps", s(&src), s(&canary)]);
    let m = mount_ok(&src, "");
    // Each names what it calls, and where (os.system pickles as posix.system).
    for (name, says) in [
        (
            "metadata-trap",
            ".metadata calls os.system; nothing was run",
        ),
        (
            "object-trap",
            "object `extra.hook`: the pickle calls posix.system; nothing was run",
        ),
    ] {
        let dir = m.path(name);
        let error = getxattr(&dir.join(".metadata"), "user.tensormount.error").unwrap();
        assert!(
            error.starts_with(says) && error.ends_with("[UnsafePickle]"),
            "{name}: {error}"
        );
        assert_eq!(names(&dir), [".metadata", "__0_0.distcp"], "{name}");
    }
    assert!(m.path("benign/model.safetensors").exists());
    assert!(m.path("benign/checkpoint.tensors/model.w").exists());
    m.unmount().unwrap();
    assert!(!canary.exists(), "the mount ran a trap");
    // Each is a real trap: torch's reader runs it.
    for name in ["metadata-trap", "object-trap"] {
        let _ = std::process::Command::new(&py)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/dcp.py"))
            .args(["load", s(&src.join(name))])
            .output()
            .unwrap();
        assert!(canary.exists(), "{name}: torch's reader did not run it");
        fs::remove_file(&canary).unwrap();
    }
}

/// A directory being written (its `.distcp` files, no `.metadata`) shows no tensors; once the
/// writer renames `.metadata.tmp` to `.metadata`, the model appears without a remount; a
/// `.distcp` rewritten under an unchanged `.metadata` is refused until `.metadata` changes; a
/// checkpoint copied `.metadata` first appears once its data file is whole.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_checkpoint_appears_once_its_metadata_lands() {
    require_fuse();
    let py = python();
    require_module(&py, "torch");
    let tmp = TempDir::new("dcp-live");
    let benign = benign(&py, &tmp);
    let src = tmp.join("src");
    let ckpt = src.join("step-100");
    fs::create_dir_all(&ckpt).unwrap();
    fs::copy(benign.join("__0_0.distcp"), ckpt.join("__0_0.distcp")).unwrap();
    let m = mount_ok(&src, "settle=0");
    assert_eq!(names(&m.path("step-100")), ["__0_0.distcp"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    fs::copy(benign.join(".metadata"), ckpt.join(".metadata.tmp")).unwrap();
    fs::rename(ckpt.join(".metadata.tmp"), ckpt.join(".metadata")).unwrap();
    wait_refreshed(&m.path(""), "the checkpoint appears", || {
        m.path("step-100/model.safetensors").exists()
    });
    let w = m.path("step-100/checkpoint.tensors/model.w");
    let bytes = fs::read(&w).unwrap();
    assert_eq!(bytes.len(), 4 * 3 * 4);
    // A save into the same directory: the .distcp rewritten in place first, under the old
    // .metadata, which then no longer describes it; the new .metadata renamed in last.
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(
        ckpt.join("__0_0.distcp"),
        fs::read(benign.join("__0_0.distcp")).unwrap(),
    )
    .unwrap();
    wait_refreshed(&m.path(""), "the rewritten data file is refused", || {
        getxattr(&m.path("step-100/.metadata"), "user.tensormount.error")
            .is_some_and(|e| e.contains("[DataChanged]"))
    });
    assert!(!m.path("step-100/checkpoint.tensors").exists());
    fs::copy(benign.join(".metadata"), ckpt.join(".metadata.tmp")).unwrap();
    fs::rename(ckpt.join(".metadata.tmp"), ckpt.join(".metadata")).unwrap();
    wait_refreshed(&m.path(""), "the checkpoint is back", || w.exists());
    assert_eq!(fs::read(&w).unwrap(), bytes);
    // The checkpoint deleted (as a trainer deletes an old step): it leaves the mount, and a
    // handle opened before keeps its bytes.
    let held = fs::File::open(&w).unwrap();
    fs::remove_dir_all(&ckpt).unwrap();
    wait_refreshed(&m.path(""), "the checkpoint leaves", || {
        !m.path("step-100").exists()
    });
    let mut again = Vec::new();
    std::io::Read::read_to_end(&mut &held, &mut again).unwrap();
    assert_eq!(again, bytes);
    drop(held);
    // A checkpoint copied `.metadata` first (`rsync` copies in name order, `.metadata` before
    // `__0_0.distcp`): refused while its data file is missing, then cut short, and shown once
    // the data file is whole, `.metadata` untouched.
    let copied = src.join("copied");
    fs::create_dir_all(&copied).unwrap();
    fs::copy(benign.join(".metadata"), copied.join(".metadata")).unwrap();
    let error = || getxattr(&m.path("copied/.metadata"), "user.tensormount.error");
    wait_refreshed(&m.path(""), "the data file is missing", || {
        error().is_some_and(|e| e.contains("\"__0_0.distcp\" is missing [DataFile]"))
    });
    let data = fs::read(benign.join("__0_0.distcp")).unwrap();
    fs::write(copied.join("__0_0.distcp"), &data[..data.len() / 2]).unwrap();
    wait_refreshed(&m.path(""), "the data file is cut short", || {
        error().is_some_and(|e| e.contains("[ChunkPastFile]"))
    });
    assert!(!m.path("copied/checkpoint.tensors").exists());
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(copied.join("__0_0.distcp"), &data).unwrap();
    wait_refreshed(&m.path(""), "the copied checkpoint appears", || {
        m.path("copied/checkpoint.tensors/model.w").exists()
    });
    assert_eq!(
        fs::read(m.path("copied/checkpoint.tensors/model.w")).unwrap(),
        bytes
    );
    assert_eq!(error(), None);
    m.unmount().unwrap();
}

/// Broken checkpoints, each named on its `.metadata` with its rule, beside a good one the daemon
/// serves on: `.metadata` cut short, a `.distcp` missing or cut short, a `relative_path` that is
/// absolute or leaves the directory, chunks that overlap, leave a hole or lie past the shape,
/// transformed chunks, an archive of another dtype than the metadata's, an absurd size. And one
/// that is not broken: a `relative_path` into a subdirectory of the checkpoint, read as torch
/// reads it.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn broken_checkpoints_are_named_on_their_metadata() {
    require_fuse();
    let py = python();
    require_module(&py, "torch");
    let tmp = TempDir::new("dcp-broken");
    let src = tmp.join("src");
    python_script(&py, "dcp.py", &["broken", s(&src)]);
    let m = mount_ok(&src, "");
    for (name, rule, says) in [
        ("truncated", "[Pickle]", "cut short"),
        ("missing", "[DataFile]", "\"__1_0.distcp\" is missing"),
        ("short", "[ChunkPastFile]", "which has 1000 bytes"),
        ("absolute", "[BadLocation]", "\"/etc/passwd\""),
        ("escaping", "[BadLocation]", "is a path with a `..` in it"),
        ("overlap", "[Coverage]", "overlap"),
        ("transformed", "[Transformed]", "transform_descriptors"),
        ("absurd", "[TooLarge]", "[1099511627776, 1099511627776]"),
        (
            "retyped",
            "[ChunkArchive]",
            "a tensor of F32 [51, 16] where the metadata says I32",
        ),
        (
            "hole",
            "[Coverage]",
            "no chunk holds its elements at [51, 0]",
        ),
        ("outside", "[Coverage]", "lies past its shape [90, 16]"),
    ] {
        let dir = m.path(name);
        let error = getxattr(&dir.join(".metadata"), "user.tensormount.error")
            .unwrap_or_else(|| panic!("{name}: no error"));
        assert!(
            error.ends_with(rule) && error.contains(says),
            "{name}: {error}"
        );
        assert!(!dir.join("checkpoint.tensors").exists(), "{name}");
        assert!(!dir.join("model.safetensors").exists(), "{name}");
    }
    let good = m.path("good/model.safetensors");
    assert!(fs::read(&good).unwrap().len() > 1000);
    assert!(consolidated_as_torch_does(&py, &m, &src, "subdir", "model.") > 0);
    // That data file taken away and put back: followed below the checkpoint as beside it.
    let data = src.join("subdir/data/__1_0.distcp");
    let away = tmp.join("away.distcp");
    fs::rename(&data, &away).unwrap();
    let weight = m.path("subdir/checkpoint.tensors/model.0.weight");
    wait_refreshed(&m.path(""), "the data file is gone", || !weight.exists());
    let error = getxattr(&m.path("subdir/.metadata"), "user.tensormount.error").unwrap();
    assert!(
        error.contains("\"data/__1_0.distcp\" is missing [MissingDataFile]"),
        "{error}"
    );
    fs::rename(&away, &data).unwrap();
    wait_refreshed(&m.path(""), "the data file is back", || weight.exists());
    m.unmount().unwrap();
}

/// Data files are opened only below SOURCE: a checkpoint whose `.metadata` and `.distcp` files
/// all link to blobs elsewhere in SOURCE (as in a Hugging Face cache) is read through its links,
/// its data files looked for beside the link; a `.distcp` that links outside SOURCE is refused,
/// named on `.metadata`, and never opened.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn data_files_are_opened_only_below_source() {
    require_fuse();
    let py = python();
    require_module(&py, "torch");
    let tmp = TempDir::new("dcp-links");
    let benign = benign(&py, &tmp);
    let src = tmp.join("src");
    let outside = tmp.join("outside");
    for d in ["blobs", "inside", "escapes"] {
        fs::create_dir_all(src.join(d)).unwrap();
    }
    fs::create_dir_all(&outside).unwrap();
    fs::copy(benign.join("__0_0.distcp"), src.join("blobs/b1")).unwrap();
    fs::copy(benign.join(".metadata"), src.join("blobs/m1")).unwrap();
    fs::copy(benign.join("__0_0.distcp"), outside.join("b1")).unwrap();
    std::os::unix::fs::symlink("../blobs/m1", src.join("inside/.metadata")).unwrap();
    std::os::unix::fs::symlink("../blobs/b1", src.join("inside/__0_0.distcp")).unwrap();
    fs::copy(benign.join(".metadata"), src.join("escapes/.metadata")).unwrap();
    std::os::unix::fs::symlink(outside.join("b1"), src.join("escapes/__0_0.distcp")).unwrap();
    let m = mount_ok(&src, "");
    assert_eq!(
        fs::read(m.path("inside/checkpoint.tensors/model.w"))
            .unwrap()
            .len(),
        4 * 3 * 4
    );
    let error = getxattr(&m.path("escapes/.metadata"), "user.tensormount.error").unwrap();
    assert!(
        error.contains("lies outside SOURCE") && error.ends_with("[DataFile]"),
        "{error}"
    );
    assert!(!m.path("escapes/checkpoint.tensors").exists());
    m.unmount().unwrap();
}

/// A checkpoint past 4 GiB, as large models' ranks write them: rank 0's file holds a tensor of
/// 4 GiB + 64 KiB (one chunk, an archive that needs zip64) before its chunk of a sharded tensor,
/// which so starts past 4 GiB. Each reads back as torch's own DCP reader loads it, the big one a
/// stretch of its file at its place; the virtual model.safetensors (over 4 GiB) reads back the
/// same through the official safetensors.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_checkpoint_past_4_gib_reads_back_as_torch_loads_it() {
    require_fuse();
    let py = python();
    require_module(&py, "torch");
    let tmp = TempDir::new("dcp-huge");
    let src = tmp.join("src");
    let run = src.join("run");
    let digests = json(&python_script(&py, "dcp.py", &["huge", s(&run)]));
    let rank0 = run.join("__0_0.distcp");
    assert!(fs::metadata(&rank0).unwrap().len() > 1 << 32);
    let m = mount_ok(&src, "");
    let dir = m.path("run/checkpoint.tensors");
    let digests = digests.as_object().unwrap();
    assert_eq!(digests.len(), 2);
    for (key, digest) in digests {
        assert_eq!(sha256sum(&dir.join(key)), digest.as_str().unwrap(), "{key}");
    }
    // The big tensor is one stretch of rank 0's file, named with its place.
    let huge = dir.join("model.huge");
    assert_eq!(
        getxattr(&huge, "user.safetensors.source").map(std::path::PathBuf::from),
        Some(rank0)
    );
    assert!(getxattr(&huge, "user.safetensors.offset").is_some());
    let virt = m.path("run/model.safetensors");
    assert!(fs::metadata(&virt).unwrap().len() > 1 << 32);
    let read = json(&python_script(&py, "oracle.py", &["load-all", s(&virt)]));
    for (key, digest) in digests {
        let name = key.strip_prefix("model.").unwrap();
        assert_eq!(read[name][2], *digest, "model.safetensors: {name}");
    }
}

/// Tensors gathered from large chunks (32 MiB bf16 grids on a 2×2 mesh: each read of the mount
/// interleaves 4 KiB rows of two data files, sent as one reply of their slices) read back as
/// torch consolidates them, and `model.safetensors` as `save_file` writes them. A data file cut
/// short under an open handle then fails its reads, never answers other bytes.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn large_gathered_tensors_read_back_and_fail_once_cut_short() {
    require_fuse();
    let py = python();
    require_module(&py, "torch");
    let tmp = TempDir::new("dcp-large");
    let src = tmp.join("src");
    let ckpt = src.join("mesh");
    python_script(&py, "dcp.py", &["big", s(&ckpt), "64", "4", "2x2"]);
    let oracle = json(&python_script(&py, "dcp.py", &["oracle", s(&ckpt)]));
    let tensors = oracle["tensors"].as_object().unwrap();
    assert_eq!(tensors.len(), 2, "{oracle}");
    let m = mount_ok(&src, "");
    let dir = m.path("mesh/checkpoint.tensors");
    for (key, t) in tensors {
        assert_eq!(
            sha256sum(&dir.join(key)),
            t["sha256"].as_str().unwrap(),
            "{key}"
        );
    }
    let want = tmp.join("want.safetensors");
    python_script(
        &py,
        "dcp.py",
        &["safetensors", s(&ckpt), "model.", s(&want)],
    );
    assert_eq!(
        sha256sum(&m.path("mesh/model.safetensors")),
        sha256sum(&want)
    );
    // Cut short under an open handle: the read fails (EIO, or ESTALE once the refresh has seen
    // the change), whether its bytes were sliced or copied before.
    let (key, _) = tensors.iter().next().unwrap();
    let held = fs::File::open(dir.join(key)).unwrap();
    let rank0 = ckpt.join("__0_0.distcp");
    let len = fs::metadata(&rank0).unwrap().len();
    fs::File::options()
        .write(true)
        .open(&rank0)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let e = std::os::unix::fs::FileExt::read_exact_at(&held, &mut buf, 0).unwrap_err();
    assert!(
        matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::ESTALE)),
        "{e}"
    );
    drop(held);
    m.unmount().unwrap();
}
