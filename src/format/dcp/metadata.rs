//! `.metadata`: torch's pickled `Metadata`, read by the pickle machine that runs nothing, its
//! globals checked against an allow-list, and walked into plain items ([`Checkpoint`]): each
//! tensor's dtype, shape and chunks, each object's place, and the data files they lie in. The
//! pickle's objects are dropped once walked.

use std::collections::HashMap;

use super::error::{DcpError, Rule};
use crate::format::description::inside;
use crate::format::kit::pickle::globals_outside;
use crate::format::kit::pickle::{self, Id, Pickle, SeqKind, Value};
use crate::format::pytorch::dtypes::{Elem, dtype_global};

/// The module of DCP's metadata classes.
const METADATA: &str = "torch.distributed.checkpoint.metadata";

/// `pathlib`'s classes, as a `checkpoint_id` is pickled (Python 3.13 writes them from
/// `pathlib._local`).
const PATHS: &[&str] = &[
    "Path",
    "PosixPath",
    "WindowsPath",
    "PurePath",
    "PurePosixPath",
    "PureWindowsPath",
];

/// The globals a `.metadata` may name (besides torch's dtypes, `torch.float32`...): the classes
/// torch 2.4 to 2.15 pickle in it. Any other is a trap.
pub(super) const ALLOWED: &[(&str, &[&str])] = &[
    (
        METADATA,
        &[
            "Metadata",
            "TensorStorageMetadata",
            "TensorProperties",
            "ChunkStorageMetadata",
            "BytesStorageMetadata",
            "MetadataIndex",
            "StorageMeta",
            "_MEM_FORMAT_ENCODING",
        ],
    ),
    ("torch.distributed.checkpoint.filesystem", &["_StorageInfo"]),
    ("torch", &["Size"]),
    ("torch.serialization", &["_get_layout"]),
    ("torch._utils", &["_get_layout"]),
    ("pathlib", PATHS),
    ("pathlib._local", PATHS),
    ("collections", &["OrderedDict"]),
];

/// Most dimensions a tensor may have.
const MAX_DIMS: usize = 64;

/// A checkpoint as its `.metadata` describes it.
#[derive(Debug)]
pub(super) struct Checkpoint {
    /// In the order of `state_dict_metadata`.
    pub items: Vec<Item>,
    /// The data files, by their `relative_path`, each once.
    pub files: Vec<Box<str>>,
    /// The `version` torch 2.9 and later write.
    pub version: Option<String>,
}

#[derive(Debug)]
pub(super) struct Item {
    /// The flattened key (`model.layers.0.weight`).
    pub key: Box<str>,
    pub what: What,
}

#[derive(Debug)]
pub(super) enum What {
    Tensor {
        elem: Elem,
        shape: Box<[u64]>,
        chunks: Vec<Chunk>,
    },
    /// Anything else, pickled in a `torch.save` archive of its own.
    Object(Stored),
}

/// A chunk of a tensor: where it lies in the tensor, and where its archive is.
#[derive(Debug)]
pub(super) struct Chunk {
    pub offsets: Box<[u64]>,
    pub sizes: Box<[u64]>,
    pub stored: Stored,
}

/// Where an archive lies: `[offset, offset + length)` of data file `file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stored {
    pub file: u32,
    pub offset: u64,
    pub length: u64,
}

fn not_metadata(what: impl Into<String>) -> DcpError {
    DcpError::new(Rule::NotMetadata, what)
}

/// Whether `module.name` may be named by a `.metadata`.
fn allowed(module: &str, name: &str) -> bool {
    dtype_global(module, name).is_some()
        || ALLOWED
            .iter()
            .any(|(m, names)| *m == module && names.contains(&name))
}

/// The globals of `p` that are not allowed, spelled `module.name`, each once.
pub(super) fn unsafe_globals(p: &Pickle) -> Vec<String> {
    let mut out = Vec::new();
    globals_outside(&p.values, allowed, &mut out);
    out
}

