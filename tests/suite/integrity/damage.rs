//! `tensormount verify` on damaged files: a flipped byte, a truncated, unreadable or changing file.

use super::{
    Fx, assert_ok, by_path, canonical, check_shape, code, flip, hex, line, lines, ok_line,
    sha256sum, verify, verify_json,
};
use crate::common::*;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A byte flipped in one blob of the cache: exit 1, exactly that file `mismatch` (expected: its
/// blob name; read: `sha256sum`'s digest of the damaged bytes), the others ok.
#[test]
fn verify_names_the_one_damaged_blob() {
    let fx = Fx::new("integrity-hf-flip", &["hf"]);
    let snap = fx.snapshot();
    let weights = fx.weights("hf");
    let rel = "model-00001-of-00002.safetensors";
    let blob = fx.path(hex(&weights[rel]["blob"]));
    let (b, e) = fx.range(
        "local/model-00001-of-00002.safetensors",
        "model.embed.weight",
    );
    flip(&blob, (b + e) / 2);
    let read = sha256sum(&blob);
    let expected = hex(&weights[rel]["sha256"]);
    assert_ne!(read, expected);

    let out = verify(&[s(&snap)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    let want: Vec<String> = weights
        .iter()
        .map(|(r, v)| match r.as_str() {
            r if r == rel => line(
                "mismatch",
                r,
                &format!(
                    "expected {expected} (blob-name: {}), read {read}",
                    canonical(&blob)
                ),
            ),
            r => ok_line(r, &v["sha256"], "blob-name"),
        })
        .collect();
    assert_eq!(lines(&out), want, "stderr: {}", stderr(&out));

    let (out, v) = verify_json(&[s(&snap)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    for (r, f) in by_path(&v) {
        if r == rel {
            assert_eq!(f["status"], "mismatch", "{f}");
            assert_eq!(hex(&f["expected"]), expected, "{f}");
            assert_eq!(hex(&f["actual"]), read, "{f}");
            assert_eq!(f["recorded_as"], "blob-name", "{f}");
            assert_eq!(f["recorded_in"], canonical(&blob).as_str(), "{f}");
        } else {
            assert_eq!(f["status"], "ok", "{f}");
        }
    }
}

/// A byte flipped in one shard of a folder with `SHA256SUMS`.
#[test]
fn verify_names_the_one_damaged_shard_of_sha256sums() {
    let fx = Fx::new("integrity-release-flip", &["release"]);
    let dir = fx.path("release");
    let rel = "model-00002-of-00002.safetensors";
    let (b, _) = fx.range(&format!("release/{rel}"), "lm_head.weight");
    flip(&dir.join(rel), b + 3);
    let read = sha256sum(&dir.join(rel));
    let weights = fx.weights("release");
    let expected = hex(&weights[rel]["sha256"]);

    let out = verify(&[s(&dir)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    let mismatch = line(
        "mismatch",
        rel,
        &format!(
            "expected {expected} (sha256sum: {}), read {read}",
            s(&dir.join("SHA256SUMS"))
        ),
    );
    let got = lines(&out);
    assert!(got.contains(&mismatch), "no line {mismatch:?} in {got:#?}");
    let (out, v) = verify_json(&[s(&dir)]);
    assert_eq!(code(&out), Some(1));
    let bad: Vec<String> = by_path(&v)
        .into_iter()
        .filter(|(_, f)| f["status"] != "ok")
        .map(|(p, _)| p)
        .collect();
    assert_eq!(bad, vec![rel.to_string()], "{v}");
    let f = by_path(&v)[rel];
    assert_eq!(hex(&f["actual"]), read, "{f}");
    assert_eq!(f["recorded_in"], s(&dir.join("SHA256SUMS")), "{f}");
}

/// A truncated file is a mismatch whose read digest is `sha256sum`'s of what is left: cut inside
/// the data (the header still parses) or inside the header (no longer a valid file).
#[test]
fn verify_truncated_files_are_hashed_as_they_are() {
    let fx = Fx::new("integrity-truncated", &["release"]);
    let dir = fx.path("release");
    let weights = fx.weights("release");
    let cuts = [
        (
            "model-00001-of-00002.safetensors",
            weights["model-00001-of-00002.safetensors"]["bytes"]
                .as_u64()
                .unwrap()
                / 2,
        ),
        ("model-00002-of-00002.safetensors", 5),
    ];
    for (rel, len) in cuts {
        OpenOptions::new()
            .write(true)
            .open(dir.join(rel))
            .unwrap()
            .set_len(len)
            .unwrap();
    }
    let (out, v) = verify_json(&[s(&dir)]);
    assert_eq!(code(&out), Some(1), "stderr: {}", stderr(&out));
    let files = by_path(&v);
    for (rel, len) in cuts {
        let f = files[rel];
        assert_eq!(f["status"], "mismatch", "{f}");
        assert_eq!(f["expected"], weights[rel]["sha256"], "{f}");
        assert_eq!(hex(&f["actual"]), sha256sum(&dir.join(rel)), "{f}");
        assert_eq!(f["bytes"].as_u64(), Some(len), "{f}");
    }
    for (rel, f) in files {
        if !cuts.iter().any(|(r, _)| *r == rel) {
            assert_eq!(f["status"], "ok", "{f}");
        }
    }
}

/// A file verify cannot read (0600, another owner) is `error` with the reason, and exit 2; the
/// others are still checked. Run as nobody (`setpriv`) when root, who reads any file.
#[test]
fn verify_unreadable_file_is_an_error() {
    let fx = Fx::new("integrity-unreadable", &["release"]);
    let dir = fx.path("release");
    let rel = "model-00002-of-00002.safetensors";
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    fs::set_permissions(
        dir.join(rel),
        fs::Permissions::from_mode(if root { 0o600 } else { 0o000 }),
    )
    .unwrap();
    let out = if root {
        require_tools(&["setpriv"]);
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(bin())
            .args(["verify", "--json"])
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    } else {
        verify(&["--json", s(&dir)])
    };
    assert_eq!(
        code(&out),
        Some(2),
        "stdout: {}\nstderr: {}",
        stdout(&out),
        stderr(&out)
    );
    let v = json(&stdout(&out));
    check_shape(&v, false);
    let weights = fx.weights("release");
    for (r, f) in by_path(&v) {
        if r == rel {
            assert_eq!(f["status"], "error", "{f}");
            assert!(f["actual"].is_null(), "{f}");
            let e = f["error"].as_str().unwrap().to_lowercase();
            assert!(e.contains("permission denied"), "error of {r}: {f}");
        } else {
            let w = weights[&r];
            let at = dir.join(hex(&w["recorded_in"]));
            let bytes = w["bytes"].as_u64().unwrap();
            assert_ok(f, hex(&w["sha256"]), bytes, "sha256sum", s(&at));
        }
    }
    assert!(by_path(&v).contains_key(rel), "{v}");
}

/// A file appended to while it is hashed is `error` ("changed while being verified"), exit 2.
/// Appends go on every 10 ms until verify exits, so that one lands while it reads, however fast.
#[test]
fn verify_file_changing_while_hashed_is_an_error() {
    let fx = Fx::new("integrity-changing", &["release"]);
    let dir = fx.path("src");
    fs::create_dir(&dir).unwrap();
    fs::copy(
        fx.path("release/extra.safetensors"),
        dir.join("ok.safetensors"),
    )
    .unwrap();
    let big = dir.join("big.safetensors");
    OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&big)
        .unwrap()
        .set_len(256 << 20)
        .unwrap();
    let ok_sha = sha256sum(&dir.join("ok.safetensors"));
    fs::write(
        dir.join("SHA256SUMS"),
        format!(
            "{ok_sha}  ok.safetensors\n{}  big.safetensors\n",
            "0".repeat(64)
        ),
    )
    .unwrap();

    let mut child = Command::new(bin())
        .args(["verify", "--json"])
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut f = OpenOptions::new().append(true).open(&big).unwrap();
    let start = Instant::now();
    let mut appends = 0;
    while child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "verify still running after 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
        f.write_all(&[1u8; 4096]).unwrap();
        appends += 1;
    }
    let out = child.wait_with_output().unwrap();
    assert!(appends > 1, "verify was done before the file changed");
    assert_eq!(
        code(&out),
        Some(2),
        "stdout: {}\nstderr: {}",
        stdout(&out),
        stderr(&out)
    );
    let v = json(&stdout(&out));
    check_shape(&v, false);
    let files = by_path(&v);
    let b = files["big.safetensors"];
    assert_eq!(b["status"], "error", "{b}");
    assert!(
        b["error"]
            .as_str()
            .unwrap()
            .contains("changed while being verified"),
        "{b}"
    );
    let ok = files["ok.safetensors"];
    assert_eq!(ok["status"], "ok", "{ok}");
    assert_eq!(hex(&ok["actual"]), ok_sha, "{ok}");
}
