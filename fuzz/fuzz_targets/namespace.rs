//! `namespace::Writer::build` over a small directory made from the input, then a walk of the tree;
//! then the directory is changed and rescanned, and the refreshed tree must be the tree a fresh
//! build of the changed directory gives, with the inode numbers of unchanged entries kept.
//!
//! Input: one layout byte, then up to six parts separated by `SEP` (`\xff=====\xff`; `\xff` never
//! occurs in UTF-8 JSON, so the separator never cuts a header or an index in two). The layout byte:
//! - bits 0-2 choose the files (see [`write_layout`]): a single file as SOURCE, one unsharded file,
//!   a sharded set, a set with a missing shard, a set beside an unsharded file wanting the same
//!   directory, files named by the input, a real directory hiding a merged one, a variant index;
//! - bit 3 puts everything one directory down (`sub/`);
//! - bit 4 adds a symbolic link to the first file and one closing a directory cycle;
//! - bit 5 builds with `layout=tree`, bit 6 with `npy`;
//! - bit 7 changes the directory before the rescan the other way round (see [`change`]).
//!
//! The tree is built with those options, without and with `strict`; whatever it accepts must be
//! walkable: names valid and sorted, lookups, reads (checked byte for byte against the sources on
//! disk, NPY views against their header and tensor; both the read that may not wait, as a FUSE
//! thread sends it, and the one that waits, as the read pool sends it), xattrs and `--list`
//! consistent.
#![no_main]

mod common;

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tensormount::base::clock::Clock;
use tensormount::format;
use tensormount::format::widen::{Target, Widening};
use tensormount::namespace::names;
use tensormount::namespace::{
    Content, Kind, Layout, NotReadable, Options, ROOT, Snapshot, SnapshotReadError, Writer,
};
use tensormount::source::Sources;

const SEP: &[u8] = b"\xff=====\xff";
const SHARD1: &str = "model-00001-of-00002.safetensors";
const SHARD2: &str = "model-00002-of-00002.safetensors";
const INDEX: &str = "model.safetensors.index.json";
const XATTR_PREFIX: &str = "user.safetensors.";

/// This process's scratch directory (in /dev/shm), removed at exit.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(format!("/dev/shm/tensormount-fuzz-{}", std::process::id()));
        extern "C" fn remove() {
            if let Some(dir) = DIR.get() {
                let _ = fs::remove_dir_all(dir);
            }
        }
        // SAFETY: registers a plain function without arguments.
        unsafe { libc::atexit(remove) };
        dir
    })
}

fn split(data: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = data;
    while parts.len() < 5 {
        match rest.windows(SEP.len()).position(|w| w == SEP) {
            Some(i) => {
                parts.push(&rest[..i]);
                rest = &rest[i + SEP.len()..];
            }
            None => break,
        }
    }
    parts.push(rest);
    parts
}

/// A file name made of input bytes, or `None` if it cannot be one.
fn fuzzed_name(bytes: &[u8]) -> Option<&OsStr> {
    let name = &bytes[..bytes.len().min(common::NAME_MAX)];
    let ok = !name.is_empty()
        && name != b"."
        && name != b".."
        && !name.contains(&b'/')
        && !name.contains(&0);
    ok.then(|| OsStr::from_bytes(name))
}

