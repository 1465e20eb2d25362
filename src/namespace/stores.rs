//! A store's named models (see [`Store`]): in a directory with the store's two subdirectories, a
//! generated directory (`by-name/`) holds each model its descriptors describe, by name, with the
//! blobs they list as files of their listed names (each interpreted as its name says, with the
//! views every such file gets) and the file the format makes from them (a `Modelfile`). A
//! descriptor whose model cannot be shown says why in its format's error attribute, on its own
//! mirrored file; the store's other models are shown all the same.
//!
//! A descriptor's locations are resolved in its own store, and only to regular files there.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::draft::{self, Body, Draft};
use super::entry::Entry;
use super::error::BuildError;
use super::generated::{self, Drafted, generated};
use super::node::{Content, FileError, Ino, no_xattrs};
use super::options::Policy;
use super::scan::Flux;
use super::snapshot::Snapshot;
use super::tensor_dirs::{Build, build as build_dir};
use crate::format::{Format, Store};
use crate::source::{DescribeError, Source};

/// The most of a listed file's text a generated file is made from.
const MAX_TEXT: u64 = 1 << 20;

/// How far below a store its files lie, at most (its descriptors' directory, and the directories
/// in it): a change that deep shows its models again.
pub fn depth() -> usize {
    let stores = Format::ALL.into_iter().filter_map(Format::store);
    stores.map(|s| s.descriptors.1 + 1).max().unwrap_or(0)
}

/// The most descriptors of one store that are read.
const MAX_MODELS: usize = 100_000;

