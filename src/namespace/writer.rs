//! The one writer of the namespace: builds the tree at mount, then rebuilds the directories of
//! SOURCE that changed, each batch giving a new [`Snapshot`] and a [`Diff`].
//!
//! Work is per directory of SOURCE. A rescan reads the directory and `stat`s its entries; when
//! nothing differs from the last scan, nothing is rebuilt. Otherwise the directory's entries are
//! drafted again: unchanged subdirectories are kept whole, unchanged files give the same
//! [`Source`] (no header is parsed again), and a generated directory whose inputs are the same
//! sources is kept whole too. The drafts are then committed over the previous snapshot, which
//! keeps the inode number of every entry whose identity did not change.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{self, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use log::{error, warn};
use serde_json::Value;

use super::claims::{self, Claim, Verdict};
use super::commit::{Commit, DirNode};
use super::draft::{self, Body, DirDraft, Draft};
use super::layout;
use super::parallel;
use super::scan::{self, Flux, Scan, What};
use super::sets::{self, SetError, Shard};
use super::source::{FileId, Registry, Source, Version, Warning, not_opened};
use super::{BuildError, Ino, MAX_NODES, Options, Origin, ROOT, Snapshot, Xattrs};
use crate::index;

/// Directories nested deeper than this are left out (with a warning).
const MAX_DEPTH: usize = 256;

/// The writer's state: what the last scan of each directory of SOURCE found.
#[derive(Debug)]
pub struct Writer {
    options: Options,
    /// SOURCE is one file, shown as the root.
    single_file: bool,
    records: HashMap<Ino, Box<Record>>,
    registry: Registry,
    next_ino: Ino,
    /// The real path of SOURCE: links inside it are kept as links.
    root: PathBuf,
    /// The device of the mount itself, never entered.
    skip_dev: Option<u64>,
    /// Building at mount: `strict` applies.
    mounting: bool,
}

/// What the last scan of one directory of SOURCE found (for a single-file mount: of the file).
#[derive(Debug)]
pub(super) struct Record {
    /// As walked (through links).
    pub path: PathBuf,
    pub parent: Option<Ino>,
    pub scan: Scan,
    /// When the scan was read, to tell whether the directory's mtime could hide a later change.
    pub scanned_at: SystemTime,
    /// For a single-file mount: the file was missing at the last look (so a file appearing at
    /// that path is new, whatever inode number it reuses).
    pub gone: bool,
    pub flux: Flux,
    /// The generated directories shown, each with the sources it was built from.
    pub generated: Vec<Generated>,
}

#[derive(Debug)]
pub(super) struct Generated {
    pub name: Arc<[u8]>,
    pub inputs: Vec<Arc<Source>>,
}

/// What a refresh changed.
#[derive(Debug, Default)]
pub struct Diff {
    /// The generation of the snapshot this diff leads to.
    pub generation: u64,
    /// Names that no longer lead to the inode they led to (removed, or replaced by another).
    pub removed: Vec<Removed>,
    /// Directories whose entries or attributes changed.
    pub changed_dirs: Vec<Ino>,
    /// Every inode no longer in the tree.
    pub detached: Vec<Ino>,
    /// Directories of SOURCE that entered the tree, and those that left it.
    pub new_dirs: Vec<Ino>,
    pub gone_dirs: Vec<Ino>,
    /// The directories read again.
    pub rescanned: Vec<PathBuf>,
    /// Names added, and names replaced by a new inode.
    pub added: usize,
    pub replaced: usize,
}

#[derive(Debug, Clone)]
pub struct Removed {
    pub parent: Ino,
    pub name: Arc<[u8]>,
    pub ino: Ino,
}

impl Diff {
    /// Whether the tree changed at all.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.changed_dirs.is_empty() && self.added == 0
    }
}

/// A directory's drafted entries, and the generated directories among them.
type Drafted = (Vec<Draft>, Vec<Generated>);

/// The inputs of one drafting of a directory's entries.
struct DirInput<'a> {
    path: &'a Path,
    scan: &'a Scan,
    /// The scan before this one, whose problems were already reported.
    previous: Option<&'a Scan>,
    flux: &'a Flux,
    /// The generated directories shown before, and where (the old snapshot and the directory).
    generated: &'a [Generated],
    old: Option<(&'a Snapshot, Ino)>,
    /// The directories from the root down to this one, for cycles.
    ancestors: &'a [FileId],
}

/// A generated directory of a scan: kept from the last tree, or to be built.
enum Slot<'a> {
    Kept(Draft),
    New(Build<'a>),
}

