//! The reader of ONNX models (`NAME.onnx`): the protobuf is walked by `pread` through a small
//! window ([`wire`]), never read whole, so a model of gigabytes costs the memory of its
//! description. Every tensor of the main graph, of every subgraph and of every local function is
//! found ([`graph`]): initializers and the values of `Constant` nodes. Each tensor's bytes are a
//! stretch of the file where the model stores them as they are (`raw_data`, one packed array of
//! floats or doubles), and values computed on read where it stores them as varints or in pieces
//! ([`tensor`]).
//!
//! A tensor is named by its initializer's name or its `Constant`'s output; a name already taken
//! (subgraphs reuse names) is prefixed by its graph's path (`If_0.then_branch/`).

mod error;
mod graph;
mod tensor;
mod wire;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value as Json;

pub use error::OnnxError;
use graph::{Found, MAX_NAME, Value};
use tensor::{Bytes, Storage, Typed, element_type};
use wire::{At, Spans, Window, Wire};

use super::description::{Conversion, Description, NotOffered, Tensor, inside};
use super::dtype::Dtype;
use super::error::FormatError;
use super::kit::notes;

/// Reads `file` (whose path is `path`, for messages) as an ONNX model.
pub fn describe(file: &File, path: &Path) -> Result<Description, FormatError> {
    let err = |e| FormatError::invalid(path, e);
    let len = file
        .metadata()
        .map_err(|e| FormatError::Io(path.to_path_buf(), e))?
        .len();
    let mut win = Window::new(file, len);
    let model = graph::model(&mut win, len).map_err(err)?;
    let mut notes = model.notes;
    let mut taken = HashSet::new();
    let mut tensors = Vec::with_capacity(model.found.len());
    let mut files = Files::default();
    for found in model.found {
        let Some(placed) = place(&mut win, &found, &mut files, &mut notes).map_err(err)? else {
            continue;
        };
        let name = unique(&mut taken, &placed.name, &found.path);
        tensors.push(Arc::new(placed.tensor(name)));
    }
    tensors.sort_by(|a, b| (a.begin, &a.name).cmp(&(b.begin, &b.name)));
    let conversion = conversion(&tensors, &model.metadata);
    let notes = notes::bounded(notes, 0, path);
    Ok(Description {
        tensors,
        metadata: Some(model.metadata),
        notes,
        conversion: Some(conversion),
        files: files.names,
        ..Description::new("onnx")
    })
}

/// The data files the model names, each once.
#[derive(Default)]
struct Files {
    names: Vec<Box<str>>,
    index: HashMap<String, u32>,
}

impl Files {
    /// The index of the data file at `location` (already checked).
    fn of(&mut self, location: String) -> u32 {
        let next = self.names.len() as u32;
        *self.index.entry(location).or_insert_with_key(|l| {
            self.names.push(l.as_str().into());
            next
        })
    }
}

/// `name`, or where it is taken, `path` + `name`, then with `#2`, `#3`... after it.
fn unique(taken: &mut HashSet<String>, name: &str, path: &str) -> String {
    let mut candidate = name.to_string();
    if taken.contains(&candidate) {
        candidate = format!("{path}{name}");
    }
    let base = candidate.clone();
    let mut k = 2;
    while taken.contains(&candidate) {
        candidate = format!("{base}#{k}");
        k += 1;
    }
    taken.insert(candidate.clone());
    candidate
}

/// What safetensors file the model converts to: every tensor of a type safetensors has, by its
/// tensor file's name; `__metadata__` says `format: onnx`, with the producer and the opsets.
fn conversion(
    tensors: &[Arc<Tensor>],
    metadata: &BTreeMap<String, Json>,
) -> Result<Conversion, NotOffered> {
    let state_dict: Vec<_> = tensors
        .iter()
        .filter(|t| !t.file_only())
        .map(|t| (Arc::clone(&t.name), Arc::clone(t)))
        .collect();
    if state_dict.is_empty() {
        return Err(NotOffered::Unfit("no tensors".into()));
    }
    let mut meta = BTreeMap::from([("format".to_string(), "onnx".to_string())]);
    for key in ["producer_name", "producer_version", "opset_import"] {
        if let Some(Json::String(v)) = metadata.get(key) {
            meta.insert(key.to_string(), v.clone());
        }
    }
    Ok(Conversion {
        state_dict,
        metadata: meta,
    })
}

/// A tensor placed: its name in its graph, type, shape and bytes.
struct Placed {
    name: String,
    dtype: Dtype,
    shape: Box<[usize]>,
    bytes: Bytes,
    size: u64,
}