/// Reads the bytes of a `.metadata`: its pickle, its globals checked, walked.
pub(super) fn read(bytes: &[u8]) -> Result<Checkpoint, DcpError> {
    let p = pickle::load(bytes, allowed).map_err(|e| {
        // The globals off this list that the pickle named before it failed: a trap.
        if !e.unsafe_globals.is_empty() {
            return trap(&e.unsafe_globals);
        }
        DcpError {
            rule: Rule::Pickle,
            what: format!("{e} [{}]", e.rule.name()),
            cut_short: e.cut_short(),
        }
    })?;
    let globals = unsafe_globals(&p);
    if !globals.is_empty() {
        return Err(trap(&globals));
    }
    Walk { p: &p }.checkpoint()
}

/// The refusal of a `.metadata` that names `globals`.
fn trap(globals: &[String]) -> DcpError {
    DcpError::new(
        Rule::UnsafePickle,
        format!(
            ".metadata calls {}; nothing was run, no tensors are shown",
            globals.join(", ")
        ),
    )
}

struct Walk<'p> {
    p: &'p Pickle,
}

impl<'p> Walk<'p> {
    /// The fields of an object of the metadata class `class` (made by `NEWOBJ` and given its
    /// fields by `BUILD`, as pickle writes a dataclass), by name.
    fn fields(&self, id: Id, module: &str, class: &str) -> Result<HashMap<&'p str, Id>, String> {
        let p = self.p;
        let made_by = match p.get(id) {
            Value::Call { callable, .. } => p.global(*callable),
            _ => None,
        };
        if made_by != Some((module, class)) {
            return Err(format!("not a {class}"));
        }
        let mut out = HashMap::new();
        let Some(added) = p.added.get(&id) else {
            return Ok(out);
        };
        for &state in &added.states {
            // A dict of fields, or (dict, slots) as a class with `__slots__` gives them.
            let dicts: Vec<Id> = match p.get(state) {
                Value::Dict(_) => vec![state],
                Value::Seq(SeqKind::Tuple, items) => items.clone(),
                _ => return Err(format!("a {class} with a state that is no dict")),
            };
            for d in dicts {
                if let Value::Dict(items) = p.get(d) {
                    for (k, v) in items {
                        if let Some(k) = p.str(*k) {
                            out.insert(k, *v);
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// The state of a `TensorProperties`: its first item (or field) is the dtype.
    fn dtype(&self, properties: Id) -> Result<Elem, String> {
        let p = self.p;
        let state = p
            .added
            .get(&properties)
            .and_then(|a| a.states.last().copied());
        let dtype = match state.map(|s| p.get(s)) {
            Some(Value::Seq(SeqKind::Tuple, items)) => items.first().copied(),
            Some(Value::Dict(_)) => self
                .fields(properties, METADATA, "TensorProperties")?
                .get("dtype")
                .copied(),
            _ => None,
        };
        let global = dtype.and_then(|d| p.global(d));
        global
            .and_then(|(m, n)| dtype_global(m, n))
            .ok_or_else(|| "properties without a torch dtype".to_string())
    }

    /// A `torch.Size` (or a tuple or list) of sizes.
    fn size(&self, id: Id) -> Result<Box<[u64]>, String> {
        let p = self.p;
        let items = match p.get(id) {
            Value::Call { callable, args } if p.global(*callable) == Some(("torch", "Size")) => p
                .items(*args)
                .and_then(|a| a.first())
                .and_then(|&inner| p.items(inner)),
            _ => p.items(id),
        };
        let items = items.ok_or("a size that is no torch.Size")?;
        if items.len() > MAX_DIMS {
            return Err(format!("a size of {} dimensions", items.len()));
        }
        items
            .iter()
            .map(|&i| {
                p.int(i)
                    .and_then(|v| u64::try_from(v).ok())
                    .ok_or_else(|| "a size that is not a count".to_string())
            })
            .collect()
    }

    fn dict(&self, id: Id) -> Option<&'p [(Id, Id)]> {
        match self.p.get(id) {
            Value::Dict(items) => Some(items),
            _ => None,
        }
    }

    fn checkpoint(&self) -> Result<Checkpoint, DcpError> {
        let p = self.p;
        let top = self
            .fields(p.top, METADATA, "Metadata")
            .map_err(|e| not_metadata(format!("the pickle is {e}")))?;
        let field = |name: &str| {
            top.get(name)
                .copied()
                .ok_or_else(|| not_metadata(format!("Metadata without {name}")))
        };
        let version = top.get("version").and_then(|&v| p.str(v)).map(String::from);
        let mut files = Files::default();
        let storage = self.storage(field("storage_data")?, &mut files)?;
        let state = self
            .dict(field("state_dict_metadata")?)
            .ok_or_else(|| not_metadata("state_dict_metadata is no dict"))?;
        // A key set twice is one item, as a Python dict holds it: in its first place, of its
        // last value.
        let mut entries: Vec<(&str, Id)> = Vec::with_capacity(state.len());
        let mut place: HashMap<&str, usize> = HashMap::with_capacity(state.len());
        for &(k, v) in state {
            let key = p
                .str(k)
                .ok_or_else(|| not_metadata("a key of state_dict_metadata that is no string"))?;
            match place.get(key) {
                Some(&i) => entries[i].1 = v,
                None => {
                    place.insert(key, entries.len());
                    entries.push((key, v));
                }
            }
        }
        let mut items = Vec::with_capacity(entries.len());
        for (key, v) in entries {
            let what = self
                .item(key, v, &storage)
                .map_err(|e| e.map_what(|w| format!("item `{key}`: {w}")))?;
            items.push(Item {
                key: key.into(),
                what,
            });
        }
        Ok(Checkpoint {
            items,
            files: files.names,
            version,
        })
    }

    /// `storage_data`: where each chunk (by key and offsets) and object (by key) lies.
    fn storage(&self, id: Id, files: &mut Files) -> Result<Storage<'p>, DcpError> {
        let p = self.p;
        let entries = self
            .dict(id)
            .ok_or_else(|| not_metadata("storage_data is no dict"))?;
        let mut out = HashMap::with_capacity(entries.len());
        for &(k, v) in entries {
            let index = self
                .fields(k, METADATA, "MetadataIndex")
                .map_err(|e| not_metadata(format!("a key of storage_data is {e}")))?;
            let fqn = index
                .get("fqn")
                .and_then(|&f| p.str(f))
                .ok_or_else(|| not_metadata("a MetadataIndex without fqn"))?;
            let offset = match index.get("offset").copied() {
                Some(o) if !matches!(p.get(o), Value::None) => Some(
                    self.size(o)
                        .map_err(|e| not_metadata(format!("storage of `{fqn}`: {e}")))?,
                ),
                _ => None,
            };
            let info = self
                .fields(v, "torch.distributed.checkpoint.filesystem", "_StorageInfo")
                .map_err(|e| not_metadata(format!("storage of `{fqn}` is {e}")))?;
            let int = |name: &str| {
                info.get(name)
                    .and_then(|&i| p.int(i))
                    .and_then(|i| u64::try_from(i).ok())
                    .ok_or_else(|| not_metadata(format!("storage of `{fqn}` without its {name}")))
            };
            let path = info
                .get("relative_path")
                .and_then(|&r| p.str(r))
                .ok_or_else(|| not_metadata(format!("storage of `{fqn}` without its path")))?;
            let transformed = info
                .get("transform_descriptors")
                .and_then(|&t| p.items(t).or_else(|| self.set(t)))
                .is_some_and(|t| !t.is_empty());
            let stored = Stored {
                file: files.index(path, fqn)?,
                offset: int("offset")?,
                length: int("length")?,
            };
            out.insert((fqn, offset), (stored, transformed));
        }
        Ok(Storage(out))
    }

    fn set(&self, id: Id) -> Option<&'p [Id]> {
        match self.p.get(id) {
            Value::Seq(_, items) => Some(items),
            _ => None,
        }
    }

    fn item(&self, key: &str, id: Id, storage: &Storage) -> Result<What, DcpError> {
        let p = self.p;
        if self.fields(id, METADATA, "BytesStorageMetadata").is_ok() {
            return Ok(What::Object(storage.get(key, None)?));
        }
        let meta = self
            .fields(id, METADATA, "TensorStorageMetadata")
            .map_err(|_| not_metadata("neither TensorStorageMetadata nor BytesStorageMetadata"))?;
        let get = |name: &str| {
            meta.get(name)
                .copied()
                .ok_or_else(|| not_metadata(format!("no {name}")))
        };
        let elem = self.dtype(get("properties")?).map_err(not_metadata)?;
        let shape = self.size(get("size")?).map_err(not_metadata)?;
        let list = p
            .items(get("chunks")?)
            .ok_or_else(|| not_metadata("chunks that are no list"))?;
        let mut chunks = Vec::with_capacity(list.len());
        for &c in list {
            let f = self
                .fields(c, METADATA, "ChunkStorageMetadata")
                .map_err(|e| not_metadata(format!("a chunk is {e}")))?;
            let size = |name: &str| {
                f.get(name)
                    .ok_or_else(|| format!("a chunk without {name}"))
                    .and_then(|&s| self.size(s))
                    .map_err(not_metadata)
            };
            let (offsets, sizes) = (size("offsets")?, size("sizes")?);
            if offsets.len() != shape.len() || sizes.len() != shape.len() {
                return Err(DcpError::new(
                    Rule::Coverage,
                    format!(
                        "a chunk at {offsets:?} of sizes {sizes:?} in a tensor of {} dimensions",
                        shape.len()
                    ),
                ));
            }
            let stored = storage.get(key, Some(&offsets))?;
            chunks.push(Chunk {
                offsets,
                sizes,
                stored,
            });
        }
        Ok(What::Tensor {
            elem,
            shape,
            chunks,
        })
    }
}

/// The places of `storage_data`, by key and chunk offsets (none for an object), and whether the
/// place has transforms.
struct Storage<'p>(HashMap<Place<'p>, (Stored, bool)>);

/// A place's key in `storage_data`: the item's key, and a chunk's offsets.
type Place<'p> = (&'p str, Option<Box<[u64]>>);

