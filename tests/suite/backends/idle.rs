//! `-o source_idle=SECS`: sources nobody uses are closed, so the backend can be unmounted; open
//! ones stay open.

use super::{
    Backend, Model, check_tree, held_in, ok, require, same, serial, small_model,
    unmount_under_idle_mount, wait_released,
};
use crate::common::*;

use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The small model behind squashfuse, with tensormount mounted on it with `-o source_idle=2`.
fn idle_fixture(tag: &str) -> (TempDir, Model, Backend, PathBuf, Daemon) {
    let tmp = TempDir::new(tag);
    let model = small_model(&tmp.join("model"));
    let (backend, _img) = Backend::squashfuse(&model.dir, &tmp, &tmp.join("backend"));
    let mnt = tmp.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let log = tmp.join("daemon.log");
    let opts = ["-o", "source_idle=2"];
    let (daemon, _) = Daemon::spawn(&backend.dir, &mnt, &opts, &log, Duration::from_secs(30));
    (tmp, model, backend, mnt, daemon)
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn idle_sources_are_closed_and_the_backend_can_unmount() {
    let _serial = serial();
    require(&["mksquashfs", "squashfuse", "getfattr"]);
    let start = Instant::now();
    let (_tmp, model, backend, mnt, mut daemon) = idle_fixture("idle");
    check_tree(&mnt, &backend.dir, &model);
    eprintln!(
        "held in the backend right after the reads: {:#?}",
        held_in(daemon.pid(), &backend.dir)
    );

    let took = wait_released(daemon.pid(), &backend.dir, Duration::from_secs(10));
    eprintln!("sources released {took:?} after the last read (source_idle=2)");
    unmount_under_idle_mount(&backend.dir, &mnt);
    assert!(daemon.running(), "daemon died: {}", daemon.stderr());
    drop(daemon);
    eprintln!("idle sources: checked in {:?}", start.elapsed());
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn an_open_tensor_keeps_its_source_open_past_the_idle_time() {
    let _serial = serial();
    require(&["mksquashfs", "squashfuse", "getfattr"]);
    let start = Instant::now();
    let (_tmp, model, backend, mnt, daemon) = idle_fixture("idleopen");

    let t = &model.tensors[5];
    let path = mnt.join("model.tensors").join(escaped(&t.name));
    let mut f = File::open(&path).unwrap();
    let mut got = Vec::new();
    f.read_to_end(&mut got).unwrap();
    same("open tensor", &got, &t.data);
    std::thread::sleep(Duration::from_secs(4));
    // Twice the idle time later, the open tensor's source is still open (a descriptor or a
    // mapping of it), and the file still reads right.
    let source = s(&backend.dir.join(&t.shard)).to_string();
    let held = held_in(daemon.pid(), &backend.dir);
    assert!(
        held.iter().any(|h| h.ends_with(&source)),
        "4 s after its last read (source_idle=2), the source {source} of a tensor still open is \
         not held by the daemon; it holds: {held:#?}"
    );
    let mut again = vec![0; t.data.len()];
    f.read_exact_at(&mut again, 0).unwrap();
    same("open tensor, read again", &again, &t.data);

    drop(f);
    let took = wait_released(daemon.pid(), &backend.dir, Duration::from_secs(10));
    eprintln!("source released {took:?} after the last close (source_idle=2)");
    ok(Command::new("umount").arg(&backend.dir));
    drop(daemon);
    eprintln!(
        "idle source held while open: checked in {:?}",
        start.elapsed()
    );
}
