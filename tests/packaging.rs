//! The packages users install from: the Python wheel (maturin, `bindings = "bin"`). The wheel is
//! built from this checkout into a target directory of its own, installed into a fresh venv, and
//! the venv's `tensormount` mounts the bundled example, checked against the official reader.
//! Needs root, FUSE, the oracle's Python and `maturin` in it (`.ci/run` installs it); skipped
//! without them, except in CI.

mod common;
use common::*;

use std::fs;
use std::path::Path;
use std::process::Command;

fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

#[test]
fn the_wheel_installs_a_tensormount_that_mounts_the_example() {
    if !require_fuse() {
        return;
    }
    let Some(py) = python() else { return };
    let maturin = py.with_file_name("maturin");
    if !maturin.exists() {
        assert!(!in_ci(), "CI is set but {} is missing", maturin.display());
        eprintln!("skipped: no maturin beside {}", py.display());
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = TempDir::new("wheel");
    let wheels = tmp.join("wheels");
    let out = Command::new(&maturin)
        .args(["build", "--release", "--quiet", "--out"])
        .arg(&wheels)
        .current_dir(root)
        // A target directory of its own: the one of this test run is locked by cargo.
        .env("CARGO_TARGET_DIR", root.join("target/wheel"))
        .output()
        .unwrap();
    assert!(out.status.success(), "maturin build: {}", stderr(&out));
    let wheel = fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("a wheel was built");
    let name = wheel.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        name.starts_with(&format!("tensormount-{}-py3-none-", env!("CARGO_PKG_VERSION"))),
        "the wheel's version is the crate's: {name}"
    );

    // A fresh venv with nothing but the wheel.
    let venv = tmp.join("venv");
    let out = Command::new(&py).args(["-m", "venv"]).arg(&venv).output().unwrap();
    assert!(out.status.success(), "venv: {}", stderr(&out));
    let out = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--no-index"])
        .arg(&wheel)
        .output()
        .unwrap();
    assert!(out.status.success(), "pip install: {}", stderr(&out));
    let installed = venv.join("bin/tensormount");
    let out = Command::new(&installed).arg("--version").output().unwrap();
    assert_eq!(
        stdout(&out).trim(),
        format!("tensormount {}", env!("CARGO_PKG_VERSION"))
    );
    let meta = Command::new(venv.join("bin/pip"))
        .args(["show", "tensormount"])
        .output()
        .unwrap();
    assert!(stdout(&meta).contains("Summary: Mount safetensors files"), "{}", stdout(&meta));

    let example = root.join("examples/tiny-model");
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let out = Command::new(&installed).arg(&example).arg(&mnt).output().unwrap();
    assert!(out.status.success(), "mount: {}", stderr(&out));
    let compared = oracle(
        &py,
        &[
            "compare",
            example.to_str().unwrap(),
            mnt.join("model.tensors").to_str().unwrap(),
        ],
    );
    let unmounted = Command::new("umount").arg(&mnt).status().unwrap();
    assert!(compared.starts_with("ok "), "{compared}");
    assert!(unmounted.success(), "umount");
}
