//! The filesystem's operations without a kernel: a real directory built into a tree as at mount,
//! then each operation called as the adapter calls it. Expected answers come from the rules
//! (`doc/layout.md`, `doc/reads.md`) and from the bytes the tests wrote, never from this code.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::symlink;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use super::read::ReplyData;
use super::xattrs::ReplyValue;
use super::*;
use crate::base::clock::Clock;
use crate::base::testing::{TempDir, sha256sum, st};
use crate::namespace::{Options, ROOT, Writer};
use crate::refresh;
use crate::refresh::invalidate::Invalidator;
use crate::source::Sources;

/// Bytes of `b`, long enough to be sent from the source's mapping.
const LONG: usize = 50_000;

/// A source directory: `m.safetensors` (tensors `a`, 100 bytes of 1, and `b`, [`LONG`] bytes of
/// 2), `sub/f.txt`, and `link`, a relative link to `m.safetensors` (kept as a link).
fn source() -> TempDir {
    let d = TempDir::new("fs");
    fs::write(
        d.join("m.safetensors"),
        st(&[("a", 100, 1), ("b", LONG, 2)]),
    )
    .unwrap();
    fs::create_dir(d.join("sub")).unwrap();
    fs::write(d.join("sub/f.txt"), b"text\n").unwrap();
    symlink("m.safetensors", d.join("link")).unwrap();
    d
}

/// The filesystem of `dir` as mounted: frozen (`-o refresh=off`), or following SOURCE with a
/// refresh thread that never answers. Also the namespace and the writer, to change the tree.
fn mounted(dir: &TempDir, follow: bool) -> (TensorFs<u32>, Arc<Namespace>, Writer) {
    let sources = Sources::new(Clock::manual(), 1024);
    let (writer, tree) = Writer::build(&sources, dir.path(), &Options::default()).unwrap();
    let ns = Arc::new(Namespace::new(tree, follow));
    let live = follow.then(|| Live {
        refresh: refresh::Handle::unanswered(sources.clone()),
        invalidate: Invalidator::new().0,
    });
    (
        TensorFs::new(ns.clone(), live, Tuning::default()),
        ns,
        writer,
    )
}

fn ino(fs: &TensorFs<u32>, path: &str) -> Ino {
    path.split('/').fold(ROOT, |dir, name| {
        fs.lookup(dir, name.as_bytes())
            .unwrap_or_else(|e| panic!("{path}: {e:?}"))
            .0
    })
}

/// A read's answer, and the name of the thread that sent it.
type Answer = (Result<Vec<u8>, FsError>, Option<String>);

struct Reply(mpsc::Sender<Answer>);

impl ReplyData for Reply {
    fn data(self, bytes: &[u8]) {
        let thread = std::thread::current().name().map(String::from);
        let _ = self.0.send((Ok(bytes.to_vec()), thread));
    }

    fn error(self, e: FsError) {
        let thread = std::thread::current().name().map(String::from);
        let _ = self.0.send((Err(e), thread));
    }
}

fn read(fs: &TensorFs<u32>, ino: Ino, offset: u64, size: u32) -> (Result<Vec<u8>, FsError>, bool) {
    let (tx, rx) = mpsc::channel();
    fs.read(ino, offset, size, Reply(tx));
    let (answer, thread) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    (answer, thread.as_deref() == Some("read"))
}

impl ReplyValue for mpsc::Sender<(Result<Vec<u8>, FsError>, Option<String>)> {
    fn value(self, value: Result<Vec<u8>, FsError>) {
        let thread = std::thread::current().name().map(String::from);
        let _ = self.send((value, thread));
    }
}

/// The value of an extended attribute, waited for.
fn xattr(fs: &TensorFs<u32>, ino: Ino, name: &[u8]) -> Result<Vec<u8>, FsError> {
    let (tx, rx) = mpsc::channel();
    fs.getxattr(ino, name, false, tx);
    rx.recv_timeout(Duration::from_secs(10)).unwrap().0
}

