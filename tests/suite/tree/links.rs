//! Links and special files: Hugging Face cache snapshots, links leading out of the source or
//! staying inside it, and FIFOs, sockets and device nodes.

use super::{check_tensor_dir, cpath, last_errno, mount, names, stat_c, u8t};
use crate::common::*;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn hugging_face_cache_snapshot_links_are_followed() {
    require_fuse();
    let tmp = TempDir::new("hf");
    let repo = tmp.join("models--org--name");
    let blobs = repo.join("blobs");
    let snap = repo.join("snapshots/0123456789abcdef");
    fs::create_dir_all(&blobs).unwrap();
    fs::create_dir_all(snap.join("unet")).unwrap();
    let model_t = [u8t("w", 20, 1), u8t("b", 4, 2)];
    let unet_t = [u8t("conv", 12, 3)];
    let (sha_m, sha_c, sha_u) = ("aaaa1111", "bbbb2222", "cccc3333");
    write_safetensors(&blobs.join(sha_m), &model_t, Some(&[("format", "pt")]));
    fs::write(blobs.join(sha_c), b"{\"hf\": 1}\n").unwrap();
    write_safetensors(&blobs.join(sha_u), &unet_t, None);
    std::os::unix::fs::symlink(
        format!("../../blobs/{sha_m}"),
        snap.join("model.safetensors"),
    )
    .unwrap();
    std::os::unix::fs::symlink(format!("../../blobs/{sha_c}"), snap.join("config.json")).unwrap();
    std::os::unix::fs::symlink(
        format!("../../../blobs/{sha_u}"),
        snap.join("unet/x.safetensors"),
    )
    .unwrap();

    let (m, _) = mount(&snap, "");
    assert_eq!(
        names(&m.dir),
        ["config.json", "model.safetensors", "model.tensors", "unet"]
    );
    assert_eq!(names(&m.path("unet")), ["x.safetensors", "x.tensors"]);
    assert_eq!(stat_c(&m.path("model.safetensors"), "%F"), "regular file");
    assert_eq!(
        fs::read(m.path("model.safetensors")).unwrap(),
        fs::read(blobs.join(sha_m)).unwrap()
    );
    assert_eq!(fs::read(m.path("config.json")).unwrap(), b"{\"hf\": 1}\n");
    check_tensor_dir(
        &m.path("model.tensors"),
        &model_t.iter().collect::<Vec<_>>(),
        &blobs.join(sha_m),
        true,
    );
    check_tensor_dir(
        &m.path("unet/x.tensors"),
        &unet_t.iter().collect::<Vec<_>>(),
        &blobs.join(sha_u),
        false,
    );
    drop(m);

    // A single-file SOURCE that is itself a link is followed too.
    let (m, _) = mount(&snap.join("model.safetensors"), "");
    check_tensor_dir(
        &m.dir,
        &model_t.iter().collect::<Vec<_>>(),
        &blobs.join(sha_m),
        true,
    );
}

