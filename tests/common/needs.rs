//! What a test needs from the machine: FUSE, tools, the oracle's Python. A test never passes
//! without what it needs: tests that mount are marked `ignore` by `build.rs` where the machine
//! cannot mount (and always run in CI), and a missing tool or Python fails the test at once with a
//! message that names `tests/run`, the command that prepares everything.

use std::path::{Path, PathBuf};

use super::find_python;
use std::process::{Command, Stdio};

pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// Asserts that real mounts can be made here: the tests that call it are ignored by the test
/// runner where `build.rs` found no FUSE, so reaching it without FUSE is a broken machine.
pub fn require_fuse() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root && Path::new("/dev/fuse").exists(),
        "FUSE is unusable (needs root and /dev/fuse), though the tests were built to mount"
    );
}

pub fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

/// Asserts that every command of `tools` is on PATH.
pub fn require_tools(tools: &[&str]) {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !on_path(t)).collect();
    assert!(
        missing.is_empty(),
        "not installed here: {missing:?}; `tests/run` (as root) installs everything the tests need"
    );
}

/// The Python with the official `safetensors` and numpy ([`find_python`]: $TENSORMOUNT_PYTHON,
/// else the repo's `.venv`, which `tests/run` creates).
pub fn python() -> PathBuf {
    find_python().expect(
        "no Python with safetensors and numpy: `tests/run` creates .venv with \
         tests/python/requirements.txt (or set TENSORMOUNT_PYTHON)",
    )
}

/// Asserts that the oracle's Python can import `module`.
pub fn require_module(py: &Path, module: &str) {
    let ok = Command::new(py)
        .args(["-c", &format!("import {module}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import {module}: `tests/run` installs tests/python/requirements.txt into .venv",
        py.display()
    );
}
