//! The reader of `torch.distributed.checkpoint` (DCP) checkpoints: a directory whose `.metadata`
//! (one pickle, read by the machine that runs nothing, its globals on an allow-list:
//! [`metadata`]) says which chunks of which tensors lie where in its `__R_N.distcp` data files.
//! Each chunk is a whole `torch.save` archive inside its data file, read by the PyTorch reader;
//! each object (anything that is not a tensor) too, its pickle scanned and never run.
//!
//! The description names every tensor by its flattened key. A tensor held by one chunk is a
//! stretch of its data file; one cut into several is gathered from them on read ([`grid`]), once
//! its chunks are checked to cover it exactly once. The conversion is the model alone (see
//! [`model_keys`]).
//!
//! The data files are opened here, beside `.metadata`, by name, never through a symbolic link; the
//! description records what `stat` said of each, so that a data file changed since is known.

mod error;
mod grid;
mod metadata;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fs::{File, Metadata};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value as Json;

use super::description::{Conversion, Description, NotOffered, OpenData, Seen, Tensor};
use super::error::FormatError;
use super::input::{Input, Parsed};
use super::pytorch::dtypes::file_only;
use super::pytorch::{describe_archive, trap_in};
pub use error::DcpError;
use error::Rule;
use grid::{Grid, Placed, row_major};
use metadata::{Checkpoint, Chunk, Stored, What};

/// The most of a `.metadata` read.
const MAX_METADATA: u64 = 1 << 30;
/// The most chunks a checkpoint may have.
const MAX_CHUNKS: usize = 1 << 24;
/// The most chunks of no elements a tensor may have (more ranks than rows is legitimate).
const MAX_EMPTY_CHUNKS: usize = 1 << 16;

/// The top-level groups of a checkpoint that are not its model, when it has no `model` group
/// (torchtitan saves the model's keys at the top level beside these).
pub const NOT_MODEL: &[&str] = &[
    "optim",
    "optimizer",
    "lr_scheduler",
    "dataloader",
    "train_state",
    "extra",
];

/// Which tensors the virtual safetensors file holds (`-o dcp_model=`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Model {
    /// The `model` group, else the top level outside [`NOT_MODEL`].
    Auto,
    /// Every tensor, keys as stored.
    All,
    /// The group of this name, its prefix removed.
    Group(String),
}

impl Model {
    /// The choice `-o dcp_model=` gives: `auto`, `all` or a group's name.
    fn parse(value: &str) -> Result<Model, String> {
        Ok(match value {
            "auto" => Model::Auto,
            "all" => Model::All,
            "" => return Err("a group's name, `auto` or `all`".into()),
            group => Model::Group(group.trim_end_matches('.').to_string()),
        })
    }
}

/// Parses the value of `-o dcp_model=` (see [`Model::parse`]) into what [`describe`] takes.
pub fn parse_model(value: &str) -> Result<Parsed, String> {
    Ok(Arc::new(Model::parse(value)?))
}

/// Reads the checkpoint whose `.metadata` is the input's file.
pub fn describe(input: Input<'_>) -> Result<Description, FormatError> {
    let (file, path) = (input.file, input.path);
    let model = input.setting::<Model>().unwrap_or(&Model::Auto);
    let invalid = |e: DcpError| FormatError::invalid(path, e);
    let io = |e| FormatError::Io(path.to_path_buf(), e);
    let len = file.metadata().map_err(io)?.len();
    if len > MAX_METADATA {
        return Err(invalid(DcpError::new(
            Rule::TooLarge,
            format!(".metadata of {len} bytes, more than {MAX_METADATA} are read"),
        )));
    }
    let mut bytes = vec![0; len as usize];
    file.read_exact_at(&mut bytes, 0).map_err(io)?;
    let checkpoint = metadata::read(&bytes).map_err(invalid)?;
    drop(bytes);
    let files = open_files(input.open, &checkpoint.files).map_err(invalid)?;
    Reading {
        files: &files,
        names: &checkpoint.files,
        model,
    }
    .describe(&checkpoint)
    .map_err(invalid)
}

/// A data file, opened, with what `stat` said of it.
struct DataFile {
    file: File,
    meta: Metadata,
}

/// Opens each data file `names` says, through `open`.
fn open_files(open: &OpenData<'_>, names: &[Box<str>]) -> Result<Vec<DataFile>, DcpError> {
    names
        .iter()
        .map(|name| {
            let failed = |why: String| {
                DcpError::new(Rule::DataFile, format!("its data file {name:?} {why}"))
            };
            let file = open(name).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) => failed("is missing".into()),
                Some(libc::ELOOP) => failed("is a symbolic link, which is not followed".into()),
                Some(libc::EXDEV) => failed(
                    "lies outside SOURCE (through a link, or beside a SOURCE that is one file), \
                     and is not opened"
                        .into(),
                ),
                _ => failed(format!("cannot be opened: {e}")),
            })?;
            let meta = file
                .metadata()
                .map_err(|e| failed(format!("cannot be read: {e}")))?;
            if !meta.is_file() {
                return Err(failed("is not a regular file".into()));
            }
            Ok(DataFile { file, meta })
        })
        .collect()
}

