//! The [`Registry`] of the sources in use, by file, so that an unchanged file reached again
//! (through another link, or by a later rescan) gives the same [`Source`], never parsed twice.

use std::collections::HashMap;
use std::fs::Metadata;
use std::path::Path;
use std::sync::{Arc, Weak};

use super::error::SourceError;
use super::file::Source;
use super::sources::Sources;
use super::version::{FileId, Version};
use crate::base::parallel;

/// The files of a directory not open yet are opened in batches of at most this fraction of the
/// cap on open sources, so that those just opened and not yet counted stay a fraction of it.
const BATCH_OF_CAP: usize = 4;

#[derive(Debug)]
pub struct Registry {
    sources: Sources,
    by_id: HashMap<FileId, Weak<Source>>,
}

impl Registry {
    pub fn new(sources: Sources) -> Registry {
        Registry {
            sources,
            by_id: HashMap::new(),
        }
    }

    pub fn sources(&self) -> &Sources {
        &self.sources
    }

    /// The source for the file at `entry`, whose `stat` gave `meta`: the one already open if that
    /// version is, else the file opened now (whose version may be newer than `meta`'s).
    pub fn get(&mut self, entry: &Path, meta: &Metadata) -> Result<Arc<Source>, SourceError> {
        if let Some(s) = self.live(&Version::of(meta)) {
            return Ok(s);
        }
        let source = Source::open(entry, &self.sources)?;
        Ok(self.insert(source))
    }

    /// [`Registry::get`] for each file of a directory, in order; those not open yet are opened
    /// several at a time where the directory is `remote` (see [`parallel`]).
    pub fn get_all(
        &mut self,
        files: &[(&Path, &Metadata)],
        remote: bool,
    ) -> Vec<Result<Arc<Source>, SourceError>> {
        let mut out: Vec<Option<Result<Arc<Source>, SourceError>>> = files
            .iter()
            .map(|(_, meta)| self.live(&Version::of(meta)).map(Ok))
            .collect();
        let missing: Vec<(usize, &Path)> = files
            .iter()
            .enumerate()
            .filter(|(i, _)| out[*i].is_none())
            .map(|(i, (path, _))| (i, *path))
            .collect();
        let batch = (self.sources.cap() / BATCH_OF_CAP).max(1);
        for batch in missing.chunks(batch) {
            let sources = &self.sources;
            let opened = parallel::map(batch, remote, |(_, path)| {
                let s = Source::open(path, sources);
                sources.step();
                s
            });
            for (&(i, _), s) in batch.iter().zip(opened) {
                out[i] = Some(s.map(|s| self.insert(s)));
            }
        }
        // Every file has its result: `parallel::map` gives one per item.
        out.into_iter().flatten().collect()
    }

    /// The source just opened, or the same version already open.
    fn insert(&mut self, source: Source) -> Arc<Source> {
        if let Some(s) = self.live(&source.version) {
            return s;
        }
        let source = Arc::new(source);
        source.track();
        self.by_id
            .insert(source.version.id, Arc::downgrade(&source));
        source
    }

    /// The source open for `version`, unless its description is to be read again (see
    /// [`Source::read_again`]).
    fn live(&self, version: &Version) -> Option<Arc<Source>> {
        let s = self.by_id.get(&version.id)?.upgrade()?;
        (s.version == *version && !s.read_again()).then_some(s)
    }

    /// Forgets sources no snapshot uses any more.
    pub fn prune(&mut self) {
        self.by_id.retain(|_, s| s.strong_count() > 0);
    }
}
