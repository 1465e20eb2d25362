//! A source replaced by rename under a frozen mount.

use super::{mountpoint, read_uncached};
use crate::common::*;

use std::fs;
use std::path::Path;
use std::time::Duration;

fn two_tensors(path: &Path, seed: u64) {
    write_safetensors(
        path,
        &[
            T {
                name: "a",
                dtype: "U8",
                shape: &[4096],
                data: bytes(4096, seed),
            },
            T {
                name: "b",
                dtype: "F32",
                shape: &[16, 16],
                data: bytes(1024, seed + 1),
            },
        ],
        Some(&[("format", "pt")]),
    );
}

/// With `refresh=off`, the tree built at mount stays: a source replaced by rename keeps serving
/// its old bytes until remount (the followed case is in tests/suite/refresh.rs).
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn source_replaced_by_rename_frozen_keeps_serving_old_bytes() {
    require_fuse();
    let tmp = TempDir::new("rename");
    let model = tmp.join("model");
    fs::create_dir(&model).unwrap();
    let src = model.join("model.safetensors");
    two_tensors(&src, 1);
    let old = fs::read(&src).unwrap();
    let next = tmp.join("next.safetensors");
    two_tensors(&next, 11);
    let new = fs::read(&next).unwrap();
    assert_eq!(old.len(), new.len());
    assert_ne!(old, new);

    let mnt = mountpoint(&tmp, "mnt");
    let log = tmp.join("daemon.log");
    let frozen = ["-o", "refresh=off"];
    let (mut daemon, _) = Daemon::spawn(&model, &mnt, &frozen, &log, Duration::from_secs(30));
    let a = mnt.join("model.tensors/a");
    let b = mnt.join("model.tensors/b");
    let mirror = mnt.join("model.safetensors");
    assert!(read_uncached(&a) == bytes(4096, 1), "a before the rename");

    fs::rename(&next, &src).unwrap();
    assert!(fs::read(&src).unwrap() == new);
    for round in 0..2 {
        assert!(
            read_uncached(&a) == bytes(4096, 1),
            "round {round}: a after the rename"
        );
        assert!(
            read_uncached(&b) == bytes(1024, 2),
            "round {round}: b after the rename"
        );
        assert!(
            read_uncached(&mirror) == old,
            "round {round}: mirror after the rename"
        );
    }
    assert!(daemon.running(), "daemon died: {}", daemon.stderr());
    let err = daemon.stop();
    assert!(err.is_empty(), "no warning expected; stderr:\n{err}");

    let (mut daemon, _) = Daemon::spawn(&model, &mnt, &frozen, &log, Duration::from_secs(30));
    assert!(read_uncached(&a) == bytes(4096, 11), "a after remount");
    assert!(read_uncached(&b) == bytes(1024, 12), "b after remount");
    assert!(read_uncached(&mirror) == new, "mirror after remount");
    let err = daemon.stop();
    assert!(err.is_empty(), "no warning expected; stderr:\n{err}");
}
