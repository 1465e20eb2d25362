//! The example loaders in `examples/loaders/` (C++, Java, Node.js, numpy, shell, and the CPU path of
//! the GPU loader) run against the mounted example model, and each line they print is compared with
//! one computed by the official Python safetensors reader from the source files, never the mount.

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

/// One tensor of each dtype the loaders handle, scalar F64 and 64-bit I64 values included.
const TENSORS: &[&str] = &[
    "model.embed_tokens.weight",               // BF16 [256,64]
    "model.layers.0.self_attn.k_proj.weight",  // F16 [32,64]
    "model.norm.weight",                       // F32 [64]
    "model.layers.0.mlp.up_proj.weight_scale", // F64 []
    "model.layers.1.self_attn.q_proj.zeros",   // I64 [4]
    "model.mask",                              // BOOL [8]
    "model.layers.1.self_attn.q_proj.qweight", // U8 [64,32]
    "model.rotary.inv_freq_i32",               // I32 [16]
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Asserts that `tool` runs here.
fn have(tool: &str, version_arg: &str) {
    let ok = Command::new(tool)
        .arg(version_arg)
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{tool} does not run here: `tests/run` (as root) installs it"
    );
}

/// The oracle's lines, read from the source files with the official reader: (loaders' format,
/// shell loader's format); `widen`: as `-o dtype=f32` presents the tensors.
fn expected(py: &Path, widen: bool) -> (String, String) {
    let model = root().join("examples/tiny-model");
    let mut args = vec!["loader-lines"];
    if widen {
        args.push("--widen");
    }
    args.push(s(&model));
    args.extend_from_slice(TENSORS);
    let (mut common, mut shell) = (String::new(), String::new());
    for line in oracle(py, &args).lines() {
        let (c, s) = line.split_once('\t').unwrap();
        common += &format!("{c}\n");
        shell += &format!("{s}\n");
    }
    assert_eq!(common.lines().count(), TENSORS.len());
    (common, shell)
}

/// Mounts the example model with `-o opts`, runs `program ARGS... MNT/model.tensors TENSORS...`
/// and compares its output with the oracle's (the shell loader's format if `shell`; the tensors
/// as `-o dtype=f32` presents them if `widened`).
fn check(
    program: impl AsRef<std::ffi::OsStr>,
    args: &[&str],
    shell: bool,
    opts: &str,
    widened: bool,
) {
    require_fuse();
    let py = python();
    let (common, shell_lines) = expected(&py, widened);
    let m = Mounted::new(&root().join("examples/tiny-model"), opts);
    let out = Command::new(program)
        .args(args)
        .arg(m.path("model.tensors"))
        .args(TENSORS)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?} failed: {}", stderr(&out));
    let want = if shell { shell_lines } else { common };
    assert_eq!(stdout(&out), want, "{args:?} (stderr: {})", stderr(&out));
}

fn loader(file: &str) -> String {
    format!("examples/loaders/{file}")
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn cpp_loader() {
    have("g++", "--version");
    let tmp = TempDir::new("cpp-loader");
    let exe: PathBuf = tmp.join("loader");
    let out = Command::new("g++")
        .args(["-O2", "-std=c++17", "-Wall", "-Wextra", "-o"])
        .arg(&exe)
        .arg(root().join(loader("loader.cpp")))
        .output()
        .unwrap();
    assert!(out.status.success(), "g++ failed: {}", stderr(&out));
    check(&exe, &[], false, "dtype=f32", true);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn java_loader() {
    have("java", "-version");
    check("java", &[&loader("Loader.java")], false, "", false);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn node_loader() {
    have("node", "--version");
    check("node", &[&loader("loader.js")], false, "", false);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn numpy_loader() {
    check(python(), &[&loader("loader.py")], false, "dtype=f32", true);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn gpu_loader_cpu_path() {
    check(
        python(),
        &[&loader("gpu_loader.py"), "--cpu"],
        false,
        "",
        false,
    );
    // Under -o dtype=f32 it still reads the stored bytes from the source, by source_dtype.
    check(
        python(),
        &[&loader("gpu_loader.py"), "--cpu"],
        false,
        "dtype=f32",
        false,
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn shell_loader() {
    have("bash", "--version");
    check("bash", &[&loader("loader.sh")], true, "", false);
}
