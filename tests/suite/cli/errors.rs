//! Mount errors: a missing source or mount point, a busy or stale mount point, bad options.

use super::{
    MountGuard, assert_error, assert_stale_reported, example, mnt_dir, mount_bg, mount_count,
};
use crate::common::*;

use std::fs;
use std::time::Duration;

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn error_source_missing() {
    require_fuse();
    let (tmp, mnt) = mnt_dir("nosrc");
    let _g = MountGuard(mnt.clone());
    let src = tmp.join("no-such-model");
    let out = mount_bg(&[s(&src), s(&mnt)]);
    assert_error(&out, &[s(&src)]);
    assert!(!is_mounted(&mnt));
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn error_mountpoint_missing() {
    require_fuse();
    let (_tmp, mnt) = mnt_dir("nomnt");
    let missing = mnt.join("absent");
    let _g = MountGuard(missing.clone());
    let out = mount_bg(&[s(&example()), s(&missing)]);
    assert_error(&out, &[s(&missing)]);
    assert!(!is_mounted(&missing));
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn error_mountpoint_is_a_regular_file() {
    require_fuse();
    let (_tmp, mnt) = mnt_dir("filemnt");
    let file = mnt.join("plain");
    fs::write(&file, b"x").unwrap();
    let _g = MountGuard(file.clone());
    let out = mount_bg(&[s(&example()), s(&file)]);
    assert_error(&out, &["not a directory"]);
    assert!(!is_mounted(&file));
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn error_already_mounted() {
    require_fuse();
    let m = Mounted::new(&example(), "");
    let mnt = fs::canonicalize(&m.dir).unwrap();
    assert_eq!(mount_count(&mnt), 1);
    let out = mount_bg(&[s(&example()), s(&mnt)]);
    assert_error(&out, &["already mounted"]);
    assert_eq!(mount_count(&mnt), 1, "a second mount was stacked");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn error_stale_mount_after_foreground_daemon_killed() {
    require_fuse();
    let (_tmp, mnt) = mnt_dir("stalefg");
    let mut fg = Daemon::start(&example(), &mnt, &[], &mnt.with_extension("log"), |_| {}).unwrap();
    fg.wait_mounted(Duration::from_secs(10)).unwrap();
    fg.signal(libc::SIGKILL);
    fg.wait(Duration::from_secs(10));
    assert!(is_mounted(&mnt), "SIGKILL should leave the mount behind");
    assert_stale_reported(&mnt);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn error_unknown_option_is_named() {
    require_fuse();
    let (_tmp, mnt) = mnt_dir("bogus");
    let _g = MountGuard(mnt.clone());
    let out = mount_bg(&[s(&example()), s(&mnt), "-o", "bogus"]);
    assert_error(&out, &["bogus"]);
    assert!(!is_mounted(&mnt));
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn error_allow_other_with_allow_root() {
    require_fuse();
    let (_tmp, mnt) = mnt_dir("allowboth");
    let _g = MountGuard(mnt.clone());
    let out = mount_bg(&[s(&example()), s(&mnt), "-o", "allow_other,allow_root"]);
    assert_error(&out, &[]);
    assert!(!is_mounted(&mnt));
}
