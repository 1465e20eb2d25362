//! The kernel's mount table, and unmounting: what is mounted at a path (from
//! `/proc/self/mountinfo`, which never asks a FUSE daemon anything), and taking a mount away.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use log::error;

use crate::base::sys;

/// A line of /proc/self/mountinfo.
pub struct MountEntry {
    pub dev: u64,
    pub fstype: String,
    pub source: String,
}

/// The topmost mount at `path`, from /proc/self/mountinfo.
pub fn top_mount(path: &Path) -> Option<MountEntry> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let target = path.as_os_str().as_bytes();
    info.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        if unescape_mountinfo(fields.get(4)?) != target {
            return None;
        }
        let sep = fields.iter().position(|f| *f == "-")?;
        let (major, minor) = fields.get(2)?.split_once(':')?;
        Some(MountEntry {
            dev: libc::makedev(major.parse().ok()?, minor.parse().ok()?),
            fstype: fields.get(sep + 1)?.to_string(),
            source: fields.get(sep + 2)?.to_string(),
        })
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Unmounts `mnt`; if files are still open, detaches it lazily so that they are served until the
/// last one closes (the session ends then). Done here rather than through fuser, whose check of
/// whether the mount is still there misreads a channel with pending requests.
pub fn unmount(mnt: &Path) {
    let mut done = sys::umount(mnt, false);
    if done
        .as_ref()
        .is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY))
    {
        done = sys::umount(mnt, true);
    }
    let Err(err) = done else {
        return;
    };
    match err.raw_os_error() {
        // Not root: the setuid helper may unmount what this user mounted.
        Some(libc::EPERM) => {
            let status = std::process::Command::new("fusermount3")
                .args(["-u", "-z", "--"])
                .arg(mnt)
                .stdin(std::process::Stdio::null())
                .status();
            if !status.is_ok_and(|s| s.success()) {
                error!(
                    "{}: cannot unmount: {err}; fusermount3 failed too",
                    mnt.display()
                );
            }
        }
        // Already unmounted.
        Some(libc::EINVAL) => {}
        _ => error!("{}: cannot unmount: {err}", mnt.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo("/mnt/a\\040b"), b"/mnt/a b");
        assert_eq!(unescape_mountinfo("/x\\134y"), b"/x\\y");
        assert_eq!(unescape_mountinfo("/plain"), b"/plain");
    }
}