/// A generated directory to build: the tensors of one file, or a merged set with what is already
/// known of it.
enum Build<'a> {
    File {
        dir: Arc<[u8]>,
        source: &'a Arc<Source>,
    },
    Set {
        dir: Arc<[u8]>,
        /// The index.
        path: PathBuf,
        owner: &'a Metadata,
        attr: super::Attr,
        xattrs: Arc<Xattrs>,
        json: Option<Arc<[u8]>>,
        entries: Vec<layout::Entry>,
    },
}

impl Build<'_> {
    /// The file the directory stands for, for messages.
    fn origin(&self) -> &Path {
        match self {
            Build::File { source, .. } => &source.path,
            Build::Set { path, .. } => path,
        }
    }
}

impl Writer {
    /// Builds the tree for SOURCE (a `.safetensors` file or a directory). Problems with single
    /// files inside a directory are warnings (errors with `strict`); anything else is an error.
    pub fn build(source: &Path, options: &Options) -> Result<(Writer, Snapshot), BuildError> {
        let canonical =
            fs::canonicalize(source).map_err(|e| BuildError::Source(source.into(), e))?;
        let meta = fs::metadata(&canonical).map_err(|e| BuildError::Source(source.into(), e))?;
        let mut w = Writer {
            options: options.clone(),
            single_file: meta.is_file(),
            records: HashMap::new(),
            registry: Registry::default(),
            next_ino: ROOT + 1,
            root: canonical.clone(),
            skip_dev: None,
            mounting: true,
        };
        let empty = Snapshot::default();
        let mut c = Commit::new(&empty, w.next_ino);
        let mut budget = MAX_NODES;
        let record = if meta.is_dir() {
            let scan = Scan::read(&canonical, &canonical, None)
                .map_err(|e| BuildError::ReadDir(source.into(), e))?;
            let (record, children) = w.fresh_dir(canonical, scan, &[], &mut budget)?;
            let root = root_node(
                draft::dir_attr(&record.scan.meta),
                super::no_xattrs(),
                Origin::Real(FileId::of(&record.scan.meta)),
            );
            c.dir(ROOT, root, children);
            record
        } else if meta.is_file() {
            let source = w
                .registry
                .get(&canonical, &meta)
                .map_err(|e| BuildError::Open(canonical.clone(), e))?;
            if let Err(e) = source.header() {
                return Err(BuildError::Invalid(e.clone()));
            }
            let mut record = Record::new(canonical, None, file_scan(source.meta.clone()));
            let (root, children) = w.file_root(&source, &mut budget)?;
            record.generated = vec![Generated {
                name: Arc::from(&b""[..]),
                inputs: vec![source],
            }];
            c.dir(ROOT, root, children);
            Box::new(record)
        } else {
            return Err(BuildError::NotFileOrDir(source.into()));
        };
        w.records.insert(ROOT, record);
        let (snapshot, _) = w.finish(c, &empty);
        w.mounting = false;
        // The files were opened to read their headers; nothing reads them yet. Closed now, they
        // cost a backend nothing until they are read (s3fs, for one, keeps what it fetched of an
        // open file in a temporary file).
        super::opened::sweep(Duration::ZERO);
        // Headers are parsed into short-lived maps; hand that memory back to the system rather
        // than keep it in the allocator for the life of the mount.
        // SAFETY: malloc_trim only releases free heap memory; it has no preconditions.
        unsafe { libc::malloc_trim(0) };
        Ok((w, snapshot))
    }

    /// Never enters the device `dev` (the mount itself, if SOURCE contains its mount point).
    pub fn skip_device(&mut self, dev: u64) {
        self.skip_dev = Some(dev);
    }

    /// Reads the directories `dirs` of SOURCE again and rebuilds those that changed (a directory
    /// that vanished is dealt with by rescanning its parent). Returns the new snapshot, whose
    /// generation is one more than `old`'s even if nothing changed.
    pub fn rescan(&mut self, old: &Snapshot, dirs: &[Ino]) -> (Snapshot, Diff) {
        let mut c = Commit::new(old, self.next_ino);
        let mut queue: VecDeque<Ino> = dirs.iter().copied().collect();
        let mut done = HashSet::new();
        let mut budget = MAX_NODES.saturating_sub(old.nodes.len());
        while let Some(d) = queue.pop_front() {
            if !done.insert(d) || c.table.get(d).is_none() {
                continue;
            }
            let Some(mut rec) = self.records.remove(&d) else {
                continue;
            };
            let gone = match self.rebuild(&mut c, old, d, &mut rec, &mut budget) {
                Ok(gone) => gone,
                Err(e) => {
                    error!("{e}; that change is not shown");
                    false
                }
            };
            if gone && let Some(p) = rec.parent {
                queue.push_back(p);
            }
            self.records.insert(d, rec);
        }
        self.finish(c, old)
    }

