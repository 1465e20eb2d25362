//! Sharded sets: the `NAME.safetensors.index[.VARIANT].json` files that map each tensor to a shard.
//! Parses and checks the index on its own; checking it against the shards is the namespace's job.

use std::collections::HashMap;

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

/// Index files larger than this are refused (the largest public index, 92k tensors, is about 8 MB).
pub const MAX_INDEX_BYTES: u64 = 32 << 20;

/// A parsed index.
#[derive(Debug)]
pub struct Index {
    /// Tensor name to shard file name.
    pub weight_map: HashMap<String, String>,
    /// The `metadata` object, if any.
    pub metadata: Option<Map<String, Value>>,
}

/// The name of the merged directory an index file asks for, or `None` if `file_name` is not an index:
/// `NAME.safetensors.index.json` gives `NAME.tensors`, `NAME.safetensors.index.VARIANT.json` gives
/// `NAME.VARIANT.tensors` (the name the unsharded `NAME.VARIANT.safetensors` would get).
pub fn merged_dir_name(file_name: &str) -> Option<String> {
    let (stem, rest) = file_name.split_once(".safetensors.index.")?;
    if stem.is_empty() {
        return None;
    }
    if rest == "json" {
        return Some(format!("{stem}.tensors"));
    }
    let variant = rest.strip_suffix(".json")?;
    (!variant.is_empty()).then(|| format!("{stem}.{variant}.tensors"))
}

/// Parses an index file's bytes. The error is the rule broken, without the path.
pub fn parse(bytes: &[u8]) -> Result<Index, String> {
    let top: IndexFile =
        serde_json::from_slice(bytes).map_err(|e| format!("index is not valid: {e}"))?;
    let metadata = match top.metadata {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return Err("index `metadata` is not an object".into()),
    };
    let Some(StrictMap { shards, bad }) = top.weight_map else {
        return Err("index has no `weight_map` object".into());
    };
    // Entries are checked in any order, but the one reported is the first by name, as a sorted
    // walk would find it.
    if let Some((_, problem)) = bad.into_iter().min() {
        return Err(problem);
    }
    let weight_map = shards;
    Ok(Index {
        weight_map,
        metadata,
    })
}

/// The top level of an index: only `metadata` and `weight_map` are looked at.
struct IndexFile {
    metadata: Option<Value>,
    weight_map: Option<StrictMap>,
}

/// The `weight_map` object, read in one pass: the shard of each tensor, and the entries that do
/// not name a file of the index's directory, with why. A key given twice is an error (serde_json
/// keeps the last one silently, which would let an index list a tensor twice with two different
/// shards).
struct StrictMap {
    shards: HashMap<String, String>,
    bad: HashMap<String, String>,
}

/// A `weight_map` value: a string, or anything else (parsed in full, so that invalid JSON in it
/// still breaks the index).
enum ShardValue {
    Name(String),
    Other,
}

