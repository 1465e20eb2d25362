//! Generic mount options: `rw`, the options mount(8) passes, repeated `-o` and escaped commas.

use super::{MountGuard, example, has_opt, mnt_dir, mount_bg, show, the_mount};
use crate::common::*;

use std::fs::{self, File};

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn rw_is_accepted_silently_and_mount_stays_read_only() {
    require_fuse();
    let (_tmp, mnt) = mnt_dir("rw");
    let _g = MountGuard(mnt.clone());
    // What mount.fuse3 runs for `mount -t fuse.tensormount` (mount(8) adds rw, mount.fuse3 as root
    // dev,suid): every fstab mount would otherwise log a warning.
    let out = mount_bg(&[s(&example()), s(&mnt), "-o", "rw,dev,suid"]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(stderr(&out), "", "{}", show(&out));
    let (_, _, opts) = the_mount(&mnt);
    assert!(has_opt(&opts, "ro") && !has_opt(&opts, "rw"), "{opts}");
    let e = File::create(mnt.join("new-file")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn generic_mount_options_are_accepted() {
    require_fuse();
    let (_tmp, mnt) = mnt_dir("generic");
    let _g = MountGuard(mnt.clone());
    let opts = "ro,dev,suid,nodev,nosuid,exec,noexec,auto,noauto,user,nouser,users,async,sync,\
                atime,noatime,relatime,nofail,_netdev,defaults,x-systemd.automount,comment=foo";
    let out = mount_bg(&[s(&example()), s(&mnt), "-o", opts]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(is_mounted(&mnt));
    assert!(
        fs::read_dir(&mnt)
            .unwrap()
            .any(|e| e.unwrap().file_name() == "model.tensors")
    );
    let (_, fstype, mopts) = the_mount(&mnt);
    assert_eq!(fstype, "fuse.tensormount");
    assert!(has_opt(&mopts, "ro"), "{mopts}");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn repeated_o_and_escaped_commas() {
    require_fuse();
    let (_tmp, mnt) = mnt_dir("twice");
    let _g = MountGuard(mnt.clone());
    let out = mount_bg(&[s(&example()), s(&mnt), "-o", "ro", "-o", "fsname=twice"]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(the_mount(&mnt).0, "twice");
    drop(_g);
    assert!(!is_mounted(&mnt));

    let (_tmp2, mnt2) = mnt_dir("escape");
    let _g2 = MountGuard(mnt2.clone());
    let out = mount_bg(&[s(&example()), s(&mnt2), "-o", "fsname=a\\,b"]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(the_mount(&mnt2).0, "a,b");
}