/// A model a descriptor describes, ready to show.
pub struct Model {
    /// Its name, `/` between the directories of the view it is in.
    pub name: String,
    /// Its files by name (sorted), each a blob of the store.
    pub files: Vec<(Arc<[u8]>, Arc<Source>)>,
    /// The tensor directories its blobs' tensors are shown in together.
    pub merged: Vec<Merged>,
    /// The generated file's name and bytes.
    pub generated: (&'static str, Vec<u8>),
}

/// A tensor directory of a model: the tensors of several of its blobs.
pub struct Merged {
    pub dir: &'static str,
    pub entries: Vec<Entry>,
    pub blobs: Vec<Arc<Source>>,
}

/// The store format (among those read) whose store the directory `dir` is, whose subdirectories
/// include `has`.
pub fn store_at(policy: Policy<'_>, has: impl Fn(&[u8]) -> bool) -> Option<Format> {
    Format::ALL.into_iter().find(|f| {
        policy.options.reads(*f)
            && f.store().is_some_and(|s| {
                has(s.descriptors.0.as_bytes()) && has(s.blobs.as_bytes()) && !s.view.is_empty()
            })
    })
}

/// Where the files of the directory `dir` are a store's descriptors: the format, the store's
/// root, and the directories of `dir`'s path below the descriptors' directory.
pub fn descriptors_in(policy: Policy<'_>, dir: &Path) -> Option<(Format, PathBuf, Vec<Vec<u8>>)> {
    Format::ALL.into_iter().find_map(|f| {
        let store = f.store().filter(|_| policy.options.reads(f))?;
        let (name, depth) = store.descriptors;
        let root = dir.ancestors().nth(depth)?;
        let top = dir.ancestors().nth(depth - 1)?;
        let ok = top.file_name() == Some(OsStr::new(name))
            && fs::symlink_metadata(root.join(store.blobs)).is_ok_and(|m| m.is_dir());
        let below: Vec<Vec<u8>> = dir
            .strip_prefix(top)
            .ok()?
            .iter()
            .map(|c| c.as_bytes().to_vec())
            .collect();
        ok.then(|| (f, root.to_path_buf(), below))
    })
}

/// The model the descriptor `source` (at `parts` below the descriptors' directory of the store at
/// `root`) describes; `Ok(None)` if the file is not a descriptor; or why it cannot be shown.
pub fn model(
    policy: Policy<'_>,
    format: Format,
    root: &Path,
    parts: &[&[u8]],
    source: &Arc<Source>,
    open: &mut dyn FnMut(&Path) -> Option<Arc<Source>>,
) -> Result<Option<Model>, FileError> {
    let Some(store) = format.store() else {
        return Ok(None);
    };
    let Some(name) = (store.name)(parts) else {
        return Ok(None);
    };
    let unreadable =
        |e| FileError::Invalid(Arc::new(DescribeError::Unreadable(source.path.clone(), e)));
    let bytes = source.bytes(store.max_descriptor + 1).map_err(unreadable)?;
    let listing = (store.read)(&bytes, &source.path)
        .map_err(|e| FileError::Invalid(Arc::new(DescribeError::Invalid(e))))?;
    let mut blob = |location: &str, size: u64| -> Result<Arc<Source>, FileError> {
        let path = root.join(location);
        // A regular file of the store, never a link out of it.
        let found = fs::symlink_metadata(&path)
            .ok()
            .filter(Metadata::is_file)
            .and_then(|_| open(&path));
        let Some(found) = found else {
            return Err(FileError::Data(
                format!("it names the blob {location}, which is missing [MissingBlob]").into(),
            ));
        };
        if found.len() != size {
            return Err(FileError::Data(
                format!(
                    "it says the blob {location} has {size} bytes; it has {} [SizeMismatch]",
                    found.len()
                )
                .into(),
            ));
        }
        Ok(found)
    };
    for (location, size) in &listing.unshown {
        blob(location, *size)?;
    }
    let mut files: Vec<(Arc<[u8]>, Arc<Source>)> = Vec::with_capacity(listing.files.len());
    let mut merged: Vec<Merged> = Vec::new();
    let mut texts = Vec::with_capacity(listing.files.len());
    for listed in &listing.files {
        let found = blob(&listed.location, listed.size)?;
        texts.push(listed.text.then(|| found.bytes(MAX_TEXT).ok()).flatten());
        let read = policy.options.format_of(listed.name.as_bytes());
        let described = match read.filter(|_| listed.interpreted) {
            Some((f, _)) => match found.describe(f) {
                Ok(d) => Some(d.clone()),
                Err(e) => {
                    return Err(FileError::Data(
                        format!(
                            "its {} ({}) is not a valid {} file: {}",
                            listed.name,
                            listed.location,
                            f.name(),
                            e.reason()
                        )
                        .into(),
                    ));
                }
            },
            None => None,
        };
        let Some(dir) = listed.merged else {
            files.push((Arc::from(listed.name.as_bytes()), found));
            continue;
        };
        let at = match merged.iter().position(|m| m.dir == dir) {
            Some(at) => at,
            None => {
                merged.push(Merged {
                    dir,
                    entries: Vec::new(),
                    blobs: Vec::new(),
                });
                merged.len() - 1
            }
        };
        let m = &mut merged[at];
        for t in described.iter().flat_map(|d| &d.tensors) {
            if m.entries.iter().any(|e| e.tensor.name == t.name) {
                return Err(FileError::Data(
                    format!(
                        "tensor `{}` is in two of its blobs, {} among them [DuplicateTensor]",
                        t.name, listed.location
                    )
                    .into(),
                ));
            }
            m.entries.push(Entry::of(t.clone(), found.clone()));
        }
        m.blobs.push(found);
    }
    let texts: Vec<Option<&[u8]>> = texts.iter().map(Option::as_deref).collect();
    let (file, make) = store.generated;
    let generated = (file, make(&name, &listing, &texts));
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Some(Model {
        name,
        files,
        merged,
        generated,
    }))
}

