//! The files of a tensor directory: one per tensor, named after the whole tensor name (flat) or
//! nested by its parts (`layout=tree`), NPY views beside them (`npy`), and `__metadata__`.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use log::warn;
use serde_json::Value;

use super::draft::{self, Draft};
use super::error::BuildError;
use super::node::{Attr, Content, Kind, no_xattrs, presented};
use super::options::{Layout, Options};
use crate::format::kit::npy;
use crate::format::widen::Widening;
use crate::format::{Dtype, Tensor};
use crate::namespace::names::Shortener;
use crate::source::{Source, Warning};

/// The name of the file holding a header's `__metadata__` (a key the format reserves).
pub const METADATA_FILE: &str = "__metadata__";

/// With `layout=tree`: the name of a tensor inside the directory of the same name (a tensor whose
/// name is also a prefix of others, like bitsandbytes' `weight` beside `weight.absmax`).
pub const TENSOR_FILE: &str = "__tensor__";

/// The suffix of the NPY view of a tensor (`-o npy`).
pub const NPY_SUFFIX: &str = ".npy";

pub use super::entry::Entry;

/// The entries of a tensor directory whose attributes are `dir` (also those of its
/// subdirectories); `__metadata__` comes from `owner` (the file or index it stands for) and is
/// readable as that file is. `budget`: how many directories `layout=tree` may make. `origin`: the
/// file or index, for the error.
pub fn tensor_dir(
    options: &Options,
    origin: &Path,
    owner: &Metadata,
    dir: &Attr,
    mut entries: Vec<Entry>,
    metadata_json: Option<Arc<[u8]>>,
    budget: usize,
) -> Result<Vec<Draft>, BuildError> {
    // Names are unique within a file or set, so a stable sort would buy nothing.
    entries.sort_unstable_by(|a, b| a.tensor.name.cmp(&b.tensor.name));
    let mut children = match options.layout {
        Layout::Flat => {
            let leaves = entries
                .iter()
                .map(|e| (LeafName::Escaped(&e.tensor.name), e))
                .collect();
            add_leaves(options, &mut Shortener::default(), leaves, Vec::new())
        }
        Layout::Tree => {
            let Some((root, mut stray)) = Branch::plant(&entries, budget) else {
                return Err(BuildError::TreeTooLarge(origin.to_path_buf()));
            };
            add_branch(options, dir, root, &mut stray, true)
        }
    };
    if let Some(json) = metadata_json {
        let attr = draft::attr(owner, Kind::File, json.len() as u64, owner.mode() & 0o444);
        children.push(Draft::file(
            METADATA_FILE.as_bytes().into(),
            attr,
            Content::Generated(json),
        ));
    }
    Ok(children)
}

/// The `__metadata__` file: the object as JSON, keys sorted, ending in a newline.
pub fn metadata_json(map: &Value) -> Arc<[u8]> {
    let mut json = serde_json::to_vec_pretty(map).unwrap_or_default();
    json.push(b'\n');
    json.into()
}

/// The entries of a directory of the tree layout, from its branch. Tensors that found no place in
/// the tree (`stray`) go to the `top` directory under their full names: those names hold a `.` or
/// a `/` (`%2F`), which no part does, so they never clash with a part.
fn add_branch<'a>(
    options: &Options,
    dir: &Attr,
    branch: Branch<'a>,
    stray: &mut Vec<Leaf<'a>>,
    top: bool,
) -> Vec<Draft> {
    let mut names = Shortener::default();
    let mut children = Vec::new();
    let mut leaves = Vec::new();
    if let Some(entry) = branch.tensor {
        leaves.push((LeafName::Exact(TENSOR_FILE), entry));
    }
    for (part, child) in branch.children {
        let leaf_name = if part == TENSOR_FILE {
            LeafName::Exact(ESCAPED_TENSOR_FILE)
        } else if top && part == METADATA_FILE {
            // The first part of a name like `__metadata__.x` would take the metadata file's name.
            LeafName::Exact(ESCAPED_METADATA_FILE)
        } else {
            LeafName::Escaped(part)
        };
        match child.tensor {
            Some(entry) if child.children.is_empty() => leaves.push((leaf_name, entry)),
            _ => {
                let name = leaf_name.file_name(&mut names);
                let grandchildren = add_branch(options, dir, child, stray, false);
                children.push(Draft::generated_dir(
                    name.as_bytes().into(),
                    *dir,
                    no_xattrs(),
                    grandchildren,
                ));
            }
        }
    }
    if top {
        leaves.append(stray);
    }
    add_leaves(options, &mut names, leaves, children)
}

/// Adds a tensor file for each leaf (its name in the directory, before escaping, and its tensor)
/// to `children`, the directory's other entries, then the NPY views if asked for.
fn add_leaves(
    options: &Options,
    names: &mut Shortener,
    leaves: Vec<Leaf<'_>>,
    mut children: Vec<Draft>,
) -> Vec<Draft> {
    for &(leaf_name, e) in &leaves {
        let tensor = &e.tensor;
        let name: Arc<[u8]> = match leaf_name.file_name(names) {
            Cow::Borrowed(same) if same == &*tensor.name => Arc::<str>::clone(&tensor.name).into(),
            other => other.as_bytes().into(),
        };
        let widen = widening(options, tensor);
        children.push(Draft::file(
            name,
            draft::file_attr(&e.bytes().meta, presented(tensor, widen).1),
            Content::Tensor {
                source: e.source.clone(),
                tensor: tensor.clone(),
                widen,
                data: e.data.clone(),
            },
        ));
    }
    if options.npy {
        add_npy_views(options, names, &leaves, &mut children);
    }
    children
}

