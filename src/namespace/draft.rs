//! What a directory should hold, before inode numbers are given ([`Draft`]), and the attributes of
//! what is drafted: built from the source by the writer and [`layout`](super::layout), merged into
//! a snapshot by [`commit`](super::commit).

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::SystemTime;

use super::node::{Attr, Content, Ino, Kind, Origin, Xattrs};
use super::record::Record;

/// An entry of a directory, by name.
#[derive(Debug)]
pub struct Draft {
    pub name: Arc<[u8]>,
    pub body: Body,
}

#[derive(Debug)]
pub enum Body {
    /// An unchanged subtree, kept with its inode number.
    Keep(Ino),
    /// A file (any content but a directory).
    File { attr: Attr, content: Content },
    /// Boxed, so that the file drafts (most) stay small.
    Dir(Box<DirDraft>),
}

#[derive(Debug)]
pub struct DirDraft {
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
pub fn attr(meta: &Metadata, kind: Kind, size: u64, perm: u32) -> Attr {
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
pub fn dir_attr(meta: &Metadata) -> Attr {
    attr(meta, Kind::Dir, 0, meta.mode() & 0o555)
}

/// A mirrored or tensor file: the source's permission bits without write or special bits.
pub fn file_attr(meta: &Metadata, size: u64) -> Attr {
    attr(meta, Kind::File, size, meta.mode() & 0o555)
}

/// A symbolic link kept as a link: its own owner and mtime (`meta`, from `lstat`), its target's
/// length as its size, and `rwxrwxrwx` as every link has.
pub fn link_attr(meta: &Metadata, target_len: usize) -> Attr {
    attr(meta, Kind::Symlink, target_len as u64, 0o777)
}

/// A directory that lists the tensors of `owner` (a safetensors file, or an index) and of `also`
/// (the shards the index names): owned like `owner`, and r-x for a class of users only if every
/// user of that class may read every one of the files, so that listing tensor names and sizes
/// never needs less than reading the files does. See [`readable_by`].
pub fn tensor_dir_attr(owner: &Metadata, also: &[&Metadata]) -> Attr {
    let files = std::iter::once(owner).chain(also.iter().copied());
    let read = readable_by(
        owner.uid(),
        owner.gid(),
        files.map(|m| (m.uid(), m.gid(), m.mode())),
    );
    attr(owner, Kind::Dir, 0, read | (read >> 2))
}

/// The read bits (`0o444` at most) that a file owned by `uid`:`gid` may have so that no one it
/// lets read can be refused by one of `files` (each its owner, group and mode). A class keeps its
/// bit only if every file grants it to each user the class may hold, whatever the user's other
/// groups, which the daemon cannot know:
/// - the owner `uid` reads a file it owns by that file's owner bit; any other file, by its group
///   bit if the owner happens to be in that group, by its other bit if not: both must be set;
/// - a member of `gid` (not `uid`) may own another file (its owner bit must be set), reads a file
///   of group `gid` by its group bit, and one of another group by its group or other bit;
/// - anyone else may own another file or be in its group (owner and group bits), or neither
///   (other bit), except that they are in neither `uid` nor `gid`.
fn readable_by(uid: u32, gid: u32, files: impl Iterator<Item = (u32, u32, u32)>) -> u32 {
    let mut perm = 0o444;
    for (f_uid, f_gid, mode) in files {
        let (u, g, o) = (mode & 0o400 != 0, mode & 0o040 != 0, mode & 0o004 != 0);
        let owner = if f_uid == uid { u } else { g && o };
        let group = (f_uid == uid || u) && if f_gid == gid { g } else { g && o };
        let other = (f_uid == uid || u) && (f_gid == gid || g) && o;
        for (ok, bit) in [(owner, 0o400), (group, 0o040), (other, 0o004)] {
            if !ok {
                perm &= !bit;
            }
        }
    }
    perm
}

#[cfg(test)]
mod tests {
    use super::readable_by;

    /// A file's owner, group and mode.
    type File = (u32, u32, u32);

    /// Users 1 and 2, groups 10 and 20; the directory is owned by 1:10 throughout.
    #[test]
    fn a_listing_is_readable_only_by_who_may_read_every_file() {
        let cases: &[(&str, &[File], u32)] = &[
            ("one file keeps its read bits", &[(1, 10, 0o644)], 0o444),
            ("private file", &[(1, 10, 0o600)], 0o400),
            ("group-readable file", &[(1, 10, 0o640)], 0o440),
            ("write and exec bits never count", &[(1, 10, 0o311)], 0o000),
            (
                "same owner: the bits all files share",
                &[(1, 10, 0o644), (1, 10, 0o600), (1, 10, 0o640)],
                0o400,
            ),
            (
                "a shard owned by another user, world-readable: all may read",
                &[(1, 10, 0o644), (2, 10, 0o644)],
                0o444,
            ),
            (
                "a shard of another user readable by its group only: the directory's owner may \
                 not be in it, others may own it or not",
                &[(1, 10, 0o644), (2, 10, 0o640)],
                0o040,
            ),
            (
                "a shard of another user and group, group-readable: only who is sure to be in \
                 that group could read it, and no class is",
                &[(1, 10, 0o644), (2, 20, 0o640)],
                0o000,
            ),
            (
                "a shard of another group, world-readable: everyone",
                &[(1, 10, 0o644), (1, 20, 0o644)],
                0o444,
            ),
            (
                "a shard of another group readable by the owner only: the owner",
                &[(1, 10, 0o644), (1, 20, 0o600)],
                0o400,
            ),
            (
                "a shard of another group that denies its own group: anyone might be in it",
                &[(1, 10, 0o644), (1, 20, 0o604)],
                0o400,
            ),
            (
                "a shard of another user that denies its owner: anyone but the directory's \
                 owner might be that user",
                &[(1, 10, 0o644), (2, 10, 0o044)],
                0o400,
            ),
            (
                "an index readable by no one",
                &[(1, 10, 0o000), (1, 10, 0o644)],
                0o000,
            ),
        ];
        for (what, files, want) in cases {
            let got = readable_by(1, 10, files.iter().copied());
            assert_eq!(got, *want, "{what}: {got:o} instead of {want:o}");
        }
    }
}