impl Storage<'_> {
    fn get(&self, key: &str, offsets: Option<&[u64]>) -> Result<Stored, DcpError> {
        let found = self.0.get(&(key, offsets.map(Box::from)));
        let at = || match offsets {
            Some(o) => format!("its chunk at {o:?}"),
            None => "it".to_string(),
        };
        match found {
            None => Err(DcpError::new(
                Rule::NoStorage,
                format!("{} has no place in storage_data", at()),
            )),
            Some((_, true)) => Err(DcpError::new(
                Rule::Transformed,
                format!(
                    "{} is stored with transform_descriptors (compressed or otherwise \
                     transformed bytes), which this reader does not undo",
                    at()
                ),
            )),
            Some((stored, false)) => Ok(*stored),
        }
    }
}

/// The data files named so far.
#[derive(Default)]
pub(super) struct Files {
    pub(super) names: Vec<Box<str>>,
    by_name: HashMap<String, u32>,
}

impl Files {
    /// The index of the data file `path` (of the storage of `fqn`), checked to lie in the
    /// checkpoint's directory or below it ([`inside`]); two spellings of one path are one file.
    pub(super) fn index(&mut self, path: &str, fqn: &str) -> Result<u32, DcpError> {
        if let Some(&i) = self.by_name.get(path) {
            return Ok(i);
        }
        // torch joins `relative_path` to the checkpoint's path as it is, so a `..` (which its
        // writer never writes) is refused rather than read as `inside` would resolve it.
        let checked = match path.split('/').any(|c| c == "..") {
            true => Err("a path with a `..` in it"),
            false => inside(path),
        };
        let name = checked.map_err(|why| {
            DcpError::new(
                Rule::BadLocation,
                format!("the data file {path:?} of `{fqn}` is {why}"),
            )
        })?;
        if let Some(&i) = self.by_name.get(&name) {
            self.by_name.insert(path.to_string(), i);
            return Ok(i);
        }
        let i = u32::try_from(self.names.len())
            .map_err(|_| DcpError::new(Rule::TooLarge, "more data files than can be counted"))?;
        self.names.push(name.as_str().into());
        self.by_name.insert(name, i);
        self.by_name.insert(path.to_string(), i);
        Ok(i)
    }
}