/// A checkpoint's data files, open, while its chunks are read.
struct Reading<'a> {
    files: &'a [DataFile],
    names: &'a [Box<str>],
    /// Which tensors the conversion holds.
    model: &'a Model,
}

impl Reading<'_> {
    /// The archive `stored` holds, read as a `torch.save` checkpoint (`what` names it).
    fn archive(
        &self,
        stored: Stored,
        what: &str,
    ) -> Result<Result<Description, FormatError>, DcpError> {
        let f = &self.files[stored.file as usize];
        let name = &self.names[stored.file as usize];
        let size = f.meta.len();
        if stored
            .offset
            .checked_add(stored.length)
            .is_none_or(|end| end > size)
        {
            return Err(DcpError {
                rule: Rule::ChunkPastFile,
                what: format!(
                    "{what} lies at [{}, +{}) of its data file {name:?}, which has {size} bytes",
                    stored.offset, stored.length
                ),
                cut_short: true,
            });
        }
        let path = Path::new(&**name);
        Ok(describe_archive(
            &f.file,
            stored.offset,
            stored.length,
            path,
        ))
    }

    fn describe(&self, c: &Checkpoint) -> Result<Description, DcpError> {
        let chunk_count: usize = c
            .items
            .iter()
            .map(|i| match &i.what {
                What::Tensor { chunks, .. } => chunks.len(),
                What::Object(_) => 1,
            })
            .sum();
        if chunk_count > MAX_CHUNKS {
            return Err(DcpError::new(
                Rule::TooLarge,
                format!("{chunk_count} chunks, more than {MAX_CHUNKS} are read"),
            ));
        }
        let mut traps: Vec<String> = Vec::new();
        let mut tensors = Vec::new();
        let mut objects = Vec::new();
        let mut notes = Vec::new();
        for item in &c.items {
            let key = &*item.key;
            match &item.what {
                What::Object(stored) => {
                    objects.push(Json::from(key));
                    let read = self.archive(*stored, &format!("object `{key}`"))?;
                    if let Some(why) = trap_in(&read) {
                        traps.push(format!("object `{key}`: {why}"));
                    }
                }
                What::Tensor {
                    elem,
                    shape,
                    chunks,
                } => {
                    let dtype = match elem.dtype.ok().or_else(|| file_only(elem)) {
                        Some(d) => d,
                        None => {
                            notes.push(format!(
                                "tensor `{key}` left out: torch.{} has no dtype here",
                                elem.name
                            ));
                            continue;
                        }
                    };
                    let placed = self.chunks(key, (dtype, elem.size), shape, chunks, &mut traps)?;
                    if !traps.is_empty() {
                        continue;
                    }
                    tensors.push(Arc::new(tensor(key, dtype, elem.size, shape, placed)?));
                }
            }
        }
        if !traps.is_empty() {
            return Err(DcpError::new(
                Rule::UnsafePickle,
                format!(
                    "{}; nothing was run, no tensors are shown",
                    traps.join("; ")
                ),
            ));
        }
        let mut metadata = BTreeMap::new();
        metadata.insert("objects".to_string(), Json::Array(objects));
        if let Some(v) = &c.version {
            metadata.insert("version".to_string(), Json::from(v.as_str()));
        }
        let conversion = conversion(&tensors, self.model);
        Ok(Description {
            tensors,
            metadata: Some(metadata),
            notes,
            conversion: Some(conversion),
            files: self.names.to_vec(),
            seen: self.files.iter().map(|f| Seen::of(&f.meta)).collect(),
            ..Description::new("dcp")
        })
    }

    /// The chunks of tensor `key` (of `shape`, elements of dtype `dtype`, `elem` bytes each),
    /// their archives read and checked against the metadata; a chunk whose archive is a trap is
    /// added to `traps`.
    fn chunks(
        &self,
        key: &str,
        (dtype, elem): (super::Dtype, u64),
        shape: &[u64],
        chunks: &[Chunk],
        traps: &mut Vec<String>,
    ) -> Result<Vec<Placed>, DcpError> {
        let coverage =
            |what: String| DcpError::new(Rule::Coverage, format!("tensor `{key}`: {what}"));
        let empty = chunks.iter().filter(|c| c.sizes.contains(&0)).count();
        if empty > MAX_EMPTY_CHUNKS {
            return Err(DcpError::new(
                Rule::TooLarge,
                format!("tensor `{key}` has {empty} chunks of no elements"),
            ));
        }
        let mut placed = Vec::with_capacity(chunks.len());
        for c in chunks {
            let inside = c
                .offsets
                .iter()
                .zip(&c.sizes)
                .zip(shape)
                .all(|((&o, &s), &n)| o.checked_add(s).is_some_and(|end| end <= n));
            if !inside {
                return Err(coverage(format!(
                    "its chunk at {:?} of sizes {:?} lies past its shape {shape:?}",
                    c.offsets, c.sizes
                )));
            }
            if c.sizes.contains(&0) {
                continue;
            }
            let what = format!("the chunk at {:?} of tensor `{key}`", c.offsets);
            let read = self.archive(c.stored, &what)?;
            if let Some(why) = trap_in(&read) {
                traps.push(format!("{what}: {why}"));
                continue;
            }
            let bad = |why: String| {
                DcpError::new(
                    Rule::ChunkArchive,
                    format!(
                        "{what} (at [{}, +{}) of {:?}): {why}",
                        c.stored.offset, c.stored.length, self.names[c.stored.file as usize]
                    ),
                )
            };
            let d = read.map_err(|e| bad(e.reason()))?;
            let [t] = &d.tensors[..] else {
                return Err(bad(format!(
                    "an archive of {} tensors, not one",
                    d.tensors.len()
                )));
            };
            let shown: Vec<u64> = t.shape.iter().map(|&n| n as u64).collect();
            if t.dtype != dtype || t.element_size() != elem || shown[..] != c.sizes[..] {
                return Err(bad(format!(
                    "a tensor of {} {shown:?} where the metadata says {} {:?}",
                    t.dtype_name(),
                    dtype.name(),
                    c.sizes
                )));
            }
            placed.push(Placed {
                offsets: c.offsets.clone(),
                sizes: c.sizes.clone(),
                file: c.stored.file,
                begin: t.begin,
                strides: t.strides.clone().unwrap_or_else(|| row_major(&c.sizes)),
            });
        }
        Ok(placed)
    }
}

