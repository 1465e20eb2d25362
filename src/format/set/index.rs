//! Sharded sets: the `NAME.safetensors.index[.VARIANT].json` files that map each tensor to a shard.
//! Parses and checks the index on its own, and keeps what checking it against its shards needs in
//! brief ([`Plan`]); that check is the namespace's job.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io;
use std::os::unix::fs::FileExt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, Visitor};
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

/// What an index says, in brief. An index of a large set is megabytes of JSON and more in memory;
/// what a check against its shards needs is kept per index version instead: for each shard, how
/// many tensors the index maps to it and a digest of their names ([`digest`]). A shard agrees with
/// the index when its own count and digest are the same; only when they are not is the index
/// parsed again, to name the tensor at fault.
#[derive(Debug)]
pub struct Plan {
    /// By shard file name: the number of tensors mapped to it and the digest of their names.
    pub shards: BTreeMap<String, (usize, u64)>,
    pub metadata: Option<Map<String, Value>>,
}

impl Plan {
    pub fn of(idx: Index) -> Plan {
        // Tens of thousands of tensors name a few hundred shards: counted by borrowed name, then
        // each name is cloned once.
        let mut by_shard: HashMap<&str, (usize, u64)> = HashMap::new();
        for (tensor, shard) in &idx.weight_map {
            let (count, digest) = by_shard.entry(shard.as_str()).or_default();
            *count += 1;
            *digest = digest.wrapping_add(name_hash(tensor));
        }
        let shards: BTreeMap<String, (usize, u64)> = by_shard
            .into_iter()
            .map(|(shard, v)| (shard.to_string(), v))
            .collect();
        Plan {
            shards,
            metadata: idx.metadata,
        }
    }
}

/// The count and digest of a set of tensor names: the wrapping sum of their hashes, so
/// independent of order.
pub fn digest<'a>(names: impl Iterator<Item = &'a str>) -> (usize, u64) {
    names.fold((0, 0), |(n, d), name| {
        (n + 1, d.wrapping_add(name_hash(name)))
    })
}

fn name_hash(name: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// Why an index is refused. The message leaves the path out: whoever reports it adds it.
#[derive(Debug)]
pub enum IndexError {
    /// The file is larger than [`MAX_INDEX_BYTES`] (its size).
    TooLarge(u64),
    /// Reading the file failed.
    Read(io::Error),
    /// Not JSON, or its top level is not an object.
    Invalid(serde_json::Error),
    /// A top-level key that is looked at is given twice; the position is where parsing stopped.
    KeyTwice {
        key: &'static str,
        line: usize,
        column: usize,
    },
    /// `weight_map` lists a tensor twice; the position is where parsing stopped.
    TensorTwice {
        tensor: String,
        line: usize,
        column: usize,
    },
    /// `metadata` is there and neither an object nor null.
    MetadataNotObject,
    /// There is no `weight_map`.
    NoWeightMap,
    /// `weight_map` is not an object.
    WeightMapNotObject,
    /// The shard of a tensor is not a string.
    ShardNotString { tensor: String },
    /// The shard of a tensor is not a plain file name (empty, `.`, `..`, or with a `/` or NUL).
    ShardNotFileName { tensor: String, shard: String },
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::TooLarge(len) => write!(
                f,
                "index is {len} bytes, over the limit of {MAX_INDEX_BYTES} bytes"
            ),
            IndexError::Read(e) => write!(f, "cannot read index: {e}"),
            IndexError::Invalid(e) => write!(f, "index is not valid: {e}"),
            IndexError::KeyTwice { key, line, column } => write!(
                f,
                "index is not valid: key `{key}` appears twice at line {line} column {column}"
            ),
            IndexError::TensorTwice {
                tensor,
                line,
                column,
            } => write!(
                f,
                "index is not valid: weight_map lists tensor `{tensor}` twice at line {line} \
                 column {column}"
            ),
            IndexError::MetadataNotObject => f.write_str("index `metadata` is not an object"),
            IndexError::NoWeightMap => f.write_str("index has no `weight_map` object"),
            IndexError::WeightMapNotObject => f.write_str("index `weight_map` is not an object"),
            IndexError::ShardNotString { tensor } => {
                write!(f, "weight_map entry for tensor `{tensor}` is not a string")
            }
            IndexError::ShardNotFileName { tensor, shard } => write!(
                f,
                "weight_map entry for tensor `{tensor}` is `{shard}`, not a file name in the \
                 index's directory"
            ),
        }
    }
}

