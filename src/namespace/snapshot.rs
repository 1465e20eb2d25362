//! [`Snapshot`]: one state of the whole tree, immutable once published; each request works on one.

use std::path::Path;

use super::entry::lies_in;
use super::layout::METADATA_FILE;
use super::node::{Content, Ino, Node, ROOT};
use super::reading::NotReadable;
use super::table::Table;
use crate::format::Tensor;
use crate::format::widen::Widening;
use crate::source::{ReadError, Reading, Wait};

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    nodes: Table,
    generation: u64,
    source_bytes: u64,
}

/// Why [`Snapshot::read`] has no bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotReadError {
    NotFound,
    NotReadable(NotReadable),
    Source(ReadError),
}

/// One tensor as `--list` shows it.
pub struct Listed<'a> {
    pub path: String,
    pub tensor: &'a Tensor,
    /// How it is presented, if widened (`-o dtype=`).
    pub widen: Option<Widening>,
    pub source: &'a Path,
    pub offset: u64,
}

impl Snapshot {
    pub(super) fn new(nodes: Table, generation: u64, source_bytes: u64) -> Snapshot {
        Snapshot {
            nodes,
            generation,
            source_bytes,
        }
    }

    /// Its inode table, for a commit to start from.
    pub(super) fn table(&self) -> &Table {
        &self.nodes
    }

    pub fn node(&self, ino: Ino) -> Option<&Node> {
        self.nodes.get(ino)
    }

    /// Counts the refreshes applied: 0 for the tree built at mount.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The children of a directory, sorted by name.
    pub fn children(&self, ino: Ino) -> Option<&[Ino]> {
        Some(&self.node(ino)?.dir()?.children)
    }

    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Option<Ino> {
        let children = self.children(parent)?;
        let i = children
            .binary_search_by(|&c| self.name_of(c).cmp(name))
            .ok()?;
        Some(children[i])
    }

    pub(super) fn name_of(&self, ino: Ino) -> &[u8] {
        self.node(ino).map_or(&[][..], |n| &n.name[..])
    }

    /// Up to `size` bytes of a file from `offset`, sent as the kernel's READ sends them: without
    /// waiting where that can be done, else waiting (for tests and fuzzing, which compare bytes).
    pub fn read(&self, ino: Ino, offset: u64, size: u32) -> Result<Vec<u8>, SnapshotReadError> {
        let reading = self.reading(ino, offset, size)?;
        let mut out = Vec::new();
        let sent = reading
            .send(Wait::No, &mut |b: &[u8]| out.extend_from_slice(b))
            .or_else(|| reading.send(Wait::Yes, &mut |b: &[u8]| out.extend_from_slice(b)));
        match sent {
            Some(Ok(())) => Ok(out),
            Some(Err(e)) => Err(SnapshotReadError::Source(e)),
            // Only a read that may not wait gives up.
            None => Err(SnapshotReadError::Source(ReadError::Io(
                "read gave up".into(),
            ))),
        }
    }

    /// [`Snapshot::read`] by the path that waits (a read-pool thread's), whatever is cached.
    pub fn read_waiting(
        &self,
        ino: Ino,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, SnapshotReadError> {
        let reading = self.reading(ino, offset, size)?;
        let mut out = Vec::new();
        match reading.send(Wait::Yes, &mut |b: &[u8]| out.extend_from_slice(b)) {
            Some(Ok(())) => Ok(out),
            Some(Err(e)) => Err(SnapshotReadError::Source(e)),
            // Only a read that may not wait gives up.
            None => Err(SnapshotReadError::Source(ReadError::Io(
                "read gave up".into(),
            ))),
        }
    }

    fn reading(&self, ino: Ino, offset: u64, size: u32) -> Result<Reading<'_>, SnapshotReadError> {
        let node = self.node(ino).ok_or(SnapshotReadError::NotFound)?;
        node.read(offset, size)
            .map_err(SnapshotReadError::NotReadable)
    }

    pub fn xattr_names(&self, ino: Ino) -> Vec<String> {
        self.node(ino).map(Node::xattr_names).unwrap_or_default()
    }

    pub fn xattr(&self, ino: Ino, name: &str) -> Option<Vec<u8>> {
        self.node(ino)?.xattr(name)
    }

    /// Total size of all sources, for `statfs`.
    pub fn source_bytes(&self) -> u64 {
        self.source_bytes
    }

    pub fn node_count(&self) -> u64 {
        self.nodes.len() as u64
    }

    /// The nearest directory of SOURCE at or above `ino` (the root for a single-file mount): the
    /// directory to rescan when `ino` looks out of date.
    pub fn real_dir_of(&self, mut ino: Ino) -> Ino {
        while let Some(node) = self.node(ino) {
            if ino == ROOT
                || matches!(
                    node.dir().map(|d| d.origin),
                    Some(super::node::Origin::Real(_))
                )
            {
                return ino;
            }
            ino = node.parent;
        }
        ROOT
    }

    /// Every node below the root, with its path (`/`-separated, lossy UTF-8) and inode, in
    /// depth-first order, each directory's entries in listing order.
    pub fn entries(&self) -> Vec<(String, Ino, &Node)> {
        let mut out = Vec::new();
        let mut stack = vec![(ROOT, String::new())];
        while let Some((ino, path)) = stack.pop() {
            let Some(node) = self.node(ino) else {
                continue;
            };
            if let Some(children) = self.children(ino) {
                for &c in children.iter().rev() {
                    let name = String::from_utf8_lossy(self.name_of(c));
                    let child = match path.is_empty() {
                        true => name.into_owned(),
                        false => format!("{path}/{name}"),
                    };
                    stack.push((c, child));
                }
            }
            if ino != ROOT {
                out.push((path, ino, node));
            }
        }
        out
    }

    /// Every tensor file, in path order, for `--list`.
    pub fn list(&self) -> Vec<Listed<'_>> {
        self.entries()
            .into_iter()
            .filter_map(|(path, _, node)| match &node.content {
                Content::Tensor {
                    source,
                    tensor,
                    widen,
                    data,
                } => {
                    let bytes = lies_in(tensor, source, data);
                    Some(Listed {
                        path,
                        tensor,
                        widen: *widen,
                        source: &bytes.path,
                        offset: tensor.start(bytes.data_start()),
                    })
                }
                _ => None,
            })
            .collect()
    }

    /// The metadata of every tensor directory that has a `__metadata__` file, by the directory's
    /// path, for `--list --json`.
    pub fn list_metadata(&self) -> Vec<(String, serde_json::Value)> {
        self.entries()
            .into_iter()
            .filter_map(|(path, _, node)| {
                let dir = match path.strip_suffix(METADATA_FILE)? {
                    "" => "",
                    parent => parent.strip_suffix('/')?,
                };
                match &node.content {
                    Content::Generated(json) => {
                        Some((dir.to_string(), serde_json::from_slice(json).ok()?))
                    }
                    _ => None,
                }
            })
            .collect()
    }
}
