//! What one directory of SOURCE holds, as `readdir` and `stat` see it, and which of its files are
//! still being written.
//!
//! Two rules decide which files may be interpreted (get a `.tensors/` directory, feed an index):
//! - names that downloaders give partial files ([`is_partial`]) never are;
//! - a file seen changing in place (same inode, new size or mtime) is in flux until it has stayed
//!   unchanged for the settle time ([`Flux`]). A file that appears complete under its name (a new
//!   inode: renamed into place, or first seen) is not in flux: writers that publish by rename
//!   never show a partial file under its final name, and a file written in place is invalid until
//!   its data fills it.

use std::collections::HashMap;
use std::fs::{self, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::parallel;
use crate::source::{FileId, Sources, Version, is_remote};

/// A directory as one scan saw it.
#[derive(Debug, Clone)]
pub struct Scan {
    /// The directory itself (links followed), stat'ed before it was read.
    pub meta: Metadata,
    /// Sorted by name.
    pub entries: Vec<Entry>,
    /// On a network or FUSE filesystem: its entries are looked at several at a time.
    pub remote: bool,
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub name: Arc<[u8]>,
    pub path: PathBuf,
    pub what: What,
}

/// What an entry is, links followed, except links kept as links (see [`kept_link`]).
#[derive(Debug, Clone)]
pub enum What {
    Dir(Metadata),
    File(Metadata),
    /// A symbolic link shown as itself: `meta` is its own (`lstat`), `target` its text, and `to`
    /// what it leads to inside SOURCE (a directory or a file).
    Link {
        meta: Metadata,
        target: PathBuf,
        to: Box<What>,
    },
    /// Not shown, and why (a dangling link, a FIFO, ...). `warn`: worth a warning.
    Skipped {
        why: String,
        warn: bool,
    },
}

impl What {
    /// The file this is, or a kept link leads to.
    pub fn file(&self) -> Option<&Metadata> {
        match self {
            What::File(m) => Some(m),
            What::Link { to, .. } => to.file(),
            _ => None,
        }
    }

    /// Whether two scans saw the same thing: the same directory, the same file version, or the
    /// same reason to skip.
    pub fn same(&self, other: &What) -> bool {
        match (self, other) {
            (What::Dir(a), What::Dir(b)) => FileId::of(a) == FileId::of(b),
            (What::File(a), What::File(b)) => Version::of(a) == Version::of(b),
            (What::Skipped { why: a, .. }, What::Skipped { why: b, .. }) => a == b,
            (
                What::Link {
                    meta: a,
                    target: ta,
                    to: xa,
                },
                What::Link {
                    meta: b,
                    target: tb,
                    to: xb,
                },
            ) => ta == tb && Version::of(a) == Version::of(b) && xa.same(xb),
            _ => false,
        }
    }
}

impl Scan {
    /// Reads the directory at `path`, inside SOURCE whose real path is `root`. Entries on the
    /// device `skip_dev` (the mount itself, should SOURCE contain it) are skipped. Each `stat`
    /// counts as a call to the source of `sources`.
    pub fn read(
        path: &Path,
        root: &Path,
        skip_dev: Option<u64>,
        sources: &Sources,
    ) -> std::io::Result<Scan> {
        let meta = fs::metadata(path)?;
        if !meta.is_dir() {
            return Err(std::io::Error::other("not a directory"));
        }
        let listed: Vec<(Arc<[u8]>, PathBuf, bool)> = fs::read_dir(path)?
            .filter_map(Result::ok)
            .map(|e| {
                let link = e.file_type().is_ok_and(|t| t.is_symlink());
                (e.file_name().as_bytes().into(), e.path(), link)
            })
            .collect();
        // On storage far away, each `stat` is a round trip: several go at once.
        let remote = fs::File::open(path).is_ok_and(|d| is_remote(&d));
        let whats = parallel::map(&listed, remote, |(_, p, link)| {
            let followed = what(p, skip_dev);
            let w = match (link, &followed) {
                (true, What::Dir(_) | What::File(_)) => match kept_link(p, root) {
                    Some((meta, target)) => What::Link {
                        meta,
                        target,
                        to: Box::new(followed),
                    },
                    None => followed,
                },
                _ => followed,
            };
            sources.step();
            w
        });
        let mut entries: Vec<Entry> = listed
            .into_iter()
            .zip(whats)
            .map(|((name, path, _), what)| Entry { name, path, what })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Scan {
            meta,
            entries,
            remote,
        })
    }

    /// The same directory with the same entries, each the same as before, and the same
    /// attributes.
    pub fn same(&self, other: &Scan) -> bool {
        Version::of(&self.meta) == Version::of(&other.meta)
            && self.entries.len() == other.entries.len()
            && self
                .entries
                .iter()
                .zip(&other.entries)
                .all(|(a, b)| a.name == b.name && a.what.same(&b.what))
    }

    pub fn get(&self, name: &[u8]) -> Option<&Entry> {
        let i = self
            .entries
            .binary_search_by(|e| e.name[..].cmp(name))
            .ok()?;
        Some(&self.entries[i])
    }
}