impl std::error::Error for IndexError {}

/// Reads an index file of `len` bytes (refused over [`MAX_INDEX_BYTES`]) and parses it.
pub fn read(file: &File, len: u64) -> Result<Index, IndexError> {
    if len > MAX_INDEX_BYTES {
        return Err(IndexError::TooLarge(len));
    }
    let mut bytes = vec![0; len as usize];
    file.read_exact_at(&mut bytes, 0)
        .map_err(IndexError::Read)?;
    parse(&bytes)
}

/// Parses an index file's bytes.
pub fn parse(bytes: &[u8]) -> Result<Index, IndexError> {
    let mut twice = None;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let top = Top(&mut twice)
        .deserialize(&mut de)
        .and_then(|top| de.end().map(|()| top));
    let top = top.map_err(|e| {
        let (line, column) = (e.line(), e.column());
        match twice {
            Some(Twice::Key(key)) => IndexError::KeyTwice { key, line, column },
            Some(Twice::Tensor(tensor)) => IndexError::TensorTwice {
                tensor,
                line,
                column,
            },
            None => IndexError::Invalid(e),
        }
    })?;
    let metadata = match top.metadata {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return Err(IndexError::MetadataNotObject),
    };
    let StrictMap { shards, bad } = match top.weight_map {
        None => return Err(IndexError::NoWeightMap),
        Some(WeightMap::Other) => return Err(IndexError::WeightMapNotObject),
        Some(WeightMap::Map(m)) => m,
    };
    // Entries are checked in any order, but the one reported is the first by name, as a sorted
    // walk would find it.
    if let Some((_, problem)) = bad.into_iter().min_by(|a, b| a.0.cmp(&b.0)) {
        return Err(problem);
    }
    Ok(Index {
        weight_map: shards,
        metadata,
    })
}

/// What is given twice, noted by the parser before it stops (serde's error carries only text).
enum Twice {
    Key(&'static str),
    Tensor(String),
}

/// The top level of an index: only `metadata` and `weight_map` are looked at.
struct IndexFile {
    metadata: Option<Value>,
    weight_map: Option<WeightMap>,
}

/// The `weight_map` value: an object, or anything else (parsed in full, so that invalid JSON in it
/// still breaks the index).
enum WeightMap {
    Map(StrictMap),
    Other,
}

/// The `weight_map` object, read in one pass: the shard of each tensor, and the entries that do
/// not name a file of the index's directory, with why. A key given twice is an error (serde_json
/// keeps the last one silently, which would let an index list a tensor twice with two different
/// shards).
struct StrictMap {
    shards: HashMap<String, String>,
    bad: HashMap<String, IndexError>,
}

/// Any JSON value other than the one a visitor is after, parsed in full and dropped (so that
/// invalid JSON in it still breaks the index).
macro_rules! visit_other {
    ($other:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<Value>()?.is_some() {}
            Ok($other)
        }
    };
}

/// A `weight_map` value: a string, or anything else.
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
            visit_other!(ShardValue::Other);
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ShardValue, E> {
                Ok(ShardValue::Name(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<ShardValue, E> {
                Ok(ShardValue::Name(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ShardValue, A::Error> {
                while map.next_entry::<String, Value>()?.is_some() {}
                Ok(ShardValue::Other)
            }
        }
        d.deserialize_any(Shard)
    }
}

/// Reads the top level of an index, noting in `.0` what it finds given twice.
struct Top<'t>(&'t mut Option<Twice>);

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = IndexFile;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<IndexFile, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
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
            let twice = match key.as_str() {
                "metadata" if out.metadata.is_none() => {
                    out.metadata = Some(map.next_value()?);
                    continue;
                }
                "weight_map" if out.weight_map.is_none() => {
                    out.weight_map = Some(map.next_value_seed(Strict(&mut *self.0))?);
                    continue;
                }
                "metadata" => "metadata",
                "weight_map" => "weight_map",
                // Parsed, not skipped, so that invalid JSON anywhere breaks the index.
                _ => {
                    map.next_value::<Value>()?;
                    continue;
                }
            };
            *self.0 = Some(Twice::Key(twice));
            return Err(de::Error::custom(format!("key `{twice}` appears twice")));
        }
        Ok(out)
    }
}