    /// Every directory of SOURCE in the tree (the root for a single-file mount), parents first.
    pub fn dirs(&self, snapshot: &Snapshot) -> Vec<Ino> {
        let mut out = vec![ROOT];
        let mut i = 0;
        while i < out.len() {
            if let Some(children) = snapshot.children(out[i]) {
                out.extend(
                    children
                        .iter()
                        .copied()
                        .filter(|c| self.records.contains_key(c)),
                );
            }
            i += 1;
        }
        out
    }

    /// Whether the directory `ino` of SOURCE may have changed since its last scan: a `stat` that
    /// differs, or an mtime too close to that scan to show a change made just after it.
    pub fn may_have_changed(&self, ino: Ino) -> bool {
        let Some(rec) = self.records.get(&ino) else {
            return false;
        };
        let Ok(now) = fs::metadata(&rec.path) else {
            return true;
        };
        if Version::of(&now) != Version::of(&rec.scan.meta) {
            return true;
        }
        let mtime = rec.scan.meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let close = match rec.scanned_at.duration_since(mtime) {
            Ok(d) => d,
            Err(e) => e.duration(),
        };
        close < RACY
    }

    /// When a file being written next settles, and in which directory.
    pub fn deadline(&self) -> Option<(Instant, Ino)> {
        self.records
            .iter()
            .filter_map(|(&ino, r)| Some((r.flux.deadline(self.options.settle)?, ino)))
            .min()
    }

    /// The directory to watch for changes of the directory `ino` of SOURCE (for a single-file
    /// mount, the file's directory).
    pub fn watch_path(&self, ino: Ino) -> Option<&Path> {
        let rec = self.records.get(&ino)?;
        if self.single_file {
            rec.path.parent()
        } else {
            Some(&rec.path)
        }
    }

    /// Installs what a commit did: records of directories that entered or left the tree, and
    /// the next inode number. Returns the new snapshot and the diff.
    fn finish(&mut self, mut c: Commit<'_>, old: &Snapshot) -> (Snapshot, Diff) {
        for ino in &c.diff.gone_dirs {
            self.records.remove(ino);
        }
        for (ino, mut rec) in std::mem::take(&mut c.records) {
            rec.parent = c.table.get(ino).map(|n| n.parent);
            self.records.insert(ino, rec);
        }
        self.next_ino = c.next_ino;
        self.registry.prune();
        let mut seen = HashSet::new();
        let source_bytes = self
            .records
            .values()
            .flat_map(|r| &r.scan.entries)
            .filter_map(|e| match &e.what {
                What::File(m) => seen.insert(FileId::of(m)).then_some(m.len()),
                _ => None,
            })
            .sum::<u64>()
            + if self.single_file {
                self.records.get(&ROOT).map_or(0, |r| r.scan.meta.len())
            } else {
                0
            };
        let snapshot = Snapshot {
            nodes: c.table,
            generation: if self.mounting { 0 } else { old.generation + 1 },
            source_bytes,
        };
        c.diff.generation = snapshot.generation;
        (snapshot, c.diff)
    }

