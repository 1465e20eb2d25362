//! `auto_unmount` after SIGKILL and after a plain unmount, and SIGKILL without it.

use super::{
    MountGuard, assert_no_daemon_within, assert_stale_reported, daemons_of, example, kill, mnt_dir,
    mount_bg, pids_with_arg, poll_until, show,
};
use crate::common::*;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Waits until `pid` has fully exited (a zombie or gone). Its command line empties earlier, while
/// its descriptors (the FUSE connection) are still open.
fn wait_dead(pid: i32) {
    poll_until(
        Duration::from_secs(5),
        "the killed daemon to exit",
        || match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => {
                let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
                matches!(state, Some(Some('Z' | 'X')))
            }
        },
    );
}

/// Mounts in the background and returns the daemon's pid.
fn mount_bg_daemon(mnt: &Path, opts: &[&str]) -> i32 {
    let src = example();
    let mut args = vec![s(&src), s(mnt)];
    args.extend_from_slice(opts);
    let out = mount_bg(&args);
    assert!(out.status.success(), "{}", show(&out));
    assert!(is_mounted(mnt));
    let pids = daemons_of(mnt);
    assert_eq!(pids.len(), 1, "daemons of {}: {pids:?}", mnt.display());
    pids[0]
}

/// The auto-unmount watchers of `mnt`: processes run as `tensormount-unmount` naming it.
fn watchers_of(mnt: &Path) -> Vec<i32> {
    pids_with_arg("tensormount-unmount", mnt)
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn auto_unmount_clears_mount_after_every_sigkill() {
    require_fuse();
    let (_tmp, mnt) = mnt_dir("autounmount");
    let _g = MountGuard(mnt.clone());
    // Every death, killed at once after mounting or once serving, in the background or the
    // foreground: the watcher sees the daemon gone only once every descriptor it held is closed,
    // so the mount is always taken away, and then the watcher is gone too.
    for round in 0..20 {
        let mut foreground = None;
        let pid = if round % 5 == 4 {
            let child = Command::new(bin())
                .args([s(&example()), s(&mnt), "-f", "-o", "auto_unmount"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            poll_until(Duration::from_secs(10), "the foreground mount", || {
                is_mounted(&mnt) && watchers_of(&mnt).len() == 1
            });
            let pid = child.id() as i32;
            foreground = Some(child);
            pid
        } else {
            mount_bg_daemon(&mnt, &["-o", "auto_unmount"])
        };
        assert_eq!(watchers_of(&mnt).len(), 1, "round {round}: one watcher");
        if round % 2 == 1 {
            // Serving: both worker threads blocked reading the device when it dies.
            assert!(fs::read_dir(&mnt).unwrap().count() > 0);
        }
        kill(pid, libc::SIGKILL);
        if let Some(mut child) = foreground {
            child.wait().unwrap();
        }
        poll_until(
            Duration::from_secs(5),
            &format!("round {round}: the mount to go after the daemon died"),
            || !is_mounted(&mnt),
        );
        assert_no_daemon_within(&mnt, Duration::from_secs(3));
        poll_until(Duration::from_secs(3), "the watcher to exit", || {
            watchers_of(&mnt).is_empty()
        });
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn auto_unmount_watcher_leaves_after_a_plain_unmount_and_never_touches_another_mount() {
    require_fuse();
    let (_tmp, mnt) = mnt_dir("autounmount-plain");
    let _g = MountGuard(mnt.clone());
    let pid = mount_bg_daemon(&mnt, &["-o", "auto_unmount"]);
    let watcher = watchers_of(&mnt);
    assert_eq!(watcher.len(), 1);
    // A plain unmount ends the daemon, then the watcher, which finds nothing to do.
    let um = Command::new("umount").arg(&mnt).output().unwrap();
    assert!(um.status.success(), "{}", show(&um));
    wait_dead(pid);
    poll_until(Duration::from_secs(3), "the watcher to exit", || {
        watchers_of(&mnt).is_empty()
    });
    // A watcher whose daemon is gone leaves a mount it did not make (another device) alone:
    // mount again without auto_unmount and kill a second watcher by hand.
    let pid = mount_bg_daemon(&mnt, &["-o", "auto_unmount"]);
    let first = watchers_of(&mnt);
    let um = Command::new("umount").arg(&mnt).output().unwrap();
    assert!(um.status.success(), "{}", show(&um));
    wait_dead(pid);
    let other = mount_bg_daemon(&mnt, &[]);
    poll_until(Duration::from_secs(3), "the first watcher to exit", || {
        first.iter().all(|w| !watchers_of(&mnt).contains(w))
    });
    assert!(is_mounted(&mnt), "the new mount stays");
    assert_eq!(daemons_of(&mnt), [other]);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn sigkill_without_auto_unmount_leaves_stale_mount_that_is_reported() {
    require_fuse();
    let (_tmp, mnt) = mnt_dir("stalebg");
    let _g = MountGuard(mnt.clone());
    let pid = mount_bg_daemon(&mnt, &[]);
    kill(pid, libc::SIGKILL);
    wait_dead(pid);
    assert_no_daemon_within(&mnt, Duration::from_secs(3));
    assert!(is_mounted(&mnt), "the mount should stay behind");
    assert_stale_reported(&mnt);
}