impl Placed {
    fn tensor(self, name: String) -> Tensor {
        let (begin, computed, file) = match self.bytes {
            Bytes::Stretch { at } => (at, None, None),
            Bytes::Typed(t) => (
                t.start(),
                Some(t as Arc<dyn super::description::Computed>),
                None,
            ),
            Bytes::External { file, at } => (at, None, Some(file)),
        };
        Tensor {
            name: Arc::from(name),
            dtype: self.dtype,
            shape: self.shape,
            begin,
            end: begin + self.size,
            strides: None,
            computed,
            file,
        }
    }
}

/// Places `found`: `None` (with a note) for a tensor that is not shown.
fn place<A: At>(
    win: &mut Window<A>,
    found: &Found,
    files: &mut Files,
    notes: &mut Vec<String>,
) -> Result<Option<Placed>, OnnxError> {
    let shown = format!("{}{}", found.path, found.name);
    let placed = |dtype: Dtype, shape: Vec<usize>, bytes, size| Placed {
        name: found.name.clone(),
        dtype,
        shape: shape.into(),
        bytes,
        size,
    };
    match &found.value {
        Value::Float { at } => Ok(Some(placed(
            Dtype::F32,
            Vec::new(),
            Bytes::Stretch { at: *at },
            4,
        ))),
        Value::Int { at, len } => {
            let t = Typed::index(win, vec![(*at, at + len)], 0, Storage::Int64, true, &shown)?;
            Ok(Some(placed(
                Dtype::I64,
                Vec::new(),
                Bytes::Typed(Arc::new(t)),
                8,
            )))
        }
        Value::List { spans, field } => {
            let (dtype, storage) = match field {
                7 => (Dtype::F32, Storage::Float),
                _ => (Dtype::I64, Storage::Int64),
            };
            let t = Typed::index(win, spans.clone(), *field, storage, false, &shown)?;
            let n = t.values();
            let shape = vec![usize::try_from(n).unwrap_or(usize::MAX)];
            let size = n * storage.bytes();
            Ok(Some(placed(dtype, shape, Bytes::Typed(Arc::new(t)), size)))
        }
        Value::Tensor(spans) => proto(win, spans, found, files, notes),
    }
}

/// What a `TensorProto` says.
#[derive(Default)]
struct Proto {
    name: String,
    dims: Vec<u64>,
    negative_dim: bool,
    data_type: u64,
    raw: Option<(u64, u64)>,
    /// For each typed field (by number): how many times it occurs, and the last packed array.
    typed: BTreeMap<u32, (u32, Option<(u64, u64)>)>,
    segment: bool,
    /// `data_location` is `EXTERNAL`.
    external: bool,
    /// `external_data`'s keys and values (`location`, `offset`, `length`, `checksum`).
    external_data: Vec<(String, String)>,
}

