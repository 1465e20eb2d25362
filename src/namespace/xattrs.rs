//! Extended attributes: the one table of what a tensor file carries, what directories and
//! mirrored files carry, and the kernel's limits on them. A name is listed exactly when it has a
//! value.

use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use log::debug;

use super::entry::lies_in;
use super::node::{Content, Node, Xattrs, presented, presented_name};
use crate::base::digest::{Sha256, hex};
use crate::format::widen::Widening;
use crate::format::{Dtype, Format, Tensor};
use crate::source::Source;

/// The kernel's limits on extended attributes (XATTR_NAME_MAX, XATTR_SIZE_MAX, XATTR_LIST_MAX).
pub const XATTR_NAME_MAX: usize = 255;
pub const XATTR_SIZE_MAX: usize = 65536;
pub const XATTR_LIST_MAX: usize = 65536;

/// The namespace of the attributes of tensors, their directories and mirrored files.
pub const PREFIX: &str = "user.safetensors.";

/// What a tensor file's attributes are made from.
struct TensorFile<'a> {
    /// The file that describes it.
    source: &'a Source,
    /// The file that holds its bytes (`source`, or a data file it names).
    data: &'a Source,
    tensor: &'a Tensor,
    widen: Option<Widening>,
    /// For an NPY view: the length of its header.
    npy_header: Option<u64>,
}

/// How an attribute's value is made, if the file has the attribute.
type Value = fn(&TensorFile) -> Option<Vec<u8>>;

/// Every attribute of a tensor file, in listing order: its whole name, and its value.
const TENSOR: &[(&str, Value)] = &[
    ("user.safetensors.dtype", |t| {
        Some(presented_name(t.tensor, t.widen).into_bytes())
    }),
    ("user.safetensors.shape", |t| {
        Some(t.tensor.shape_json().into_bytes())
    }),
    // Offsets into a safetensors header's data buffer: safetensors files only.
    ("user.safetensors.data_offsets", |t| {
        t.source
            .format()
            .is_some_and(Format::native)
            .then(|| format!("[{},{}]", t.tensor.begin, t.tensor.end).into_bytes())
    }),
    // Where the bytes lie in the source: only for a tensor stored as one stretch.
    ("user.safetensors.offset", |t| {
        t.tensor
            .is_stretch()
            .then(|| t.tensor.start(t.data.data_start()).to_string().into_bytes())
    }),
    ("user.safetensors.source", |t| {
        t.tensor
            .is_stretch()
            .then(|| t.data.path.as_os_str().as_bytes().to_vec())
    }),
    // A name longer than an attribute may be is left out (the file name is shortened then too).
    ("user.safetensors.name", |t| {
        (t.tensor.name.len() <= XATTR_SIZE_MAX).then(|| t.tensor.name.as_bytes().to_vec())
    }),
    ("user.safetensors.source_dtype", |t| {
        t.widen.map(|_| t.tensor.dtype_name().as_bytes().to_vec())
    }),
    ("user.safetensors.npy_header_len", |t| {
        t.npy_header.map(|n| n.to_string().into_bytes())
    }),
    // The kind of checkpoint, for tensors of a format other than safetensors.
    ("user.tensormount.format", |t| {
        t.source
            .format()
            .filter(|f| !f.native())
            .and(t.source.kind())
            .map(|k| k.as_bytes().to_vec())
    }),
];

/// The elements and bytes of a block of a packed block type (a GGUF quantized type, ONNX's 4-bit
/// types), under its format's name for it: the tensor file's attribute after [`TENSOR`]'s.
fn block(t: &TensorFile) -> Option<(&'static str, Vec<u8>)> {
    match t.tensor.dtype {
        Dtype::Block(b) => Some((
            b.xattr,
            format!("[{},{}]", b.elements, b.bytes).into_bytes(),
        )),
        _ => None,
    }
}

/// A mirrored weight file's attribute: the SHA-256 SOURCE records for it (see
/// [`Source::recorded`]).
const RECORDED: &str = "user.tensormount.sha256";

