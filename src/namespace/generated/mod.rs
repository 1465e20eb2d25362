//! The generated directories of a directory of SOURCE: `NAME.tensors/` for each valid
//! `NAME.safetensors`, a merged directory for each index whose set is valid, kept whole while
//! built from the same sources; and the tensor directory of one file.
//!
//! [`generated`] goes in steps: interpret the files (headers and indexes read several at a time),
//! say what each file wants ([`Want`]), decide who gets each name ([`claims`]), check each set
//! against its shards, then lay out the directories to build, several at a time.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use log::warn;
use serde_json::Value;

use super::claims::{self, Claim, Verdict};
use super::data_files;
use super::draft::{self, Body, Draft};
use super::error::BuildError;
use super::layout;
use super::node::{Content, FileError, Ino, Origin, Refusal};
use super::options::Policy;
use super::record::Generated;
use super::scan::{self, Flux};
use super::sets::{self, Merged, SetError, Shard, indexes, numbered};
use super::snapshot::Snapshot;
use super::tensor_dirs::{Build, build, metadata_of};
use super::xattrs;
use crate::base::parallel;
use crate::format::set::index::{self, Plan};
use crate::format::{Format, IndexName, Numbered};
use crate::source::{Parse, Source, Warning};

mod slots;
mod wants;

/// The directory of SOURCE whose generated directories are drafted.
pub struct Dir<'a> {
    pub path: &'a Path,
    pub flux: &'a Flux,
    /// The generated directories shown before, and where (the old snapshot and the directory).
    pub shown: &'a [Generated],
    pub old: Option<(&'a Snapshot, Ino)>,
}

/// A directory's generated directories, and the errors its mirrored files carry.
pub struct Interpreted {
    pub drafts: Vec<Drafted<Draft>>,
    pub errors: Errors,
}

/// A generated directory (drafted, or about to be), with the sources it is built from.
pub struct Drafted<T> {
    pub draft: T,
    pub inputs: Vec<Arc<Source>>,
}

/// Why files of the directory are not interpreted, by name.
pub type Errors = HashMap<Arc<[u8]>, Refusal>;

/// Says why the file `name`, claimed by `format` as a file that describes tensors, is not
/// interpreted, in the attribute `format` says such errors in.
fn refuse(errors: &mut Errors, name: &Arc<[u8]>, format: Format, why: FileError) {
    let xattr = format.error_xattr();
    errors.insert(name.clone(), Refusal { xattr, why });
}

/// A file (by its place among the directory's files) that wants a generated entry.
struct Want {
    file: usize,
    /// The name of the entry.
    dir: Vec<u8>,
    what: Wanted,
    /// The data files the file's tensors lie in, as its description names them.
    data: Arc<[Arc<Source>]>,
}

/// What a file wants.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wanted {
    /// Its tensors, as a file of this format, in a directory.
    Tensors(Format),
    /// For an index of a set of files of this format, its merged set.
    Set(Format),
    /// For a checkpoint of another format, the safetensors file it converts to.
    Converted(Format),
    /// For the index of a set of checkpoints of this format, the index of the safetensors files
    /// they convert to.
    ConvertedIndex(Format),
    /// For the first shard of a numbered set of this format, the merged set.
    Numbered(Format),
    /// For the first shard of a numbered set, the index of the safetensors files its shards
    /// convert to.
    NumberedIndex(Format),
}

impl Wanted {
    /// The format of the file that wants it (of an index's shards).
    fn format(self) -> Format {
        match self {
            Wanted::Tensors(f)
            | Wanted::Set(f)
            | Wanted::Converted(f)
            | Wanted::ConvertedIndex(f)
            | Wanted::Numbered(f)
            | Wanted::NumberedIndex(f) => f,
        }
    }
}

impl Want {
    fn set(&self) -> bool {
        matches!(self.what, Wanted::Set(_) | Wanted::Numbered(_))
    }
}

