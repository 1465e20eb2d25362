//! A safetensors header's JSON read in one pass.
//!
//! The crate's own deserializer (`serde(flatten)` over a map of tensors) first copies the whole
//! header into a generic tree, about ten times the size of the JSON: near 1 GiB for a header at the
//! format's 100 MB limit. [`Entries`] reads the same JSON in one pass straight into what
//! `Metadata::new` takes. Where that finds the text is not JSON, the crate would reject it for the
//! same rule; where it rejects a header for anything else, the crate's deserializer reads the
//! header again and has the last word. So what is accepted, and the rule named otherwise, stay the
//! crate's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use ::safetensors::SafeTensorError;
use ::safetensors::tensor::{Metadata, TensorInfo};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::format::description::Tensor;

/// The tensors (in data order) and the metadata (keys sorted) of a valid header.
pub(super) type Validated = (Vec<Arc<Tensor>>, Option<BTreeMap<String, String>>);

/// A header's JSON read into what `Metadata::new` takes: the crate's deserializer does the same
/// after buffering the whole header, and both accept the same JSON where [`Entries::parse`]
/// succeeds; where it finds the text is not JSON the crate does too (the fuzz target `header`
/// checks both against the crate).
///
/// Equivalences kept: `__metadata__` is read as the crate reads it (`null` is none, values must be
/// strings, the last of repeated keys wins, a second `__metadata__` is an error); every other key
/// is a tensor, the last of repeated names wins; a tensor's unknown fields are ignored but must be
/// valid JSON as the crate's buffering requires (no lone surrogate escapes, nesting within
/// serde_json's limit), where serde's own skipping of ignored values checks less.
pub(super) struct Entries {
    metadata: Option<HashMap<String, String>>,
    /// In the order of the JSON, repeats included.
    tensors: Vec<(String, TensorInfo)>,
}

impl Entries {
    /// The header read in one pass, or why this reader does not accept it.
    pub(super) fn parse(json: &str) -> Result<Entries, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(json);
        let entries = Entries::deserialize(&mut de)?;
        de.end()?;
        Ok(entries)
    }

    /// The header read by the crate's own deserializer (which also validates it), for what
    /// [`Entries::parse`] rejects: `None` where the crate rejects it too.
    pub(super) fn from_crate(json: &str) -> Option<Entries> {
        let metadata: Metadata = serde_json::from_str(json).ok()?;
        let tensors = metadata
            .offset_keys()
            .into_iter()
            .filter_map(|name| {
                let info = metadata.info(&name)?.clone();
                Some((name, info))
            })
            .collect();
        Some(Entries {
            metadata: metadata.metadata().clone(),
            tensors,
        })
    }

    /// The tensors and metadata, if the crate's `Metadata::new` accepts them (the data filling
    /// the file is left to check).
    pub(super) fn validate(self) -> Result<Validated, SafeTensorError> {
        let Entries {
            metadata,
            mut tensors,
        } = self;
        keep_last_of_each_name(&mut tensors);
        // As the crate orders them (a stable sort of its hash map's entries: the order of tensors
        // with equal offsets is arbitrary there too).
        tensors.sort_by_key(|(_, info)| info.data_offsets);
        let ours: Vec<Arc<Tensor>> = tensors
            .iter()
            .map(|(name, info)| {
                Arc::new(Tensor {
                    name: Arc::from(name.as_str()),
                    dtype: info.dtype.into(),
                    shape: info.shape.clone().into_boxed_slice(),
                    begin: info.data_offsets.0 as u64,
                    end: info.data_offsets.1 as u64,
                    strides: None,
                    computed: None,
                    file: None,
                })
            })
            .collect();
        let sorted_metadata = metadata
            .as_ref()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
        Metadata::new(metadata, tensors)?;
        Ok((ours, sorted_metadata))
    }
}

/// Drops all but the last entry of each name, as the crate's map of tensors keeps the last value
/// of a repeated key.
fn keep_last_of_each_name(tensors: &mut Vec<(String, TensorInfo)>) {
    let mut seen = HashSet::with_capacity(tensors.len());
    let keep: Vec<bool> = tensors
        .iter()
        .rev()
        .map(|(name, _)| seen.insert(name.as_str()))
        .collect();
    drop(seen);
    let mut keep = keep.into_iter().rev();
    tensors.retain(|_| keep.next().unwrap_or(true));
}

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Top;
        impl<'de> Visitor<'de> for Top {
            type Value = Entries;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a safetensors header object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut metadata = None;
                let mut tensors = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "__metadata__" {
                        if metadata.is_some() {
                            return Err(de::Error::duplicate_field("__metadata__"));
                        }
                        metadata = Some(map.next_value::<Option<HashMap<String, String>>>()?);
                    } else {
                        tensors.push((key, map.next_value::<Entry>()?.0));
                    }
                }
                Ok(Entries {
                    metadata: metadata.flatten(),
                    tensors,
                })
            }
        }
        d.deserialize_map(Top)
    }
}

/// One tensor's entry, read as the crate's `TensorInfo` but with unknown fields checked in full.
struct Entry(TensorInfo);

/// The fields of a tensor's entry.
enum Field {
    Dtype,
    Shape,
    DataOffsets,
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = Field;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
                Ok(match v {
                    "dtype" => Field::Dtype,
                    "shape" => Field::Shape,
                    "data_offsets" => Field::DataOffsets,
                    _ => Field::Other,
                })
            }
        }
        d.deserialize_identifier(Name)
    }
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Entry;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a tensor's entry")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
                fn once<T, E: de::Error>(slot: &Option<T>, name: &'static str) -> Result<(), E> {
                    match slot {
                        Some(_) => Err(E::duplicate_field(name)),
                        None => Ok(()),
                    }
                }
                let (mut dtype, mut shape, mut data_offsets) = (None, None, None);
                while let Some(field) = map.next_key::<Field>()? {
                    match field {
                        Field::Dtype => {
                            once(&dtype, "dtype")?;
                            dtype = Some(map.next_value()?);
                        }
                        Field::Shape => {
                            once(&shape, "shape")?;
                            shape = Some(map.next_value()?);
                        }
                        Field::DataOffsets => {
                            once(&data_offsets, "data_offsets")?;
                            data_offsets = Some(map.next_value()?);
                        }
                        Field::Other => {
                            map.next_value::<Checked>()?;
                        }
                    }
                }
                Ok(Entry(TensorInfo {
                    dtype: dtype.ok_or_else(|| de::Error::missing_field("dtype"))?,
                    shape: shape.ok_or_else(|| de::Error::missing_field("shape"))?,
                    data_offsets: data_offsets
                        .ok_or_else(|| de::Error::missing_field("data_offsets"))?,
                }))
            }
        }
        d.deserialize_map(Fields)
    }
}

/// Any JSON value, parsed in full and dropped: how the crate's buffering reads what it then
/// ignores.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Any;
        impl<'de> Visitor<'de> for Any {
            type Value = Checked;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
                Ok(Checked)
            }

            fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
                Ok(Checked)
            }

            fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
                Ok(Checked)
            }

            fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
                Ok(Checked)
            }

            fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
                Ok(Checked)
            }

            fn visit_unit<E>(self) -> Result<Checked, E> {
                Ok(Checked)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
                while seq.next_element::<Checked>()?.is_some() {}
                Ok(Checked)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
                while map.next_entry::<Checked, Checked>()?.is_some() {}
                Ok(Checked)
            }
        }
        d.deserialize_any(Any)
    }
}
