//! `tensormount verify` against what each kind of source records (a Hugging Face cache, a
//! `local_dir`, `SHA256SUMS`, nothing), for single files too, and its usage errors.

use super::{
    Fx, assert_ok, by_path, canonical, code, hex, line, lines, ok_line, sha256sum, str_map, verify,
    verify_json,
};
use crate::common::*;

use std::collections::BTreeMap;
use std::fs;
use std::process::Output;

/// What stderr must be when it is not a terminal: a summary, and no progress bar.
fn no_progress(out: &Output) {
    let err = stderr(out);
    assert!(
        !err.contains('\r') && !err.contains('\x1b'),
        "a progress bar on a stderr that is not a terminal: {err:?}"
    );
    assert!(!err.trim().is_empty(), "no summary line on stderr");
}

/// A Hugging Face cache's snapshot: each weight file is checked against the name of the blob its
/// link reaches (`recorded_as` blob-name, `recorded_in` the blob), which is hashlib's digest; small
/// files (named by git's SHA-1) and the virtual conversion of a checkpoint are not weight files.
#[test]
fn verify_hf_cache_snapshot_against_blob_names() {
    let fx = Fx::new("integrity-hf", &["hf"]);
    let snap = fx.snapshot();
    let weights = fx.weights("hf");
    assert_eq!(weights.len(), 4);

    let out = verify(&[s(&snap)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    no_progress(&out);
    let want: Vec<String> = weights
        .iter()
        .map(|(rel, v)| {
            let sha = hex(&v["sha256"]);
            assert_eq!(
                sha256sum(&snap.join(rel)),
                sha,
                "the oracles disagree on {rel}"
            );
            line("ok", rel, &format!("sha256 {sha} (blob-name)"))
        })
        .collect();
    assert_eq!(lines(&out), want, "stderr: {}", stderr(&out));

    let (out, v) = verify_json(&[s(&snap)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        weights.keys().collect::<Vec<_>>()
    );
    let mut total = 0;
    for (rel, w) in &weights {
        let bytes = w["bytes"].as_u64().unwrap();
        total += bytes;
        let blob = canonical(&fx.path(hex(&w["blob"])));
        assert_ok(files[rel], hex(&w["sha256"]), bytes, "blob-name", &blob);
    }
    assert_eq!(v["bytes"].as_u64(), Some(total), "total bytes hashed");
}

/// A `local_dir` download: each weight file's etag in huggingface_hub's download metadata (one in
/// a sub-folder, whose metadata is `.cache/huggingface/download/unet/NAME.metadata`).
#[test]
fn verify_local_dir_against_download_metadata() {
    let fx = Fx::new("integrity-local", &["local"]);
    let dir = fx.path("local");
    let weights = fx.weights("local");
    assert!(weights.contains_key("unet/diffusion_pytorch_model.safetensors"));

    let out = verify(&[s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let want: Vec<String> = weights
        .iter()
        .map(|(rel, v)| ok_line(rel, &v["sha256"], "download-metadata"))
        .collect();
    assert_eq!(lines(&out), want, "stderr: {}", stderr(&out));

    let (out, v) = verify_json(&[s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    assert_eq!(files.len(), weights.len(), "{v}");
    for (rel, w) in &weights {
        assert_eq!(w["etag"], w["sha256"]);
        let meta = dir.join(hex(&w["metadata"]));
        assert_eq!(
            meta,
            dir.join(".cache/huggingface/download")
                .join(format!("{rel}.metadata"))
        );
        let bytes = w["bytes"].as_u64().unwrap();
        assert_ok(
            files[rel],
            hex(&w["sha256"]),
            bytes,
            "download-metadata",
            s(&meta),
        );
    }
}

/// A release folder: `SHA256SUMS` written by `sha256sum` (with `unet/x.safetensors` relative to
/// it) and `extra.safetensors.sha256` in BSD format (`sha256sum --tag`), which wins over the
/// folder's `SHA256SUMS` line for the same file.
#[test]
fn verify_release_folder_against_sha256sums() {
    let fx = Fx::new("integrity-release", &["release"]);
    let dir = fx.path("release");
    let weights = fx.weights("release");

    let out = verify(&[s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    no_progress(&out);
    let want: Vec<String> = weights
        .iter()
        .map(|(rel, v)| ok_line(rel, &v["sha256"], "sha256sum"))
        .collect();
    assert_eq!(lines(&out), want, "stderr: {}", stderr(&out));

    let (out, v) = verify_json(&[s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        weights.keys().collect::<Vec<_>>()
    );
    for (rel, w) in &weights {
        let at = dir.join(hex(&w["recorded_in"]));
        let bytes = w["bytes"].as_u64().unwrap();
        assert_ok(files[rel], hex(&w["sha256"]), bytes, "sha256sum", s(&at));
    }
}

/// Nothing recorded: every weight file, an invalid one too, is hashed and `unknown` (exit 0), its
/// digest `sha256sum`'s; `--write-manifest` gives the invalid one no tensors, the others hashlib's
/// digest of each tensor's bytes.
#[test]
fn verify_unrecorded_files_are_unknown_and_still_hashed() {
    let fx = Fx::new("integrity-plain", &["plain"]);
    let dir = fx.path("plain");
    let weights = fx.weights("plain");
    assert_eq!(weights.len(), 3);

    let out = verify(&[s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let want: Vec<String> = weights
        .keys()
        .map(|rel| {
            line(
                "unknown",
                rel,
                &format!("sha256 {}", sha256sum(&dir.join(rel))),
            )
        })
        .collect();
    assert_eq!(lines(&out), want, "stderr: {}", stderr(&out));

    let manifest = fx.path("manifest.json");
    let (out, v) = verify_json(&["--write-manifest", s(&manifest), s(&dir)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    assert_eq!(files.len(), weights.len(), "{v}");
    for (rel, w) in &weights {
        let f = files[rel];
        assert_eq!(f["status"], "unknown", "{f}");
        assert_eq!(hex(&f["actual"]), sha256sum(&dir.join(rel)), "{f}");
        assert!(f["expected"].is_null(), "{f}");
        assert!(
            f["recorded_as"].is_null() && f["recorded_in"].is_null(),
            "{f}"
        );
        assert_eq!(f["bytes"], w["bytes"], "{f}");
    }

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
        let want = if w["valid"].as_bool().unwrap() {
            fx.tensors(&format!("plain/{rel}"))
        } else {
            BTreeMap::new()
        };
        assert_eq!(str_map(&e["tensors"]), want, "tensors of {rel}");
    }
}

/// A single file as SOURCE: its path in the report is its name; its record is found as for a
/// directory (the `SHA256SUMS` above it, the blob behind a snapshot link, none).
#[test]
fn verify_single_file_source() {
    let fx = Fx::new("integrity-single", &["release", "plain", "hf"]);
    let release = fx.weights("release");

    let x = fx.path("release/unet/x.safetensors");
    let sha = hex(&release["unet/x.safetensors"]["sha256"]);
    let out = verify(&[s(&x)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        lines(&out),
        vec![line(
            "ok",
            "x.safetensors",
            &format!("sha256 {sha} (sha256sum)")
        )]
    );
    let (out, v) = verify_json(&[s(&x)]);
    assert_eq!(code(&out), Some(0));
    let files = by_path(&v);
    assert_eq!(files.len(), 1, "{v}");
    let bytes = release["unet/x.safetensors"]["bytes"].as_u64().unwrap();
    let sums = fx.path("release/SHA256SUMS");
    assert_ok(files["x.safetensors"], sha, bytes, "sha256sum", s(&sums));

    let a = fx.path("plain/a.safetensors");
    let out = verify(&[s(&a)]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        lines(&out),
        vec![line(
            "unknown",
            "a.safetensors",
            &format!("sha256 {}", sha256sum(&a))
        )]
    );

    let rel = "model-00002-of-00002.safetensors";
    let w = &fx.weights("hf")[rel];
    let (out, v) = verify_json(&[s(&fx.snapshot().join(rel))]);
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let blob = canonical(&fx.path(hex(&w["blob"])));
    let bytes = w["bytes"].as_u64().unwrap();
    assert_ok(
        by_path(&v)[rel],
        hex(&w["sha256"]),
        bytes,
        "blob-name",
        &blob,
    );
}

/// Usage errors exit 2: no SOURCE, an unknown option, a SOURCE that does not exist, a manifest
/// that does not exist.
#[test]
fn verify_usage_errors_exit_2() {
    let fx = Fx::new("integrity-usage", &["plain"]);
    let dir = fx.path("plain");
    let missing = fx.path("nothing-here");
    let cases: [&[&str]; 4] = [
        &[],
        &["--no-such-option", s(&dir)],
        &[s(&missing)],
        &["--manifest", s(&missing), s(&dir)],
    ];
    for args in cases {
        let out = verify(args);
        assert_eq!(
            code(&out),
            Some(2),
            "verify {args:?}: stdout {}\nstderr {}",
            stdout(&out),
            stderr(&out)
        );
        assert!(
            !stderr(&out).trim().is_empty(),
            "verify {args:?}: no message"
        );
    }
}

/// A blob that two snapshots of a cache link to is one version: hashed once (the report's bytes
/// are one blob's), and reported under each path, `ok` against its name (`sha256sum`'s digest).
#[test]
fn verify_hashes_a_blob_of_two_snapshots_once() {
    let tmp = TempDir::new("integrity-two-snapshots");
    let repo = tmp.path().join("models--org--m");
    let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let staged = tmp.path().join("staged.safetensors");
    write_raw(
        &staged,
        r#"{"w":{"dtype":"U8","shape":[3000000],"data_offsets":[0,3000000]}}"#,
        &bytes,
    );
    let sha = sha256sum(&staged);
    fs::create_dir_all(repo.join("blobs")).unwrap();
    fs::rename(&staged, repo.join("blobs").join(&sha)).unwrap();
    for rev in ["r1", "r2"] {
        let dir = repo.join("snapshots").join(rev);
        fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/{sha}"), dir.join("model.safetensors"))
            .unwrap();
    }
    let (out, v) = verify_json(&[s(&repo)]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let files = by_path(&v);
    let blob_len = fs::metadata(repo.join("blobs").join(&sha)).unwrap().len();
    for rev in ["r1", "r2"] {
        let f = files[&format!("snapshots/{rev}/model.safetensors")];
        assert_eq!(f["status"], "ok");
        assert_eq!(hex(&f["actual"]), sha);
        assert_eq!(f["recorded_as"], "blob-name");
    }
    assert_eq!(v["bytes"].as_u64(), Some(blob_len), "hashed once");
}

/// A whole Hugging Face cache with one corrupted shard: each file is reported once, under its
/// snapshot path (as `huggingface-cli scan-cache` lists it), not again at its blob; so one
/// `mismatch` row and one `ok` row. A blob that no snapshot names keeps its own path.
#[test]
fn verify_reports_each_file_of_a_cache_once_under_its_snapshot_path() {
    let tmp = TempDir::new("integrity-cache-once");
    let repo = tmp.path().join("models--org--m");
    fs::create_dir_all(repo.join("blobs")).unwrap();
    let snap = repo.join("snapshots").join("r1");
    fs::create_dir_all(&snap).unwrap();
    let mut shas = Vec::new();
    for (i, fill) in [(1, 7u8), (2, 9u8)] {
        let staged = tmp.path().join("staged.safetensors");
        write_raw(
            &staged,
            r#"{"w":{"dtype":"U8","shape":[4096],"data_offsets":[0,4096]}}"#,
            &[fill; 4096],
        );
        let sha = sha256sum(&staged);
        fs::rename(&staged, repo.join("blobs").join(&sha)).unwrap();
        let name = format!("model-0000{i}-of-00002.safetensors");
        std::os::unix::fs::symlink(format!("../../blobs/{sha}"), snap.join(&name)).unwrap();
        shas.push(sha);
    }
    // The second shard's bytes changed after download: its blob no longer has the name's digest.
    let damaged = repo.join("blobs").join(&shas[1]);
    let mut bytes = fs::read(&damaged).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(&damaged, &bytes).unwrap();
    let actual = sha256sum(&damaged);
    let out = verify(&[s(&repo)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    assert_eq!(
        lines(&out),
        [
            line(
                "ok",
                "snapshots/r1/model-00001-of-00002.safetensors",
                &format!("sha256 {} (blob-name)", shas[0])
            ),
            line(
                "mismatch",
                "snapshots/r1/model-00002-of-00002.safetensors",
                &format!(
                    "expected {} (blob-name: {}), read {actual}",
                    shas[1],
                    canonical(&damaged)
                )
            ),
        ],
        "stderr: {}",
        stderr(&out)
    );
    // A blob no snapshot names is verified at its own path.
    fs::remove_file(snap.join("model-00001-of-00002.safetensors")).unwrap();
    let (out, v) = verify_json(&[s(&repo)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        [
            &format!("blobs/{}", shas[0]),
            &"snapshots/r1/model-00002-of-00002.safetensors".to_string()
        ]
    );
    assert_eq!(files[&format!("blobs/{}", shas[0])]["status"], "ok");
}
