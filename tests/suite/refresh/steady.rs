//! What stays: inodes through unrelated changes, a listing in progress, descriptors through republishes, refresh=off, and polling where inotify watches run out.

use super::*;

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