/// A cache laid out as `huggingface_hub` writes one: blobs named by hash, revisions of links into
/// them (`../../blobs/HASH`, one level more in a subfolder), refs, a sharded revision and a second
/// revision sharing a blob.
fn write_hf_cache(cache: &Path) -> Vec<(&'static str, Vec<T<'static>>)> {
    let repo = cache.join("models--org--model");
    let blobs = repo.join("blobs");
    let (rev1, rev2) = (
        "0123456789abcdef0123456789abcdef01234567",
        "fedcba9876543210fedcba9876543210fedcba98",
    );
    for d in [
        blobs.clone(),
        repo.join("refs"),
        repo.join("snapshots").join(rev1).join("unet"),
        repo.join("snapshots").join(rev2),
    ] {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(repo.join("refs/main"), rev2).unwrap();
    fs::write(repo.join("refs/v1"), rev1).unwrap();
    let files: Vec<(&str, Vec<T<'static>>)> = vec![
        ("model.safetensors", vec![u8t("w", 20, 1), u8t("b", 4, 2)]),
        ("unet/diffusion.safetensors", vec![u8t("conv", 12, 3)]),
        ("big-00001-of-00002.safetensors", vec![u8t("x", 8, 4)]),
        ("big-00002-of-00002.safetensors", vec![u8t("y", 8, 5)]),
    ];
    let link = |rev: &str, file: &str, blob: &str| {
        let up = "../".repeat(2 + file.matches('/').count());
        let at = repo.join("snapshots").join(rev).join(file);
        std::os::unix::fs::symlink(format!("{up}blobs/{blob}"), at).unwrap();
    };
    for (i, (file, tensors)) in files.iter().enumerate() {
        let blob = format!("{:040x}", i + 1);
        write_safetensors(&blobs.join(&blob), tensors, Some(&[("format", "pt")]));
        link(rev1, file, &blob);
    }
    let index = r#"{"metadata":{"total_size":16},"weight_map":{"x":"big-00001-of-00002.safetensors","y":"big-00002-of-00002.safetensors"}}"#;
    fs::write(blobs.join("index0"), index).unwrap();
    link(rev1, "big.safetensors.index.json", "index0");
    fs::write(blobs.join("config0"), b"{\"hf\": 1}\n").unwrap();
    link(rev1, "config.json", "config0");
    // The second revision keeps the model and changes the config.
    link(rev2, "model.safetensors", &format!("{:040x}", 1));
    fs::write(blobs.join("config1"), b"{\"hf\": 2}\n").unwrap();
    link(rev2, "config.json", "config1");
    files
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn hugging_face_cache_links_stay_links() {
    require_fuse();
    let py = python();
    require_module(&py, "huggingface_hub");
    let tmp = TempDir::new("hfcache");
    let cache = tmp.join("hub");
    let files = write_hf_cache(&cache);
    let (m, err) = mount(&cache, "");
    assert!(err.is_empty(), "stderr: {err}");

    // huggingface_hub sees the same cache through the mount: the same repos, revisions, refs,
    // files, blobs and size on disk, and resolves the same files offline, byte for byte.
    let repo_id = "org/model";
    let on_source = oracle(&py, &["hf-cache", cache.to_str().unwrap(), repo_id]);
    let on_mount = oracle(&py, &["hf-cache", m.dir.to_str().unwrap(), repo_id]);
    assert_eq!(
        on_mount, on_source,
        "huggingface_hub on the mount and on the source"
    );
    let parsed: serde_json::Value = serde_json::from_str(&on_source).unwrap();
    assert_eq!(
        parsed["repos"][repo_id]["revisions"]
            .as_object()
            .map(|r| r.len()),
        Some(2),
        "{on_source}"
    );

    // Each link is the same link, and the tensors of the file it leads to sit beside it.
    let rev1 = "models--org--model/snapshots/0123456789abcdef0123456789abcdef01234567";
    for (file, tensors) in &files {
        let at = format!("{rev1}/{file}");
        assert_eq!(stat_c(&m.path(&at), "%F"), "symbolic link", "{at}");
        assert_eq!(
            fs::read_link(m.path(&at)).unwrap(),
            fs::read_link(cache.join(&at)).unwrap(),
            "{at}"
        );
        let blob = fs::canonicalize(cache.join(&at)).unwrap();
        let dir = at.strip_suffix(".safetensors").unwrap().to_string() + ".tensors";
        check_tensor_dir(
            &m.path(&dir),
            &tensors.iter().collect::<Vec<_>>(),
            &blob,
            true,
        );
    }
    // The sharded set is merged through its linked index.
    assert_eq!(
        names(&m.path(format!("{rev1}/big.tensors"))),
        ["__metadata__", "x", "y"]
    );
    assert_eq!(
        fs::read(m.path(format!("{rev1}/big.tensors/y"))).unwrap(),
        files[3].1[0].data
    );
    // The snapshots hold links only, as on the source: `du`, `cp -a` and `scan_cache_dir` see
    // each blob once.
    let count = |dir: &Path, kind: &str| {
        let out = Command::new("find")
            .arg(dir.join("models--org--model/snapshots"))
            .args([
                "-name",
                "*.tensors",
                "-prune",
                "-o",
                "-type",
                kind,
                "-print",
            ])
            .output()
            .unwrap();
        stdout(&out).lines().count()
    };
    assert_eq!(
        count(&m.dir, "f"),
        0,
        "regular files in the mounted snapshots"
    );
    assert_eq!(count(&m.dir, "l"), count(&cache, "l"));
    assert_eq!(count(&cache, "l"), 8);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn links_leading_out_of_source_are_followed_and_links_inside_kept() {
    require_fuse();
    let tmp = TempDir::new("links");
    let s = tmp.join("src");
    let outside = tmp.join("outside");
    fs::create_dir_all(s.join("real")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    let t = [u8t("w", 6, 1)];
    write_safetensors(&s.join("real/a.safetensors"), &t, None);
    write_safetensors(&outside.join("o.safetensors"), &t, None);
    std::os::unix::fs::symlink("real", s.join("l1")).unwrap();
    std::os::unix::fs::symlink(s.join("real"), s.join("l2")).unwrap();
    std::os::unix::fs::symlink("../outside", s.join("out")).unwrap();
    std::os::unix::fs::symlink("real/a.safetensors", s.join("b.safetensors")).unwrap();
    std::os::unix::fs::symlink("nowhere.safetensors", s.join("dangling-link")).unwrap();
    std::os::unix::fs::symlink(".", s.join("cycle-self")).unwrap();
    std::os::unix::fs::symlink("..", s.join("real/cycle-up")).unwrap();
    std::os::unix::fs::symlink(&s, s.join("real/cycle-abs")).unwrap();

    let start = Instant::now();
    let (m, err) = mount(&s, "");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(
        names(&m.dir),
        [
            "b.safetensors",
            "b.tensors",
            "cycle-self",
            "l1",
            "l2",
            "out",
            "real"
        ]
    );
    // Relative links that stay inside SOURCE are links; the rest are what they lead to.
    for (path, kind) in [
        ("l1", "symbolic link"),
        ("cycle-self", "symbolic link"),
        ("real/cycle-up", "symbolic link"),
        ("b.safetensors", "symbolic link"),
        ("l2", "directory"),
        ("out", "directory"),
    ] {
        assert_eq!(stat_c(&m.path(path), "%F"), kind, "{path}");
    }
    assert_eq!(fs::read_link(m.path("l1")).unwrap(), Path::new("real"));
    assert_eq!(
        fs::read(m.path("b.tensors/w")).unwrap(),
        t[0].data,
        "b.tensors beside the link"
    );
    assert_eq!(
        fs::read(m.path("b.safetensors")).unwrap(),
        fs::read(s.join("real/a.safetensors")).unwrap()
    );
    assert_eq!(names(&m.path("out")), ["o.safetensors", "o.tensors"]);
    // Through a kept link, the mount's own directory.
    assert_eq!(names(&m.path("l1")), names(&m.path("real")));
    assert_eq!(fs::read(m.path("l1/a.tensors/w")).unwrap(), t[0].data);
    // An absolute link back up is still a cycle, left out with a warning; so is a dangling one.
    assert_eq!(
        names(&m.path("real")),
        ["a.safetensors", "a.tensors", "cycle-up"]
    );
    for w in ["dangling-link", "cycle-abs"] {
        assert!(err.contains(w), "stderr should warn about {w}: {err:?}");
    }
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn fifos_sockets_and_device_nodes_are_skipped_without_hanging() {
    require_fuse();
    let tmp = TempDir::new("special");
    let s = tmp.join("src");
    fs::create_dir(&s).unwrap();
    let t = [u8t("w", 6, 1)];
    write_safetensors(&s.join("m.safetensors"), &t, None);
    let fifo = cpath(&s.join("pipe.safetensors"));
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let fifo2 = cpath(&s.join("plainfifo"));
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo2.as_ptr(), 0o644) }, 0);
    let _sock = std::os::unix::net::UnixListener::bind(s.join("sock")).unwrap();
    let dev = cpath(&s.join("null-dev"));
    // SAFETY: valid C string; a character device like /dev/null (1, 3).
    let rc = unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 3)) };
    assert_eq!(
        rc,
        0,
        "mknod of a device node (needs root): {}",
        last_errno()
    );

    // Watch the FIFO and the device node for opens: the daemon may stat them, never open them.
    // SAFETY: plain inotify calls on valid C strings; the descriptor is closed below.
    let inotify = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    assert!(inotify >= 0, "inotify_init1: {}", last_errno());
    for w in [&fifo, &fifo2, &dev] {
        // SAFETY: valid descriptor and C string.
        let wd = unsafe {
            libc::inotify_add_watch(inotify, w.as_ptr(), libc::IN_OPEN | libc::IN_ACCESS)
        };
        assert!(wd >= 0, "inotify_add_watch {w:?}: {}", last_errno());
    }

    let (tx, rx) = std::sync::mpsc::channel();
    let s2 = s.clone();
    std::thread::spawn(move || {
        let r = Mounted::try_new(&s2, "");
        let _ = tx.send(r);
    });
    let (m, out) = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("mount hung on a FIFO, socket or device node");
    assert!(out.status.success(), "mount failed: {}", stderr(&out));
    let m = m.expect("mounted");
    assert_eq!(names(&m.dir), ["m.safetensors", "m.tensors"]);
    assert_eq!(fs::read(m.path("m.tensors/w")).unwrap(), t[0].data);
    let mut buf = [0u8; 4096];
    // SAFETY: reading into a local buffer from our own non-blocking inotify descriptor.
    let n = unsafe { libc::read(inotify, buf.as_mut_ptr().cast(), buf.len()) };
    let err = last_errno();
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(inotify) };
    assert!(
        n < 0 && err == libc::EAGAIN,
        "a FIFO or device node was opened or read during the mount ({n} bytes of inotify events)"
    );
}
