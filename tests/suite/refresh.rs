//! The mount follows its source: files and models added, removed, replaced by rename, rewritten in
//! place, downloaded the way huggingface_hub does, republished the way save_pretrained does. Real
//! mounts, real writers (the official safetensors writer), waits on the root's refresh generation
//! (never bare sleeps), in inotify and poll modes where they differ.

use crate::common::*;

use std::ffi::CString;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, symlink};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A foreground daemon following `src`, mounted on `mnt`.
struct Live {
    tmp: TempDir,
    src: PathBuf,
    mnt: PathBuf,
    daemon: Daemon,
    py: PathBuf,
}

impl Live {
    /// Makes a source directory with `setup`, and mounts it (or the path `setup` returns, if it
    /// is a file) with `-o opts`.
    fn start(tag: &str, opts: &str, setup: impl FnOnce(&Live0) -> PathBuf) -> Live {
        require_fuse();
        let py = python();
        let tmp = TempDir::new(tag);
        let src = tmp.join("src");
        fs::create_dir(&src).unwrap();
        let mnt = tmp.join("mnt");
        fs::create_dir(&mnt).unwrap();
        let l0 = Live0 {
            src: src.clone(),
            py: py.clone(),
        };
        let source = setup(&l0);
        let log = tmp.join("daemon.log");
        let opts = format!("ro,{opts}");
        let args = ["-o", opts.trim_end_matches(',')];
        let (daemon, _) = Daemon::spawn(&source, &mnt, &args, &log, Duration::from_secs(30));
        Live {
            tmp,
            src,
            mnt,
            daemon,
            py,
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.mnt.join(p)
    }

    fn src(&self, p: &str) -> PathBuf {
        self.src.join(p)
    }

    fn save(&self, p: &str, seed: u64, names: &[&str]) {
        save(&self.py, &self.src(p), seed, names);
    }

    /// Waits until `cond` holds, looking again after each refresh.
    fn until(&self, what: &str, cond: impl FnMut() -> bool) {
        wait_refreshed(&self.mnt, what, cond);
    }

    /// SIGUSR1, then waits for the rescan it asks for.
    fn rescan(&self) {
        let seen = generation(&self.mnt);
        self.daemon.signal(libc::SIGUSR1);
        wait_generation_after(&self.mnt, seen);
    }

    fn compare(&self, src: &str, tensor_dir: &str) {
        let (src, dir) = (self.src(src), self.path(tensor_dir));
        oracle(
            &self.py,
            &["compare", src.to_str().unwrap(), dir.to_str().unwrap()],
        );
    }
}

/// What `setup` gets before the mount exists.
struct Live0 {
    src: PathBuf,
    py: PathBuf,
}

impl Live0 {
    fn save(&self, p: &str, seed: u64, names: &[&str]) {
        save(&self.py, &self.src.join(p), seed, names);
    }
}

/// Writes `path` with the official writer (which writes a temporary file and renames it).
fn save(py: &Path, path: &Path, seed: u64, names: &[&str]) {
    let seed = seed.to_string();
    let mut args = vec!["save", path.to_str().unwrap(), &seed];
    args.extend_from_slice(names);
    oracle(py, &args);
}

fn ino(p: &Path) -> u64 {
    fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .ino()
}

fn errno<T>(r: std::io::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

/// Drops the kernel's cached pages of an open file, so the next read goes to the daemon.
fn drop_cache(f: &File) {
    // SAFETY: posix_fadvise on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
}

/// The whole file through `f`, past the page cache.
fn read_all_uncached(f: &File) -> std::io::Result<Vec<u8>> {
    drop_cache(f);
    let len = f.metadata()?.len() as usize;
    let mut buf = vec![0; len];
    f.read_exact_at(&mut buf, 0)?;
    Ok(buf)
}

/// The bytes a tensor has in a source file, by its header.
fn tensor_bytes(file: &Path, name: &str) -> Vec<u8> {
    let bytes = fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let off = &header[name]["data_offsets"];
    let (b, e) = (
        off[0].as_u64().unwrap() as usize,
        off[1].as_u64().unwrap() as usize,
    );
    bytes[8 + n + b..8 + n + e].to_vec()
}

/// An inotify watch on a file of the mount, as a tool watching the mount would have.
struct Watch {
    fd: i32,
}

impl Watch {
    fn new(file: &Path) -> Watch {
        // SAFETY: plain syscalls on our own descriptor and a valid path.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            assert!(fd >= 0);
            let c = CString::new(file.as_os_str().as_bytes()).unwrap();
            assert!(libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_DELETE_SELF) >= 0);
            Watch { fd }
        }
    }

