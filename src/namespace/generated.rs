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

    /// What each file asks for: `NAME.tensors` for a valid unsharded file, a merged directory for
    /// an index. Files that cannot have theirs get their error.
    fn wants(
        &self,
        files: &[(Arc<[u8]>, Arc<Source>)],
        open: &mut dyn FnMut(&Path) -> Option<Arc<Source>>,
        errors: &mut Errors,
    ) -> Result<Vec<Want>, BuildError> {
        let mut wants = Vec::new();
        for (i, (name, source)) in files.iter().enumerate() {
            if !self.interpretable(name) {
                continue;
            }
            if let Some((format, stem)) = self.format_of(name) {
                if self.in_flux(name) {
                    refuse(errors, name, format, self.being_written());
                    continue;
                }
                match source.describe_in(format, Some(self.d.path)) {
                    Ok(d) => {
                        if !d.notes.is_empty() && source.first_warning(Warning::Notes) {
                            d.notes.iter().for_each(|note| warn!("{note}"));
                        }
                        let found = data_files::find(d, self.d.path, files, open, |name| {
                            self.in_flux(name).then(|| self.being_written())
                        });
                        let data = match found {
                            Ok(data) => data,
                            Err(e) => {
                                let settling = matches!(e, FileError::BeingWritten(_));
                                if !settling && source.first_warning(Warning::Invalid) {
                                    warn!("{}: {e}", source.path.display());
                                }
                                refuse(errors, name, format, e);
                                continue;
                            }
                        };
                        // A checkpoint without tensors (training arguments, an optimizer's
                        // hyperparameters) gets no empty directory.
                        if format.empty_dir() || !d.tensors.is_empty() {
                            wants.push(Want {
                                file: i,
                                dir: [stem, b".tensors"].concat(),
                                what: Wanted::Tensors(format),
                                data: data.clone(),
                            });
                        }
                        match source.converted(format) {
                            Some(Ok(_)) => wants.push(Want {
                                file: i,
                                dir: format.converted_name(stem).unwrap_or_default(),
                                what: Wanted::Converted(format),
                                data: data.clone(),
                            }),
                            // A trap is said of it with tensors or without.
                            Some(Err(why))
                                if !d.tensors.is_empty()
                                    || matches!(&d.conversion, Some(Err(e)) if e.is_trap()) =>
                            {
                                refuse(errors, name, format, FileError::NotConverted(why.clone()));
                            }
                            _ => {}
                        }
                        let first = Numbered::of(format, name).filter(|s| s.no == 1 && s.count > 1);
                        if let Some(set) = first {
                            let dir = [&set.base[..], b".tensors"].concat();
                            wants.push(Want {
                                file: i,
                                dir,
                                what: Wanted::Numbered(format),
                                data: Arc::from([]),
                            });
                            if let Some(file) = format.converted_name(&set.base) {
                                wants.push(Want {
                                    file: i,
                                    dir: [&file[..], b".index.json"].concat(),
                                    what: Wanted::NumberedIndex(format),
                                    data: Arc::from([]),
                                });
                            }
                        }
                    }
                    Err(e) if e.is_foreign() => {}
                    Err(e) => {
                        if source.first_warning(Warning::Invalid) {
                            if !self.policy.mounting && e.cut_short() {
                                // Most likely still being written, by a writer that paused.
                                log::info!("{e} (no .tensors directory; incomplete so far)");
                            } else {
                                self.policy.reject(BuildError::NoTensorsDir(e.clone()))?;
                            }
                        }
                        refuse(errors, name, format, FileError::Invalid(e.clone()));
                    }
                }
            } else if let Some((format, dir)) = self.merged_dir(name) {
                wants.push(Want {
                    file: i,
                    dir: dir.into_bytes(),
                    what: Wanted::Set(format),
                    data: Arc::from([]),
                });
                if let Some(converted) = IndexName::of(name).and_then(|i| i.converted) {
                    wants.push(Want {
                        file: i,
                        dir: converted,
                        what: Wanted::ConvertedIndex(format),
                        data: Arc::from([]),
                    });
                }
            }
        }
        Ok(wants)
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

    /// The directory a winning want gets, with the sources it is built from: the old one if built
    /// from the same sources, else one to build; none for a set that is not valid (its index then
    /// carries why).
    fn slot<'f>(
        &self,
        want: &Want,
        files: &'f [(Arc<[u8]>, Arc<Source>)],
        errors: &mut Errors,
    ) -> Result<Option<Drafted<Slot<'f>>>, BuildError> {
        let (name, source) = &files[want.file];
        let dir: Arc<[u8]> = Arc::from(&want.dir[..]);
        if let Wanted::Converted(format) = want.what {
            let Some(Ok(file)) = source.converted(format) else {
                return Ok(None);
            };
            let attr = draft::file_attr(&source.meta, file.len());
            let content = Content::Converted {
                source: source.clone(),
                file: file.clone(),
                data: want.data.clone(),
            };
            let inputs = [std::slice::from_ref(source), &want.data[..]].concat();
            return Ok(Some(Drafted {
                draft: Slot::Kept(Draft::file(dir, attr, content)),
                inputs,
            }));
        }
        if let Wanted::Tensors(format) = want.what {
            let inputs = [std::slice::from_ref(source), &want.data[..]].concat();
            let slot = match self.kept(&dir, &inputs) {
                Some(keep) => Slot::Kept(keep),
                None => Slot::New(Build::File {
                    dir,
                    source,
                    format,
                    data: want.data.clone(),
                }),
            };
            return Ok(Some(Drafted {
                draft: slot,
                inputs,
            }));
        }
        if let Wanted::Numbered(format) | Wanted::NumberedIndex(format) = want.what {
            return Ok(self.numbered(want, format, files));
        }
        if self.in_flux(name) {
            refuse(errors, name, want.what.format(), self.being_written());
            return Ok(None);
        }
        let merged = self.merged(name, source, files);
        if let Wanted::ConvertedIndex(_) = want.what {
            // Its set's problems are the set's want's to report.
            let Ok((_, merged)) = merged else {
                return Ok(None);
            };
            let mut inputs = vec![source.clone()];
            inputs.extend(merged.shards.iter().cloned());
            // Made again (the whole index parsed) only when the index or a shard changed.
            let draft = match self.kept(&dir, &inputs) {
                Some(keep) => keep,
                None => match indexes::converted_index(dir, source, &merged) {
                    Some(draft) => draft,
                    None => return Ok(None),
                },
            };
            return Ok(Some(Drafted {
                draft: Slot::Kept(draft),
                inputs,
            }));
        }
        let (plan, merged) = match merged {
            Ok(m) => m,
            Err(why) => {
                let why = Arc::new(why);
                refuse(
                    errors,
                    name,
                    want.what.format(),
                    FileError::Set(why.clone()),
                );
                // A shard still being written is no problem yet.
                if !why.settling() && source.first_warning(Warning::Invalid) {
                    self.policy.reject(BuildError::NoMergedDir {
                        index: self.d.path.join(OsStr::from_bytes(name)),
                        dir: String::from_utf8_lossy(&want.dir).into_owned(),
                        why,
                    })?;
                }
                return Ok(None);
            }
        };
        let mut inputs = vec![source.clone()];
        inputs.extend(merged.shards.iter().cloned());
        if let Some(keep) = self.kept(&dir, &inputs) {
            return Ok(Some(Drafted {
                draft: Slot::Kept(keep),
                inputs,
            }));
        }
        let metadata = plan.metadata.clone();
        let json = metadata
            .clone()
            .map(|m| layout::metadata_json(&Value::Object(m)));
        let Some(format) = IndexName::of(name).map(|i| i.format) else {
            return Ok(None);
        };
        let xattrs = xattrs::metadata_xattrs(
            format,
            metadata
                .iter()
                .flatten()
                .map(|(k, v)| (k, index::metadata_value_text(v))),
        );
        let shards: Vec<&Metadata> = merged.shards.iter().map(|s| &s.meta).collect();
        let attr = draft::tensor_dir_attr(&source.meta, &shards);
        let build = Build::Set {
            dir,
            path: self.d.path.join(OsStr::from_bytes(name)),
            owner: &source.meta,
            attr,
            xattrs,
            json,
            entries: merged.entries,
        };
        Ok(Some(Drafted {
            draft: Slot::New(build),
            inputs,
        }))
    }

    /// The merged directory, or the index of conversions, of the numbered set whose first shard
    /// is the file of `want`; none (and a warning, once) while the set is not whole.
    fn numbered<'f>(
        &self,
        want: &Want,
        format: Format,
        files: &'f [(Arc<[u8]>, Arc<Source>)],
    ) -> Option<Drafted<Slot<'f>>> {
        let (name, source) = &files[want.file];
        let set = Numbered::of(format, name)?;
        let merged = numbered::check(format, &set, |n| {
            let (n, s) = files.iter().find(|(f, _)| &f[..] == n)?;
            let settled = !self.in_flux(n);
            Some(Shard {
                source: s,
                format: Some(format),
                settled,
            })
        });
        let merged = match merged {
            Ok(m) => m,
            Err(why) => {
                let warn = want.what == Wanted::Numbered(format) && !why.settling();
                if warn && source.first_warning(Warning::Unmerged) {
                    warn!(
                        "{}: {why}: the set is not merged, each shard is served on its own",
                        self.d.path.join(OsStr::from_bytes(name)).display()
                    );
                }
                return None;
            }
        };
        let dir: Arc<[u8]> = Arc::from(&want.dir[..]);
        let inputs = merged.shards.clone();
        if let Some(keep) = self.kept(&dir, &inputs) {
            return Some(Drafted {
                draft: Slot::Kept(keep),
                inputs,
            });
        }
        if want.what == Wanted::NumberedIndex(format) {
            let draft = indexes::numbered_index(dir, source, &merged)?;
            return Some(Drafted {
                draft: Slot::Kept(draft),
                inputs,
            });
        }
        let (json, xattrs) = metadata_of(format, source.describe(format).as_ref().ok()?);
        let shards: Vec<&Metadata> = merged.shards.iter().map(|s| &s.meta).collect();
        let build = Build::Set {
            dir,
            path: self.d.path.join(OsStr::from_bytes(name)),
            owner: &source.meta,
            attr: draft::tensor_dir_attr(&source.meta, &shards),
            xattrs,
            json,
            entries: merged.entries,
        };
        Some(Drafted {
            draft: Slot::New(build),
            inputs,
        })
    }

    /// The set of the index `source` (a file of `files`), checked against its shards.
    fn merged<'f>(
        &self,
        index: &[u8],
        source: &'f Arc<Source>,
        files: &'f [(Arc<[u8]>, Arc<Source>)],
    ) -> Result<(&'f Arc<Plan>, Merged), SetError> {
        let plan = source
            .plan()
            .as_ref()
            .map_err(|e| SetError::Index(e.clone()))?;
        let merged = sets::check(
            plan,
            |shard| {
                let (n, s) = files.iter().find(|(n, _)| &n[..] == shard.as_bytes())?;
                Some(Shard {
                    source: s,
                    format: sets::shard_format(index, self.format_of(n).map(|(f, _)| f)),
                    settled: !self.in_flux(n),
                })
            },
            || source.index(),
        )?;
        Ok((plan, merged))
    }

    /// The old generated entry `name` (a directory, or generated bytes) if it was made from the
    /// same sources.
    fn kept(&self, name: &Arc<[u8]>, inputs: &[Arc<Source>]) -> Option<Draft> {
        let old = self.d.shown.iter().find(|g| g.name == *name)?;
        let same = old.inputs.len() == inputs.len()
            && old
                .inputs
                .iter()
                .zip(inputs)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        let (snap, dir) = self.d.old?;
        let ino = snap.lookup(dir, name)?;
        let generated = match &snap.node(ino)?.content {
            Content::Dir(d) => d.origin == Origin::Generated,
            Content::Generated(_) => true,
            _ => false,
        };
        (same && generated).then(|| Draft {
            name: name.clone(),
            body: Body::Keep(ino),
        })
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
