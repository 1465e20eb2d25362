//! The packages users install from: the Python wheel (maturin, `bindings = "bin"`). The wheel is
//! built from this checkout into a target directory of its own, installed into a fresh venv, and
//! the venv's `tensormount` mounts the bundled example, checked against the official reader.
//! Needs root, FUSE, the oracle's Python and `maturin` in it (`tests/run` installs it).

use crate::common::*;

use std::fs;
use std::path::Path;
use std::process::Command;

/// Both packages are built in one target directory of their own (`target/wheel`): one at a time.
static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn the_wheel_installs_a_tensormount_that_mounts_the_example() {
    require_fuse();
    let py = python();
    let maturin = py.with_file_name("maturin");
    assert!(
        maturin.exists(),
        "no maturin beside {}: `tests/run` installs tests/python/requirements.txt",
        py.display()
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = TempDir::new("wheel");
    let wheels = tmp.join("wheels");
    let build = BUILD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let out = Command::new(&maturin)
        .args(["build", "--release", "--quiet", "--out"])
        .arg(&wheels)
        .current_dir(root)
        // A target directory of its own: the one of this test run is locked by cargo.
        .env("CARGO_TARGET_DIR", root.join("target/wheel"))
        .output()
        .unwrap();
    assert!(out.status.success(), "maturin build: {}", stderr(&out));
    drop(build);
    let wheel = fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("a wheel was built");
    let name = wheel.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        name.starts_with(&format!(
            "tensormount-{}-py3-none-",
            env!("CARGO_PKG_VERSION")
        )),
        "the wheel's version is the crate's: {name}"
    );

    // A fresh venv with nothing but the wheel.
    let venv = tmp.join("venv");
    let out = Command::new(&py)
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
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
    // What an index page shows, from the installed metadata.
    let meta = Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import importlib.metadata as m; print(m.metadata('tensormount'))",
        ])
        .output()
        .unwrap();
    for field in [
        "Summary: Mount safetensors files",
        "License-Expression: MIT OR Apache-2.0",
    ] {
        assert!(stdout(&meta).contains(field), "{field}: {}", stdout(&meta));
    }

    let example = root.join("examples/tiny-model");
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let out = Command::new(&installed)
        .arg(&example)
        .arg(&mnt)
        .output()
        .unwrap();
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

/// Runs `cmd` through `sh -c`, asserting success; returns stdout.
fn sh(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(out.status.success(), "{cmd}: {}", stderr(&out));
    stdout(&out)
}

/// The Debian package, installed for real with `dpkg -i` and removed with `dpkg -r`: so it runs
/// only in CI, or where `TENSORMOUNT_DPKG=1` (when the tests are built, see `build.rs`) says this
/// machine may be changed, and never where tensormount is installed already.
#[test]
#[cfg_attr(
    not(all(tensormount_fuse, tensormount_dpkg)),
    ignore = "installs a package system-wide: needs root, /dev/fuse, and CI or TENSORMOUNT_DPKG=1"
)]
fn the_debian_package_installs_mounts_and_removes_cleanly() {
    require_fuse();
    let py = python();
    let has_deb = Command::new("cargo")
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(has_deb, "cargo-deb is missing: `tests/run` installs it");
    for path in ["/usr/bin/tensormount", "/sbin/mount.tensormount"] {
        assert!(
            fs::symlink_metadata(path).is_err(),
            "{path} exists: tensormount is installed here already"
        );
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = TempDir::new("deb");
    let build = BUILD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let out = Command::new("cargo")
        .args(["deb", "--quiet", "--output"])
        .arg(tmp.path())
        .current_dir(root)
        .env("CARGO_TARGET_DIR", root.join("target/wheel"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo deb: {}", stderr(&out));
    drop(build);
    let deb = tmp.join(format!(
        "tensormount_{}-1_amd64.deb",
        env!("CARGO_PKG_VERSION")
    ));
    assert!(deb.exists(), "{} was not built", deb.display());
    let deps = sh(&format!("dpkg-deb -f {} Depends", deb.display()));
    assert!(deps.contains("fuse3"), "Depends: {deps}");

    sh(&format!("dpkg -i {}", deb.display()));
    let files = sh("dpkg -L tensormount");
    let result = std::panic::catch_unwind(|| {
        assert_eq!(
            fs::read_link("/sbin/mount.tensormount").unwrap(),
            Path::new("/usr/bin/tensormount")
        );
        assert_eq!(
            sh("man -w tensormount").trim(),
            "/usr/share/man/man8/tensormount.8.gz"
        );
        let verify = Command::new("systemd-analyze")
            .args(["verify", "tensormount@llama.service"])
            .output()
            .unwrap();
        assert!(
            verify.status.success() && stderr(&verify).trim().is_empty(),
            "systemd-analyze verify: {}",
            stderr(&verify)
        );
        let offered = sh(
            "bash -c 'source /usr/share/bash-completion/completions/tensormount; \
             COMP_WORDS=(tensormount -o \"\"); COMP_CWORD=2; COMP_LINE=\"tensormount -o \"; \
             COMP_POINT=${#COMP_LINE}; _tensormount tensormount \"\" -o; \
             printf \"%s\\n\" \"${COMPREPLY[@]}\"'",
        );
        for option in ["allow_other", "layout=tree", "npy"] {
            assert!(
                offered.lines().any(|l| l == option),
                "bash completion of -o lacks {option}: {offered}"
            );
        }
        // Both fstab types, through mount(8) and the installed helper.
        let example = root.join("examples/tiny-model");
        for fstype in ["fuse.tensormount", "tensormount"] {
            let mnt = tmp.join(fstype);
            fs::create_dir(&mnt).unwrap();
            sh(&format!(
                "mount -t {fstype} {} {}",
                example.display(),
                mnt.display()
            ));
            let compared = oracle(
                &py,
                &[
                    "compare",
                    example.to_str().unwrap(),
                    mnt.join("model.tensors").to_str().unwrap(),
                ],
            );
            sh(&format!("umount {}", mnt.display()));
            assert!(compared.starts_with("ok "), "mount -t {fstype}: {compared}");
        }
    });
    sh("dpkg -r tensormount");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    // Nothing of the package is left (directories shared with others, such as /sbin, stay).
    let left: Vec<&str> = files
        .lines()
        // A file, or a link (even dangling), that is not a directory.
        .filter(|f| fs::symlink_metadata(f).is_ok() && !Path::new(f).is_dir())
        .collect();
    assert!(left.is_empty(), "left after dpkg -r: {left:?}");
    assert!(
        !sh("dpkg-query -W -f '${db:Status-Status}' tensormount 2>/dev/null || true")
            .contains("installed"),
        "dpkg still lists tensormount"
    );
}