    /// Rebuilds the directory `d` if it changed. Returns true if it is gone (or is now another
    /// directory), for its parent to deal with.
    fn rebuild(
        &mut self,
        c: &mut Commit<'_>,
        old: &Snapshot,
        d: Ino,
        rec: &mut Record,
        budget: &mut usize,
    ) -> Result<bool, BuildError> {
        if self.single_file {
            self.rebuild_file_root(c, rec, budget)?;
            return Ok(false);
        }
        let scanned_at = SystemTime::now();
        let scan = match Scan::read(&rec.path, &self.root, self.skip_dev) {
            Ok(s) if d == ROOT || FileId::of(&s.meta) == FileId::of(&rec.scan.meta) => s,
            Ok(_) => return Ok(true),
            Err(_) if d != ROOT => return Ok(true),
            Err(e) => {
                warn!(
                    "{}: cannot read SOURCE ({e}); the last tree stays",
                    rec.path.display()
                );
                return Ok(false);
            }
        };
        let now = Instant::now();
        let settle = self.options.settle;
        let due = rec.flux.deadline(settle).is_some_and(|t| t <= now);
        if scan.same(&rec.scan) && !due {
            rec.scanned_at = scanned_at;
            return Ok(false);
        }
        c.diff.rescanned.push(rec.path.clone());
        rec.flux.update(&rec.scan, &scan, now);
        rec.flux.expire(now, settle);
        let previous = std::mem::replace(&mut rec.scan, scan);
        rec.scanned_at = scanned_at;
        let mut ancestors = vec![FileId::of(&rec.scan.meta)];
        let mut up = rec.parent;
        while let Some(p) = up.and_then(|p| self.records.get(&p)) {
            ancestors.push(FileId::of(&p.scan.meta));
            up = p.parent;
        }
        ancestors.reverse();
        let input = DirInput {
            path: &rec.path,
            scan: &rec.scan,
            previous: Some(&previous),
            flux: &rec.flux,
            generated: &rec.generated,
            old: Some((old, d)),
            ancestors: &ancestors,
        };
        let (children, generated) = match self.entries(&input, budget) {
            Ok(drafted) => drafted,
            Err(e) => {
                rec.scan = previous;
                return Err(e);
            }
        };
        rec.generated = generated;
        let Some(node) = old.node(d) else {
            return Ok(false);
        };
        let id = FileId::of(&rec.scan.meta);
        let dir = DirNode {
            name: node.name.clone(),
            parent: node.parent,
            attr: draft::dir_attr(&rec.scan.meta),
            xattrs: super::no_xattrs(),
            origin: Origin::Real(id),
        };
        c.dir(d, dir, children);
        Ok(false)
    }

    /// A single-file mount: the root shows the file's tensors while it is valid and settled,
    /// nothing otherwise.
    fn rebuild_file_root(
        &mut self,
        c: &mut Commit<'_>,
        rec: &mut Record,
        budget: &mut usize,
    ) -> Result<(), BuildError> {
        let now = Instant::now();
        let settle = self.options.settle;
        let meta = fs::metadata(&rec.path).ok().filter(Metadata::is_file);
        let due = rec.flux.deadline(settle).is_some_and(|t| t <= now);
        let before = (!rec.gone).then(|| Version::of(&rec.scan.meta));
        let version = meta.as_ref().map(Version::of);
        if version == before && !due {
            return Ok(());
        }
        c.diff.rescanned.push(rec.path.clone());
        if let (Some(v), Some(b)) = (version, before)
            && v.id == b.id
            && !v.same_bytes(&b)
        {
            rec.flux.note(b"", now);
        }
        rec.flux.expire(now, settle);
        rec.gone = meta.is_none();
        let source = match meta {
            Some(m) => {
                rec.scan = file_scan(m.clone());
                Some(self.registry.get(&rec.path, &m))
            }
            None => None,
        };
        let settled = !rec.flux.unsettled(b"", now, settle);
        let valid = match &source {
            Some(Ok(s)) if settled => match s.header() {
                Ok(_) => Some(s.clone()),
                Err(e) => {
                    if s.first_warning(Warning::Invalid) {
                        if e.cut_short() {
                            log::info!("{e}; incomplete so far, no tensors shown");
                        } else {
                            warn!("{e}; the mount shows no tensors until it is valid");
                        }
                    }
                    None
                }
            },
            Some(Ok(_)) => None,
            Some(Err(e)) => {
                warn!("{}: cannot open: {e}", rec.path.display());
                None
            }
            None => {
                warn!("{}: gone; the mount shows no tensors", rec.path.display());
                None
            }
        };
        let (root, children) = match &valid {
            Some(s) => self.file_root(s, budget)?,
            None => {
                let attr = c
                    .table
                    .get(ROOT)
                    .map_or_else(|| draft::tensor_dir_attr(&rec.scan.meta, &[]), |n| n.attr);
                (
                    root_node(attr, super::no_xattrs(), Origin::Generated),
                    Vec::new(),
                )
            }
        };
        rec.generated = valid
            .into_iter()
            .map(|s| Generated {
                name: Arc::from(&b""[..]),
                inputs: vec![s],
            })
            .collect();
        c.dir(ROOT, root, children);
        Ok(())
    }

    /// The root of a single-file mount and its entries.
    fn file_root(
        &self,
        source: &Arc<Source>,
        budget: &mut usize,
    ) -> Result<(DirNode, Vec<Draft>), BuildError> {
        let (attr, xattrs, children) = self.file_tensors(source, budget)?;
        Ok((root_node(attr, xattrs, Origin::Generated), children))
    }