    /// Whether IN_DELETE_SELF was queued.
    fn deleted(&self) -> bool {
        let mut buf = vec![0u8; 4096];
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
        let mut at = 0usize;
        while n > 0 && at + 16 <= n as usize {
            let mask = u32::from_ne_bytes(buf[at + 4..at + 8].try_into().unwrap());
            if mask & libc::IN_DELETE_SELF != 0 {
                return true;
            }
            at += 16 + u32::from_ne_bytes(buf[at + 12..at + 16].try_into().unwrap()) as usize;
        }
        false
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // SAFETY: closes our own descriptor.
        unsafe { libc::close(self.fd) };
    }
}

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

// -------------------------------------------------------------------- rewritten in place, flux

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_file_rewritten_in_place_fails_old_handles_and_comes_back_once_settled() {
    rewritten_in_place("inplace", "settle=0.3");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_file_rewritten_in_place_under_kernel_cache_keeps_the_old_cached_pages() {
    rewritten_in_place("inplace-kc", "settle=0.3,kernel_cache");
}

/// A source rewritten in place under a mount made with `opts`: old handles fail, and the tensors
/// come back once the file has settled. Under `kernel_cache`, pages the kernel cached of an old
/// handle stay readable (the old, consistent bytes); under direct I/O there are none, and every
/// read of an old handle fails.
fn rewritten_in_place(tag: &str, opts: &str) {
    let kernel_cache = opts.contains("kernel_cache");
    let mut l = Live::start(tag, opts, |s| {
        s.save("a.safetensors", 1, &["w", "v"]);
        s.src.clone()
    });
    let a = l.src("a.safetensors");
    let w = File::open(l.path("a.tensors/w")).unwrap();
    let cached = fs::read(l.path("a.tensors/v")).unwrap();
    let v = File::open(l.path("a.tensors/v")).unwrap();
    // Rewritten in place with other bytes (an old writer: truncate, then write).
    let staged = l.tmp.join("staged.safetensors");
    save(&l.py, &staged, 2, &["w", "v"]);
    let bytes = fs::read(&staged).unwrap();
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&a)
        .unwrap();
    f.write_all(&bytes[..bytes.len() / 2]).unwrap();
    f.flush().unwrap();
    // Past the page cache, an old handle never gets new bytes: ESTALE.
    drop_cache(&w);
    let mut buf = vec![0u8; 4096];
    assert_eq!(errno(w.read_at(&mut buf, 0)), Some(libc::ESTALE));
    let mut again = vec![0u8; cached.len()];
    if kernel_cache {
        // Pages the kernel had cached stay the old, consistent bytes.
        v.read_exact_at(&mut again, 0).unwrap();
        assert!(again == cached);
    } else {
        assert_eq!(errno(v.read_exact_at(&mut again, 0)), Some(libc::ESTALE));
    }
    // Half-written: mirrored as it is, not interpreted.
    l.until("a.tensors to go", || !l.path("a.tensors").exists());
    let error = getxattr(&l.path("a.safetensors"), "user.safetensors.error").unwrap();
    assert!(
        error.contains("being written") || error.contains("MetadataIncompleteBuffer"),
        "{error}"
    );
    f.write_all(&bytes[bytes.len() / 2..]).unwrap();
    drop(f);
    assert!(fs::read(l.path("a.safetensors")).unwrap() == bytes);
    // Complete, then settled: interpreted again.
    l.until("a.tensors back", || l.path("a.tensors/w").exists());
    assert!(fs::read(l.path("a.tensors/w")).unwrap() == tensor_bytes(&a, "w"));
    assert!(getxattr(&l.path("a.safetensors"), "user.safetensors.error").is_none());
    assert!(l.daemon.running());
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn partial_download_names_are_never_interpreted() {
    let l = Live::start("partial", "", |s| {
        s.save("a.safetensors", 1, &["w"]);
        s.src.clone()
    });
    let bytes = fs::read(l.src("a.safetensors")).unwrap();
    for name in [
        "b.safetensors.incomplete",
        ".tmpAb12Cd",
        "c.safetensors.part",
    ] {
        fs::write(l.src(name), &bytes).unwrap();
    }
    l.until("the partial files", || names(&l.mnt).len() == 5);
    assert_eq!(
        names(&l.mnt),
        [
            ".tmpAb12Cd",
            "a.safetensors",
            "a.tensors",
            "b.safetensors.incomplete",
            "c.safetensors.part"
        ]
    );
}

// ------------------------------------------------------------------ huggingface_hub downloads

/// Replays `hf_hub_download` of every file of a sharded model into a cache, checking the mount
/// after each step: `refs/main` written first, the snapshot directory made, each blob written
/// under a temporary name (`<etag>.incomplete` up to 1.17, `<etag>.<8 hex>.incomplete` since
/// 1.18), renamed, and only then linked from the snapshot.
fn hf_download(new_naming: bool) {
    let l = Live::start("hf", "", |s| s.src.clone());
    let staged = l.tmp.join("staged");
    fs::create_dir(&staged).unwrap();
    let shards = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    save(&l.py, &staged.join(shards[0]), 1, &["a", "b"]);
    save(&l.py, &staged.join(shards[1]), 2, &["c"]);
    let index = serde_json::json!({"metadata": {"total_size": 12288},
        "weight_map": {"a": shards[0], "b": shards[0], "c": shards[1]}});
    fs::write(
        staged.join("model.safetensors.index.json"),
        serde_json::to_vec_pretty(&index).unwrap(),
    )
    .unwrap();
    let repo = l.src("models--org--model");
    let sha = "0123456789abcdef0123456789abcdef01234567";
    fs::create_dir_all(repo.join("refs")).unwrap();
    fs::create_dir_all(repo.join("blobs")).unwrap();
    fs::write(repo.join("refs/main"), sha).unwrap();
    let snap = repo.join("snapshots").join(sha);
    fs::create_dir_all(&snap).unwrap();
    let snap_mnt = format!("models--org--model/snapshots/{sha}");

    let files = ["model.safetensors.index.json", shards[0], shards[1]];
    for (i, file) in files.iter().enumerate() {
        let bytes = fs::read(staged.join(file)).unwrap();
        let etag = format!("{:040x}", i + 1);
        let tmp = if new_naming {
            repo.join(format!("blobs/{etag}.1a2b3c4d.incomplete"))
        } else {
            repo.join(format!("blobs/{etag}.incomplete"))
        };
        let mut f = File::create(&tmp).unwrap();
        f.write_all(&bytes[..bytes.len() / 3]).unwrap();
        f.flush().unwrap();
        // Mid-download: the partial blob is mirrored, nothing in the snapshot yet.
        let tmp_name = tmp.file_name().unwrap().to_str().unwrap().to_string();
        l.until("the partial blob", || {
            fs::read_dir(l.path("models--org--model/blobs")).is_ok_and(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_str() == Some(&tmp_name))
            })
        });
        assert!(!l.path(&format!("{snap_mnt}/{file}")).exists());
        f.write_all(&bytes[bytes.len() / 3..]).unwrap();
        drop(f);
        fs::rename(&tmp, repo.join("blobs").join(&etag)).unwrap();
        symlink(format!("../../blobs/{etag}"), snap.join(file)).unwrap();
        l.until("the snapshot file", || {
            l.path(&format!("{snap_mnt}/{file}")).exists()
        });
        // The merged set appears only with its last shard.
        let merged = l.path(&format!("{snap_mnt}/model.tensors"));
        assert_eq!(merged.exists(), i == files.len() - 1, "after {file}");
    }
    let blobs = names(&l.path("models--org--model/blobs"));
    assert!(
        blobs.iter().all(|b| !b.ends_with(".incomplete")),
        "{blobs:?}"
    );
    l.compare(
        &format!("models--org--model/snapshots/{sha}"),
        &format!("{snap_mnt}/model.tensors"),
    );
    // A second revision fills in beside the first, which stays as it was.
    let first = ino(&l.path(&format!("{snap_mnt}/model.tensors/a")));
    let sha2 = "fedcba9876543210fedcba9876543210fedcba98";
    fs::create_dir_all(repo.join("snapshots").join(sha2)).unwrap();
    symlink(
        format!("../../blobs/{:040x}", 2),
        repo.join("snapshots").join(sha2).join(shards[0]),
    )
    .unwrap();
    fs::write(repo.join("refs/main"), sha2).unwrap();
    l.until("the second revision", || {
        l.path(&format!(
            "models--org--model/snapshots/{sha2}/model-00001-of-00002.tensors/a"
        ))
        .exists()
    });
    assert_eq!(ino(&l.path(&format!("{snap_mnt}/model.tensors/a"))), first);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn huggingface_hub_downloads_appear_complete_old_naming() {
    hf_download(false);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn huggingface_hub_downloads_appear_complete_new_naming() {
    hf_download(true);
}

// ------------------------------------------------------------------------- save_pretrained

/// `save_pretrained` republishing a 3-shard model as 2 shards into the same directory: stale
/// shards deleted first, new shards written by the official writer, the index rewritten in place
/// last. The merged directory is absent while the set is inconsistent, correct after; handles
/// opened on the old set keep their bytes.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn save_pretrained_republish_hides_the_set_until_complete() {
    let names3 = ["a", "b", "c"];
    let shard = |i: usize, n: usize| format!("model-{i:05}-of-{n:05}.safetensors");
    let l = Live::start("republish", "settle=0.3", |s| {
        let mut map = serde_json::Map::new();
        for (i, n) in names3.iter().enumerate() {
            s.save(&shard(i + 1, 3), 10 + i as u64, &[n]);
            map.insert(n.to_string(), shard(i + 1, 3).into());
        }
        fs::write(
            s.src.join("model.safetensors.index.json"),
            serde_json::to_vec(&serde_json::json!({"metadata": {}, "weight_map": map})).unwrap(),
        )
        .unwrap();
        s.src.clone()
    });
    let old_a = tensor_bytes(&l.src(&shard(1, 3)), "a");
    let held = File::open(l.path("model.tensors/a")).unwrap();
    let merged_present = || l.path("model.tensors").exists();
    assert!(merged_present());

    // 1. Stale shards deleted.
    for i in 1..=3 {
        fs::remove_file(l.src(&shard(i, 3))).unwrap();
    }
    l.until("the merged set to go", || !merged_present());
    // 2. New shards written, one by one.
    l.save(&shard(1, 2), 20, &["a", "b"]);
    l.rescan();
    assert!(!merged_present());
    l.save(&shard(2, 2), 21, &["c"]);
    l.rescan();
    assert!(
        !merged_present(),
        "the old index names shards that are gone"
    );
    // 3. The index, in place.
    let mut map = serde_json::Map::new();
    for (n, s) in [("a", 1), ("b", 1), ("c", 2)] {
        map.insert(n.into(), shard(s, 2).into());
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(l.src("model.safetensors.index.json"))
        .unwrap();
    f.write_all(
        &serde_json::to_vec(&serde_json::json!({"metadata": {}, "weight_map": map})).unwrap(),
    )
    .unwrap();
    drop(f);
    l.until("the new merged set", merged_present);
    assert_eq!(
        names(&l.path("model.tensors")),
        ["__metadata__", "a", "b", "c"]
    );
    assert!(
        fs::read(l.path("model.tensors/a")).unwrap() == tensor_bytes(&l.src(&shard(1, 2)), "a")
    );
    // The handle opened on the old set still reads the old bytes.
    assert!(read_all_uncached(&held).unwrap() == old_a);

    // Republished again with shard 1 untouched: its tensors keep their inodes.
    let a = ino(&l.path("model.tensors/a"));
    let c = ino(&l.path("model.tensors/c"));
    l.save(&shard(2, 2), 22, &["c"]);
    l.until("the new c", || ino(&l.path("model.tensors/c")) != c);
    assert_eq!(ino(&l.path("model.tensors/a")), a);
    assert!(
        fs::read(l.path("model.tensors/c")).unwrap() == tensor_bytes(&l.src(&shard(2, 2)), "c")
    );
}

// ------------------------------------------------------------------------ identity, listings

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn unrelated_changes_keep_every_inode() {
    let l = Live::start("stable", "", |s| {
        fs::create_dir(s.src.join("m1")).unwrap();
        fs::create_dir(s.src.join("m2")).unwrap();
        s.save("m1/a.safetensors", 1, &["w", "v"]);
        s.save("m2/b.safetensors", 2, &["w"]);
        s.src.clone()
    });
    let all = |root: &Path| -> Vec<(PathBuf, u64)> {
        let with_ino = |p: PathBuf| {
            let i = fs::symlink_metadata(&p).unwrap().ino();
            (p, i)
        };
        walk(root).into_iter().map(with_ino).collect()
    };
    let before = all(&l.path("m1"));
    let m2 = ino(&l.path("m2/b.tensors/w"));
    fs::write(l.src("m2/notes.txt"), b"hello").unwrap();
    l.until("notes.txt", || l.path("m2/notes.txt").exists());
    assert_eq!(all(&l.path("m1")), before);
    assert_eq!(ino(&l.path("m2/b.tensors/w")), m2);
}

/// A directory listing in progress never skips or repeats an entry while the directory changes.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_listing_in_progress_sees_one_state() {
    let l = Live::start("readdir", "", |s| {
        for i in 0..400 {
            fs::write(s.src.join(format!("file-{i:04}.txt")), b"x").unwrap();
        }
        s.src.clone()
    });
    let dir = CString::new(l.mnt.as_os_str().as_bytes()).unwrap();
    // SAFETY: opening a directory we own the path of.
    let fd = unsafe { libc::open(dir.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(fd >= 0);
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 4096];
    let mut read_some = |seen: &mut Vec<String>| -> bool {
        // SAFETY: getdents64 into a buffer of the given length.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        assert!(n >= 0);
        let mut at = 0usize;
        while at < n as usize {
            let reclen = u16::from_ne_bytes(buf[at + 16..at + 18].try_into().unwrap()) as usize;
            let name = &buf[at + 19..at + reclen];
            let name = name.split(|&b| b == 0).next().unwrap();
            seen.push(String::from_utf8_lossy(name).into_owned());
            at += reclen;
        }
        n > 0
    };
    assert!(read_some(&mut seen));
    assert!(
        seen.len() < 300,
        "the first read should not take the whole directory"
    );
    for i in 0..400 {
        if i % 2 == 0 {
            fs::remove_file(l.src(&format!("file-{i:04}.txt"))).unwrap();
        }
    }
    fs::write(l.src("zzz-new.txt"), b"y").unwrap();
    l.until("the change", || !l.path("file-0000.txt").exists());
    while read_some(&mut seen) {}
    // SAFETY: closing our descriptor.
    unsafe { libc::close(fd) };
    seen.retain(|n| n != "." && n != "..");
    let unique: std::collections::HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "an entry was listed twice");
    for i in (1..400).step_by(2) {
        assert!(
            seen.contains(&format!("file-{i:04}.txt")),
            "file-{i:04}.txt skipped"
        );
    }
    // A new listing sees the new state.
    assert_eq!(names(&l.mnt).len(), 201);
}

