//! Sharded sets: an index and the shards its `weight_map` names, all files of the index's own
//! directory. A merged directory is shown only while the index and every shard it names are
//! present, settled and valid, and agree with each other.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::layout::Entry;
use super::source::Source;
use crate::index::Index;

/// A file of the index's directory, as the check needs it.
pub(super) struct Shard<'a> {
    pub source: &'a Arc<Source>,
    /// Not being written (see [`super::scan::Flux`]).
    pub settled: bool,
}

/// What a valid set merges: its tensors with their sources, and the shards (sorted by name).
pub(super) struct Merged {
    pub entries: Vec<Entry>,
    pub shards: Vec<Arc<Source>>,
}

/// Why a set is not shown.
pub(super) struct Refused {
    pub reason: String,
    /// Only because a shard is still being written.
    pub settling: bool,
}

impl From<String> for Refused {
    fn from(reason: String) -> Refused {
        Refused {
            reason,
            settling: false,
        }
    }
}

/// Checks an index against its shards (`file` looks a file of the directory up by name): every
/// shard named is a settled, valid `.safetensors` file of the directory, every listed tensor is in
/// its shard, and every tensor of a shard is listed for that shard.
pub(super) fn check<'a>(
    idx: &Index,
    file: impl Fn(&str) -> Option<Shard<'a>>,
) -> Result<Merged, Refused> {
    let mut shards: HashMap<&str, &'a Arc<Source>> = HashMap::new();
    for shard in idx.weight_map.values() {
        if shards.contains_key(shard.as_str()) {
            continue;
        }
        let Some(f) = file(shard) else {
            return Err(format!("shard `{shard}` named in weight_map is missing").into());
        };
        if !shard.ends_with(".safetensors") {
            return Err(format!("shard `{shard}` is not a .safetensors file").into());
        }
        if !f.settled {
            return Err(Refused {
                reason: format!("shard `{shard}` is being written"),
                settling: true,
            });
        }
        if f.source.header().is_err() {
            return Err(format!("shard `{shard}` is not a valid safetensors file").into());
        }
        shards.insert(shard.as_str(), f.source);
    }
    // Every tensor of a shard is listed for that shard...
    let mut entries = Vec::with_capacity(idx.weight_map.len());
    for (shard, src) in &shards {
        let Ok(parsed) = src.header() else {
            continue;
        };
        for t in &parsed.tensors {
            if idx.weight_map.get(&*t.name).map(String::as_str) != Some(*shard) {
                return Err(format!(
                    "tensor `{}` of shard `{shard}` is missing from the weight_map",
                    t.name
                )
                .into());
            }
            entries.push((t.clone(), Arc::clone(src)));
        }
    }
    // ... and, names being unique on both sides, every listed tensor was found iff the counts
    // agree. Otherwise name one that was not.
    if entries.len() != idx.weight_map.len() {
        let found: HashSet<&str> = entries.iter().map(|(t, _)| &*t.name).collect();
        if let Some((tensor, shard)) = idx
            .weight_map
            .iter()
            .find(|(t, _)| !found.contains(t.as_str()))
        {
            return Err(format!("tensor `{tensor}` is not in its shard `{shard}`").into());
        }
    }
    let mut named: Vec<(&str, &Arc<Source>)> = shards.into_iter().collect();
    named.sort_by_key(|(name, _)| *name);
    Ok(Merged {
        entries,
        shards: named.into_iter().map(|(_, s)| Arc::clone(s)).collect(),
    })
}