    /// The drafts of a directory's entries: its files and directories (unchanged directories
    /// kept whole), then the generated directories its files ask for.
    fn entries(&mut self, d: &DirInput<'_>, budget: &mut usize) -> Result<Drafted, BuildError> {
        let mut drafts = Vec::new();
        let mut files: Vec<(Arc<[u8]>, Arc<Source>)> = Vec::new();
        let wanted: Vec<(&Path, &Metadata)> = d
            .scan
            .entries
            .iter()
            .filter_map(|e| e.what.file().map(|m| (&*e.path, m)))
            .collect();
        let mut opened = self.registry.get_all(&wanted, d.scan.remote).into_iter();
        for e in &d.scan.entries {
            let known = d
                .previous
                .and_then(|p| p.get(&e.name))
                .is_some_and(|p| p.what.same(&e.what));
            match &e.what {
                What::Dir(m) => {
                    let id = FileId::of(m);
                    if let Some(ino) = self.kept_dir(d.old, &e.name, id) {
                        drafts.push(Draft {
                            name: e.name.clone(),
                            body: Body::Keep(ino),
                        });
                    } else if d.ancestors.contains(&id) {
                        warn!(
                            "{}: symbolic link closes a directory cycle, left out",
                            e.path.display()
                        );
                    } else if d.ancestors.len() >= MAX_DEPTH {
                        warn!(
                            "{}: nested over {MAX_DEPTH} levels deep, left out",
                            e.path.display()
                        );
                    } else if let Some(dir) = self.new_dir(e, d.ancestors, budget)? {
                        drafts.push(dir);
                    }
                }
                What::Link { meta, target, to } if !matches!(**to, What::File(_)) => {
                    drafts.push(link_draft(e.name.clone(), meta, target));
                }
                What::File(_) | What::Link { .. } => {
                    match opened.next().unwrap_or_else(|| Err(not_opened())) {
                        Ok(s) => files.push((e.name.clone(), s)),
                        Err(err) if !known => {
                            warn!("{}: cannot open, skipped: {err}", e.path.display())
                        }
                        Err(_) => {}
                    }
                }
                What::Skipped { why, warn: true } if !known => {
                    warn!("{}: {why}", e.path.display())
                }
                What::Skipped { why, .. } => log::debug!("{}: {why}", e.path.display()),
            }
        }
        let (generated, errors) = self.generated(d, &drafts, &files, budget)?;
        for (name, source) in files {
            // A kept link to a file still gets the file's `.tensors/` (above), but shows as a link.
            if let Some(What::Link { meta, target, .. }) = d.scan.get(&name).map(|e| &e.what) {
                drafts.push(link_draft(name, meta, target));
                continue;
            }
            let error = errors.get(&name).cloned();
            drafts.push(Draft::file(
                name,
                draft::file_attr(&source.meta, source.len()),
                super::Content::Mirror { source, error },
            ));
        }
        let mut inputs = Vec::new();
        for (draft, gen_inputs) in generated {
            inputs.push(Generated {
                name: draft.name.clone(),
                inputs: gen_inputs,
            });
            drafts.push(draft);
        }
        Ok((drafts, inputs))
    }

    /// The old inode of a subdirectory that is still the same directory, kept whole.
    fn kept_dir(&self, old: Option<(&Snapshot, Ino)>, name: &[u8], id: FileId) -> Option<Ino> {
        let (snap, d) = old?;
        let c = snap.lookup(d, name)?;
        let same = snap.node(c)?.dir()?.origin == Origin::Real(id);
        (same && self.records.contains_key(&c)).then_some(c)
    }

    /// A directory of SOURCE new to the tree, with everything below it. `None` (after a warning)
    /// if it cannot be read.
    fn new_dir(
        &mut self,
        e: &scan::Entry,
        ancestors: &[FileId],
        budget: &mut usize,
    ) -> Result<Option<Draft>, BuildError> {
        if *budget == 0 {
            return Err(BuildError::TooManyDirs(e.path.clone()));
        }
        *budget -= 1;
        let scan = match Scan::read(&e.path, &self.root, self.skip_dev) {
            Ok(s) => s,
            Err(err) => {
                warn!(
                    "{}: cannot read directory, skipped: {err}",
                    e.path.display()
                );
                return Ok(None);
            }
        };
        let (record, children) = self.fresh_dir(e.path.clone(), scan, ancestors, budget)?;
        Ok(Some(Draft {
            name: e.name.clone(),
            body: Body::Dir(Box::new(DirDraft {
                attr: draft::dir_attr(&record.scan.meta),
                xattrs: super::no_xattrs(),
                origin: Origin::Real(FileId::of(&record.scan.meta)),
                children,
                record: Some(record),
            })),
        }))
    }

