//! Merging drafts into the previous snapshot. An entry keeps its inode number when its name,
//! parent and identity are unchanged (the same source version and byte range for a file, the same
//! source directory for a mirrored one, any generated directory of that name); anything else gets
//! a new number, and what it replaces or removes leaves the tree (is "detached").
//!
//! Everything a commit does is recorded in a [`Diff`] for the kernel's caches.

use std::sync::Arc;

use super::diff::{Diff, Removed};
use super::draft::{Body, DirDraft, Draft};
use super::node::{Attr, Content, Dir, Ino, Kind, Node, Origin, Refusal, Xattrs};
use super::record::Record;
use super::snapshot::Snapshot;
use super::table::Table;

pub struct Commit<'a> {
    old: &'a Snapshot,
    pub table: Table,
    pub next_ino: Ino,
    pub diff: Diff,
    /// Records of the directories of SOURCE that entered the tree, by their new numbers.
    pub records: Vec<(Ino, Box<Record>)>,
}

/// What a directory node is besides its children.
pub struct DirNode {
    pub name: Arc<[u8]>,
    pub parent: Ino,
    pub attr: Attr,
    pub xattrs: Arc<Xattrs>,
    pub origin: Origin,
}

impl<'a> Commit<'a> {
    pub fn new(old: &'a Snapshot, next_ino: Ino) -> Commit<'a> {
        Commit {
            old,
            table: old.table().clone(),
            next_ino,
            diff: Diff::default(),
            records: Vec::new(),
        }
    }

    /// Makes `ino` the directory `dir` holding `children` (sorted by name, unique), reusing the
    /// inode numbers of its entries in the old snapshot where their identity is unchanged.
    pub fn dir(&mut self, ino: Ino, dir: DirNode, mut children: Vec<Draft>) {
        children.sort_by(|a, b| a.name.cmp(&b.name));
        let old_children: &[Ino] = self
            .old
            .node(ino)
            .and_then(Node::dir)
            .map_or(&[], |d| &d.children);
        let mut placed = Vec::with_capacity(children.len());
        let mut old = old_children.iter().copied().peekable();
        for draft in children {
            // Old entries before this name are gone.
            while let Some(&o) = old.peek() {
                if self.old.name_of(o) >= &draft.name[..] {
                    break;
                }
                old.next();
                self.remove(ino, o);
            }
            let same_name = old.next_if(|&o| self.old.name_of(o) == &draft.name[..]);
            let name = draft.name.clone();
            let child = self.place(ino, draft, same_name);
            match same_name {
                Some(o) if o != child => {
                    self.diff.replaced += 1;
                    self.diff.removed.push(Removed {
                        parent: ino,
                        name,
                        ino: o,
                    });
                }
                Some(_) => {}
                None => self.diff.added += 1,
            }
            placed.push(child);
        }
        for o in old {
            self.remove(ino, o);
        }

        let subdirs = placed
            .iter()
            .filter(|&&c| self.table.get(c).is_some_and(|n| n.attr.kind == Kind::Dir))
            .count();
        let node = Node {
            name: dir.name,
            parent: dir.parent,
            attr: Attr {
                nlink: 2 + subdirs as u32,
                ..dir.attr
            },
            content: Content::Dir(Arc::new(Dir {
                children: placed.into(),
                xattrs: dir.xattrs,
                origin: dir.origin,
            })),
        };
        let unchanged = self.old.node(ino).is_some_and(|o| same_dir(o, &node));
        if !unchanged {
            if self.old.node(ino).is_some() {
                self.diff.changed_dirs.push(ino);
            }
            self.table.insert(ino, node);
        }
    }

    /// Places one draft in directory `parent`, where `old` had the same name: returns its inode
    /// number (the old one if its identity is unchanged).
    fn place(&mut self, parent: Ino, draft: Draft, old: Option<Ino>) -> Ino {
        let old_node = old.and_then(|o| self.old.node(o));
        match draft.body {
            Body::Keep(ino) => ino,
            Body::File { attr, content } => {
                let node = Node {
                    name: draft.name,
                    parent,
                    attr,
                    content,
                };
                if let (Some(o), Some(old_node)) = (old, old_node)
                    && same_file(old_node, &node)
                {
                    // Same bytes; only what the mirrored file's error says can differ.
                    if !same_error(old_node, &node) {
                        self.table.insert(o, node);
                    }
                    return o;
                }
                if let Some(o) = old {
                    self.detach(o);
                }
                let ino = self.alloc();
                self.table.insert(ino, node);
                ino
            }
            Body::Dir(d) => {
                let DirDraft {
                    attr,
                    xattrs,
                    origin,
                    children,
                    record,
                } = *d;
                let dir = DirNode {
                    name: draft.name,
                    parent,
                    attr,
                    xattrs,
                    origin,
                };
                let reuse = old_node
                    .and_then(Node::dir)
                    .is_some_and(|d| d.origin == origin && record.is_none());
                let ino = match old {
                    Some(o) if reuse => o,
                    _ => {
                        if let Some(o) = old {
                            self.detach(o);
                        }
                        self.alloc()
                    }
                };
                if let Some(record) = record {
                    self.diff.new_dirs.push(ino);
                    self.records.push((ino, record));
                }
                self.dir(ino, dir, children);
                ino
            }
        }
    }

    /// An entry of `parent` that has no successor.
    fn remove(&mut self, parent: Ino, ino: Ino) {
        self.diff.removed.push(Removed {
            parent,
            name: Arc::from(self.old.name_of(ino)),
            ino,
        });
        self.detach(ino);
    }

    /// Takes the subtree at `ino` out of the tree.
    fn detach(&mut self, ino: Ino) {
        let mut stack = vec![ino];
        while let Some(ino) = stack.pop() {
            let Some(node) = self.table.remove(ino) else {
                continue;
            };
            if let Content::Dir(d) = &node.content {
                stack.extend(d.children.iter().copied());
                if let Origin::Real(_) = d.origin {
                    self.diff.gone_dirs.push(ino);
                }
            }
            self.diff.detached.push(ino);
        }
    }

    fn alloc(&mut self) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        ino
    }
}

