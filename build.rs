//! Tells the integration tests whether this machine can mount (`cfg(tensormount_fuse)`): root and
//! a `/dev/fuse` that opens. Tests that mount are marked `ignore` without it, so the test runner
//! reports them as ignored, with the reason, instead of `ok`. In CI (`CI` set) they always run, and
//! fail if they cannot mount. `TENSORMOUNT_NO_FUSE=1` forces the ignored case (to check the
//! report). `cfg(tensormount_dpkg)`, in CI or with `TENSORMOUNT_DPKG=1`, lets the Debian package
//! test install and remove the package on this machine.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tensormount_fuse)");
    println!("cargo::rustc-check-cfg=cfg(tensormount_dpkg)");
    println!("cargo::rerun-if-env-changed=TENSORMOUNT_DPKG");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=TENSORMOUNT_NO_FUSE");
    println!("cargo::rerun-if-changed=build.rs");
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    let forced_off = std::env::var_os("TENSORMOUNT_NO_FUSE").is_some_and(|v| v == "1");
    if ci || (!forced_off && can_mount()) {
        println!("cargo::rustc-cfg=tensormount_fuse");
    }
    // The Debian package test installs and removes a package system-wide: only where allowed.
    if ci || std::env::var_os("TENSORMOUNT_DPKG").is_some_and(|v| v == "1") {
        println!("cargo::rustc-cfg=tensormount_dpkg");
    }
}

/// Root, and `/dev/fuse` opens for reading and writing.
fn can_mount() -> bool {
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    root && std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_ok()
}