    /// The record and entries of a directory of SOURCE seen for the first time (read as `scan`),
    /// below the directories `ancestors`.
    fn fresh_dir(
        &mut self,
        path: PathBuf,
        scan: Scan,
        ancestors: &[FileId],
        budget: &mut usize,
    ) -> Result<(Box<Record>, Vec<Draft>), BuildError> {
        let mut record = Box::new(Record::new(path, None, scan));
        let mut chain = ancestors.to_vec();
        chain.push(FileId::of(&record.scan.meta));
        let input = DirInput {
            path: &record.path,
            scan: &record.scan,
            previous: None,
            flux: &record.flux,
            generated: &[],
            old: None,
            ancestors: &chain,
        };
        let (children, generated) = self.entries(&input, budget)?;
        record.generated = generated;
        Ok((record, children))
    }

    /// The generated directories of a directory (drafts with the sources they are built from),
    /// and the errors its mirrored files carry.
    #[allow(clippy::type_complexity)]
    fn generated(
        &self,
        d: &DirInput<'_>,
        real_dirs: &[Draft],
        files: &[(Arc<[u8]>, Arc<Source>)],
        budget: &mut usize,
    ) -> Result<(Vec<(Draft, Vec<Arc<Source>>)>, HashMap<Arc<[u8]>, Arc<str>>), BuildError> {
        let now = Instant::now();
        let settle = self.options.settle;
        let mut errors: HashMap<Arc<[u8]>, Arc<str>> = HashMap::new();
        let never = scan::is_partial_dir(d.path);
        let interpretable = |name: &[u8]| !never && !scan::is_partial(name);
        let in_flux = |name: &[u8]| d.flux.unsettled(name, now, settle);
        let flux_reason = || -> Arc<str> {
            Arc::from(format!(
                "being written: changed in place less than {:?} ago; interpreted once it settles",
                settle
            ))
        };

        // The headers and indexes about to be used are read several at a time first.
        let mut unread: Vec<(&Arc<Source>, bool)> = files
            .iter()
            .filter(|(name, _)| interpretable(name) && !in_flux(name))
            .filter_map(|(name, source)| {
                let index = std::str::from_utf8(name)
                    .ok()
                    .and_then(index::merged_dir_name)
                    .is_some();
                (index || name.ends_with(b".safetensors")).then_some((source, index))
            })
            .filter(|(source, index)| !source.is_read(*index))
            .collect();
        // Taken in order by the threads: an index (tens of megabytes of JSON for a large model,
        // the longest single job) starts first rather than after every header.
        unread.sort_by_key(|(_, index)| !index);
        let remote = unread.iter().any(|(s, _)| s.remote);
        parallel::map(&unread, remote, |(source, index)| source.read(*index));

        // What each file asks for: `NAME.tensors` for a valid unsharded file, a merged directory
        // for an index.
        let mut wanted: Vec<(usize, Vec<u8>, bool)> = Vec::new();
        for (i, (name, source)) in files.iter().enumerate() {
            if !interpretable(name) {
                continue;
            }
            if let Some(stem) = name.strip_suffix(b".safetensors") {
                if in_flux(name) {
                    errors.insert(name.clone(), flux_reason());
                    continue;
                }
                match source.header() {
                    Ok(_) => wanted.push((i, [stem, b".tensors"].concat(), false)),
                    Err(e) => {
                        if source.first_warning(Warning::Invalid) {
                            if !self.mounting && e.cut_short() {
                                // Most likely still being written, by a writer that paused.
                                log::info!("{e} (no .tensors directory; incomplete so far)");
                            } else {
                                self.reject(BuildError::NoTensorsDir(e.clone()))?;
                            }
                        }
                        errors.insert(name.clone(), Arc::from(e.reason()));
                    }
                }
            } else if let Some(dir) = std::str::from_utf8(name)
                .ok()
                .and_then(index::merged_dir_name)
            {
                wanted.push((i, dir.into_bytes(), true));
            }
        }
        let real: Vec<&[u8]> = real_dirs
            .iter()
            .map(|c| &c.name[..])
            .chain(files.iter().map(|(n, _)| &n[..]))
            .collect();
        let claims: Vec<Claim<'_>> = wanted
            .iter()
            .map(|(i, dir, index)| Claim {
                file: &files[*i].0,
                dir,
                index: *index,
            })
            .collect();
        let verdicts = claims::decide(&real, &claims);

        let mut out = Vec::new();
        for ((i, dir, is_index), verdict) in wanted.iter().zip(verdicts) {
            let (name, source) = &files[*i];
            let dir_name = String::from_utf8_lossy(dir);
            let path = d.path.join(std::ffi::OsStr::from_bytes(name));
            match verdict {
                Verdict::Real => {
                    if source.first_warning(Warning::NameTaken) {
                        let what = if *is_index {
                            "merged tensors"
                        } else {
                            "tensors"
                        };
                        warn!(
                            "{}: a real entry is named {dir_name}; it is shown instead of the {what}",
                            path.display()
                        );
                    }
                    continue;
                }
                Verdict::File(other) => {
                    if source.first_warning(Warning::NameTaken) {
                        warn!(
                            "{}: {} also wants {dir_name}; the unsharded file's tensors are shown",
                            path.display(),
                            d.path.join(std::ffi::OsStr::from_bytes(other)).display()
                        );
                    }
                    continue;
                }
                Verdict::Wins => {}
            }
            let dir: Arc<[u8]> = Arc::from(&dir[..]);
            if !is_index {
                let inputs = vec![source.clone()];
                let draft = match self.kept_generated(d, &dir, &inputs) {
                    Some(keep) => Slot::Kept(keep),
                    None => Slot::New(Build::File { dir, source }),
                };
                out.push((draft, inputs));
                continue;
            }
            if in_flux(name) {
                errors.insert(name.clone(), flux_reason());
                continue;
            }
            let merged = match source.plan() {
                Ok(plan) => sets::check(
                    plan,
                    |shard| {
                        let (n, s) = files.iter().find(|(n, _)| &n[..] == shard.as_bytes())?;
                        Some(Shard {
                            source: s,
                            settled: !in_flux(n),
                        })
                    },
                    || source.index(),
                )
                .map(|m| (plan, m)),
                Err(e) => Err(SetError::Index(e.clone())),
            };
            let (plan, merged) = match merged {
                Ok(m) => m,
                Err(why) => {
                    errors.insert(name.clone(), Arc::from(why.to_string()));
                    // A shard still being written is no problem yet.
                    if !why.settling() && source.first_warning(Warning::Invalid) {
                        self.reject(BuildError::NoMergedDir {
                            index: path,
                            dir: dir_name.into_owned(),
                            why,
                        })?;
                    }
                    continue;
                }
            };
            let mut inputs = vec![source.clone()];
            inputs.extend(merged.shards.iter().cloned());
            let draft = match self.kept_generated(d, &dir, &inputs) {
                Some(keep) => Slot::Kept(keep),
                None => {
                    let metadata = plan.metadata.clone();
                    let json = metadata
                        .clone()
                        .map(|m| layout::metadata_json(&Value::Object(m)));
                    let xattrs = layout::metadata_xattrs(
                        metadata
                            .iter()
                            .flatten()
                            .map(|(k, v)| (k, index::metadata_value_text(v))),
                    );
                    let shards: Vec<&Metadata> = merged.shards.iter().map(|s| &s.meta).collect();
                    let attr = draft::tensor_dir_attr(&source.meta, &shards);
                    Slot::New(Build::Set {
                        dir,
                        path,
                        owner: &source.meta,
                        attr,
                        xattrs,
                        json,
                        entries: merged.entries,
                    })
                }
            };
            out.push((draft, inputs));
        }
        // The directories to build are laid out several at a time (a model of 163 shards has 164,
        // with 92,000 tensors in the merged one), each within what is left of the node budget.
        let builds: Vec<&Build<'_>> = out
            .iter()
            .filter_map(|(slot, _)| match slot {
                Slot::New(b) => Some(b),
                Slot::Kept(_) => None,
            })
            .collect();
        let left = *budget;
        let mut built =
            parallel::map(&builds, false, |b| self.build_generated(b, left)).into_iter();
        let mut drafts = Vec::with_capacity(out.len());
        for (draft, inputs) in out {
            let draft = match draft {
                Slot::Kept(keep) => keep,
                Slot::New(b) => {
                    // One result per build, in order (built here should the map fall short).
                    let draft = built
                        .next()
                        .unwrap_or_else(|| self.build_generated(&b, left))?;
                    *budget = budget
                        .checked_sub(draft.count())
                        .ok_or_else(|| BuildError::TooManyNodes(b.origin().into()))?;
                    draft
                }
            };
            drafts.push((draft, inputs));
        }
        Ok((drafts, errors))
    }