/// Tensor `key`, consolidated from its placed chunks.
fn tensor(
    key: &str,
    dtype: super::Dtype,
    elem: u64,
    shape: &[u64],
    placed: Vec<Placed>,
) -> Result<Tensor, DcpError> {
    let too_large = || {
        DcpError::new(
            Rule::TooLarge,
            format!("tensor `{key}` of shape {shape:?} has more bytes than can be counted"),
        )
    };
    let numel = shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or_else(too_large)?;
    let size = numel.checked_mul(elem).ok_or_else(too_large)?;
    let dims = shape
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<Box<[usize]>>>()
        .ok_or_else(too_large)?;
    let grid = Grid::of(shape, elem, placed)
        .map_err(|why| DcpError::new(Rule::Coverage, format!("tensor `{key}`: {why}")))?;
    let base = Tensor {
        name: Arc::from(key),
        dtype,
        shape: dims,
        begin: 0,
        end: size,
        strides: None,
        computed: None,
        file: None,
    };
    if numel == 0 {
        return Ok(base);
    }
    // One chunk: a stretch (or strided view) of its data file.
    if let Some(c) = grid.whole() {
        let strides = (c.strides != row_major(shape)).then(|| c.strides.clone());
        return Ok(Tensor {
            begin: c.begin,
            end: c.begin + size,
            strides,
            file: Some(c.file),
            ..base
        });
    }
    Ok(Tensor {
        computed: Some(Arc::new(grid)),
        ..base
    })
}

/// The keys of the tensors the virtual safetensors file holds, with the names it gives them: a
/// checkpoint with a top-level `model` group gives that group's tensors, `model.` removed;
/// one without gives every tensor outside the groups that are not the model ([`NOT_MODEL`]),
/// its key as stored.
/// `-o dcp_model=` picks another group, or every tensor.
fn model_keys(keys: &[&str], model: &Model) -> Vec<(usize, String)> {
    let group = match model {
        Model::Group(g) => Some(g.as_str()),
        Model::Auto if keys.iter().any(|k| k.starts_with("model.")) => Some("model"),
        Model::Auto | Model::All => None,
    };
    keys.iter()
        .enumerate()
        .filter_map(|(i, k)| match group {
            Some(g) => k
                .strip_prefix(g)
                .and_then(|rest| rest.strip_prefix('.'))
                .map(|rest| (i, rest.to_string())),
            None if *model == Model::All => Some((i, k.to_string())),
            None => {
                let group = k.split('.').next().unwrap_or(k);
                (!NOT_MODEL.contains(&group)).then(|| (i, k.to_string()))
            }
        })
        .collect()
}

fn conversion(tensors: &[Arc<Tensor>], model: &Model) -> Result<Conversion, NotOffered> {
    let keys: Vec<&str> = tensors.iter().map(|t| &*t.name).collect();
    let state_dict: Vec<_> = model_keys(&keys, model)
        .into_iter()
        .filter(|(i, _)| !tensors[*i].file_only())
        .map(|(i, name)| (Arc::from(name.as_str()), tensors[i].clone()))
        .collect();
    if state_dict.is_empty() {
        return Err(NotOffered::Unfit("no tensors of a model".to_string()));
    }
    Ok(Conversion {
        state_dict,
        metadata: [("format".to_string(), "pt".to_string())].into(),
    })
}
