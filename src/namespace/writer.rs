//! The one writer of the namespace: builds the tree at mount, then rebuilds the directories of
//! SOURCE that changed, each batch giving a new [`Snapshot`] and a [`Diff`].
//!
//! Work is per directory of SOURCE. A rescan reads the directory and `stat`s its entries; when
//! nothing differs from the last scan, nothing is rebuilt. Otherwise the directory's entries are
//! drafted again ([`real`](super::real)): unchanged subdirectories are kept whole, unchanged files
//! give the same [`Source`](crate::source::Source) (no header is parsed again), and a generated
//! directory whose inputs are the same sources is kept whole too. The drafts are then committed
//! over the previous snapshot, which keeps the inode number of every entry whose identity did not
//! change.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use log::{error, warn};

use super::commit::{Commit, DirNode};
use super::diff::Diff;
use super::draft;
use super::error::{BuildError, MAX_NODES};
use super::node::{Ino, Origin, ROOT, no_xattrs};
use super::options::{Options, Policy};
use super::real::{DirInput, Walk};
use super::record::Record;
use super::scan::{Scan, What};
use super::single;
use super::snapshot::Snapshot;
use super::stores;
use crate::base::clock::Clock;
use crate::base::sys;
use crate::source::{FileId, Registry, Sources, Version};

/// A scan that changes within this long of its directory's mtime may miss a change made in the
/// same clock tick: the directory is then read again on the next lookup that misses.
const RACY: Duration = Duration::from_secs(2);

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

impl Writer {
    /// Builds the tree for SOURCE (a `.safetensors` file or a directory), opening its files
    /// through `sources`. Problems with single files inside a directory are warnings (errors with
    /// `strict`); anything else is an error.
    pub fn build(
        sources: &Sources,
        source: &Path,
        options: &Options,
    ) -> Result<(Writer, Snapshot), BuildError> {
        let canonical =
            fs::canonicalize(source).map_err(|e| BuildError::Source(source.into(), e))?;
        let meta = fs::metadata(&canonical).map_err(|e| BuildError::Source(source.into(), e))?;
        let mut w = Writer {
            options: options.clone(),
            single_file: meta.is_file(),
            records: HashMap::new(),
            registry: Registry::new(sources.clone()),
            next_ino: ROOT + 1,
            root: canonical.clone(),
            skip_dev: None,
            mounting: true,
        };
        let empty = Snapshot::default();
        let mut c = Commit::new(&empty, w.next_ino);
        let mut budget = MAX_NODES;
        let record = if meta.is_dir() {
            sources.set_root(&canonical);
            let scan = Scan::read(&canonical, &canonical, None, sources)
                .map_err(|e| BuildError::ReadDir(source.into(), e))?;
            let (record, children) = w.walk().fresh_dir(canonical, scan, &[], &mut budget)?;
            let root = single::root_node(
                draft::dir_attr(&record.scan.meta),
                no_xattrs(),
                Origin::Real(FileId::of(&record.scan.meta)),
            );
            c.dir(ROOT, root, children);
            record
        } else if meta.is_file() {
            let source = w
                .registry
                .get(&canonical, &meta)
                .map_err(|e| BuildError::Open(canonical.clone(), e))?;
            if let Err(e) = source.describe(single::format_of(&source)) {
                return Err(BuildError::Invalid(e.clone()));
            }
            let mut record = Record::new(canonical, None, single::file_scan(source.meta.clone()));
            let (root, children) = single::file_root(w.policy(), &source, &mut budget)?;
            record.generated = vec![single::generated_root(source)];
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
        sources.sweep(Duration::ZERO);
        // Headers are parsed into short-lived maps; hand that memory back to the system rather
        // than keep it in the allocator for the life of the mount.
        sys::trim_heap();
        Ok((w, snapshot))
    }

    fn policy(&self) -> Policy<'_> {
        Policy::new(&self.options, self.mounting)
    }

    fn clock(&self) -> &Clock {
        self.registry.sources().clock()
    }

    /// Now, as the writer's clock says (settle times and deadlines are on it).
    pub fn now(&self) -> Instant {
        self.clock().now()
    }