/// A converted file's attribute: the checkpoint it was converted from.
const CONVERTED_FROM: &str = "user.tensormount.converted_from";

impl Node {
    fn tensor_file(&self) -> Option<TensorFile<'_>> {
        let (source, tensor, widen, data, npy) = match &self.content {
            Content::Tensor {
                source,
                tensor,
                widen,
                data,
            } => (source, tensor, *widen, data, false),
            Content::Npy {
                source,
                tensor,
                widen,
                data,
            } => (source, tensor, *widen, data, true),
            _ => return None,
        };
        Some(TensorFile {
            source,
            data: lies_in(tensor, source, data),
            tensor,
            widen,
            npy_header: npy.then(|| self.attr.size - presented(tensor, widen).1),
        })
    }

    /// The names of the extended attributes, in a stable order.
    pub fn xattr_names(&self) -> Vec<String> {
        if let Some(t) = self.tensor_file() {
            return TENSOR
                .iter()
                .filter(|(_, value)| value(&t).is_some())
                .map(|(name, _)| name.to_string())
                .chain(block(&t).map(|(name, _)| name.to_string()))
                .collect();
        }
        match &self.content {
            Content::Dir(d) => d.xattrs.keys().cloned().collect(),
            Content::Mirror { error, source } => {
                let error = error.as_ref().map(|e| e.xattr.to_string());
                let recorded = recorded(source).map(|_| RECORDED.to_string());
                error.into_iter().chain(recorded).collect()
            }
            Content::Converted { .. } => vec![CONVERTED_FROM.to_string()],
            _ => Vec::new(),
        }
    }

    /// The value of one extended attribute, or `None` if there is no such attribute.
    pub fn xattr(&self, name: &str) -> Option<Vec<u8>> {
        if let Content::Dir(d) = &self.content {
            return d.xattrs.get(name).map(|v| v.clone().into_bytes());
        }
        if let Some(t) = self.tensor_file() {
            if let Some((_, value)) = TENSOR.iter().find(|(k, _)| *k == name) {
                return value(&t);
            }
            return block(&t).filter(|(k, _)| *k == name).map(|(_, v)| v);
        }
        match &self.content {
            Content::Mirror { error: Some(e), .. } if name == e.xattr => {
                Some(e.to_string().into_bytes())
            }
            Content::Mirror { source, .. } if name == RECORDED => {
                recorded(source).map(|d| hex(d).into_bytes())
            }
            Content::Converted { source, .. } if name == CONVERTED_FROM => {
                Some(source.path.as_os_str().as_bytes().to_vec())
            }
            _ => None,
        }
    }
}

/// The digest SOURCE records for a mirrored file, looked up on first use (for a source on a
/// filesystem that may stall, only once looked up on the read pool: see `fs`).
fn recorded(source: &Source) -> Option<&Sha256> {
    let recorded = match source.remote {
        true => source.recorded_if_known()?,
        false => source.recorded(),
    };
    recorded.map(|r| &r.sha256)
}

/// The xattr of each metadata entry the kernel can carry (name, value and list limits), named as
/// `format` names them (`user.safetensors.metadata.KEY`, `user.gguf.KEY`): the xattrs of a tensor
/// directory.
pub fn metadata_xattrs<'a>(
    format: Format,
    entries: impl Iterator<Item = (&'a String, String)>,
) -> Arc<Xattrs> {
    let mut out = Xattrs::new();
    let mut list_len = 0;
    for (key, value) in entries {
        let name = format.metadata_xattr(key);
        if name.len() > XATTR_NAME_MAX
            || name.contains('\0')
            || value.len() > XATTR_SIZE_MAX
            || list_len + name.len() + 1 > XATTR_LIST_MAX
        {
            debug!("metadata key `{key}` does not fit in an extended attribute; left out");
            continue;
        }
        list_len += name.len() + 1;
        out.insert(name, value);
    }
    Arc::new(out)
}