fn what(path: &Path, skip_dev: Option<u64>) -> What {
    match fs::metadata(path) {
        Ok(m) if Some(m.dev()) == skip_dev => What::Skipped {
            why: "the mount itself, left out".into(),
            warn: false,
        },
        Ok(m) if m.is_dir() => What::Dir(m),
        Ok(m) if m.is_file() => What::File(m),
        Ok(_) => What::Skipped {
            why: "not a regular file or directory, skipped".into(),
            warn: false,
        },
        Err(e) => {
            let link = fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink());
            let what = if link {
                "dangling symbolic link"
            } else {
                "cannot stat"
            };
            What::Skipped {
                why: format!("{what}, skipped: {e}"),
                warn: true,
            }
        }
    }
}

/// The link at `path`, kept as a link: its own metadata and target, if that target is relative and
/// leads, word by word from the link's directory, to the very path the link resolves to, inside
/// `root` (SOURCE). Such a link leads through the mount to the mirror of its target, as a Hugging
/// Face snapshot's `../../blobs/HASH` does. Other links are followed (shown as what they lead to):
/// absolute ones, and those leading out of SOURCE or through other links.
fn kept_link(path: &Path, root: &Path) -> Option<(Metadata, PathBuf)> {
    let target = fs::read_link(path).ok()?;
    let lexical = lexical_target(path.parent()?, &target)?;
    if !lexical.starts_with(root) || fs::canonicalize(path).ok()? != lexical {
        return None;
    }
    Some((fs::symlink_metadata(path).ok()?, target))
}

/// `target` followed word by word from the directory `dir`, without looking at the filesystem;
/// `None` for an absolute target or one that climbs above `/`.
fn lexical_target(dir: &Path, target: &Path) -> Option<PathBuf> {
    let mut out = dir.to_path_buf();
    for part in target.components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Whether `name` is what a downloader calls a file it has not finished: `*.incomplete`
/// (huggingface_hub, hf-hub), `*.part`, `*.tmp` and `tempfile`'s `.tmpXXXXXX` (safetensors'
/// `save_file` since 0.8). Such files are mirrored, never interpreted.
pub fn is_partial(name: &[u8]) -> bool {
    let temp = name.len() == 10
        && name.starts_with(b".tmp")
        && name[4..].iter().all(u8::is_ascii_alphanumeric);
    temp || [&b".incomplete"[..], b".part", b".tmp"]
        .iter()
        .any(|s| name.ends_with(s))
}

/// Whether files of the directory at `path` are never interpreted: Hugging Face's lock directory.
pub fn is_partial_dir(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == ".locks")
}

/// The files of one directory seen changing in place, and when they last did.
#[derive(Debug, Default, Clone)]
pub struct Flux {
    changed: HashMap<Arc<[u8]>, Instant>,
}

impl Flux {
    /// Notes the files that `new` shows changed in place since `old`, and forgets those gone.
    pub fn update(&mut self, old: &Scan, new: &Scan, now: Instant) {
        self.changed.retain(|name, _| new.get(name).is_some());
        for e in &new.entries {
            let (What::File(m), Some(What::File(before))) =
                (&e.what, old.get(&e.name).map(|o| &o.what))
            else {
                continue;
            };
            let (v, before) = (Version::of(m), Version::of(before));
            if v.id == before.id && !v.same_bytes(&before) {
                self.changed.insert(e.name.clone(), now);
            }
        }
    }

