//! FUSE backends: a squashfs image mounted by `squashfuse`, `bindfs -o direct_io` (files that
//! cannot be mapped), and a `squashfuse` stopped with SIGSTOP.

use super::{Backend, check_stall, check_tree, pids_of, require, serial, small_model, write_model};
use crate::common::*;

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::time::{Duration, Instant};

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn squashfuse_backend_serves_every_tensor() {
    let _serial = serial();
    require(&["mksquashfs", "squashfuse", "getfattr"]);
    let start = Instant::now();
    let tmp = TempDir::new("squash");
    let model = small_model(&tmp.join("model"));
    let (backend, _img) = Backend::squashfuse(&model.dir, &tmp, &tmp.join("backend"));
    let tm = Mounted::new(&backend.dir, "");
    let n = check_tree(&tm.dir, &backend.dir, &model);
    assert_eq!(n, 12 + 12 + 5);

    // The official reader, through the mount.
    {
        let py = python();
        let out = oracle(
            &py,
            &["compare", s(&model.dir), s(&tm.path("model.tensors"))],
        );
        assert!(out.starts_with("ok 12 "), "{out}");
        let from_mount = oracle(&py, &["load-all", s(&tm.dir)]);
        let from_source = oracle(&py, &["load-all", s(&model.dir)]);
        assert_eq!(from_mount, from_source);
        eprintln!("the official reader agrees through the mount");
    }
    eprintln!(
        "squashfuse backend: {n} files checked in {:?}",
        start.elapsed()
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn direct_io_backend_is_served_with_pread() {
    let _serial = serial();
    require(&["bindfs", "getfattr"]);
    let start = Instant::now();
    let tmp = TempDir::new("directio");
    let model = small_model(&tmp.join("model"));
    // Files of a direct_io FUSE mount cannot be mapped (mmap fails with ENODEV).
    let backend = Backend::bindfs("direct_io", &model.dir, &tmp.join("backend"));
    let probe = File::open(backend.dir.join(&model.shards[0])).unwrap();
    assert_eq!(
        Map::new(&probe, 0, 4096)
            .err()
            .and_then(|e| e.raw_os_error()),
        Some(libc::ENODEV),
        "bindfs -o direct_io files were expected to refuse mmap"
    );
    drop(probe);

    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let (daemon, _) = Daemon::spawn(&backend.dir, &mnt, &[], &log, Duration::from_secs(30));
    let n = check_tree(&mnt, &backend.dir, &model);

    // --list sees every tensor too, with its source and offset.
    let out = run(&["--list", "--json", s(&backend.dir)]);
    assert!(out.status.success(), "--list: {}", stderr(&out));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let mut want = BTreeSet::new();
    for t in &model.tensors {
        let stem = t.shard.trim_end_matches(".safetensors");
        for dir in [format!("{stem}.tensors"), "model.tensors".to_string()] {
            want.insert((
                format!("{dir}/{}", escaped(&t.name)),
                s(&backend.dir.join(&t.shard)).to_string(),
                t.offset,
                t.data.len() as u64,
            ));
        }
    }
    let got: BTreeSet<(String, String, u64, u64)> = rows["tensors"]
        .as_array()
        .expect("--list --json prints an array of tensors")
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap().to_string(),
                r["source"].as_str().unwrap().to_string(),
                r["offset"].as_u64().unwrap(),
                r["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want, "--list --json of {}", backend.dir.display());

    // The daemon says which source it could not map and that it reads it with pread instead.
    let err = daemon.stderr();
    assert!(
        err.lines()
            .any(|l| l.contains(s(&backend.dir)) && l.contains("pread")),
        "no log line names the unmappable source ({}) and pread:\n{err}",
        backend.dir.display()
    );
    drop(daemon);
    eprintln!(
        "direct_io backend: {n} files checked in {:?}",
        start.elapsed()
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_stalled_backend_does_not_freeze_the_mount() {
    let _serial = serial();
    require(&["mksquashfs", "squashfuse", "getfattr"]);
    const READERS: usize = 16;
    let start = Instant::now();
    let tmp = TempDir::new("stall");
    // 17 tensors of 4 MiB in one file; the last one is read before the stall ("cached").
    let model = write_model(&tmp.join("model"), 1, READERS + 1, |_| 4 << 20);
    let (backend, img) = Backend::squashfuse(&model.dir, &tmp, &tmp.join("backend"));
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let (daemon, _) = Daemon::spawn(&backend.dir, &mnt, &[], &log, Duration::from_secs(30));
    let pids = pids_of("squashfuse", &img);
    assert_eq!(
        pids.len(),
        1,
        "squashfuse processes of {}: {pids:?}",
        img.display()
    );
    check_stall(&model, &mnt, &daemon, pids[0], 0..READERS, READERS);
    drop(daemon);
    drop(backend);
    eprintln!("stalled backend: checked in {:?}", start.elapsed());
}
