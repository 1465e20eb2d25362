//! Sharded sets: an index and the shards its `weight_map` names, all files of the index's own
//! directory. A merged directory is shown only while the index and every shard it names are
//! present, settled and valid, and agree with each other.
//!
//! The check works on the index's [`Plan`] (counts and digests of names per shard): a shard agrees
//! with the index when its own count and digest (kept per shard version) are the same; only when
//! they are not is the index parsed again, to name the tensor at fault.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use crate::format::IndexName;
use crate::format::set::index::{Index, Plan};
use crate::format::{Description, Format};
use crate::source::{PlanError, Source};

/// A tensor with the source it is served from.
pub mod indexes;
pub mod numbered;

use super::entry::Entry;

/// A file of the index's directory, as the check needs it.
pub struct Shard<'a> {
    pub source: &'a Arc<Source>,
    /// The format its name says, among those read.
    pub format: Option<Format>,
    /// Not being written (see [`super::scan::Flux`]).
    pub settled: bool,
}

/// The format a shard of the index `index` is read as, given the one its name says (`named`, among
/// the formats read): a safetensors index's shards are safetensors files, a PyTorch index's
/// (`*.bin.index*.json`) checkpoints.
pub fn shard_format(index: &[u8], named: Option<Format>) -> Option<Format> {
    let kind = IndexName::of(index)?.format;
    named.filter(|f| *f == kind)
}

/// What a valid set merges: its tensors with their sources, and the shards (sorted by name).
pub struct Merged {
    pub entries: Vec<Entry>,
    pub shards: Vec<Arc<Source>>,
}

/// Why a set is not shown. The message leaves the index's path out: whoever reports it adds it.
#[derive(Debug)]
pub enum SetError {
    /// The index itself is broken.
    Index(Arc<PlanError>),
    /// A shard the index names is not a file of its directory.
    ShardMissing(String),
    /// A shard the index names is not named as a file of the format its index is for (or that
    /// format is not read).
    WrongFormat(String),
    /// A shard is still being written (no problem yet: it may settle).
    ShardSettling(String),
    /// A shard is not a valid file of its format (named).
    ShardInvalid(String, &'static str),
    /// A shard holds a tensor the index does not list.
    Unlisted { tensor: String, shard: String },
    /// A shard holds a tensor the index lists for another shard (the tensor is in both, or only in
    /// the wrong one).
    ListedElsewhere {
        tensor: String,
        shard: String,
        listed: String,
    },
    /// A tensor the index lists is not in the shard it names.
    NotInShard { tensor: String, shard: String },
    /// A shard's tensor names differ from the index's in digest only: never expected, as every
    /// difference is found by name.
    Disagrees(String),
    /// A shard of a numbered set (no index) is not what its name says it is.
    Numbered { shard: String, why: String },
}

impl SetError {
    /// Only because a shard is still being written.
    pub fn settling(&self) -> bool {
        match self {
            SetError::ShardSettling(_) => true,
            SetError::Index(_)
            | SetError::ShardMissing(_)
            | SetError::WrongFormat(_)
            | SetError::ShardInvalid(..)
            | SetError::Numbered { .. }
            | SetError::Unlisted { .. }
            | SetError::ListedElsewhere { .. }
            | SetError::NotInShard { .. }
            | SetError::Disagrees(_) => false,
        }
    }
}

impl fmt::Display for SetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetError::Index(e) => write!(f, "{e}"),
            SetError::ShardMissing(shard) => {
                write!(f, "shard `{shard}` named in weight_map is missing")
            }
            SetError::WrongFormat(shard) => {
                write!(
                    f,
                    "shard `{shard}` is not a file of the format its index is for"
                )
            }
            SetError::ShardSettling(shard) => write!(f, "shard `{shard}` is being written"),
            SetError::ShardInvalid(shard, format) => {
                write!(f, "shard `{shard}` is not a valid {format} file")
            }
            SetError::Unlisted { tensor, shard } => write!(
                f,
                "tensor `{tensor}` of shard `{shard}` is missing from the weight_map"
            ),
            SetError::ListedElsewhere {
                tensor,
                shard,
                listed,
            } => write!(
                f,
                "tensor `{tensor}` of shard `{shard}` is listed for shard `{listed}` in the \
                 weight_map"
            ),
            SetError::NotInShard { tensor, shard } => {
                write!(f, "tensor `{tensor}` is not in its shard `{shard}`")
            }
            SetError::Disagrees(shard) => {
                write!(f, "shard `{shard}` does not hold what weight_map says")
            }
            SetError::Numbered { shard, why } => write!(f, "shard `{shard}` {why}"),
        }
    }
}