/// Opens read-only with a backing opener that must not be asked.
fn open(fs: &TensorFs<u32>, ino: Ino) -> Result<Open<u32>, FsError> {
    fs.open(ino, libc::O_RDONLY, |_| panic!("passthrough asked for"))
}

#[test]
fn lookups_attributes_links_and_errors() {
    let d = source();
    let (fs, _, _) = mounted(&d, false);
    let (m, attr) = fs.lookup(ROOT, b"m.safetensors").unwrap();
    assert_eq!(attr.kind, Kind::File);
    assert_eq!(
        attr.size,
        fs::metadata(d.join("m.safetensors")).unwrap().len()
    );
    assert_eq!(fs.getattr(m).unwrap(), attr);
    assert_eq!(fs.lookup(ROOT, b"nope"), Err(FsError::NotFound));
    assert_eq!(
        fs.lookup(m, b"x"),
        Err(FsError::NotDir),
        "a file has no entries"
    );
    assert_eq!(fs.getattr(1 << 40), Err(FsError::NotFound));
    let b = ino(&fs, "m.tensors/b");
    assert_eq!(fs.getattr(b).unwrap().size, LONG as u64);
    let link = ino(&fs, "link");
    assert_eq!(&*fs.readlink(link).unwrap(), b"m.safetensors");
    assert_eq!(fs.readlink(m), Err(FsError::NotLink));
    let s = fs.statfs();
    assert_eq!(
        s.files, 8,
        "root, link, m.safetensors, m.tensors, a, b, sub, sub/f.txt"
    );
    let bytes = fs::metadata(d.join("m.safetensors")).unwrap().len() + 5;
    assert_eq!(s.blocks, bytes.div_ceil(u64::from(STATFS_BSIZE)));
}

#[test]
fn listings_count_from_dot_and_resume_at_any_offset() {
    let d = source();
    let (fs, _, _) = mounted(&d, false);
    let open = fs.opendir(ROOT).unwrap();
    assert!(open.keep_cache && open.cache_dir);
    let list = |offset: u64, room: usize| {
        let mut got = Vec::new();
        fs.readdir(ROOT, open.fh, offset, |ino, next, kind, name| {
            got.push((String::from_utf8_lossy(name).into_owned(), next, kind, ino));
            got.len() == room
        })
        .unwrap();
        got
    };
    let all = list(0, usize::MAX);
    let names: Vec<(&str, u64)> = all
        .iter()
        .map(|(n, next, ..)| (n.as_str(), *next))
        .collect();
    assert_eq!(
        names,
        [
            (".", 1),
            ("..", 2),
            ("link", 3),
            ("m.safetensors", 4),
            ("m.tensors", 5),
            ("sub", 6)
        ]
    );
    assert_eq!(all[0].3, ROOT);
    assert_eq!(all[1].3, ROOT, "the root's parent is itself");
    assert_eq!(all[2].2, Kind::Symlink);
    assert_eq!(all[4].2, Kind::Dir);
    // A full reply stops the listing; the next request resumes where it stopped.
    assert_eq!(list(0, 2).len(), 2);
    let rest: Vec<String> = list(2, usize::MAX).into_iter().map(|e| e.0).collect();
    assert_eq!(rest, ["link", "m.safetensors", "m.tensors", "sub"]);
    assert!(list(6, usize::MAX).is_empty());
    // With attributes, the same entries and offsets.
    let mut plus = Vec::new();
    fs.readdirplus(ROOT, open.fh, 3, |_, next, name, attr| {
        plus.push((String::from_utf8_lossy(name).into_owned(), next, attr.kind));
        false
    })
    .unwrap();
    assert_eq!(plus[0], ("m.safetensors".into(), 4, Kind::File));
    fs.releasedir(open.fh);
    let m = ino(&fs, "m.safetensors");
    assert_eq!(fs.opendir(m).err(), Some(FsError::NotDir));
    assert_eq!(
        fs.readdir(m, 0, 0, |_, _, _, _| false),
        Err(FsError::NotDir)
    );
}

