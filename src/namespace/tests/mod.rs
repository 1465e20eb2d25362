//! The namespace's unit tests, without a kernel, on real temporary directories built as at mount:
//! - [`refresh`]: the refresh rules: a directory changed the way writers change model
//!   directories, rescanned, and the snapshots and diffs checked against what the rules say;
//! - [`layout`]: the naming and layout rules, table-driven: file names in a tensor directory,
//!   claims, the tree layout, NPY views, `__metadata__`, and the diffs of clashes.
//!
//! Expected results are written out by hand from the documented rules (`doc/layout.md`), never
//! taken from this code's output. The helpers both use are here.

mod indexes;
mod layout;
mod refresh;
mod tree;

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

pub(super) use crate::base::clock::Clock;
pub(super) use crate::namespace::sets;
pub(super) use crate::namespace::*;
pub(super) use crate::source::Sources;

pub(super) use crate::base::testing::{TempDir as Dir, st};

/// Writes `bytes` to a temporary name and renames it to `path`, as publishers do.
pub(super) fn publish(path: &Path, bytes: &[u8]) {
    let tmp = path.with_file_name(".tmpPUBLSH");
    fs::write(&tmp, bytes).unwrap();
    fs::rename(&tmp, path).unwrap();
}

/// Rewrites `path` in place (same inode), as `open(..., "w")` writers do.
pub(super) fn rewrite(path: &Path, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

pub(super) fn index(map: &[(&str, &str)]) -> Vec<u8> {
    let weight_map: serde_json::Map<String, serde_json::Value> = map
        .iter()
        .map(|(t, s)| (t.to_string(), serde_json::Value::from(*s)))
        .collect();
    serde_json::to_vec(&serde_json::json!({"metadata": {}, "weight_map": weight_map})).unwrap()
}

pub(super) fn options(settle: Duration) -> Options {
    Options {
        settle,
        ..Options::default()
    }
}

/// The inode at `path` (`/`-separated, from the root).
pub(super) fn at(s: &Snapshot, path: &str) -> Option<Ino> {
    path.split('/')
        .filter(|p| !p.is_empty())
        .try_fold(ROOT, |ino, name| s.lookup(ino, name.as_bytes()))
}

pub(super) fn names(s: &Snapshot, path: &str) -> Vec<String> {
    s.children(at(s, path).unwrap())
        .unwrap()
        .iter()
        .map(|&c| String::from_utf8_lossy(&s.node(c).unwrap().name).into_owned())
        .collect()
}

pub(super) fn bytes(s: &Snapshot, path: &str) -> Vec<u8> {
    s.read(at(s, path).unwrap(), 0, u32::MAX).unwrap()
}

/// Every path below `path` with its inode number.
pub(super) fn inos(s: &Snapshot, path: &str) -> Vec<(String, Ino)> {
    let mut out = Vec::new();
    let mut stack = vec![(at(s, path).unwrap(), path.to_string())];
    while let Some((ino, p)) = stack.pop() {
        out.push((p.clone(), ino));
        for &c in s.children(ino).unwrap_or_default() {
            let name = String::from_utf8_lossy(&s.node(c).unwrap().name).into_owned();
            stack.push((c, format!("{p}/{name}")));
        }
    }
    out.sort();
    out
}

pub(super) fn removed_names(d: &Diff) -> Vec<String> {
    let mut v: Vec<String> = d
        .removed
        .iter()
        .map(|r| String::from_utf8_lossy(&r.name).into_owned())
        .collect();
    v.sort();
    v
}

/// Sources on a manual clock, so that waiting out a settle time takes no time.
pub(super) fn sources() -> Sources {
    Sources::new(Clock::manual(), 1024)
}

/// A tree built as at mount, with the writer that rescans it and the clock it reads.
pub(super) struct Mount {
    pub(super) writer: Writer,
    pub(super) snap: Snapshot,
    pub(super) clock: Clock,
}

impl Mount {
    pub(super) fn new(src: &Path, settle: Duration) -> Mount {
        let sources = sources();
        let (writer, snap) = Writer::build(&sources, src, &options(settle)).unwrap();
        Mount {
            writer,
            snap,
            clock: sources.clock().clone(),
        }
    }

    /// Moves the clock to when the next file being written settles.
    pub(super) fn wait_until_settled(&self) {
        let (deadline, _) = self.writer.deadline().expect("a settle deadline");
        self.clock
            .advance(deadline.saturating_duration_since(self.writer.now()));
    }

    /// Rescans every directory, as SIGUSR1 or a poll tick does.
    pub(super) fn rescan(&mut self) -> Diff {
        let dirs = self.writer.dirs(&self.snap);
        let (snap, diff) = self.writer.rescan(&self.snap, &dirs);
        assert_eq!(snap.generation(), self.snap.generation() + 1);
        let old: HashSet<Ino> = inos(&self.snap, "").into_iter().map(|x| x.1).collect();
        let new: HashSet<Ino> = inos(&snap, "").into_iter().map(|x| x.1).collect();
        // Every inode that left the tree is in the diff, and only those.
        let left: HashSet<Ino> = old.difference(&new).copied().collect();
        let detached: HashSet<Ino> = diff.detached.iter().copied().collect();
        assert_eq!(left, detached, "detached inodes");
        // New inode numbers are new: never one the tree had.
        let max_old = old.iter().max().copied().unwrap_or(0);
        assert!(
            new.difference(&old).all(|&i| i > max_old),
            "an inode number reused"
        );
        self.snap = snap;
        diff
    }
}

pub(super) const SETTLE: Duration = Duration::from_secs(3600);

/// A safetensors file: `(name, dtype, shape, bytes)` in that order, with `metadata` if given.
pub(super) fn safetensors(
    tensors: &[(&str, &str, &[usize], Vec<u8>)],
    metadata: Option<Value>,
) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    if let Some(m) = metadata {
        header.insert("__metadata__".into(), m);
    }
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.to_string(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    let json = serde_json::to_string(&header).unwrap();
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(&data);
    out
}

/// A U8 tensor of `n` bytes, each `byte`.
pub(super) fn u8t(name: &str, n: usize, byte: u8) -> (&str, &'static str, Vec<usize>, Vec<u8>) {
    (name, "U8", vec![n], vec![byte; n])
}

pub(super) fn write_u8(path: &Path, tensors: &[(&str, usize, u8)]) {
    fs::write(path, st(tensors)).unwrap();
}

pub(super) fn build(source: &Path, layout: Layout, npy: bool) -> Snapshot {
    let options = Options {
        layout,
        npy,
        ..Options::default()
    };
    Writer::build(&sources(), source, &options).unwrap().1
}

pub(super) fn node<'a>(s: &'a Snapshot, path: &str) -> &'a Node {
    s.node(at(s, path).unwrap_or_else(|| panic!("no {path}")))
        .unwrap()
}

