//! The entries of a directory of SOURCE: its files (mirrored), its links kept as links, its
//! subdirectories (kept whole while unchanged, read whole when new), then the generated
//! directories its files ask for ([`generated`]).

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use log::warn;

use super::draft::{self, Body, DirDraft, Draft};
use super::error::BuildError;
use super::generated::{self, generated};
use super::node::{Content, FileError, Ino, Origin, Refusal, no_xattrs};
use super::options::Policy;
use super::record::{Generated, Record};
use super::scan::{self, Flux, Scan, What};
use super::snapshot::Snapshot;
use super::stores;
use crate::source::{FileId, Registry, Source};

/// Directories nested deeper than this are left out (with a warning).
const MAX_DEPTH: usize = 256;

/// What walking directories of SOURCE needs of the writer.
pub struct Walk<'a> {
    pub policy: Policy<'a>,
    /// When this walk interprets files (the writer's clock).
    pub now: Instant,
    pub registry: &'a mut Registry,
    /// What the last scans found, by directory (for subdirectories kept whole).
    pub records: &'a HashMap<Ino, Box<Record>>,
    /// The real path of SOURCE: links inside it are kept as links.
    pub root: &'a Path,
    /// The device of the mount itself, never entered.
    pub skip_dev: Option<u64>,
}

/// The inputs of one drafting of a directory's entries.
pub struct DirInput<'a> {
    pub path: &'a Path,
    pub scan: &'a Scan,
    /// The scan before this one, whose problems were already reported.
    pub previous: Option<&'a Scan>,
    pub flux: &'a Flux,
    /// The generated directories shown before, and where (the old snapshot and the directory).
    pub generated: &'a [Generated],
    pub old: Option<(&'a Snapshot, Ino)>,
    /// The directories from the root down to this one, for cycles.
    pub ancestors: &'a [FileId],
}

/// A directory's entries as [`Walk::entries`] drafts them.
pub struct Entries {
    /// Its files and directories (unchanged directories kept whole), then the generated
    /// directories its files ask for.
    pub drafts: Vec<Draft>,
    /// Those generated directories, with the sources they are built from.
    pub generated: Vec<Generated>,
    /// See [`Record::reads_below`].
    pub reads_below: Vec<PathBuf>,
}

impl Walk<'_> {
    /// The drafts of a directory's entries, and what its record keeps of them.
    pub fn entries(&mut self, d: &DirInput<'_>, budget: &mut usize) -> Result<Entries, BuildError> {
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
                What::File(_) | What::Link { .. } => match opened.next() {
                    Some(Ok(s)) => files.push((e.name.clone(), s)),
                    Some(Err(err)) if !known => {
                        warn!("{}: cannot open, skipped: {err}", e.path.display())
                    }
                    _ => {}
                },
                What::Skipped { why, warn: true } if !known => {
                    warn!("{}: {why}", e.path.display())
                }
                What::Skipped { why, .. } => log::debug!("{}: {why}", e.path.display()),
            }
        }
        let dir = generated::Dir {
            path: d.path,
            flux: d.flux,
            shown: d.generated,
            old: d.old,
        };
        // A data file below the directory (a model's `weights/part1`), as the scan of that
        // directory opened it.
        let registry = &mut *self.registry;
        let mut below: Vec<PathBuf> = Vec::new();
        let mut open = |path: &Path| {
            if let Some(dir) = path.parent()
                && dir.starts_with(d.path)
                && dir != d.path
                && !below.iter().any(|b| b == dir)
            {
                below.push(dir.to_path_buf());
            }
            let meta = std::fs::metadata(path).ok()?;
            registry.get(path, &meta).ok()
        };
        let interpreted = generated(
            self.policy,
            self.now,
            &dir,
            &drafts,
            &files,
            &mut open,
            budget,
        )?;
        // A file whose description failed on a data file it names, wherever that lies: any
        // change below reads it again.
        let read_again = files.iter().any(|(_, s)| s.read_again());
        let mut errors = interpreted.errors;
        // A store's descriptors say why a model is not shown on their own files.
        if let Some((format, root, below)) = stores::descriptors_in(self.policy, d.path) {
            for (name, source) in &files {
                let mut parts: Vec<&[u8]> = below.iter().map(Vec::as_slice).collect();
                parts.push(name);
                let model = stores::model(self.policy, format, &root, &parts, source, &mut open);
                if let Err(why) = model {
                    let settle = self.policy.options.settle;
                    // Rewritten in place (a pull of a tag it has): being written, not broken.
                    let why = match d.flux.unsettled(name, self.now, settle) {
                        true => FileError::BeingWritten(settle),
                        false => why,
                    };
                    let xattr = format.error_xattr();
                    errors.insert(name.clone(), Refusal { xattr, why });
                }
            }
        }
        for (name, source) in files {
            // A kept link to a file still gets the file's `.tensors/` (above), but shows as a link.
            if let Some(What::Link { meta, target, .. }) = d.scan.get(&name).map(|e| &e.what) {
                drafts.push(link_draft(name, meta, target));
                continue;
            }
            let error = errors.remove(&name);
            drafts.push(Draft::file(
                name,
                draft::file_attr(&source.meta, source.len()),
                Content::Mirror { source, error },
            ));
        }
        let mut shown = Vec::new();
        for generated::Drafted { draft, inputs } in interpreted.drafts {
            shown.push(Generated {
                name: draft.name.clone(),
                inputs,
            });
            drafts.push(draft);
        }
        let is_dir = |n: &[u8]| {
            d.scan
                .get(n)
                .is_some_and(|e| matches!(e.what, What::Dir(_)))
        };
        if let Some(format) = stores::store_at(self.policy, is_dir) {
            let view = format.store().map_or("", |s| s.view).as_bytes();
            if drafts.iter().any(|c| &*c.name == view) {
                log::debug!(
                    "{}: a real entry is named {}; it is shown instead of the store's models",
                    d.path.display(),
                    String::from_utf8_lossy(view)
                );
            } else if let Some(generated::Drafted { draft, inputs }) = stores::view(
                self.policy,
                self.now,
                format,
                stores::StoreDir {
                    root: d.path,
                    meta: &d.scan.meta,
                    old: d.old,
                },
                &mut open,
                budget,
            )? {
                shown.push(Generated {
                    name: draft.name.clone(),
                    inputs,
                });
                drafts.push(draft);
            }
        }
        if read_again {
            below.push(d.path.to_path_buf());
        }
        Ok(Entries {
            drafts,
            generated: shown,
            reads_below: below,
        })
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
        let sources = self.registry.sources().clone();
        let scan = match Scan::read(&e.path, self.root, self.skip_dev, &sources) {
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
                xattrs: no_xattrs(),
                origin: Origin::Real(FileId::of(&record.scan.meta)),
                children,
                record: Some(record),
            })),
        }))
    }

    /// The record and entries of a directory of SOURCE seen for the first time (read as `scan`),
    /// below the directories `ancestors`.
    pub fn fresh_dir(
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
        let entries = self.entries(&input, budget)?;
        record.generated = entries.generated;
        record.reads_below = entries.reads_below;
        Ok((record, entries.drafts))
    }
}

/// A symbolic link kept as a link (see [`What::Link`]).
fn link_draft(name: Arc<[u8]>, meta: &Metadata, target: &Path) -> Draft {
    let target: Arc<[u8]> = Arc::from(target.as_os_str().as_bytes());
    Draft::file(
        name,
        draft::link_attr(meta, target.len()),
        Content::Link(target),
    )
}