/// Writes the files of `layout` into `dir`; returns the SOURCE to build from.
fn write_layout(dir: &Path, layout: u8, parts: &[&[u8]]) -> PathBuf {
    let part = |i: usize| parts.get(i).copied().unwrap_or_default();
    let write = |name: &OsStr, bytes: &[u8]| {
        let path = dir.join(name);
        if !path.exists() {
            fs::write(path, bytes).expect("write scratch file");
        }
    };
    let w = |name: &str, i: usize| write(OsStr::new(name), part(i));
    match layout {
        0 => {
            w("model.safetensors", 0);
            return dir.join("model.safetensors");
        }
        1 => w("model.safetensors", 0),
        2 => {
            w(SHARD1, 0);
            w(SHARD2, 1);
            w(INDEX, 2);
        }
        3 => {
            w(SHARD1, 0);
            w(INDEX, 1);
        }
        4 => {
            w(SHARD1, 0);
            w(SHARD2, 1);
            w(INDEX, 2);
            w("model.safetensors", 3);
        }
        5 => {
            for pair in parts.chunks(2) {
                if let Some(name) = fuzzed_name(pair[0]) {
                    write(name, pair.get(1).copied().unwrap_or_default());
                }
            }
        }
        6 => {
            w(SHARD1, 0);
            w(SHARD2, 1);
            w(INDEX, 2);
            fs::create_dir(dir.join("model.tensors")).unwrap();
            fs::write(dir.join("model.tensors/model.safetensors"), part(3)).unwrap();
        }
        _ => {
            w(SHARD1, 0);
            w(SHARD2, 1);
            w("model.safetensors.index.fp16.json", 2);
            w("model.fp16.safetensors", 3);
        }
    }
    dir.to_path_buf()
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let parts = split(rest);
    let root = scratch();
    let _ = fs::remove_dir_all(root);
    fs::create_dir(root).expect("create scratch directory");
    let mut dir = root.to_path_buf();
    if selector & 0x08 != 0 {
        dir.push("sub");
        fs::create_dir(&dir).unwrap();
    }
    let layout = selector & 0x07;
    let source = write_layout(&dir, layout, &parts);
    if selector & 0x10 != 0 && layout != 0 {
        if let Some(first) = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .min()
        {
            // A file the input named may already have either name (then it stays).
            let _ = std::os::unix::fs::symlink(&first, dir.join("link.safetensors"));
        }
        let _ = std::os::unix::fs::symlink(root, dir.join("cycle"));
    }

    let layout_opt = if selector & 0x20 != 0 {
        Layout::Tree
    } else {
        Layout::Flat
    };
    let options = Options {
        strict: false,
        layout: layout_opt,
        npy: selector & 0x40 != 0,
        // With both views, float tensors are widened too (every selector bit is taken).
        widen: (selector & 0x60 == 0x60).then_some(Target::F32),
        settle: std::time::Duration::from_secs(3600),
        off: Vec::new(),
    };
    let sources = Sources::new(Clock::system(), 1024);
    let lenient = Writer::build(&sources, &source, &options);
    let strict = Writer::build(
        &sources,
        &source,
        &Options {
            strict: true,
            ..options.clone()
        },
    )
    .map(|(_, t)| t);

    if layout == 0 {
        // A single file builds exactly when its header is valid.
        let file = fs::File::open(&source).unwrap();
        let header = format::SAFETENSORS.describe(&file, &source);
        assert_eq!(header.is_ok(), lenient.is_ok(), "{header:?} / {lenient:?}");
        assert_eq!(header.is_ok(), strict.is_ok());
    }

    let listed = lenient
        .as_ref()
        .ok()
        .map(|(_, t)| check_tree(t, &source, &options));
    match (&strict, listed) {
        (Ok(t), Some(listed)) => {
            let strict_listed = check_tree(t, &source, &options);
            assert_eq!(strict_listed, listed, "strict and default trees differ");
        }
        (Ok(_), None) => panic!("strict build succeeded where the default failed: {lenient:?}"),
        (Err(e), _) => {
            let _ = e.to_string();
        }
    }
    let (mut writer, old) = match lenient {
        Ok(built) => built,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    if layout == 0 {
        return;
    }

    // Change the directory by renames, removals and additions (never in place, so nothing is in
    // flux), rescan, and compare with a fresh build.
    change(&dir, &parts, selector & 0x80 != 0);
    let (new, diff) = writer.rescan(&old, &writer.dirs(&old));
    assert_eq!(new.generation(), old.generation() + 1);
    check_tree(&new, &source, &options);
    let Ok((_, fresh)) = Writer::build(&sources, &source, &options) else {
        panic!("a fresh build of the changed directory failed where the rescan succeeded");
    };
    let (refreshed, fresh) = (shape(&new), shape(&fresh));
    assert!(
        refreshed == fresh,
        "refreshed and fresh trees differ:\n{refreshed:#?}\n{fresh:#?}"
    );
    // Every inode kept is the same entry; every inode gone is in the diff.
    let old_shape: std::collections::HashMap<u64, Shape> = shape_by_ino(&old);
    for (ino, entry) in shape_by_ino(&new) {
        if let Some(before) = old_shape.get(&ino) {
            assert_eq!(before, &entry, "inode {ino} kept for another entry");
        }
    }
    let detached: HashSet<u64> = diff.detached.iter().copied().collect();
    for ino in old_shape.keys() {
        assert_eq!(
            new.node(*ino).is_none(),
            detached.contains(ino),
            "inode {ino}: detached, or in the new tree, not both"
        );
    }
});