/// The tensor a file shows, and whether it is an NPY view.
pub(super) fn tensor_of<'a>(s: &'a Snapshot, path: &str) -> Option<(&'a str, bool)> {
    match &node(s, path).content {
        Content::Tensor { tensor, .. } => Some((&tensor.name, false)),
        Content::Npy { tensor, .. } => Some((&tensor.name, true)),
        _ => None,
    }
}

/// Every file below `path`, by its path relative to it (`/`-separated), with the tensor it shows
/// (`None` for other files, e.g. `__metadata__`) and whether it is an NPY view.
pub(super) fn files(s: &Snapshot, path: &str) -> BTreeMap<Vec<u8>, Option<(String, bool)>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(at(s, path).unwrap(), Vec::new())];
    while let Some((ino, rel)) = stack.pop() {
        let n = s.node(ino).unwrap();
        match &n.content {
            Content::Dir(d) => {
                for &c in d.children.iter() {
                    let mut p = rel.clone();
                    if !p.is_empty() {
                        p.push(b'/');
                    }
                    p.extend_from_slice(&s.node(c).unwrap().name);
                    stack.push((c, p));
                }
            }
            Content::Tensor { tensor, .. } => {
                out.insert(rel, Some((tensor.name.to_string(), false)));
            }
            Content::Npy { tensor, .. } => {
                out.insert(rel, Some((tensor.name.to_string(), true)));
            }
            _ => {
                out.insert(rel, None);
            }
        }
    }
    out
}

pub(super) fn raw_names(s: &Snapshot, path: &str) -> Vec<Vec<u8>> {
    s.children(at(s, path).unwrap())
        .unwrap()
        .iter()
        .map(|&c| s.node(c).unwrap().name.to_vec())
        .collect()
}