/// The descriptors of the store at `root`: each file `depth` levels below its descriptors'
/// directory, with its path below it, in order.
fn descriptors(store: &Store, root: &Path) -> Vec<(Vec<Vec<u8>>, PathBuf)> {
    let (name, depth) = store.descriptors;
    let mut level = vec![(Vec::new(), root.join(name))];
    for d in 0..depth {
        let mut next = Vec::new();
        for (parts, dir) in level {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            let mut entries: Vec<_> = entries.flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let Ok(kind) = e.file_type() else { continue };
                let last = d + 1 == depth;
                if (last && !kind.is_file()) || (!last && !kind.is_dir()) {
                    continue;
                }
                let mut p: Vec<Vec<u8>> = parts.clone();
                p.push(e.file_name().as_bytes().to_vec());
                next.push((p, e.path()));
                if next.len() > MAX_MODELS {
                    log::warn!(
                        "{}: more than {MAX_MODELS} descriptors; the rest are left out",
                        root.display()
                    );
                    return next;
                }
            }
        }
        level = next;
    }
    level
}

/// The blobs of the store at `root`, if it is one, that none of its descriptors names.
pub fn unreferenced_blobs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for store in Format::ALL.into_iter().filter_map(Format::store) {
        let is_dir = |n: &str| fs::symlink_metadata(root.join(n)).is_ok_and(|m| m.is_dir());
        if !is_dir(store.descriptors.0) || !is_dir(store.blobs) {
            continue;
        }
        let mut named = std::collections::HashSet::new();
        for (parts, path) in descriptors(store, root) {
            let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            if (store.name)(&parts).is_none() {
                continue;
            }
            let Ok(file) = fs::File::open(&path) else {
                continue;
            };
            let mut bytes = Vec::new();
            if std::io::Read::read_to_end(
                &mut std::io::Read::take(file, store.max_descriptor + 1),
                &mut bytes,
            )
            .is_err()
            {
                continue;
            }
            if let Ok(listing) = (store.read)(&bytes, &path) {
                let locations = listing
                    .files
                    .iter()
                    .map(|f| &f.location)
                    .chain(listing.unshown.iter().map(|(l, _)| l));
                named.extend(locations.map(|l| root.join(&**l)));
            }
        }
        let Ok(blobs) = fs::read_dir(root.join(store.blobs)) else {
            continue;
        };
        for b in blobs.flatten() {
            let path = b.path();
            if (store.digest)(b.file_name().as_bytes()).is_some() && !named.contains(&path) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A store's directory: where it is, its metadata, and where it was in the last snapshot.
pub struct StoreDir<'a> {
    pub root: &'a Path,
    pub meta: &'a Metadata,
    pub old: Option<(&'a Snapshot, Ino)>,
}

/// The generated directory of the store `at`, of `format`: every model its descriptors describe that can be shown, by
/// name. A model whose descriptor ends too soon (being rewritten in place, as `ollama pull` of a
/// tag it has rewrites a manifest) keeps what it showed.
pub fn view(
    policy: Policy<'_>,
    now: Instant,
    format: Format,
    at: StoreDir<'_>,
    open: &mut dyn FnMut(&Path) -> Option<Arc<Source>>,
    budget: &mut usize,
) -> Result<Option<Drafted<Draft>>, BuildError> {
    let StoreDir { root, meta, old } = at;
    let Some(store) = format.store() else {
        return Ok(None);
    };
    let mut inputs = Vec::new();
    let mut tree = Tree::default();
    // The model directory shown before under `name`, if any.
    let shown = |name: &str| -> Option<Ino> {
        let (snap, dir) = old?;
        let mut ino = snap.lookup(dir, store.view.as_bytes())?;
        for part in name.split('/') {
            ino = snap.lookup(ino, part.as_bytes())?;
        }
        Some(ino)
    };
    for (parts, path) in descriptors(store, root) {
        let Some(source) = fs::metadata(&path).ok().and_then(|_| open(&path)) else {
            continue;
        };
        let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        inputs.push(source.clone());
        let m = match model(policy, format, root, &parts, &source, open) {
            Ok(Some(m)) => m,
            Err(FileError::Invalid(e)) if e.cut_short() => {
                if let Some(ino) = (store.name)(&parts).as_deref().and_then(shown) {
                    let name = (store.name)(&parts).unwrap_or_default();
                    tree.keep(name.split('/'), ino);
                }
                continue;
            }
            _ => continue,
        };
        inputs.extend(m.files.iter().map(|(_, s)| s.clone()));
        inputs.extend(m.merged.iter().flat_map(|d| d.blobs.iter().cloned()));
        let dir = root.join(store.view).join(&m.name);
        let d = generated::Dir {
            path: &dir,
            flux: &Flux::default(),
            shown: &[],
            old: None,
        };
        let interpreted = generated(policy, now, &d, &[], &m.files, open, budget)?;
        let mut children: Vec<Draft> = m
            .files
            .iter()
            .map(|(name, s)| {
                let attr = draft::file_attr(&s.meta, s.len());
                let content = Content::Mirror {
                    source: s.clone(),
                    error: None,
                };
                Draft::file(name.clone(), attr, content)
            })
            .collect();
        children.extend(interpreted.drafts.into_iter().map(|d| d.draft));
        for merged in m.merged {
            if children.iter().any(|c| &*c.name == merged.dir.as_bytes()) {
                continue;
            }
            let blobs: Vec<&Metadata> = merged.blobs.iter().map(|b| &b.meta).collect();
            let build = Build::Set {
                dir: Arc::from(merged.dir.as_bytes()),
                path: source.path.clone(),
                owner: &source.meta,
                attr: draft::tensor_dir_attr(&source.meta, &blobs),
                xattrs: no_xattrs(),
                json: None,
                entries: merged.entries,
            };
            let draft = build_dir(policy, &build, *budget)?;
            *budget = budget.saturating_sub(draft.count());
            children.push(draft);
        }
        let (file, bytes) = m.generated;
        if !children.iter().any(|c| &*c.name == file.as_bytes()) {
            let attr = draft::file_attr(&source.meta, bytes.len() as u64);
            let content = Content::Generated(Arc::from(bytes));
            children.push(Draft::file(Arc::from(file.as_bytes()), attr, content));
        }
        tree.insert(m.name.split('/'), children);
    }
    let attr = draft::dir_attr(meta);
    *budget = budget.saturating_sub(tree.count());
    Ok(Some(Drafted {
        draft: tree.draft(store.view.as_bytes(), attr),
        inputs,
    }))
}

/// The view's directories: each model's files at the end of its name's path.
#[derive(Default)]
struct Tree {
    dirs: BTreeMap<Vec<u8>, Tree>,
    files: Vec<Draft>,
    /// A model directory kept as it was shown.
    kept: Option<Ino>,
}

impl Tree {
    fn insert<'a>(&mut self, mut path: impl Iterator<Item = &'a str>, files: Vec<Draft>) {
        match path.next() {
            Some(part) => self
                .dirs
                .entry(part.as_bytes().to_vec())
                .or_default()
                .insert(path, files),
            None => self.files = files,
        }
    }

    fn keep<'a>(&mut self, mut path: impl Iterator<Item = &'a str>, ino: Ino) {
        match path.next() {
            Some(part) => self
                .dirs
                .entry(part.as_bytes().to_vec())
                .or_default()
                .keep(path, ino),
            None => self.kept = Some(ino),
        }
    }

    fn count(&self) -> usize {
        self.files.iter().map(Draft::count).sum::<usize>()
            + self.dirs.values().map(|t| 1 + t.count()).sum::<usize>()
    }

    fn draft(self, name: &[u8], attr: super::node::Attr) -> Draft {
        if let (Some(ino), true) = (self.kept, self.files.is_empty() && self.dirs.is_empty()) {
            return Draft {
                name: Arc::from(name),
                body: Body::Keep(ino),
            };
        }
        let mut children = self.files;
        for (n, t) in self.dirs {
            if !children.iter().any(|c| *c.name == *n) {
                children.push(t.draft(&n, attr));
            }
        }
        children.sort_by(|a, b| a.name.cmp(&b.name));
        Draft::generated_dir(Arc::from(name), attr, no_xattrs(), children)
    }
}