impl std::error::Error for SetError {}

/// Checks an index, in brief, against its shards (`file` looks a file of the directory up by
/// name): every shard named is a settled, valid `.safetensors` file of the directory holding
/// exactly the tensors the index maps to it. `full` parses the index, to say what is wrong.
pub fn check<'a>(
    plan: &Plan,
    file: impl Fn(&str) -> Option<Shard<'a>>,
    full: impl FnOnce() -> Result<Index, PlanError>,
) -> Result<Merged, SetError> {
    let mut entries = Vec::new();
    let mut shards = Vec::with_capacity(plan.shards.len());
    for (shard, &wanted) in &plan.shards {
        let (source, format, parsed) = usable(shard, file(shard))?;
        if source.digest(format) != wanted {
            // Some tensor is where the index does not say: find it.
            return Err(match full().map(|idx| check_full(&idx, file)) {
                Ok(Err(e)) => e,
                Ok(Ok(_)) => SetError::Disagrees(shard.clone()),
                Err(e) => SetError::Index(Arc::new(e)),
            });
        }
        entries.extend(
            parsed
                .tensors
                .iter()
                .map(|t| Entry::of(t.clone(), source.clone())),
        );
        shards.push(source.clone());
    }
    Ok(Merged { entries, shards })
}

/// The shard named `shard` (`f` as the directory has it) if it is a settled, valid
/// `.safetensors` file, with its header.
fn usable<'a>(
    shard: &str,
    f: Option<Shard<'a>>,
) -> Result<(&'a Arc<Source>, Format, &'a Arc<Description>), SetError> {
    let Some(f) = f else {
        return Err(SetError::ShardMissing(shard.to_string()));
    };
    let Some(format) = f.format else {
        return Err(SetError::WrongFormat(shard.to_string()));
    };
    if !f.settled {
        return Err(SetError::ShardSettling(shard.to_string()));
    }
    match f.source.describe(format) {
        Ok(parsed) => Ok((f.source, format, parsed)),
        Err(_) => Err(SetError::ShardInvalid(shard.to_string(), format.name())),
    }
}

/// The check on the whole index, naming the first disagreement it finds.
fn check_full<'a>(
    idx: &Index,
    file: impl Fn(&str) -> Option<Shard<'a>>,
) -> Result<Merged, SetError> {
    let mut shards: HashMap<&str, &'a Arc<Source>> = HashMap::new();
    for shard in idx.weight_map.values() {
        if shards.contains_key(shard.as_str()) {
            continue;
        }
        let (source, _, _) = usable(shard, file(shard))?;
        shards.insert(shard.as_str(), source);
    }
    // Every tensor of a shard is listed for that shard...
    let mut entries = Vec::with_capacity(idx.weight_map.len());
    for (shard, src) in &shards {
        let Some(Ok(parsed)) = src.format().map(|f| src.describe(f)) else {
            continue;
        };
        for t in &parsed.tensors {
            match idx.weight_map.get(&*t.name) {
                Some(listed) if listed == shard => {}
                Some(listed) => {
                    return Err(SetError::ListedElsewhere {
                        tensor: t.name.to_string(),
                        shard: shard.to_string(),
                        listed: listed.clone(),
                    });
                }
                None => {
                    return Err(SetError::Unlisted {
                        tensor: t.name.to_string(),
                        shard: shard.to_string(),
                    });
                }
            }
            entries.push(Entry::of(t.clone(), Arc::clone(src)));
        }
    }
    // ... and, names being unique on both sides, every listed tensor was found iff the counts
    // agree. Otherwise name one that was not.
    if entries.len() != idx.weight_map.len() {
        let found: HashSet<&str> = entries.iter().map(|e| &*e.tensor.name).collect();
        if let Some((tensor, shard)) = idx
            .weight_map
            .iter()
            .find(|(t, _)| !found.contains(t.as_str()))
        {
            return Err(SetError::NotInShard {
                tensor: tensor.clone(),
                shard: shard.clone(),
            });
        }
    }
    let mut named: Vec<(&str, &Arc<Source>)> = shards.into_iter().collect();
    named.sort_by_key(|(name, _)| *name);
    Ok(Merged {
        entries,
        shards: named.into_iter().map(|(_, s)| Arc::clone(s)).collect(),
    })
}