/// Changes `dir`: replaces the first file by rename with the next part's bytes, removes the
/// second, adds a copy of the first part as `added.safetensors`; `reverse` takes the files from
/// the other end.
fn change(dir: &Path, parts: &[&[u8]], reverse: bool) {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .collect();
    files.sort();
    if reverse {
        files.reverse();
    }
    let part = |i: usize| {
        parts
            .get(i % parts.len().max(1))
            .copied()
            .unwrap_or_default()
    };
    if let Some(first) = files.first() {
        let tmp = dir.join(".tmp-fuzz");
        fs::write(&tmp, part(1)).unwrap();
        fs::rename(&tmp, first).unwrap();
    }
    if let Some(second) = files.get(1) {
        fs::remove_file(second).unwrap();
    }
    let added = dir.join("added.safetensors");
    if !added.exists() {
        fs::write(added, part(0)).unwrap();
    }
}

/// What a node is, without its inode number: path, kind, size and for files the first bytes.
type Shape = (PathBuf, Kind, u64, Vec<u8>);

fn shape_of(tree: &Snapshot, ino: u64, path: PathBuf) -> Shape {
    let node = tree.node(ino).unwrap();
    let head = match node.attr.kind {
        Kind::File => tree.read(ino, 0, 64).unwrap_or_default(),
        Kind::Dir | Kind::Symlink => Vec::new(),
    };
    (path, node.attr.kind, node.attr.size, head)
}

