//! Numbered sets: shards named `NAME-00001-of-00003.gguf` and no index, as `gguf-split` writes a
//! model too large for one file. Their tensors are merged into `NAME.tensors/` only while every
//! shard is present, settled and valid, says it is the shard its name says (`split.no`,
//! `split.count`), no tensor is in two shards, and the set holds as many tensors as its first shard
//! says (`split.tensors.count`); otherwise each shard is served on its own, with a warning.

use std::collections::HashMap;

use super::{Merged, SetError, Shard};
use crate::format::{Format, Numbered};
use crate::namespace::entry::Entry;

/// Checks the numbered set `set` of `format` against its shards (`file` looks a file of the
/// directory up by name).
pub fn check<'a>(
    format: Format,
    set: &Numbered,
    file: impl Fn(&[u8]) -> Option<Shard<'a>>,
) -> Result<Merged, SetError> {
    let mut entries = Vec::new();
    let mut shards = Vec::with_capacity(set.count as usize);
    // Each tensor name, with the shard it was found in.
    let mut seen: HashMap<&str, String> = HashMap::new();
    let mut claimed = None;
    let [no_key, count_key, tensors_key] = format.split_keys();
    for no in 1..=set.count {
        let name = set.shard_name(no);
        let shard = String::from_utf8_lossy(&name).into_owned();
        let wrong = |why: String| SetError::Numbered {
            shard: shard.clone(),
            why,
        };
        let Some(f) = file(&name) else {
            return Err(wrong("is missing".into()));
        };
        if !f.settled {
            return Err(SetError::ShardSettling(shard));
        }
        let Ok(d) = f.source.describe(format) else {
            return Err(SetError::ShardInvalid(shard, format.name()));
        };
        match d.split {
            Some(s) if s.no + 1 == u64::from(no) && s.count == u64::from(set.count) => {}
            Some(s) => {
                return Err(wrong(format!(
                    "says it is shard {} of {} ({no_key} {}, {count_key} {})",
                    s.no.saturating_add(1),
                    s.count,
                    s.no,
                    s.count
                )));
            }
            None => return Err(wrong(format!("has no {no_key} and {count_key}"))),
        }
        if no == 1 {
            claimed = d.split.and_then(|s| s.tensors);
        }
        for t in &d.tensors {
            if let Some(other) = seen.insert(&t.name, shard.clone()) {
                return Err(wrong(format!(
                    "holds tensor `{}`, which shard `{other}` holds too",
                    t.name
                )));
            }
            entries.push(Entry::of(t.clone(), f.source.clone()));
        }
        shards.push(f.source.clone());
    }
    if let Some(n) = claimed.filter(|&n| n != entries.len() as u64) {
        return Err(SetError::Numbered {
            shard: String::from_utf8_lossy(&set.shard_name(1)).into_owned(),
            why: format!(
                "says the set has {n} tensors ({tensors_key}), its shards hold {}",
                entries.len()
            ),
        });
    }
    Ok(Merged { entries, shards })
}
