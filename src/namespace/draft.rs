//! What a directory should hold, before inode numbers are given: built from the source by
//! [`writer`](super::writer) and [`layout`](super::layout), merged into a snapshot by
//! [`commit`](super::commit).

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::SystemTime;

use super::writer::Record;
use super::{Attr, Content, Ino, Kind, Origin, Xattrs};

/// An entry of a directory, by name.
#[derive(Debug)]
pub(super) struct Draft {
    pub name: Arc<[u8]>,
    pub body: Body,
}

#[derive(Debug)]
pub(super) enum Body {
    /// An unchanged subtree, kept with its inode number.
    Keep(Ino),
    /// A file (any content but a directory).
    File { attr: Attr, content: Content },
    /// Boxed, so that the file drafts (most) stay small.
    Dir(Box<DirDraft>),
}

#[derive(Debug)]
pub(super) struct DirDraft {
    pub attr: Attr,
    pub xattrs: Arc<Xattrs>,
    pub origin: Origin,
    pub children: Vec<Draft>,
    /// For a directory of SOURCE not in the tree before: what its scan found.
    pub record: Option<Box<Record>>,
}

impl Draft {
    pub fn file(name: Arc<[u8]>, attr: Attr, content: Content) -> Draft {
        Draft {
            name,
            body: Body::File { attr, content },
        }
    }

    pub fn generated_dir(
        name: Arc<[u8]>,
        attr: Attr,
        xattrs: Arc<Xattrs>,
        children: Vec<Draft>,
    ) -> Draft {
        Draft {
            name,
            body: Body::Dir(Box::new(DirDraft {
                attr,
                xattrs,
                origin: Origin::Generated,
                children,
                record: None,
            })),
        }
    }

    /// How many nodes this draft adds (kept subtrees count as none).
    pub fn count(&self) -> usize {
        match &self.body {
            Body::Keep(_) => 0,
            Body::File { .. } => 1,
            Body::Dir(d) => 1 + d.children.iter().map(Draft::count).sum::<usize>(),
        }
    }
}

/// Attributes derived from the file or directory a node stands for: its owner, group and mtime,
/// and the given permission bits.
pub(super) fn attr(meta: &Metadata, kind: Kind, size: u64, perm: u32) -> Attr {
    Attr {
        kind,
        size,
        perm: perm as u16,
        uid: meta.uid(),
        gid: meta.gid(),
        mtime: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        nlink: if kind == Kind::Dir { 2 } else { 1 },
    }
}

/// A mirrored directory: the source's permission bits without write or special bits.
pub(super) fn dir_attr(meta: &Metadata) -> Attr {
    attr(meta, Kind::Dir, 0, meta.mode() & 0o555)
}

/// A mirrored or tensor file: the source's permission bits without write or special bits.
pub(super) fn file_attr(meta: &Metadata, size: u64) -> Attr {
    attr(meta, Kind::File, size, meta.mode() & 0o555)
}

/// A directory standing for a safetensors file or index: r-x for whoever may read that file.
pub(super) fn tensor_dir_attr(meta: &Metadata) -> Attr {
    let read = meta.mode() & 0o444;
    attr(meta, Kind::Dir, 0, read | (read >> 2))
}