/// Every node by path.
fn shape(tree: &Snapshot) -> Vec<Shape> {
    let mut out: Vec<Shape> = shape_by_ino(tree).into_values().collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn shape_by_ino(tree: &Snapshot) -> std::collections::HashMap<u64, Shape> {
    let mut out = std::collections::HashMap::new();
    let mut stack = vec![(ROOT, PathBuf::new())];
    while let Some((ino, path)) = stack.pop() {
        for &c in tree.children(ino).unwrap_or_default() {
            let name = OsStr::from_bytes(&tree.node(c).unwrap().name);
            stack.push((c, path.join(name)));
        }
        out.insert(ino, shape_of(tree, ino, path));
    }
    out
}

/// Walks the whole tree, checking everything it shows. Returns the `--list` paths and offsets.
fn check_tree(tree: &Snapshot, source: &Path, options: &Options) -> Vec<(String, u64, u64)> {
    let read = |ino, offset, size| tree.read(ino, offset, size);
    let count = tree.node_count();
    let beyond = u64::MAX / 2;
    assert!(count >= 1);
    assert!(tree.node(0).is_none() && tree.node(beyond).is_none());
    assert_eq!(read(0, 0, 1), Err(SnapshotReadError::NotFound));
    assert_eq!(read(beyond, 0, 1), Err(SnapshotReadError::NotFound));
    assert!(tree.xattr_names(beyond).is_empty());

    let root_node = tree.node(ROOT).unwrap();
    assert_eq!(root_node.attr.kind, Kind::Dir);
    assert!(root_node.name.is_empty());

    // Directory walk from the root: every node reached exactly once.
    let mut seen = std::collections::HashSet::new();
    let mut tensors = 0usize;
    let mut stack = vec![(ROOT, PathBuf::new())];
    while let Some((ino, path)) = stack.pop() {
        assert!(seen.insert(ino), "inode {ino} reached twice");
        let node = tree.node(ino).unwrap();
        assert_eq!(
            node.attr.perm & 0o222,
            0,
            "{path:?}: writable permission bits"
        );
        check_xattrs(tree, ino, &path);
        match &node.content {
            Content::Dir(d) => {
                let children = &d.children;
                assert_eq!(node.attr.kind, Kind::Dir);
                assert_eq!(
                    read(ino, 0, 1),
                    Err(SnapshotReadError::NotReadable(NotReadable::IsDir))
                );
                assert_eq!(tree.children(ino), Some(&children[..]));
                let mut subdirs = 0;
                let mut previous: Option<&[u8]> = None;
                for &c in children.iter() {
                    let child = tree
                        .node(c)
                        .unwrap_or_else(|| panic!("{path:?}: child {c} missing"));
                    let name = &child.name[..];
                    common::assert_file_name(name, &format!("{path:?}"));
                    if let Some(p) = previous {
                        assert!(
                            p < name,
                            "{path:?}: children not sorted or not unique: {p:?} {name:?}"
                        );
                    }
                    previous = Some(name);
                    assert_eq!(child.parent, ino);
                    assert_eq!(tree.lookup(ino, name), Some(c));
                    if child.attr.kind == Kind::Dir {
                        subdirs += 1;
                    }
                    stack.push((c, path.join(OsStr::from_bytes(name))));
                }
                assert_eq!(node.attr.nlink, 2 + subdirs, "{path:?}: nlink");
                assert_eq!(tree.lookup(ino, b"\0"), None);
                assert_eq!(tree.lookup(ino, b""), None);
            }
            Content::Link(target) => {
                // A kept link is the link at the same place under SOURCE.
                assert_eq!(node.attr.kind, Kind::Symlink);
                let real = fs::read_link(source.join(&path)).unwrap();
                assert_eq!(
                    real.as_os_str().as_bytes(),
                    &target[..],
                    "{path:?}: link target"
                );
                assert_eq!(node.attr.size, target.len() as u64);
            }
            content => {
                assert_eq!(node.attr.kind, Kind::File);
                assert_eq!(tree.children(ino), None);
                let size = node.attr.size;
                let whole =
                    read(ino, 0, u32::MAX).unwrap_or_else(|e| panic!("{path:?}: read: {e:?}"));
                let whole = &whole[..];
                // The read pool's path (waiting on storage) sends what the FUSE thread's does.
                let waiting = tree.read_waiting(ino, 0, u32::MAX);
                assert_eq!(waiting.as_deref(), Ok(whole), "{path:?}: waiting read");
                if size > 2 {
                    let middle = tree.read_waiting(ino, 1, (size - 2).min(1 << 20) as u32);
                    assert_eq!(
                        middle.as_deref(),
                        Ok(&whole[1..(size - 1).min(1 + (1 << 20)) as usize]),
                        "{path:?}: waiting read of the middle"
                    );
                }
                assert_eq!(whole.len() as u64, size, "{path:?}: read length");
                assert_eq!(read(ino, size, 4096), Ok(Vec::new()));
                assert_eq!(read(ino, u64::MAX, u32::MAX), Ok(Vec::new()));
                assert_eq!(read(ino, 0, 0), Ok(Vec::new()));
                if size > 0 {
                    assert_eq!(read(ino, size - 1, 2).unwrap(), &whole[whole.len() - 1..]);
                }
                match content {
                    Content::Mirror { .. } => {
                        // A mirrored file is the file at the same place under SOURCE.
                        let real = fs::read(source.join(&path)).unwrap();
                        assert!(whole == &real[..], "{path:?}: mirrored bytes differ");
                    }
                    Content::Tensor { tensor, widen, .. } => {
                        tensors += 1;
                        check_widen(tensor, *widen, options.widen);
                        check_tensor(tree, ino, &path, tensor, *widen, whole, options.layout);
                    }
                    Content::Npy { tensor, widen, .. } => {
                        assert!(options.npy, "{path:?}: an NPY view without -o npy");
                        check_widen(tensor, *widen, options.widen);
                        check_npy(tree, ino, &path, tensor, *widen, whole, options.layout);
                    }
                    Content::Converted { .. } => {
                        // A checkpoint's conversion: a safetensors file the official crate reads.
                        safetensors::SafeTensors::deserialize(whole)
                            .unwrap_or_else(|e| panic!("{path:?}: not safetensors: {e}"));
                    }
                    Content::Generated(_) => {
                        // `__metadata__`, or the index of a set of checkpoints' conversions.
                        assert!(
                            &node.name[..] == b"__metadata__" || node.name.ends_with(b".json"),
                            "{path:?}: generated"
                        );
                        assert_eq!(whole.last(), Some(&b'\n'));
                        let v: serde_json::Value = serde_json::from_slice(whole)
                            .unwrap_or_else(|e| panic!("{path:?}: not JSON: {e}"));
                        assert!(v.is_object(), "{path:?}: not a JSON object");
                    }
                    Content::Dir(_) | Content::Link(_) => unreachable!(),
                }
            }
        }
    }
    assert_eq!(seen.len() as u64, count, "nodes unreachable from the root");

    // `--list`: every tensor file once, by a path that leads to it.
    let list = tree.list();
    assert_eq!(list.len(), tensors);
    let mut out = Vec::new();
    let mut paths = HashSet::new();
    for l in &list {
        assert!(paths.insert(l.path.clone()), "listed twice: {}", l.path);
        if !l.path.contains('\u{fffd}') {
            let mut ino = ROOT;
            for component in l.path.split('/') {
                ino = tree
                    .lookup(ino, component.as_bytes())
                    .unwrap_or_else(|| panic!("listed path {:?} does not resolve", l.path));
            }
            let Some(Content::Tensor { tensor, .. }) = tree.node(ino).map(|n| &n.content) else {
                panic!("listed path {:?} is not a tensor", l.path);
            };
            assert_eq!(tensor.name, l.tensor.name);
        }
        out.push((l.path.clone(), l.offset, l.tensor.size()));
    }
    out
}

/// An NPY view: a 1.0 header of the length its xattr gives, then the tensor's bytes, whichever
/// way the reads cut it.
fn check_npy(
    tree: &Snapshot,
    ino: u64,
    path: &Path,
    tensor: &format::Tensor,
    widen: Option<Widening>,
    whole: &[u8],
    layout: Layout,
) {
    let header_len: usize = String::from_utf8(
        tree.xattr(ino, &format!("{XATTR_PREFIX}npy_header_len"))
            .expect("npy_header_len xattr"),
    )
    .unwrap()
    .parse()
    .unwrap();
    assert_eq!(header_len % 64, 0, "{path:?}: NPY header length");
    assert!(
        whole.starts_with(b"\x93NUMPY\x01\x00"),
        "{path:?}: NPY magic"
    );
    assert_eq!(
        u16::from_le_bytes([whole[8], whole[9]]) as usize,
        header_len - 10
    );
    assert_eq!(whole[header_len - 1], b'\n');
    let name = path.file_name().unwrap().as_bytes();
    assert!(name.ends_with(b".npy"), "{path:?}: NPY view name");
    // The tensor bytes are the tensor file's.
    let raw_path = path.with_file_name(OsStr::from_bytes(&name[..name.len() - 4]));
    check_tensor(
        tree,
        ino,
        &raw_path,
        tensor,
        widen,
        &whole[header_len..],
        layout,
    );
    for cut in [1, header_len - 1, header_len, header_len + 1] {
        let mut pieces = Vec::new();
        let mut offset = 0;
        loop {
            let piece = tree.read(ino, offset, cut as u32).unwrap();
            if piece.is_empty() {
                break;
            }
            offset += piece.len() as u64;
            pieces.extend_from_slice(&piece);
            if cut == 1 && offset > header_len as u64 + 2 {
                pieces.extend_from_slice(&tree.read(ino, offset, u32::MAX).unwrap());
                break;
            }
        }
        assert!(pieces == whole, "{path:?}: reads of {cut} bytes differ");
    }
}

/// A tensor is widened exactly when `-o dtype=` asks for a type wider than its float dtype.
fn check_widen(tensor: &format::Tensor, widen: Option<Widening>, target: Option<Target>) {
    assert_eq!(
        widen,
        target.and_then(|t| Widening::new(tensor.dtype, t)),
        "`{}`: widening",
        tensor.name
    );
}

fn check_tensor(
    tree: &Snapshot,
    ino: u64,
    path: &Path,
    tensor: &format::Tensor,
    widen: Option<Widening>,
    bytes: &[u8],
    layout: Layout,
) {
    let x = |key: &str| {
        let v = tree
            .xattr(ino, &format!("{XATTR_PREFIX}{key}"))
            .unwrap_or_else(|| panic!("{path:?}: no {key} xattr"));
        String::from_utf8(v).unwrap_or_else(|_| panic!("{path:?}: {key} xattr is not UTF-8"))
    };
    let presented = widen.map_or(tensor.size(), |w| w.presented_len(tensor.size()));
    assert_eq!(bytes.len() as u64, presented);
    let offsets = common::json_usize_array(&x("data_offsets")).expect("data_offsets xattr");
    assert_eq!(offsets, [tensor.begin, tensor.end]);
    assert!(
        common::json_usize_array(&x("shape")).is_some(),
        "{path:?}: shape xattr"
    );
    match widen {
        Some(w) => {
            assert_eq!(x("dtype"), format!("{:?}", w.target().dtype()));
            assert_eq!(x("source_dtype"), tensor.dtype_name());
        }
        None => assert_eq!(x("dtype"), tensor.dtype_name()),
    }
    let offset: u64 = x("offset").parse().expect("offset xattr");
    let source = tree.xattr(ino, &format!("{XATTR_PREFIX}source")).unwrap();
    let real = fs::read(OsStr::from_bytes(&source)).unwrap();
    let start = offset as usize;
    let stored = real
        .get(start..start + tensor.size() as usize)
        .unwrap_or_else(|| panic!("{path:?}: tensor beyond the source"));
    match widen {
        // The bytes served are the widening of the source's bytes at that offset.
        Some(w) => {
            let mut widened = vec![0u8; bytes.len()];
            assert!(w.convert(stored, 0, &mut widened));
            assert!(widened == bytes, "{path:?}: widened bytes differ");
        }
        None => assert!(
            stored == bytes,
            "{path:?}: tensor bytes differ from the source's"
        ),
    }
    // The file name is the escaped tensor name, unless that is too long (or split by the tree).
    let escaped = names::escape(&tensor.name);
    let file_name = path.file_name().unwrap().as_bytes();
    if layout == Layout::Tree {
        let last = tensor.name.rsplit(['.', '/']).next().unwrap_or_default();
        let last = names::escape(last);
        let ok = [
            &b"__tensor__"[..],
            b"%5F_tensor__",
            last.as_bytes(),
            escaped.as_bytes(),
        ]
        .contains(&file_name)
            || file_name.windows(2).any(|w| w == b"%#");
        assert!(ok, "{path:?}: tree file name of `{}`", tensor.name);
    } else if escaped.len() <= common::NAME_MAX {
        assert_eq!(
            file_name,
            escaped.as_bytes(),
            "{path:?}: file name of `{}`",
            tensor.name
        );
    } else {
        assert!(
            file_name.windows(2).any(|w| w == b"%#"),
            "{path:?}: shortened name without marker"
        );
    }
    if tensor.name.len() <= 65536 {
        assert_eq!(x("name"), &*tensor.name);
    }
}

fn check_xattrs(tree: &Snapshot, ino: u64, path: &Path) {
    let names = tree.xattr_names(ino);
    let mut seen = HashSet::new();
    let mut list_len = 0;
    for name in &names {
        assert!(seen.insert(name), "{path:?}: xattr {name} listed twice");
        assert!(name.starts_with(XATTR_PREFIX), "{path:?}: xattr {name}");
        assert!(
            name.len() <= 255 && !name.contains('\0'),
            "{path:?}: xattr name {name:?}"
        );
        list_len += name.len() + 1;
        let value = tree
            .xattr(ino, name)
            .unwrap_or_else(|| panic!("{path:?}: listed xattr {name} has no value"));
        assert!(
            value.len() <= 65536,
            "{path:?}: xattr {name} of {} bytes",
            value.len()
        );
    }
    assert!(
        list_len <= 65536,
        "{path:?}: xattr list of {list_len} bytes"
    );
    assert_eq!(tree.xattr(ino, "user.safetensors.no-such-attribute"), None);
    assert_eq!(tree.xattr(ino, "trusted.x"), None);
}