#[test]
fn a_listing_keeps_the_tree_its_directory_was_opened_on() {
    let d = source();
    let (fs, ns, mut writer) = mounted(&d, false);
    let open = fs.opendir(ROOT).unwrap();
    fs::write(d.join("new.txt"), b"new").unwrap();
    fs::remove_dir_all(d.join("sub")).unwrap();
    let (snapshot, diff) = writer.rescan(&ns.current(), &[ROOT]);
    ns.publish(snapshot, &diff.detached);
    let names = |fh: u64| {
        let mut got = Vec::new();
        fs.readdir(ROOT, fh, 2, |_, _, _, name| {
            got.push(String::from_utf8_lossy(name).into_owned());
            false
        })
        .unwrap();
        got
    };
    assert_eq!(
        names(open.fh),
        ["link", "m.safetensors", "m.tensors", "sub"]
    );
    let again = fs.opendir(ROOT).unwrap();
    assert_eq!(
        names(again.fh),
        ["link", "m.safetensors", "m.tensors", "new.txt"]
    );
}

#[test]
fn opens_refuse_writes_directories_and_unknown_inodes() {
    let d = source();
    let (fs, _, _) = mounted(&d, false);
    let m = ino(&fs, "m.safetensors");
    for flags in [libc::O_WRONLY, libc::O_RDWR, libc::O_RDONLY | libc::O_TRUNC] {
        assert_eq!(
            fs.open(m, flags, |_| panic!("no backing for a write"))
                .err(),
            Some(FsError::ReadOnly),
            "flags {flags:o}"
        );
    }
    assert_eq!(open(&fs, ROOT).err(), Some(FsError::IsDir));
    assert_eq!(
        open(&fs, 1 << 40).err(),
        Some(FsError::Stale(Cause::LeftTree))
    );
    // A tensor is never passed through (its offsets are not the source's).
    let b = ino(&fs, "m.tensors/b");
    let o = open(&fs, b).unwrap();
    assert!(o.backing.is_none() && o.keep_cache && !o.cache_dir);
    fs.release(b, o.fh);
}

#[test]
fn files_not_passed_through_are_opened_with_direct_io_once_the_kernel_allows_mapping_them() {
    let d = source();
    for (tuning, granted, want) in [
        (Tuning::default(), true, true),
        // A kernel that would refuse mappings of such files (before 6.6): the page cache.
        (Tuning::default(), false, false),
        // -o kernel_cache.
        (
            Tuning {
                direct_io: false,
                ..Tuning::default()
            },
            true,
            false,
        ),
    ] {
        let (fs, _, _) = mounted(&d, false);
        let fs = TensorFs::new(fs.ns.clone(), None, tuning);
        fs.set_direct_io(granted);
        fs.set_passthrough(false);
        let b = ino(&fs, "m.tensors/b");
        let o = open(&fs, b).unwrap();
        assert_eq!(o.direct_io, want, "tensor, {tuning:?}, granted {granted}");
        // Mapped pages are still kept across opens.
        assert!(o.keep_cache);
        fs.release(b, o.fh);
        // A mirrored file the kernel does not read itself is served the same way.
        let m = ino(&fs, "m.safetensors");
        let o = open(&fs, m).unwrap();
        assert!(o.backing.is_none());
        assert_eq!(o.direct_io, want, "mirror, {tuning:?}, granted {granted}");
        fs.release(m, o.fh);
        let o = fs.opendir(ROOT).unwrap();
        assert!(!o.direct_io, "a directory");
    }
}