    /// Notes that the file `name` changed in place at `now`.
    pub fn note(&mut self, name: &[u8], now: Instant) {
        self.changed.insert(name.into(), now);
    }

    /// Whether the file `name` is still settling at `now`.
    pub fn unsettled(&self, name: &[u8], now: Instant, settle: Duration) -> bool {
        self.changed
            .get(name)
            .is_some_and(|&t| now.duration_since(t) < settle)
    }

    /// Forgets files that have settled by `now`.
    pub fn expire(&mut self, now: Instant, settle: Duration) {
        self.changed.retain(|_, t| now.duration_since(*t) < settle);
    }

    /// When the next file settles.
    pub fn deadline(&self, settle: Duration) -> Option<Instant> {
        self.changed.values().map(|&t| t + settle).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_names() {
        for name in [
            "model.safetensors.incomplete",
            "0123abcd.incomplete",
            "0123abcd.1a2b3c4d.incomplete",
            ".tmpAb12Cd",
            "x.part",
            "refs-main.tmp",
        ] {
            assert!(is_partial(name.as_bytes()), "{name}");
        }
        for name in [
            "model.safetensors",
            ".tmpAb12Cd.safetensors",
            ".tmp-abcdef",
            "incomplete",
            "model.tmpfile",
        ] {
            assert!(!is_partial(name.as_bytes()), "{name}");
        }
        assert!(is_partial_dir(Path::new("/cache/.locks/models--a--b")));
        assert!(!is_partial_dir(Path::new("/cache/models--a--b/blobs")));
    }

    #[test]
    fn link_targets_are_followed_word_by_word() {
        let dir = Path::new("/c/models--a--b/snapshots/abc");
        let cases: &[(&str, Option<&str>)] = &[
            ("../../blobs/123", Some("/c/models--a--b/blobs/123")),
            ("./x/../y", Some("/c/models--a--b/snapshots/abc/y")),
            ("sub/file", Some("/c/models--a--b/snapshots/abc/sub/file")),
            ("../../../../..", None),
            ("../../../../../x", None),
            ("/c/models--a--b/blobs/123", None),
            ("", Some("/c/models--a--b/snapshots/abc")),
        ];
        for (target, want) in cases {
            assert_eq!(
                lexical_target(dir, Path::new(target)).as_deref(),
                want.map(Path::new),
                "{target}"
            );
        }
    }

    #[test]
    fn links_are_kept_only_where_they_lead_inside_source_by_their_own_words() {
        let root = std::env::temp_dir().join(format!("tm-scan-links-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("blobs")).unwrap();
        fs::create_dir_all(root.join("snap/sub")).unwrap();
        fs::create_dir_all(root.join("elsewhere")).unwrap();
        let root = fs::canonicalize(&root).unwrap();
        fs::write(root.join("blobs/1"), b"x").unwrap();
        let link = |target: &str, at: &str| {
            std::os::unix::fs::symlink(target, root.join(at)).unwrap();
            root.join(at)
        };
        let kept = |p: &Path| kept_link(p, &root).map(|(_, t)| t);
        let hf = link("../blobs/1", "snap/model.safetensors");
        assert_eq!(kept(&hf), Some(PathBuf::from("../blobs/1")));
        assert_eq!(kept(&link("..", "snap/up")), Some(PathBuf::from("..")));
        // Absolute, leading out, or through another link: followed instead.
        let abs = root.join("blobs/1");
        assert_eq!(kept(&link(abs.to_str().unwrap(), "snap/abs")), None);
        assert_eq!(kept(&link("../../..", "snap/out")), None);
        link("../snap", "elsewhere/snap-link");
        assert_eq!(kept(&link("../elsewhere/snap-link/up", "snap/via")), None);
        assert_eq!(kept(&link("nowhere", "snap/dangling")), None);
        // Not a link at all.
        assert_eq!(kept(&root.join("blobs/1")), None);
        fs::remove_dir_all(&root).unwrap();
    }
}