    /// A generated directory new to the tree (see [`Build`]), its entries counted against
    /// `budget`.
    fn build_generated(&self, b: &Build<'_>, mut budget: usize) -> Result<Draft, BuildError> {
        match b {
            Build::File { dir, source } => {
                let (attr, xattrs, children) = self.file_tensors(source, &mut budget)?;
                Ok(Draft::generated_dir(dir.clone(), attr, xattrs, children))
            }
            Build::Set {
                dir,
                path,
                owner,
                attr,
                xattrs,
                json,
                entries,
            } => {
                let children = self.tensor_entries(
                    path,
                    owner,
                    attr,
                    entries.clone(),
                    json.clone(),
                    &mut budget,
                )?;
                Ok(Draft::generated_dir(
                    dir.clone(),
                    *attr,
                    xattrs.clone(),
                    children,
                ))
            }
        }
    }

    /// The old generated directory `name` if it was built from the same sources.
    fn kept_generated(
        &self,
        d: &DirInput<'_>,
        name: &Arc<[u8]>,
        inputs: &[Arc<Source>],
    ) -> Option<Draft> {
        let old = d.generated.iter().find(|g| g.name == *name)?;
        let same = old.inputs.len() == inputs.len()
            && old
                .inputs
                .iter()
                .zip(inputs)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        let (snap, dir) = d.old?;
        let ino = snap.lookup(dir, name)?;
        let generated = snap.node(ino)?.dir()?.origin == Origin::Generated;
        (same && generated).then(|| Draft {
            name: name.clone(),
            body: Body::Keep(ino),
        })
    }