// ------------------------------------------------------------------------------- lifetime

/// 300 republishes of a file whose tensors the kernel looks up each time: old inodes are
/// forgotten, and their sources' descriptors and mappings released.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn republishing_again_and_again_leaves_descriptors_where_they_were() {
    let mut l = Live::start("lifetime", "refresh=poll,refresh_interval=3600", |s| {
        s.save("a.safetensors", 0, &["w"]);
        s.save("b.safetensors", 0, &["w"]);
        s.src.clone()
    });
    let staged: Vec<Vec<u8>> = (0..2)
        .map(|seed| {
            let p = l.tmp.join(format!("v{seed}.safetensors"));
            save(&l.py, &p, seed, &["w"]);
            fs::read(p).unwrap()
        })
        .collect();
    let publish = |bytes: &[u8]| {
        let tmp = l.src(".tmpREPUBL");
        fs::write(&tmp, bytes).unwrap();
        fs::rename(&tmp, l.src("a.safetensors")).unwrap();
    };
    assert_eq!(fs::read(l.path("a.tensors/w")).unwrap().len(), 4096);
    for round in 0..300 {
        publish(&staged[round % 2]);
        l.rescan();
        // Looked up and read, so the kernel holds the new inodes until they are replaced.
        let got = fs::read(l.path("a.tensors/w")).unwrap();
        assert!(
            got == tensor_bytes(&l.src("a.safetensors"), "w"),
            "round {round}"
        );
        fs::metadata(l.path("a.safetensors")).unwrap();
    }
    // Every replaced version is let go (the kernel forgot its inodes once they were replaced).
    let pid = l.daemon.pid();
    wait_for("the replaced versions let go", || {
        deleted_files_held(pid).is_empty()
    });
    assert!(l.daemon.running());
}

