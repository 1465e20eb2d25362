//! mount(8) and fstab, in a private mount namespace.

use super::{
    MountGuard, assert_no_daemon_within, daemons_of, example, has_opt, mnt_dir, mount_count,
    output_within, show,
};
use crate::common::*;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Kills (by id) any tensormount still serving `mnt` when dropped: the daemon of a private mount
/// namespace the test could not unmount.
struct DaemonReaper(PathBuf);

impl Drop for DaemonReaper {
    fn drop(&mut self) {
        for pid in daemons_of(&self.0) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn mount_helper_and_fstab_in_private_namespace() {
    require_fuse();
    let (tmp, mnt) = mnt_dir("mount8");
    let _g = MountGuard(mnt.clone());
    let _reaper = DaemonReaper(mnt.clone());
    let root = fs::canonicalize(tmp.path()).unwrap();
    let bindir = root.join("bin");
    fs::create_dir(&bindir).unwrap();
    std::os::unix::fs::symlink(fs::canonicalize(bin()).unwrap(), bindir.join("tensormount"))
        .unwrap();
    let src = example();
    let fstab = root.join("fstab");
    fs::write(
        &fstab,
        format!("{} {} fuse.tensormount ro,nofail 0 0\n", s(&src), s(&mnt)),
    )
    .unwrap();
    let usr_local_bin_before = mount_count(Path::new("/usr/local/bin"));

    let script = format!(
        r#"set -e
trap 'umount -l {mnt} 2>/dev/null || true' EXIT
mount --bind {bindir} /usr/local/bin
mount -t fuse.tensormount {src} {mnt} -o ro,allow_other
echo MARK-MOUNTED-T
ls {mnt}
grep " {mnt} " /proc/mounts
umount {mnt}
grep -q " {mnt} " /proc/mounts || echo MARK-GONE-T
mount -T {fstab} {mnt}
echo MARK-MOUNTED-FSTAB
ls {mnt}
grep " {mnt} " /proc/mounts
umount {mnt}
grep -q " {mnt} " /proc/mounts || echo MARK-GONE-FSTAB
"#,
        mnt = s(&mnt),
        bindir = s(&bindir),
        src = s(&src),
        fstab = s(&fstab),
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c", &script]);
    let (out, _) = output_within(cmd, Duration::from_secs(20));
    let text = stdout(&out);
    assert!(out.status.success(), "{}", show(&out));
    let mut parts = text.split("MARK-");
    parts.next();
    let sections: Vec<&str> = parts.collect();
    assert_eq!(sections.len(), 4, "{}", show(&out));
    for (section, tag) in
        sections
            .iter()
            .zip(["MOUNTED-T", "GONE-T", "MOUNTED-FSTAB", "GONE-FSTAB"])
    {
        assert!(section.starts_with(tag), "{}", show(&out));
    }
    for mounted in [sections[0], sections[2]] {
        assert!(
            mounted.lines().any(|l| l == "model.tensors"),
            "{}",
            show(&out)
        );
        let line = mounted
            .lines()
            .find(|l| l.contains(&format!(" {} ", s(&mnt))))
            .unwrap_or_else(|| panic!("no /proc/mounts line\n{}", show(&out)));
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f[0], s(&src), "{line}");
        assert_eq!(f[2], "fuse.tensormount", "{line}");
        assert!(has_opt(f[3], "ro"), "{line}");
    }

    // Nothing leaked into this namespace, and the daemons ended with their mounts.
    assert!(!is_mounted(&mnt));
    assert_eq!(
        mount_count(Path::new("/usr/local/bin")),
        usr_local_bin_before
    );
    assert_no_daemon_within(&mnt, Duration::from_secs(3));
}