    /// The tensor directory of one valid safetensors file: its attributes, xattrs and entries.
    fn file_tensors(
        &self,
        source: &Arc<Source>,
        budget: &mut usize,
    ) -> Result<(super::Attr, Arc<Xattrs>, Vec<Draft>), BuildError> {
        let parsed = match source.header() {
            Ok(p) => p,
            Err(e) => return Err(BuildError::Invalid(e.clone())),
        };
        let entries = parsed
            .tensors
            .iter()
            .map(|t| (t.clone(), source.clone()))
            .collect();
        let json = parsed
            .metadata
            .as_ref()
            .map(|m| layout::metadata_json(&serde_json::json!(m)));
        let xattrs = layout::metadata_xattrs(
            parsed
                .metadata
                .iter()
                .flatten()
                .map(|(k, v)| (k, v.clone())),
        );
        let attr = draft::tensor_dir_attr(&source.meta, &[]);
        let children =
            self.tensor_entries(&source.path, &source.meta, &attr, entries, json, budget)?;
        Ok((attr, xattrs, children))
    }

    fn tensor_entries(
        &self,
        origin: &Path,
        owner: &Metadata,
        dir: &super::Attr,
        entries: Vec<layout::Entry>,
        json: Option<Arc<[u8]>>,
        budget: &mut usize,
    ) -> Result<Vec<Draft>, BuildError> {
        let children =
            layout::tensor_dir(&self.options, origin, owner, dir, entries, json, *budget)?;
        let count: usize = 1 + children.iter().map(Draft::count).sum::<usize>();
        *budget = budget
            .checked_sub(count)
            .ok_or_else(|| BuildError::TooManyNodes(origin.into()))?;
        Ok(children)
    }

    /// A problem with one file: a warning, or at mount with `-o strict` the end of the mount.
    fn reject(&self, e: BuildError) -> Result<(), BuildError> {
        if self.options.strict && self.mounting {
            return Err(e);
        }
        warn!("{e}");
        Ok(())
    }
}

/// A scan that changes within this long of its directory's mtime may miss a change made in the
/// same clock tick: the directory is then read again on the next lookup that misses.
const RACY: Duration = Duration::from_secs(2);

impl Record {
    fn new(path: PathBuf, parent: Option<Ino>, scan: Scan) -> Record {
        Record {
            path,
            parent,
            scan,
            scanned_at: SystemTime::now(),
            gone: false,
            flux: Flux::default(),
            generated: Vec::new(),
        }
    }
}

/// The record of a single-file SOURCE: the file's own `stat`, no entries.
/// A symbolic link kept as a link (see [`What::Link`]).
fn link_draft(name: Arc<[u8]>, meta: &Metadata, target: &Path) -> Draft {
    let target: Arc<[u8]> = Arc::from(target.as_os_str().as_bytes());
    Draft::file(
        name,
        draft::link_attr(meta, target.len()),
        super::Content::Link(target),
    )
}

fn file_scan(meta: Metadata) -> Scan {
    Scan {
        meta,
        entries: Vec::new(),
        remote: false,
    }
}

fn root_node(attr: super::Attr, xattrs: Arc<Xattrs>, origin: Origin) -> DirNode {
    DirNode {
        name: Arc::from(&b""[..]),
        parent: ROOT,
        attr,
        xattrs,
        origin,
    }
}