/// A generated entry of a scan: kept from the last tree (or a file, made at once), or a directory
/// to be built.
enum Slot<'a> {
    Kept(Draft),
    New(Build<'a>),
}

/// The generated directories of the directory `d`, whose real subdirectories are `real_dirs` and
/// whose files are `files` (sorted by name), interpreted at `now`; their entries are counted
/// against `budget`.
pub fn generated(
    policy: Policy<'_>,
    now: Instant,
    d: &Dir<'_>,
    real_dirs: &[Draft],
    files: &[(Arc<[u8]>, Arc<Source>)],
    open: &mut dyn FnMut(&Path) -> Option<Arc<Source>>,
    budget: &mut usize,
) -> Result<Interpreted, BuildError> {
    let step = Step {
        policy,
        now,
        d,
        never: scan::is_partial_dir(d.path),
        files,
    };
    let mut errors = HashMap::new();
    step.parse_ahead(files);
    let wants = step.wants(files, open, &mut errors)?;
    let winners = step.claim(real_dirs, files, wants);
    let mut slots = Vec::new();
    for want in winners {
        if let Some(slot) = step.slot(&want, files, &mut errors)? {
            slots.push(slot);
        }
    }
    let drafts = step.build_all(slots, budget)?;
    Ok(Interpreted { drafts, errors })
}

/// What every step of [`generated`] shares.
struct Step<'a> {
    policy: Policy<'a>,
    now: Instant,
    d: &'a Dir<'a>,
    /// A directory whose files are never interpreted (Hugging Face's `.locks`).
    never: bool,
    /// Its files, by name: what a claim by the files beside looks at.
    files: &'a [(Arc<[u8]>, Arc<Source>)],
}