/// Notes in `slot` that `tensor` is listed twice, and gives the error that stops the parser.
fn twice<E: de::Error>(slot: &mut Option<Twice>, tensor: String) -> E {
    let e = E::custom(format!("weight_map lists tensor `{tensor}` twice"));
    *slot = Some(Twice::Tensor(tensor));
    e
}

/// Reads `weight_map`, noting in `.0` a tensor it finds listed twice.
struct Strict<'t>(&'t mut Option<Twice>);

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = WeightMap;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<WeightMap, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = WeightMap;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    visit_other!(WeightMap::Other);
    fn visit_str<E: de::Error>(self, _: &str) -> Result<WeightMap, E> {
        Ok(WeightMap::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WeightMap, A::Error> {
        let mut out = StrictMap {
            shards: HashMap::with_capacity(map.size_hint().unwrap_or(0)),
            bad: HashMap::new(),
        };
        while let Some(tensor) = map.next_key::<String>()? {
            if !out.bad.is_empty() && out.bad.contains_key(&tensor) {
                return Err(twice(self.0, tensor));
            }
            let problem = match map.next_value()? {
                ShardValue::Name(shard) if is_plain_file_name(&shard) => {
                    // One lookup for the check and the insert.
                    match out.shards.entry(tensor) {
                        Entry::Occupied(e) => return Err(twice(self.0, e.remove_entry().0)),
                        Entry::Vacant(e) => e.insert(shard),
                    };
                    continue;
                }
                _ if out.shards.contains_key(&tensor) => return Err(twice(self.0, tensor)),
                ShardValue::Name(shard) => IndexError::ShardNotFileName {
                    tensor: tensor.clone(),
                    shard,
                },
                ShardValue::Other => IndexError::ShardNotString {
                    tensor: tensor.clone(),
                },
            };
            out.bad.insert(tensor, problem);
        }
        Ok(WeightMap::Map(out))
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

    /// Each malformed index gives the rule it breaks, with the message users see (written out
    /// here by hand, positions counted in the bytes).
    #[test]
    fn rejects_bad_indexes_with_the_rule_broken() {
        use IndexError as E;
        type Case = (&'static [u8], fn(&IndexError) -> bool, &'static str);
        let cases: &[Case] = &[
            (
                b"nope",
                |e| matches!(e, E::Invalid(_)),
                "index is not valid: expected ident at line 1 column 2",
            ),
            (
                b"[]",
                |e| matches!(e, E::Invalid(_)),
                "index is not valid: invalid type: sequence, expected a JSON object at line 1 \
                 column 0",
            ),
            (
                b"{\"x\":{\"\xff\":1},\"weight_map\":{}}",
                |e| matches!(e, E::Invalid(_)),
                "index is not valid: invalid unicode code point at line 1 column 8",
            ),
            (
                br#"{"x":"\ud800","weight_map":{}}"#,
                |e| matches!(e, E::Invalid(_)),
                "index is not valid: unexpected end of hex escape at line 1 column 13",
            ),
            (
                br#"{"weight_map":{"a":[1,}}"#,
                |e| matches!(e, E::Invalid(_)),
                "index is not valid: expected value at line 1 column 23",
            ),
            (
                br#"{"weight_map":{}} x"#,
                |e| matches!(e, E::Invalid(_)),
                "index is not valid: trailing characters at line 1 column 19",
            ),
            (
                br#"{"weight_map":{},"weight_map":{}}"#,
                |e| {
                    matches!(
                        e,
                        E::KeyTwice {
                            key: "weight_map",
                            line: 1,
                            column: 29
                        }
                    )
                },
                "index is not valid: key `weight_map` appears twice at line 1 column 29",
            ),
            (
                br#"{"metadata":{},"metadata":{},"weight_map":{}}"#,
                |e| {
                    matches!(
                        e,
                        E::KeyTwice {
                            key: "metadata",
                            line: 1,
                            column: 25
                        }
                    )
                },
                "index is not valid: key `metadata` appears twice at line 1 column 25",
            ),
            (
                br#"{"weight_map":{"a":"s1","a":"s2"}}"#,
                |e| matches!(e, E::TensorTwice { tensor, line: 1, column: 33 } if tensor == "a"),
                "index is not valid: weight_map lists tensor `a` twice at line 1 column 33",
            ),
            (
                br#"{"weight_map":{"a":1,"a":"s"}}"#,
                |e| matches!(e, E::TensorTwice { tensor, line: 1, column: 24 } if tensor == "a"),
                "index is not valid: weight_map lists tensor `a` twice at line 1 column 24",
            ),
            (
                br#"{"weight_map":{"a":"s","a":1}}"#,
                |e| matches!(e, E::TensorTwice { tensor, line: 1, column: 29 } if tensor == "a"),
                "index is not valid: weight_map lists tensor `a` twice at line 1 column 29",
            ),
            (
                br#"{"metadata":[],"weight_map":{}}"#,
                |e| matches!(e, E::MetadataNotObject),
                "index `metadata` is not an object",
            ),
            (
                b"{}",
                |e| matches!(e, E::NoWeightMap),
                "index has no `weight_map` object",
            ),
            (
                br#"{"weight_map":[]}"#,
                |e| matches!(e, E::WeightMapNotObject),
                "index `weight_map` is not an object",
            ),
            (
                br#"{"weight_map":null}"#,
                |e| matches!(e, E::WeightMapNotObject),
                "index `weight_map` is not an object",
            ),
            (
                br#"{"weight_map":"s.safetensors"}"#,
                |e| matches!(e, E::WeightMapNotObject),
                "index `weight_map` is not an object",
            ),
            (
                br#"{"weight_map":{"a":1}}"#,
                |e| matches!(e, E::ShardNotString { tensor } if tensor == "a"),
                "weight_map entry for tensor `a` is not a string",
            ),
            (
                br#"{"weight_map":{"a":{"b":"s"}}}"#,
                |e| matches!(e, E::ShardNotString { tensor } if tensor == "a"),
                "weight_map entry for tensor `a` is not a string",
            ),
            (
                br#"{"weight_map":{"a":"../x.safetensors"}}"#,
                |e| {
                    matches!(e, E::ShardNotFileName { tensor, shard }
                    if tensor == "a" && shard == "../x.safetensors")
                },
                "weight_map entry for tensor `a` is `../x.safetensors`, not a file name in the \
                 index's directory",
            ),
            (
                br#"{"weight_map":{"a":"/etc/passwd"}}"#,
                |e| matches!(e, E::ShardNotFileName { shard, .. } if shard == "/etc/passwd"),
                "weight_map entry for tensor `a` is `/etc/passwd`, not a file name in the \
                 index's directory",
            ),
            (
                br#"{"weight_map":{"a":".."}}"#,
                |e| matches!(e, E::ShardNotFileName { shard, .. } if shard == ".."),
                "weight_map entry for tensor `a` is `..`, not a file name in the index's \
                 directory",
            ),
            (
                br#"{"weight_map":{"a":""}}"#,
                |e| matches!(e, E::ShardNotFileName { shard, .. } if shard.is_empty()),
                "weight_map entry for tensor `a` is ``, not a file name in the index's directory",
            ),
            // Of several bad entries, the first by name.
            (
                br#"{"weight_map":{"b":1,"a":"/x"}}"#,
                |e| matches!(e, E::ShardNotFileName { tensor, .. } if tensor == "a"),
                "weight_map entry for tensor `a` is `/x`, not a file name in the index's directory",
            ),
        ];
        for (bytes, is_variant, message) in cases {
            let shown = String::from_utf8_lossy(bytes);
            let err = parse(bytes).unwrap_err();
            assert!(is_variant(&err), "{shown}: {err:?}");
            assert_eq!(err.to_string(), *message, "{shown}");
        }
    }

    #[test]
    fn escaped_shard_names_are_names() {
        let i = parse(br#"{"weight_map":{"a\u0062":"s\u0031.safetensors"}}"#).unwrap();
        assert_eq!(i.weight_map["ab"], "s1.safetensors");
    }

    #[test]
    fn reads_bounded_files() {
        let p = std::env::temp_dir().join(format!("tm-index-{}", std::process::id()));
        std::fs::write(&p, br#"{"weight_map":{"a":"s.safetensors"}}"#).unwrap();
        let f = File::open(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        assert_eq!(read(&f, 36).unwrap().weight_map["a"], "s.safetensors");
        let big = MAX_INDEX_BYTES + 1;
        let e = read(&f, big).unwrap_err();
        assert!(matches!(e, IndexError::TooLarge(n) if n == big), "{e:?}");
        assert_eq!(
            e.to_string(),
            "index is 33554433 bytes, over the limit of 33554432 bytes"
        );
        let e = read(&f, 100).unwrap_err();
        assert!(matches!(e, IndexError::Read(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "cannot read index: failed to fill whole buffer"
        );
    }
}
