//! Files removed or replaced by rename: gone, or new, to new opens; open handles keep their bytes; a single-file SOURCE followed.

use super::*;

// ------------------------------------------------------------------------------------- removed

fn removed(opts: &str) {
    let mut l = Live::start("removed", opts, |s| {
        s.save("a.safetensors", 1, &["w", "v"]);
        s.save("b.safetensors", 2, &["w"]);
        s.src.clone()
    });
    let w_path = l.path("a.tensors/w");
    let w_bytes = tensor_bytes(&l.src("a.safetensors"), "w");
    let mirror_bytes = fs::read(l.src("a.safetensors")).unwrap();
    {
        let w = File::open(&w_path).unwrap();
        let map = Map::whole(&w);
        let mirror = File::open(l.path("a.safetensors")).unwrap();
        // Looked up, not open: the kernel drops it as soon as it is told.
        let watch = Watch::new(&l.path("a.tensors/v"));

        fs::remove_file(l.src("a.safetensors")).unwrap();
        if opts.contains("poll") {
            l.rescan();
        }
        l.until("a.safetensors to go", || !l.path("a.safetensors").exists());
        assert_eq!(errno(fs::metadata(&w_path)), Some(libc::ENOENT));
        assert_eq!(errno(File::open(l.path("a.tensors/v"))), Some(libc::ENOENT));
        assert_eq!(names(&l.mnt), ["b.safetensors", "b.tensors"]);
        // Handles and mappings opened before read the bytes they had, past the page cache.
        assert!(read_all_uncached(&w).unwrap() == w_bytes);
        assert!(map.bytes() == w_bytes);
        assert!(read_all_uncached(&mirror).unwrap() == mirror_bytes);
        // The kernel was told: the file's link count is 0, and watchers of a file that is not
        // open saw it deleted (the kernel tells a directory's watchers nothing).
        assert_eq!(w.metadata().unwrap().nlink(), 0);
        assert!(watch.deleted(), "no IN_DELETE_SELF");
    }
    // Once closed and forgotten, the source's descriptor and mapping are released.
    let pid = l.daemon.pid();
    wait_for("the removed file let go", || {
        deleted_files_held(pid).is_empty()
    });
    assert!(l.daemon.running());
    let err = l.daemon.stop();
    assert!(!err.contains("panic"), "{err}");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn removed_files_vanish_but_open_handles_keep_their_bytes_inotify() {
    removed("");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn removed_files_vanish_but_open_handles_keep_their_bytes_poll() {
    removed("refresh=poll,refresh_interval=3600");
}

// -------------------------------------------------------------------------- replaced by rename

fn replaced(opts: &str) {
    let mut l = Live::start("replaced", opts, |s| {
        s.save("a.safetensors", 1, &["w", "v"]);
        s.save("b.safetensors", 2, &["w"]);
        s.src.clone()
    });
    let a = l.src("a.safetensors");
    let old = (
        tensor_bytes(&a, "w"),
        tensor_bytes(&a, "v"),
        fs::read(&a).unwrap(),
    );
    let inos_before = (
        ino(&l.path("a.tensors")),
        ino(&l.path("a.tensors/w")),
        ino(&l.path("a.safetensors")),
        ino(&l.path("b.tensors/w")),
        ino(&l.path("b.safetensors")),
    );
    let w = File::open(l.path("a.tensors/w")).unwrap();
    let map = Map::whole(&w);
    let mirror = File::open(l.path("a.safetensors")).unwrap();
    assert!(map.bytes() == old.0);

    // Republished: a new file renamed over the old one.
    l.save("a.safetensors", 11, &["w", "v"]);
    let new = (
        tensor_bytes(&a, "w"),
        tensor_bytes(&a, "v"),
        fs::read(&a).unwrap(),
    );
    assert_ne!(new.0, old.0);
    // An open right after the rename returns the new bytes, before any refresh in poll mode: the
    // open finds its source replaced, has the directory read again, and answers ESTALE, which makes
    // the kernel look the path up again.
    assert!(fs::read(l.path("a.tensors/w")).unwrap() == new.0);
    assert!(fs::read(l.path("a.tensors/v")).unwrap() == new.1);
    assert!(fs::read(l.path("a.safetensors")).unwrap() == new.2);
    // Handles and mappings opened before keep the old bytes, all of them.
    assert!(read_all_uncached(&w).unwrap() == old.0);
    assert!(map.bytes() == old.0);
    assert!(read_all_uncached(&mirror).unwrap() == old.2);

    // Changed entries are new inodes; the tensor directory and the sibling keep theirs.
    assert_eq!(ino(&l.path("a.tensors")), inos_before.0);
    assert_ne!(ino(&l.path("a.tensors/w")), inos_before.1);
    assert_ne!(ino(&l.path("a.safetensors")), inos_before.2);
    assert_eq!(ino(&l.path("b.tensors/w")), inos_before.3);
    assert_eq!(ino(&l.path("b.safetensors")), inos_before.4);
    l.compare("a.safetensors", "a.tensors");
    drop((w, map, mirror));
    assert!(l.daemon.running());
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_file_replaced_by_rename_is_new_to_new_opens_and_old_to_old_handles_inotify() {
    replaced("");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_file_replaced_by_rename_is_new_to_new_opens_and_old_to_old_handles_poll() {
    replaced("refresh=poll,refresh_interval=3600");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_single_file_source_is_followed() {
    let l = Live::start("single", "", |s| {
        s.save("a.safetensors", 1, &["w"]);
        s.src.join("a.safetensors")
    });
    let a = l.src("a.safetensors");
    let old = tensor_bytes(&a, "w");
    let w = File::open(l.path("w")).unwrap();
    l.save("a.safetensors", 2, &["w", "x"]);
    assert!(fs::read(l.path("w")).unwrap() == tensor_bytes(&a, "w"));
    l.until("x to appear", || {
        names(&l.mnt) == ["__metadata__", "w", "x"]
    });
    assert!(read_all_uncached(&w).unwrap() == old);
    assert_eq!(
        getxattr(&l.mnt, "user.safetensors.metadata.seed").as_deref(),
        Some("2")
    );
}