/// A `TensorProto` placed (`None`, with a note, for one not shown).
fn proto<A: At>(
    win: &mut Window<A>,
    spans: &Spans,
    found: &Found,
    files: &mut Files,
    notes: &mut Vec<String>,
) -> Result<Option<Placed>, OnnxError> {
    let inside = format!("tensor `{}{}`", found.path, found.name);
    let mut p = Proto::default();
    win.fields(spans, &inside, |win, f| {
        match (f.number, f.wire) {
            (1, Wire::Varint(v)) => {
                p.negative_dim |= (v as i64) < 0;
                p.dims.push(v);
            }
            (1, Wire::Len { at, len }) => {
                let mut pos = at;
                while pos < at + len {
                    let v = win.varint(&mut pos, at + len, &inside)?;
                    p.negative_dim |= (v as i64) < 0;
                    p.dims.push(v);
                }
            }
            (2, Wire::Varint(v)) => p.data_type = v,
            (3, _) => p.segment = true,
            (8, w) => p.name = win.text(w, MAX_NAME, &inside)?,
            (9, Wire::Len { at, len }) => p.raw = Some((at, len)),
            (14, Wire::Varint(v)) => p.external = v == 1,
            (13, Wire::Len { at, len }) => {
                p.external_data
                    .push(graph::entry_text(win, at, len, &inside)?);
            }
            (n @ (4 | 5 | 7 | 10 | 11), w) => {
                let e = p.typed.entry(n).or_default();
                e.0 += 1;
                e.1 = match w {
                    Wire::Len { at, len } => Some((at, len)),
                    _ => None,
                };
            }
            (1 | 2 | 9 | 14, _) => return Err(wire::wire_type(&inside, "its declared type")),
            _ => {}
        }
        Ok(())
    })?;
    let name = if found.name.is_empty() {
        p.name.clone()
    } else {
        found.name.clone()
    };
    let shown = format!("{}{name}", found.path);
    let bad = |what: String| OnnxError::BadTensor {
        name: shown.clone(),
        what,
    };
    let mut skip = |why: String| {
        notes.push(format!("tensor `{shown}` is not shown: {why}"));
        Ok(None)
    };
    if p.segment {
        return skip("it is a segment of a tensor (which onnx does not load either)".into());
    }
    let Some((type_name, dtype, storage)) = element_type(p.data_type) else {
        return skip(match p.data_type {
            8 => "its elements are strings".into(),
            0 => "its element type is UNDEFINED".into(),
            t => format!("its element type {t} is not one this reader knows"),
        });
    };
    if p.negative_dim {
        return Err(bad("has a negative dimension".into()));
    }
    let shape: Vec<usize> = p
        .dims
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()
        .ok_or_else(|| bad("has a dimension too large".into()))?;
    let numel = p
        .dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or_else(|| bad("has dimensions whose product overflows".into()))?;
    let Some(size) = dtype.size_of(numel) else {
        return skip(format!(
            "{numel} elements of {type_name} are no whole number of bytes"
        ));
    };
    let placed = |bytes| Placed {
        name: name.clone(),
        dtype,
        shape: shape.clone().into(),
        bytes,
        size,
    };
    if p.external {
        return external(&p, size, type_name, files, &bad).map(|b| Some(placed(b)));
    }
    if let Some((at, len)) = p.raw {
        if len != size {
            return Err(bad(format!(
                "holds {len} bytes of raw_data where {type_name} {:?} needs {size}",
                p.dims
            )));
        }
        return Ok(Some(placed(Bytes::Stretch { at })));
    }
    if storage == Storage::RawOnly {
        return skip(format!("its {type_name} elements are not in raw_data"));
    }
    let field = storage.field();
    let (count, last) = p.typed.get(&field).copied().unwrap_or_default();
    // One packed array of floats or doubles: its bytes are the tensor's, as they are.
    if let (1, Some((at, len)), Storage::Float | Storage::Double) = (count, last, storage) {
        if len != size {
            return Err(bad(format!(
                "holds {len} bytes of values where {type_name} {:?} needs {size}",
                p.dims
            )));
        }
        return Ok(Some(placed(Bytes::Stretch { at })));
    }
    if count == 0 && size == 0 {
        let at = spans.first().map_or(0, |s| s.0);
        return Ok(Some(placed(Bytes::Stretch { at })));
    }
    let t = Typed::index(win, spans.clone(), field, storage, false, &shown)?;
    let want = size / storage.bytes();
    if t.values() != want {
        return Err(bad(format!(
            "holds {} values where {type_name} {:?} needs {want}",
            t.values(),
            p.dims
        )));
    }
    Ok(Some(placed(Bytes::Typed(Arc::new(t)))))
}

/// Where the external data of `p` (`size` bytes of `type_name`) is: its `location` checked as a
/// string (see [`location`]), its `offset` (0 if absent) and its `length` (the size if absent;
/// given, it must be the size). Whether the bytes are there is the mount's to check, once the
/// file is found.
fn external(
    p: &Proto,
    size: u64,
    type_name: &str,
    files: &mut Files,
    bad: &dyn Fn(String) -> OnnxError,
) -> Result<Bytes, OnnxError> {
    let value = |key: &str| {
        p.external_data
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let number = |key: &str| -> Result<Option<u64>, OnnxError> {
        value(key)
            .map(|v| {
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| bad(format!("has an external data {key} of {v:?}, not a number")))
            })
            .transpose()
    };
    let Some(loc) = value("location") else {
        return Err(bad("has external data with no location".into()));
    };
    let checked = inside(loc).map_err(|why| OnnxError::BadLocation {
        name: p.name.clone(),
        location: loc.to_string(),
        why,
    })?;
    let at = number("offset")?.unwrap_or(0);
    if let Some(length) = number("length")?
        && length != size
    {
        return Err(bad(format!(
            "has external data of {length} bytes where {type_name} {:?} needs {size}",
            p.dims
        )));
    }
    if at.checked_add(size).is_none() {
        return Err(bad(format!(
            "has external data at offset {at}, past any file"
        )));
    }
    Ok(Bytes::External {
        file: files.of(checked),
        at,
    })
}

#[cfg(test)]
mod tests;