#[test]
fn the_first_open_of_a_mirrored_file_decides_passthrough_until_its_last_release() {
    let d = source();
    let (fs, _, _) = mounted(&d, false);
    let m = ino(&fs, "m.safetensors");
    let asked = AtomicUsize::new(0);
    let backing = |file: &File| -> io::Result<u32> {
        // The backing file is the source itself.
        assert_eq!(
            file.metadata().unwrap().len(),
            fs::metadata(d.join("m.safetensors")).unwrap().len()
        );
        Ok(asked.fetch_add(1, Ordering::SeqCst) as u32 + 7)
    };
    let first = fs.open(m, libc::O_RDONLY, backing).unwrap();
    let second = fs.open(m, libc::O_RDONLY, backing).unwrap();
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "one backing file per inode"
    );
    let (one, two) = (first.backing.unwrap(), second.backing.unwrap());
    assert!(Arc::ptr_eq(&one, &two) && *one == 7);
    assert!(
        !first.keep_cache,
        "the kernel refuses caching flags with passthrough"
    );
    fs.release(m, first.fh);
    let third = fs.open(m, libc::O_RDONLY, backing).unwrap();
    assert_eq!(
        third.backing.as_deref(),
        Some(&7),
        "still the same while one is open"
    );
    fs.release(m, second.fh);
    fs.release(m, third.fh);
    // The last release let it go: the next open asks again.
    let fourth = fs.open(m, libc::O_RDONLY, backing).unwrap();
    assert_eq!(fourth.backing.as_deref(), Some(&8));
    fs.release(m, fourth.fh);
}

#[test]
fn a_backing_refused_for_want_of_privilege_turns_passthrough_off() {
    let d = source();
    let (fs, _, _) = mounted(&d, false);
    let m = ino(&fs, "m.safetensors");
    let f = ino(&fs, "sub/f.txt");
    // EINVAL (a source on a stacked filesystem) concerns that file only.
    let o = fs
        .open(m, libc::O_RDONLY, |_| {
            Err(io::Error::from_raw_os_error(libc::EINVAL))
        })
        .unwrap();
    assert!(
        o.backing.is_none() && o.keep_cache,
        "served from the page cache"
    );
    fs.release(m, o.fh);
    let o = fs.open(f, libc::O_RDONLY, |_| Ok(1)).unwrap();
    assert!(o.backing.is_some());
    fs.release(f, o.fh);
    // EPERM (no CAP_SYS_ADMIN) is the same for every file: never asked again.
    let o = fs
        .open(m, libc::O_RDONLY, |_| {
            Err(io::Error::from_raw_os_error(libc::EPERM))
        })
        .unwrap();
    assert!(o.backing.is_none());
    fs.release(m, o.fh);
    let o = open(&fs, f).unwrap();
    assert!(o.backing.is_none());
    // Nor when the kernel refused passthrough at INIT.
    let (fs, _, _) = mounted(&d, false);
    fs.set_passthrough(false);
    assert!(
        open(&fs, ino(&fs, "m.safetensors"))
            .unwrap()
            .backing
            .is_none()
    );
}

#[test]
fn reads_wait_on_the_pool_only_for_what_is_not_at_hand() {
    let d = source();
    let (fs, _, _) = mounted(&d, false);
    let b = ino(&fs, "m.tensors/b");
    let a = ino(&fs, "m.tensors/a");
    // The build closed every source: the first read opens it again, on the pool.
    let (got, pool) = read(&fs, b, 0, LONG as u32);
    assert_eq!(got.unwrap(), vec![2; LONG]);
    assert!(pool, "a closed source is opened on the pool");
    // Open now, and in the page cache (just read): sent from this thread (from the mapping, then a
    // copy).
    let whole = fs::read(d.join("m.safetensors")).unwrap();
    let (got, pool) = read(&fs, b, 100, 40_000);
    assert_eq!(got.unwrap(), vec![2; 40_000]);
    assert!(!pool);
    let (got, pool) = read(&fs, a, 10, 4096);
    assert_eq!(got.unwrap(), vec![1; 90], "short at the end");
    assert!(!pool);
    assert_eq!(read(&fs, a, 100, 10).0.unwrap(), Vec::<u8>::new());
    assert_eq!(read(&fs, a, u64::MAX, 10).0.unwrap(), Vec::<u8>::new());
    // Mirrored bytes are the source's.
    let m = ino(&fs, "m.safetensors");
    assert_eq!(read(&fs, m, 0, u32::MAX).0.unwrap(), whole);
    assert_eq!(read(&fs, ROOT, 0, 10).0, Err(FsError::IsDir));
    assert_eq!(
        read(&fs, 1 << 40, 0, 10).0,
        Err(FsError::Stale(Cause::LeftTree))
    );
}

