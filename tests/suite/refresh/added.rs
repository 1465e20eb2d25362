//! Files and models added: found by inotify, by polling, at once on lookup, and on SIGUSR1.

use super::*;

// --------------------------------------------------------------------------------------- added

fn added(opts: &str) {
    let l = Live::start("added", opts, |s| {
        s.save("a.safetensors", 1, &["w"]);
        s.src.clone()
    });
    let nlink = fs::metadata(&l.mnt).unwrap().nlink();
    l.save("b.safetensors", 2, &["x", "y"]);
    fs::create_dir(l.src("model")).unwrap();
    l.save("model/m.safetensors", 3, &["z"]);
    // Only the root's attributes are looked at (no listing, no lookup): the refresh itself
    // (inotify, or the poll) must find the change, and tell the kernel its cached attributes
    // are out of date.
    l.until("the root to gain b.tensors and model", || {
        fs::metadata(&l.mnt).unwrap().nlink() == nlink + 2
    });
    assert_eq!(
        names(&l.mnt),
        [
            "a.safetensors",
            "a.tensors",
            "b.safetensors",
            "b.tensors",
            "model"
        ]
    );
    assert_eq!(names(&l.path("model")), ["m.safetensors", "m.tensors"]);
    assert_eq!(
        fs::read(l.path("b.tensors/x")).unwrap(),
        tensor_bytes(&l.src("b.safetensors"), "x")
    );
    l.compare("b.safetensors", "b.tensors");
    l.compare("model/m.safetensors", "model/m.tensors");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn added_files_and_models_appear_inotify() {
    added("");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn added_files_and_models_appear_poll() {
    let mode = "refresh=poll,refresh_interval=0.2";
    added(mode);
}

/// However seldom the source is polled, a path that is not there yet is looked for in its
/// source directory, and a listing reads the directory again when it changed.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn added_paths_are_found_at_once_without_waiting_for_the_poll() {
    let l = Live::start("exact", "refresh=poll,refresh_interval=3600", |s| {
        s.save("a.safetensors", 1, &["w"]);
        s.src.clone()
    });
    assert_eq!(
        getxattr(&l.mnt, "user.tensormount.refresh_mode").as_deref(),
        Some("poll")
    );
    assert_eq!(names(&l.mnt), ["a.safetensors", "a.tensors"]);
    fs::create_dir(l.src("model")).unwrap();
    l.save("model/m.safetensors", 3, &["z"]);
    assert_eq!(
        fs::read(l.path("model/m.tensors/z")).unwrap(),
        tensor_bytes(&l.src("model/m.safetensors"), "z")
    );
    l.save("b.safetensors", 2, &["x"]);
    assert_eq!(
        names(&l.mnt),
        [
            "a.safetensors",
            "a.tensors",
            "b.safetensors",
            "b.tensors",
            "model"
        ]
    );
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn sigusr1_rescans_at_once() {
    let l = Live::start("usr1", "refresh=poll,refresh_interval=3600", |s| {
        s.save("a.safetensors", 1, &["w"]);
        s.src.clone()
    });
    assert_eq!(names(&l.mnt).len(), 2);
    l.save("b.safetensors", 2, &["x"]);
    fs::remove_file(l.src("a.safetensors")).unwrap();
    l.rescan();
    assert_eq!(names(&l.mnt), ["b.safetensors", "b.tensors"]);
    let err = l.daemon.stderr();
    assert!(!err.contains("error"), "{err}");
}