impl Step<'_> {
    /// The format a file of this directory is read as, with its stem (see
    /// [`Options::format_among`](super::options::Options::format_among)).
    fn format_of<'n>(&self, name: &'n [u8]) -> Option<(Format, &'n [u8])> {
        let beside = |matches: &dyn Fn(&[u8]) -> bool| {
            self.files.iter().any(|(n, _)| &n[..] != name && matches(n))
        };
        self.policy.options.format_among(name, &beside)
    }

    fn interpretable(&self, name: &[u8]) -> bool {
        !self.never && !scan::is_partial(name)
    }

    /// The merged directory an index of this name asks for (only while its shards' format is
    /// read).
    fn merged_dir(&self, name: &[u8]) -> Option<(Format, String)> {
        let index = IndexName::of(name)?;
        self.policy
            .options
            .reads(index.format)
            .then_some((index.format, index.merged_dir))
    }

    /// What a file of this name is read as ahead of use, if anything.
    fn parse_of(&self, name: &[u8]) -> Option<Parse> {
        if self.merged_dir(name).is_some() {
            return Some(Parse::Index);
        }
        let (format, _) = self.format_of(name)?;
        Some(Parse::Tensors(format))
    }

    fn in_flux(&self, name: &[u8]) -> bool {
        self.d
            .flux
            .unsettled(name, self.now, self.policy.options.settle)
    }

    fn being_written(&self) -> FileError {
        FileError::BeingWritten(self.policy.options.settle)
    }

    /// Reads the headers and indexes about to be used, several at a time.
    fn parse_ahead(&self, files: &[(Arc<[u8]>, Arc<Source>)]) {
        let mut unread: Vec<(&Arc<Source>, Parse)> = files
            .iter()
            .filter(|(name, _)| self.interpretable(name) && !self.in_flux(name))
            .filter_map(|(name, source)| Some((source, self.parse_of(name)?)))
            .filter(|(source, parse)| !source.is_parsed(*parse))
            .collect();
        // Taken in order by the threads: an index (tens of megabytes of JSON for a large model,
        // the longest single job) starts first rather than after every header.
        unread.sort_by_key(|(_, parse)| *parse != Parse::Index);
        let remote = unread.iter().any(|(s, _)| s.remote);
        let dir = self.d.path;
        parallel::map(&unread, remote, |(source, parse)| source.parse(*parse, dir));
    }

    /// The wants that get their name (see [`claims`]); the others are warned about once.
    fn claim(
        &self,
        real_dirs: &[Draft],
        files: &[(Arc<[u8]>, Arc<Source>)],
        wants: Vec<Want>,
    ) -> Vec<Want> {
        let real: Vec<&[u8]> = real_dirs
            .iter()
            .map(|c| &c.name[..])
            .chain(files.iter().map(|(n, _)| &n[..]))
            .collect();
        let claims: Vec<Claim<'_>> = wants
            .iter()
            .map(|w| Claim {
                file: &files[w.file].0,
                dir: &w.dir,
                set: w.set(),
            })
            .collect();
        let verdicts = claims::decide(&real, &claims);
        let mut wins = Vec::with_capacity(wants.len());
        for (want, verdict) in wants.iter().zip(verdicts) {
            let (name, source) = &files[want.file];
            let dir_name = String::from_utf8_lossy(&want.dir);
            let path = self.d.path.join(OsStr::from_bytes(name));
            wins.push(verdict == Verdict::Wins);
            match verdict {
                Verdict::Wins => {}
                // A model published in both formats: the real file is the conversion.
                Verdict::Real
                    if matches!(
                        want.what,
                        Wanted::Converted(_) | Wanted::ConvertedIndex(_) | Wanted::NumberedIndex(_)
                    ) =>
                {
                    log::debug!("{}: {dir_name} is a real file", path.display());
                }
                Verdict::Real => {
                    if source.first_warning(Warning::NameTaken) {
                        let what = match want.what {
                            Wanted::Set(_) | Wanted::Numbered(_) => "merged tensors",
                            Wanted::ConvertedIndex(_) | Wanted::NumberedIndex(_) => {
                                "index of its conversions"
                            }
                            Wanted::Tensors(_) => "tensors",
                            Wanted::Converted(_) => "safetensors file it converts to",
                        };
                        warn!(
                            "{}: a real entry is named {dir_name}; it is shown instead of the {what}",
                            path.display()
                        );
                    }
                }
                Verdict::File(other) => {
                    if source.first_warning(Warning::NameTaken) {
                        warn!(
                            "{}: {} also wants {dir_name}; the unsharded file's tensors are shown",
                            path.display(),
                            self.d.path.join(OsStr::from_bytes(other)).display()
                        );
                    }
                }
            }
        }
        let mut wins = wins.into_iter();
        wants
            .into_iter()
            .filter(|_| wins.next() == Some(true))
            .collect()
    }

    /// The drafts of the slots: those to build are laid out several at a time (a model of 163
    /// shards has 164, with 92,000 tensors in the merged one), each within what is left of the
    /// node budget.
    fn build_all(
        &self,
        slots: Vec<Drafted<Slot<'_>>>,
        budget: &mut usize,
    ) -> Result<Vec<Drafted<Draft>>, BuildError> {
        let builds: Vec<&Build<'_>> = slots
            .iter()
            .filter_map(|slot| match &slot.draft {
                Slot::New(b) => Some(b),
                Slot::Kept(_) => None,
            })
            .collect();
        let left = *budget;
        let policy = self.policy;
        let mut built = parallel::map(&builds, false, |b| build(policy, b, left)).into_iter();
        let mut drafts = Vec::with_capacity(slots.len());
        for Drafted {
            draft: slot,
            inputs,
        } in slots
        {
            let draft = match slot {
                Slot::Kept(keep) => keep,
                Slot::New(b) => {
                    // One result per build, in order (built here should the map fall short).
                    let draft = built.next().unwrap_or_else(|| build(policy, &b, left))?;
                    *budget = budget
                        .checked_sub(draft.count())
                        .ok_or_else(|| BuildError::TooManyNodes(b.origin().into()))?;
                    draft
                }
            };
            drafts.push(Drafted { draft, inputs });
        }
        Ok(drafts)
    }
}