// ---------------------------------------------------------------------------------- frozen

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn refresh_off_is_the_tree_built_at_mount() {
    let mut l = Live::start("frozen", "refresh=off", |s| {
        s.save("a.safetensors", 1, &["w"]);
        s.src.clone()
    });
    assert_eq!(
        getxattr(&l.mnt, "user.tensormount.refresh_mode").as_deref(),
        Some("off")
    );
    assert_eq!(generation(&l.mnt), 0);
    l.save("b.safetensors", 2, &["x"]);
    l.daemon.signal(libc::SIGUSR1);
    assert_eq!(
        errno(fs::metadata(l.path("b.safetensors"))),
        Some(libc::ENOENT)
    );
    assert_eq!(names(&l.mnt), ["a.safetensors", "a.tensors"]);
    assert_eq!(generation(&l.mnt), 0);
    assert!(l.daemon.running());
}

// ----------------------------------------------------------------------------- watch limits

/// With inotify watches running out, the directories left unwatched are polled: logged once,
/// and a change in one of them is still found (here in a user namespace whose watch limit is 3,
/// so that the host's limit is left alone).
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn directories_beyond_the_watch_limit_are_polled() {
    let l = Live::start("watchlimit", "refresh=off", |s| {
        for d in ["a", "b", "c", "d"] {
            fs::create_dir(s.src.join(d)).unwrap();
        }
        s.save("a/m.safetensors", 1, &["w"]);
        s.src.clone()
    });
    let mnt = l.tmp.join("mnt2");
    fs::create_dir(&mnt).unwrap();
    let log = l.tmp.join("limited.log");
    let staged = l.tmp.join("n.safetensors");
    save(&l.py, &staged, 2, &["x"]);
    let script = format!(
        r#"set -e
echo 3 > /proc/sys/user/max_inotify_watches
{bin} {src} {mnt} --log-file {log} -o refresh_interval=0.2
trap 'umount {mnt}' EXIT
echo "mode $(getfattr --only-values -n user.tensormount.refresh_mode {mnt})"
before=$(stat -c %h {mnt}/d)
cp {staged} {src}/d/n.safetensors
# d is polled: its link count grows with n.tensors; only attributes are looked at.
for i in $(seq 1 200); do
    g=$(getfattr --only-values -n user.tensormount.refresh_generation {mnt})
    [ "$(stat -c %h {mnt}/d)" -gt "$before" ] && break
    n=0
    while [ "$(getfattr --only-values -n user.tensormount.refresh_generation {mnt})" = "$g" ] \
        && [ $n -lt 2000 ]; do n=$((n + 1)); done
done
echo "nlink $before $(stat -c %h {mnt}/d)"
ls {mnt}/d
"#,
        bin = bin(),
        src = l.src.display(),
        mnt = mnt.display(),
        log = log.display(),
        staged = staged.display(),
    );
    let out = std::process::Command::new("unshare")
        .args(["-Urm", "sh", "-c", &script])
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("mode inotify+poll"), "{text}");
    assert!(text.contains("nlink 2 3"), "{text}");
    assert!(text.contains("n.tensors"), "{text}");
    let logged = fs::read_to_string(&log).unwrap();
    assert_eq!(logged.matches("watch limit reached").count(), 1, "{logged}");
}
