//! The tensor directories of a directory of SOURCE, built: one file's (`NAME.tensors/`), or a
//! merged set's, each laid out by [`layout`] and counted against the node budget.

use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use log::warn;

use super::draft::{self, Draft};
use super::error::BuildError;
use super::layout;
use super::node::{Attr, Xattrs};
use super::options::Policy;
use super::xattrs;
use crate::format::{Description, Format};
use crate::source::{Source, Warning};

/// A generated directory to build: the tensors of one file, or a merged set with what is already
/// known of it.
pub enum Build<'a> {
    File {
        dir: Arc<[u8]>,
        source: &'a Arc<Source>,
        format: Format,
        /// The data files its tensors lie in (see [`Description::files`]).
        data: Arc<[Arc<Source>]>,
    },
    Set {
        dir: Arc<[u8]>,
        /// The index.
        path: PathBuf,
        owner: &'a Metadata,
        attr: Attr,
        xattrs: Arc<Xattrs>,
        json: Option<Arc<[u8]>>,
        entries: Vec<layout::Entry>,
    },
}

impl Build<'_> {
    /// The file the directory stands for, for messages.
    pub fn origin(&self) -> &Path {
        match self {
            Build::File { source, .. } => &source.path,
            Build::Set { path, .. } => path,
        }
    }
}

/// A generated directory new to the tree (see [`Build`]), its entries counted against `budget`.
pub fn build(policy: Policy<'_>, b: &Build<'_>, mut budget: usize) -> Result<Draft, BuildError> {
    match b {
        Build::File {
            dir,
            source,
            format,
            data,
        } => {
            let (attr, xattrs, children) =
                file_tensors(policy, source, *format, data, &mut budget)?;
            Ok(Draft::generated_dir(dir.clone(), attr, xattrs, children))
        }
        Build::Set {
            dir,
            path,
            owner,
            attr,
            xattrs,
            json,
            entries,
        } => {
            let children = tensor_entries(
                policy,
                path,
                owner,
                attr,
                entries.clone(),
                json.clone(),
                &mut budget,
            )?;
            Ok(Draft::generated_dir(
                dir.clone(),
                *attr,
                xattrs.clone(),
                children,
            ))
        }
    }
}

/// The tensor directory of one valid file of `format`, whose tensors lie in it or in the data
/// files `data` it names: its attributes, xattrs and entries.
pub fn file_tensors(
    policy: Policy<'_>,
    source: &Arc<Source>,
    format: Format,
    data: &Arc<[Arc<Source>]>,
    budget: &mut usize,
) -> Result<(Attr, Arc<Xattrs>, Vec<Draft>), BuildError> {
    let described = match source.describe(format) {
        Ok(d) => d,
        Err(e) => return Err(BuildError::Invalid(e.clone())),
    };
    if policy.options.widen.is_some() {
        layout::warn_undecodable(source, &described.tensors);
    }
    let mut entries = Vec::with_capacity(described.tensors.len());
    let mut left_out = 0;
    for t in &described.tensors {
        // A data file not found here (a single-file SOURCE, outside of which nothing is
        // opened): the tensor is left out.
        if t.file.is_some_and(|k| data.get(k as usize).is_none()) {
            left_out += 1;
            continue;
        }
        entries.push(layout::Entry {
            tensor: t.clone(),
            source: source.clone(),
            data: data.clone(),
        });
    }
    if left_out > 0 && source.first_warning(Warning::DataLeftOut) {
        warn!(
            "{}: {left_out} tensors lie in data files outside SOURCE, which are not opened; \
             mount the model's directory to see them",
            source.path.display()
        );
    }
    let (json, xattrs) = metadata_of(format, described);
    let attr = draft::tensor_dir_attr(&source.meta, &[]);
    let children = tensor_entries(
        policy,
        &source.path,
        &source.meta,
        &attr,
        entries,
        json,
        budget,
    )?;
    Ok((attr, xattrs, children))
}

/// The metadata of a file of `format` described as `d`, as the JSON file and the xattrs of its
/// tensor directory: every key in the file; as xattrs, the values (a string as itself, the rest
/// as JSON), not what is known of a value too long to keep (an object).
pub fn metadata_of(format: Format, d: &Description) -> (Option<Arc<[u8]>>, Arc<Xattrs>) {
    let json = d
        .metadata
        .as_ref()
        .map(|m| layout::metadata_json(&serde_json::json!(m)));
    let entries = d.metadata.iter().flatten().filter_map(|(k, v)| match v {
        serde_json::Value::String(s) => Some((k, s.clone())),
        serde_json::Value::Object(_) => None,
        v => Some((k, v.to_string())),
    });
    (json, xattrs::metadata_xattrs(format, entries))
}

/// The entries of a tensor directory (see [`layout::tensor_dir`]), counted against `budget`.
fn tensor_entries(
    policy: Policy<'_>,
    origin: &Path,
    owner: &Metadata,
    dir: &Attr,
    entries: Vec<layout::Entry>,
    json: Option<Arc<[u8]>>,
    budget: &mut usize,
) -> Result<Vec<Draft>, BuildError> {
    let children = layout::tensor_dir(policy.options, origin, owner, dir, entries, json, *budget)?;
    let count: usize = 1 + children.iter().map(Draft::count).sum::<usize>();
    *budget = budget
        .checked_sub(count)
        .ok_or_else(|| BuildError::TooManyNodes(origin.into()))?;
    Ok(children)
}