/// Whether two file nodes show the same bytes with the same attributes.
fn same_file(a: &Node, b: &Node) -> bool {
    a.attr == b.attr
        && match (&a.content, &b.content) {
            // The same version (a file whose description is read again is a new source of it).
            (Content::Mirror { source: x, .. }, Content::Mirror { source: y, .. }) => {
                x.version == y.version
            }
            (
                Content::Tensor {
                    source: x,
                    tensor: t,
                    widen: v,
                    data: d,
                },
                Content::Tensor {
                    source: y,
                    tensor: u,
                    widen: w,
                    data: e,
                },
            )
            | (
                Content::Npy {
                    source: x,
                    tensor: t,
                    widen: v,
                    data: d,
                },
                Content::Npy {
                    source: y,
                    tensor: u,
                    widen: w,
                    data: e,
                },
            ) => {
                Arc::ptr_eq(x, y)
                    && Arc::ptr_eq(t, u)
                    && v == w
                    && d.len() == e.len()
                    && d.iter().zip(e.iter()).all(|(d, e)| Arc::ptr_eq(d, e))
            }
            (
                Content::Converted {
                    source: x,
                    file: f,
                    data: d,
                },
                Content::Converted {
                    source: y,
                    file: g,
                    data: e,
                },
            ) => {
                Arc::ptr_eq(x, y)
                    && Arc::ptr_eq(f, g)
                    && d.len() == e.len()
                    && d.iter().zip(e.iter()).all(|(d, e)| Arc::ptr_eq(d, e))
            }
            (Content::Generated(x), Content::Generated(y))
            | (Content::Link(x), Content::Link(y)) => x == y,
            _ => false,
        }
}

/// Whether two mirrored files carry the same error in the same attribute.
fn same_error(a: &Node, b: &Node) -> bool {
    let said = |r: &Refusal| (r.xattr, r.to_string());
    match (&a.content, &b.content) {
        (Content::Mirror { error: x, .. }, Content::Mirror { error: y, .. }) => {
            x.as_ref().map(said) == y.as_ref().map(said)
        }
        _ => true,
    }
}

/// Whether a directory node is unchanged: same attributes, entries and xattrs.
fn same_dir(a: &Node, b: &Node) -> bool {
    match (a.dir(), b.dir()) {
        (Some(x), Some(y)) => {
            a.attr == b.attr && a.name == b.name && a.parent == b.parent && x == y
        }
        _ => false,
    }
}