#[test]
fn a_source_changed_in_place_fails_reads_eio_when_frozen_estale_when_followed() {
    for follow in [false, true] {
        let d = source();
        let (fs, _, _) = mounted(&d, follow);
        let b = ino(&fs, "m.tensors/b");
        let held = open(&fs, b).unwrap();
        // Cut short inside `b`: its bytes are gone.
        let len = fs::metadata(d.join("m.safetensors")).unwrap().len();
        File::options()
            .write(true)
            .open(d.join("m.safetensors"))
            .unwrap()
            .set_len(len - 10)
            .unwrap();
        // Both the long read (from the mapping) and the short one (copied) say why, naming the
        // source.
        for size in [LONG as u32, 100] {
            let e = read(&fs, b, 0, size).0.unwrap_err();
            let cause = match (follow, &e) {
                (true, FsError::Stale(c)) | (false, FsError::Io(c)) => c.to_string(),
                _ => panic!("follow: {follow}: {e:?}"),
            };
            let want = format!("{}: changed in place", d.join("m.safetensors").display());
            assert!(cause.starts_with(&want), "{cause}");
        }
        fs.release(b, held.fh);
    }
}

#[test]
fn an_inode_that_left_a_followed_tree_is_stale_to_opens() {
    let d = source();
    let (fs, ns, mut writer) = mounted(&d, true);
    let f = ino(&fs, "sub/f.txt");
    fs::remove_file(d.join("sub/f.txt")).unwrap();
    let sub = ino(&fs, "sub");
    let (snapshot, diff) = writer.rescan(&ns.current(), &[sub]);
    assert!(diff.detached.contains(&f));
    ns.publish(snapshot, &diff.detached);
    // The kernel still holds it (the lookup above): known, but not to be opened again.
    assert_eq!(fs.getattr(f).map(|a| a.kind), Ok(Kind::File));
    assert_eq!(
        open(&fs, f).err(),
        Some(FsError::Stale(Cause::Moved(d.join("sub/f.txt"))))
    );
    assert_eq!(fs.lookup(sub, b"f.txt"), Err(FsError::NotFound));
    fs.forget(f, 1);
    assert_eq!(fs.getattr(f), Err(FsError::NotFound), "forgotten");
}

#[test]
fn extended_attributes_of_the_root_of_tensors_and_of_other_namespaces() {
    let d = source();
    let (fs, _, _) = mounted(&d, false);
    let list = |ino| -> Vec<String> {
        let raw = fs.listxattr(ino).unwrap();
        assert!(
            raw.is_empty() || raw.ends_with(&[0]),
            "NUL-terminated names"
        );
        raw.split(|&c| c == 0)
            .filter(|n| !n.is_empty())
            .map(|n| String::from_utf8(n.to_vec()).unwrap())
            .collect()
    };
    assert_eq!(
        list(ROOT),
        [
            "user.tensormount.refresh_generation",
            "user.tensormount.refresh_mode"
        ]
    );
    assert_eq!(
        xattr(&fs, ROOT, b"user.tensormount.refresh_mode").unwrap(),
        b"off"
    );
    assert_eq!(
        xattr(&fs, ROOT, b"user.tensormount.refresh_generation").unwrap(),
        b"0"
    );
    let b = ino(&fs, "m.tensors/b");
    let names = list(b);
    for key in ["dtype", "shape", "data_offsets", "offset", "source", "name"] {
        let name = format!("user.safetensors.{key}");
        assert!(names.contains(&name), "{name} in {names:?}");
        assert!(xattr(&fs, b, name.as_bytes()).is_ok());
    }
    assert_eq!(
        xattr(&fs, b, b"user.safetensors.shape").unwrap(),
        b"[50000]"
    );
    assert_eq!(
        xattr(&fs, b, b"user.safetensors.no_such"),
        Err(FsError::NoAttribute)
    );
    assert_eq!(
        xattr(&fs, b, b"security.selinux"),
        Err(FsError::OtherNamespace)
    );
    assert_eq!(
        xattr(&fs, b, b"user.tensormount.refresh_mode"),
        Err(FsError::NoAttribute),
        "the root's own attributes are the root's"
    );
    assert!(list(ino(&fs, "sub/f.txt")).is_empty());
    assert_eq!(fs.listxattr(1 << 40), Err(FsError::NotFound));
}