/// `NAME.npy` beside each tensor file numpy can describe, unless an entry of the directory
/// already has that name (a tensor named `NAME.npy`).
fn add_npy_views(
    options: &Options,
    names: &mut Shortener,
    leaves: &[Leaf<'_>],
    children: &mut Vec<Draft>,
) {
    let taken: HashSet<Arc<[u8]>> = children.iter().map(|c| c.name.clone()).collect();
    for &(leaf_name, e) in leaves {
        let (tensor, src) = (&e.tensor, &e.source);
        let widen = widening(options, tensor);
        let (dtype, presented) = presented(tensor, widen);
        let header = (!tensor.file_only() || widen.is_some())
            .then(|| npy::header_as(dtype, tensor))
            .flatten();
        let Some(header) = header else {
            continue;
        };
        let name = match leaf_name {
            LeafName::Escaped(part) => names.file_name_with(part, NPY_SUFFIX),
            LeafName::Exact(name) => format!("{name}{NPY_SUFFIX}"),
        };
        if taken.contains(name.as_bytes()) {
            warn!(
                "{}: tensor `{}`: no {name} view, a tensor file has that name",
                src.path.display(),
                tensor.name
            );
            continue;
        }
        let size = header.len() as u64 + presented;
        children.push(Draft::file(
            name.into_bytes().into(),
            draft::file_attr(&e.bytes().meta, size),
            Content::Npy {
                source: src.clone(),
                tensor: tensor.clone(),
                widen,
                data: e.data.clone(),
            },
        ));
    }
}

/// How `-o dtype=` presents `tensor`: widened, or as stored (`None`).
fn widening(options: &Options, tensor: &Tensor) -> Option<Widening> {
    Widening::new(tensor.dtype, options.widen?)
}

/// A tensor placed in a directory: its name there and the tensor with its source.
type Leaf<'a> = (LeafName<'a>, &'a Entry);

#[derive(Clone, Copy)]
enum LeafName<'a> {
    /// A tensor name, or a part of one, to escape (and shorten) into a file name.
    Escaped(&'a str),
    /// A file name as it is.
    Exact(&'static str),
}

impl<'a> LeafName<'a> {
    fn file_name(self, names: &mut Shortener) -> Cow<'a, str> {
        match self {
            LeafName::Escaped(name) => names.file_name(name),
            LeafName::Exact(name) => Cow::Borrowed(name),
        }
    }
}

/// With `layout=tree`: how a part that is itself `__tensor__` is written, so that it never clashes
/// with the tensor of a directory (escaping never writes `%5F`, so this is unambiguous).
const ESCAPED_TENSOR_FILE: &str = "%5F_tensor__";

/// With `layout=tree`: how a first part that is `__metadata__` is written, beside the metadata
/// file of that name (a tensor cannot be named `__metadata__` itself, but `__metadata__.x` can).
const ESCAPED_METADATA_FILE: &str = "%5F_metadata__";

/// With `layout=tree`: names with more parts than this are shown under their full name at the top.
const MAX_TREE_DEPTH: usize = 64;

/// A directory of the tree layout while it is being built.
#[derive(Default)]
struct Branch<'a> {
    /// The tensor whose name ends here.
    tensor: Option<&'a Entry>,
    children: BTreeMap<&'a str, Branch<'a>>,
}

impl<'a> Branch<'a> {
    /// The tree of `entries` (sorted by name), with the tensors that find no place in it: names
    /// of over MAX_TREE_DEPTH parts, and a name whose parts an earlier name already has (`a/b`
    /// after `a.b`). `None` if it would take more than `budget` directories (hostile names can ask
    /// for MAX_TREE_DEPTH each).
    fn plant(entries: &'a [Entry], budget: usize) -> Option<(Branch<'a>, Vec<Leaf<'a>>)> {
        let mut root = Branch::default();
        let mut stray = Vec::new();
        let mut branches = 0;
        for entry in entries {
            let name = &*entry.tensor.name;
            let parts = name.split(['.', '/']);
            if parts.clone().count() > MAX_TREE_DEPTH {
                stray.push((LeafName::Escaped(name), entry));
                continue;
            }
            let branch = parts.fold(&mut root, |b, part| {
                b.children.entry(part).or_insert_with(|| {
                    branches += 1;
                    Branch::default()
                })
            });
            if branches > budget {
                return None;
            }
            match branch.tensor {
                Some(_) => stray.push((LeafName::Escaped(name), entry)),
                None => branch.tensor = Some(entry),
            }
        }
        Some((root, stray))
    }
}

/// Under `-o dtype=`, the warning (once per version of the file) that its tensors of block types
/// no decoder is known for keep their raw files.
pub fn warn_undecodable(source: &Source, tensors: &[Arc<Tensor>]) {
    let mut types: Vec<&str> = tensors
        .iter()
        .filter(|t| matches!(t.dtype, Dtype::Block(b) if b.decode.is_none()))
        .map(|t| t.dtype_name())
        .collect();
    types.sort_unstable();
    types.dedup();
    if !types.is_empty() && source.first_warning(Warning::Notes) {
        warn!(
            "{}: tensors of type {} cannot be dequantized: served as stored under -o dtype=",
            source.path.display(),
            types.join(", ")
        );
    }
}