    /// What walking directories of SOURCE needs, for a walk at this moment.
    fn walk(&mut self) -> Walk<'_> {
        Walk {
            policy: Policy::new(&self.options, self.mounting),
            now: self.registry.sources().clock().now(),
            registry: &mut self.registry,
            records: &self.records,
            root: &self.root,
            skip_dev: self.skip_dev,
        }
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
        // Directories rebuilt whatever their own scan says, as something below them changed: a
        // store, its descriptors' directories, a directory whose files read data files below.
        let mut forced = HashSet::new();
        let mut budget = MAX_NODES.saturating_sub(old.node_count() as usize);
        while let Some(d) = queue.pop_front() {
            if !done.insert(d) || c.table.get(d).is_none() {
                continue;
            }
            let Some(mut rec) = self.records.remove(&d) else {
                continue;
            };
            let rescanned = c.diff.rescanned.len();
            let force = forced.contains(&d);
            let gone = match self.rebuild(&mut c, old, d, &mut rec, force, &mut budget) {
                Ok(gone) => gone,
                Err(e) => {
                    error!("{e}; that change is not shown");
                    false
                }
            };
            if gone && let Some(p) = rec.parent {
                queue.push_back(p);
            }
            let changed = gone || c.diff.rescanned.len() > rescanned;
            let parent = rec.parent;
            let path = rec.path.clone();
            self.records.insert(d, rec);
            if !changed {
                continue;
            }
            let mut again = self.reading_below(parent, &path);
            // A store's models are shown again, and its descriptors say again why one is not:
            // a blob that arrived, a manifest written.
            if let Some(store) = self.store_above(parent)
                && !forced.contains(&store)
            {
                again.push(store);
                again.extend(self.descriptor_dirs(store));
            }
            for dir in again {
                if forced.insert(dir) {
                    done.remove(&dir);
                    queue.push_back(dir);
                }
            }
        }
        self.finish(c, old)
    }

    /// The directories at or above `dir` whose files read data files at, above or below
    /// `changed` (see [`Record::reads_below`]).
    fn reading_below(&self, mut dir: Option<Ino>, changed: &Path) -> Vec<Ino> {
        let mut out = Vec::new();
        while let Some(d) = dir {
            let Some(rec) = self.records.get(&d) else {
                break;
            };
            if rec
                .reads_below
                .iter()
                .any(|b| b.starts_with(changed) || changed.starts_with(b))
            {
                out.push(d);
            }
            dir = rec.parent;
        }
        out
    }

    /// The nearest directory at or above `dir` that holds a store (see [`stores`]), within the
    /// depth a store's files lie at.
    fn store_above(&self, mut dir: Option<Ino>) -> Option<Ino> {
        let policy = self.policy();
        for _ in 0..=stores::depth() {
            let d = dir?;
            let rec = self.records.get(&d)?;
            let is_dir = |n: &[u8]| {
                rec.scan
                    .get(n)
                    .is_some_and(|e| matches!(e.what, What::Dir(_)))
            };
            if stores::store_at(policy, is_dir).is_some() {
                return Some(d);
            }
            dir = rec.parent;
        }
        None
    }

    /// The directories of the store at `store` whose files are its descriptors.
    fn descriptor_dirs(&self, store: Ino) -> Vec<Ino> {
        let Some(root) = self.records.get(&store).map(|r| &r.path) else {
            return Vec::new();
        };
        let policy = self.policy();
        self.records
            .iter()
            .filter(|(_, r)| {
                r.path.starts_with(root)
                    && stores::descriptors_in(policy, &r.path).is_some_and(|(_, at, _)| at == *root)
            })
            .map(|(ino, _)| *ino)
            .collect()
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
        let generation = if self.mounting {
            0
        } else {
            old.generation() + 1
        };
        let snapshot = Snapshot::new(c.table, generation, source_bytes);
        c.diff.generation = generation;
        (snapshot, c.diff)
    }

    /// Rebuilds the directory `d` if it changed, or if `forced` (a store, something below which
    /// changed). Returns true if it is gone (or is now another directory), for its parent to deal
    /// with.
    fn rebuild(
        &mut self,
        c: &mut Commit<'_>,
        old: &Snapshot,
        d: Ino,
        rec: &mut Record,
        forced: bool,
        budget: &mut usize,
    ) -> Result<bool, BuildError> {
        let now = self.now();
        if self.single_file {
            let policy = Policy::new(&self.options, self.mounting);
            single::rebuild(policy, now, &mut self.registry, c, rec, budget)?;
            return Ok(false);
        }
        let scanned_at = SystemTime::now();
        let sources = self.registry.sources().clone();
        let scan = match Scan::read(&rec.path, &self.root, self.skip_dev, &sources) {
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
        let settle = self.options.settle;
        let due = rec.flux.deadline(settle).is_some_and(|t| t <= now);
        if scan.same(&rec.scan) && !due && !forced {
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
        let entries = match self.walk().entries(&input, budget) {
            Ok(drafted) => drafted,
            Err(e) => {
                rec.scan = previous;
                return Err(e);
            }
        };
        rec.generated = entries.generated;
        rec.reads_below = entries.reads_below;
        let children = entries.drafts;
        let Some(node) = old.node(d) else {
            return Ok(false);
        };
        let dir = DirNode {
            name: node.name.clone(),
            parent: node.parent,
            attr: draft::dir_attr(&rec.scan.meta),
            xattrs: no_xattrs(),
            origin: Origin::Real(FileId::of(&rec.scan.meta)),
        };
        c.dir(d, dir, children);
        Ok(false)
    }
}