#[test]
fn a_tensor_files_digest_is_computed_on_the_read_pool_and_its_length_known_at_once() {
    let d = source();
    let (fs, _, _) = mounted(&d, false);
    let b = ino(&fs, "m.tensors/b");
    let listed = |fs: &TensorFs<u32>| {
        fs.listxattr(b)
            .unwrap()
            .split(|&c| c == 0)
            .any(|n| n == b"user.safetensors.sha256")
    };
    assert!(
        !listed(&fs),
        "listed only once known: `getfattr -d` reads no tensor"
    );
    // A size query: answered at once, without reading the tensor.
    let (tx, rx) = mpsc::channel();
    fs.getxattr(b, b"user.safetensors.sha256", true, tx);
    let (value, thread) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(value.unwrap().len(), 64);
    assert_eq!(
        thread.as_deref(),
        std::thread::current().name(),
        "answered by the caller"
    );
    // The value: from the read pool, the tensor's bytes as `sha256sum` sees them.
    let bytes = read(&fs, b, 0, 1 << 24).0.unwrap();
    assert!(bytes.len() >= LONG);
    let (tx, rx) = mpsc::channel();
    fs.getxattr(b, b"user.safetensors.sha256", false, tx);
    let (value, thread) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(thread.as_deref(), Some("read"));
    assert_eq!(
        String::from_utf8(value.unwrap()).unwrap(),
        sha256sum(&bytes)
    );
    // Asked again: remembered, and listed.
    assert_eq!(xattr(&fs, b, b"user.safetensors.sha256").unwrap().len(), 64);
    assert!(listed(&fs));
    // Not a tensor file: no digest of its own.
    let f = ino(&fs, "sub/f.txt");
    assert_eq!(
        xattr(&fs, f, b"user.safetensors.sha256"),
        Err(FsError::NoAttribute)
    );
}

#[test]
fn under_verify_only_files_that_may_have_a_record_wait_for_a_verdict_to_be_cached() {
    let d = source();
    let (fs, ns, _) = mounted(&d, false);
    let fs = fs.verifying(Some(Arc::default()));
    // Whether an open may be handed to the kernel for good: passthrough asked for a mirrored
    // file (and refused here), the page cache kept for a tensor.
    let settled = |path: &str| {
        let i = ino(&fs, path);
        let asked = AtomicUsize::new(0);
        let o = fs
            .open(i, libc::O_RDONLY, |_| {
                asked.fetch_add(1, Ordering::Relaxed);
                Err(io::Error::from_raw_os_error(libc::EINVAL))
            })
            .unwrap();
        fs.release(i, o.fh);
        match path.contains(".tensors/") {
            true => o.keep_cache,
            false => asked.load(Ordering::Relaxed) == 1,
        }
    };
    // Not a weight file: nothing to wait for.
    assert!(settled("sub/f.txt"));
    // A weight file (and its tensors) not looked up yet, then looked up and found to have no
    // record: settled from then on.
    assert!(!settled("m.safetensors") && !settled("m.tensors/b"));
    let node = ns.get(ino(&fs, "m.safetensors")).unwrap();
    assert!(node.source().unwrap().recorded().is_none());
    assert!(settled("m.safetensors") && settled("m.tensors/b"));
}
