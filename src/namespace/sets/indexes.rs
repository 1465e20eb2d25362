//! The generated index files: the index of the safetensors files a set converts to, as
//! `transformers` writes an index (sorted keys, two-space indent, a final newline), shown only
//! while every shard converts.

use std::sync::Arc;

use serde_json::Value;

use super::Merged;
use crate::format::Format;
use crate::namespace::draft::{self, Draft};
use crate::namespace::node::Content;
use crate::source::Source;

/// The index of the safetensors files a set of checkpoints converts to, named `name`: the index
/// `source` with each shard named by its conversion.
pub fn converted_index(name: Arc<[u8]>, source: &Arc<Source>, merged: &Merged) -> Option<Draft> {
    let idx = source.index().ok().filter(|_| converts(merged))?;
    let weight_map: serde_json::Map<String, Value> = idx
        .weight_map
        .into_iter()
        .map(|(tensor, shard)| {
            let file = match Format::of(shard.as_bytes()) {
                Some((f, stem)) => f.converted_name(stem).unwrap_or_else(|| shard.into_bytes()),
                None => shard.into_bytes(),
            };
            (
                tensor,
                Value::String(String::from_utf8_lossy(&file).into_owned()),
            )
        })
        .collect();
    index_file(name, source, idx.metadata, weight_map)
}

/// The index of the safetensors files the shards of a numbered set (`merged`, whose first shard is
/// `first`) convert to, named `name`: each tensor mapped to its shard's conversion, and the
/// conversions' `total_size`.
pub fn numbered_index(name: Arc<[u8]>, first: &Arc<Source>, merged: &Merged) -> Option<Draft> {
    if !converts(merged) {
        return None;
    }
    let mut weight_map = serde_json::Map::new();
    let mut total: u64 = 0;
    for shard in &merged.shards {
        let format = shard.format()?;
        let Some(Ok(converted)) = shard.converted(format) else {
            return None;
        };
        total = total.saturating_add(converted.data_len);
        let file_name = shard.path.file_name()?.as_encoded_bytes();
        let (_, stem) = Format::of(file_name)?;
        let file = format.converted_name(stem)?;
        let file = String::from_utf8_lossy(&file).into_owned();
        for part in &converted.parts {
            weight_map.insert(part.tensor.name.to_string(), Value::String(file.clone()));
        }
    }
    let metadata = serde_json::Map::from_iter([("total_size".to_string(), Value::from(total))]);
    index_file(name, first, Some(metadata), weight_map)
}

/// Whether every shard of `merged` converts.
fn converts(merged: &Merged) -> bool {
    merged.shards.iter().all(|s| {
        let format = s.format();
        format.is_some_and(|f| matches!(s.converted(f), Some(Ok(_))))
    })
}

/// The index file `name` of `metadata` and `weight_map`, owned as `owner` is.
fn index_file(
    name: Arc<[u8]>,
    owner: &Source,
    metadata: Option<serde_json::Map<String, Value>>,
    weight_map: serde_json::Map<String, Value>,
) -> Option<Draft> {
    let mut top = serde_json::Map::new();
    if let Some(m) = metadata {
        top.insert("metadata".into(), Value::Object(m));
    }
    top.insert("weight_map".into(), Value::Object(weight_map));
    let mut json = serde_json::to_vec_pretty(&Value::Object(top)).ok()?;
    json.push(b'\n');
    let attr = draft::file_attr(&owner.meta, json.len() as u64);
    Some(Draft::file(name, attr, Content::Generated(json.into())))
}