impl<'de> Deserialize<'de> for ShardValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Shard;
        impl<'de> Visitor<'de> for Shard {
            type Value = ShardValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ShardValue, E> {
                Ok(ShardValue::Name(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<ShardValue, E> {
                Ok(ShardValue::Name(v))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<ShardValue, E> {
                Ok(ShardValue::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<ShardValue, E> {
                Ok(ShardValue::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<ShardValue, E> {
                Ok(ShardValue::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<ShardValue, E> {
                Ok(ShardValue::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<ShardValue, E> {
                Ok(ShardValue::Other)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<ShardValue, A::Error> {
                while seq.next_element::<Value>()?.is_some() {}
                Ok(ShardValue::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ShardValue, A::Error> {
                while map.next_entry::<String, Value>()?.is_some() {}
                Ok(ShardValue::Other)
            }
        }
        d.deserialize_any(Shard)
    }
}

impl<'de> Deserialize<'de> for IndexFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Top;
        impl<'de> Visitor<'de> for Top {
            type Value = IndexFile;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IndexFile, A::Error> {
                let mut out = IndexFile {
                    metadata: None,
                    weight_map: None,
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "metadata" if out.metadata.is_none() => {
                            out.metadata = Some(map.next_value()?)
                        }
                        "weight_map" if out.weight_map.is_none() => {
                            out.weight_map = Some(map.next_value()?)
                        }
                        "metadata" | "weight_map" => {
                            return Err(de::Error::custom(format!("key `{key}` appears twice")));
                        }
                        // Parsed, not skipped, so that invalid JSON anywhere breaks the index.
                        _ => {
                            map.next_value::<Value>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(Top)
    }
}

impl<'de> Deserialize<'de> for StrictMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Strict;
        impl<'de> Visitor<'de> for Strict {
            type Value = StrictMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StrictMap, A::Error> {
                let mut out = StrictMap {
                    shards: HashMap::with_capacity(map.size_hint().unwrap_or(0)),
                    bad: HashMap::new(),
                };
                while let Some(tensor) = map.next_key::<String>()? {
                    let twice =
                        || de::Error::custom(format!("weight_map lists tensor `{tensor}` twice"));
                    if !out.bad.is_empty() && out.bad.contains_key(&tensor) {
                        return Err(twice());
                    }
                    match map.next_value()? {
                        ShardValue::Name(shard) if is_plain_file_name(&shard) => {
                            // One lookup for the check and the insert.
                            match out.shards.entry(tensor) {
                                std::collections::hash_map::Entry::Occupied(e) => {
                                    return Err(de::Error::custom(format!(
                                        "weight_map lists tensor `{}` twice",
                                        e.key()
                                    )));
                                }
                                std::collections::hash_map::Entry::Vacant(e) => {
                                    e.insert(shard);
                                }
                            }
                            continue;
                        }
                        _ if out.shards.contains_key(&tensor) => return Err(twice()),
                        ShardValue::Name(shard) => {
                            let problem = format!(
                                "weight_map entry for tensor `{tensor}` is `{shard}`, not a file \
                                 name in the index's directory"
                            );
                            out.bad.insert(tensor, problem);
                        }
                        ShardValue::Other => {
                            let problem =
                                format!("weight_map entry for tensor `{tensor}` is not a string");
                            out.bad.insert(tensor, problem);
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(Strict)
    }
}

fn is_plain_file_name(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/') && !s.contains('\0')
}

/// Renders an index metadata value as an xattr value: strings as they are, anything else as compact
/// JSON (`total_size` gives `123456`).
pub fn metadata_value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_names() {
        assert_eq!(
            merged_dir_name("model.safetensors.index.json").as_deref(),
            Some("model.tensors")
        );
        assert_eq!(
            merged_dir_name("model.safetensors.index.fp16.json").as_deref(),
            Some("model.fp16.tensors")
        );
        assert_eq!(
            merged_dir_name("diffusion_pytorch_model.safetensors.index.json").as_deref(),
            Some("diffusion_pytorch_model.tensors")
        );
        assert_eq!(merged_dir_name("model.safetensors"), None);
        assert_eq!(merged_dir_name("config.json"), None);
        assert_eq!(merged_dir_name(".safetensors.index.json"), None);
        assert_eq!(merged_dir_name("model.safetensors.index..json"), None);
        assert_eq!(merged_dir_name("model.safetensors.index.json.bak"), None);
    }

    #[test]
    fn parses_weight_map_and_metadata() {
        let i =
            parse(br#"{"metadata":{"total_size":12},"weight_map":{"b":"s2","a":"s1"}}"#).unwrap();
        assert_eq!(
            {
                let mut keys: Vec<_> = i.weight_map.keys().collect();
                keys.sort();
                keys
            },
            ["a", "b"]
        );
        assert_eq!(
            metadata_value_text(&i.metadata.unwrap()["total_size"]),
            "12"
        );
        assert!(parse(br#"{"weight_map":{}}"#).unwrap().metadata.is_none());
    }

    #[test]
    fn rejects_bad_indexes() {
        for (bytes, needle) in [
            (&b"nope"[..], "not valid"),
            (b"[]", "a JSON object"),
            (
                br#"{"weight_map":{"a":"s1","a":"s2"}}"#,
                "lists tensor `a` twice",
            ),
            (br#"{"weight_map":{},"weight_map":{}}"#, "appears twice"),
            (b"{\"x\":{\"\xff\":1},\"weight_map\":{}}", "not valid"),
            (br#"{"x":"\ud800","weight_map":{}}"#, "not valid"),
            (b"{}", "no `weight_map`"),
            (br#"{"weight_map":[]}"#, "expected a JSON object"),
            (br#"{"weight_map":{"a":1}}"#, "not a string"),
            (
                br#"{"weight_map":{"a":"../x.safetensors"}}"#,
                "not a file name",
            ),
            (br#"{"weight_map":{"a":"/etc/passwd"}}"#, "not a file name"),
            (br#"{"weight_map":{"a":".."}}"#, "not a file name"),
            (br#"{"weight_map":{"a":""}}"#, "not a file name"),
            (
                br#"{"metadata":[],"weight_map":{}}"#,
                "`metadata` is not an object",
            ),
        ] {
            let err = parse(bytes).unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
    }
}
