//! Extended attributes: the one table of what a tensor file carries, what directories and
//! mirrored files carry, and the kernel's limits on them. A name is listed exactly when it has a
//! value.

use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use log::debug;

use super::node::{Content, Node, Xattrs, presented};
use crate::format::Tensor;
use crate::source::Source;
use crate::widen::Widening;

/// The kernel's limits on extended attributes (XATTR_NAME_MAX, XATTR_SIZE_MAX, XATTR_LIST_MAX).
pub const XATTR_NAME_MAX: usize = 255;
pub const XATTR_SIZE_MAX: usize = 65536;
pub const XATTR_LIST_MAX: usize = 65536;

/// The namespace of the attributes of tensors, their directories and mirrored files.
pub const PREFIX: &str = "user.safetensors.";

/// What a tensor file's attributes are made from.
struct TensorFile<'a> {
    source: &'a Source,
    tensor: &'a Tensor,
    widen: Option<Widening>,
    /// For an NPY view: the length of its header.
    npy_header: Option<u64>,
}

/// How an attribute's value is made, if the file has the attribute.
type Value = fn(&TensorFile) -> Option<Vec<u8>>;

/// Every attribute of a tensor file, in listing order: its name after [`PREFIX`], and its value.
const TENSOR: &[(&str, Value)] = &[
    ("dtype", |t| {
        Some(format!("{:?}", presented(t.tensor, t.widen).0).into_bytes())
    }),
    ("shape", |t| Some(t.tensor.shape_json().into_bytes())),
    ("data_offsets", |t| {
        Some(format!("[{},{}]", t.tensor.begin, t.tensor.end).into_bytes())
    }),
    ("offset", |t| {
        Some(
            (t.source.data_start() + t.tensor.begin)
                .to_string()
                .into_bytes(),
        )
    }),
    ("source", |t| {
        Some(t.source.path.as_os_str().as_bytes().to_vec())
    }),
    // A name longer than an attribute may be is left out (the file name is shortened then too).
    ("name", |t| {
        (t.tensor.name.len() <= XATTR_SIZE_MAX).then(|| t.tensor.name.as_bytes().to_vec())
    }),
    ("source_dtype", |t| {
        t.widen.map(|_| t.tensor.dtype_name().into_bytes())
    }),
    ("npy_header_len", |t| {
        t.npy_header.map(|n| n.to_string().into_bytes())
    }),
];

/// A mirrored file's attribute: why it is not interpreted as its name says.
const ERROR: &str = "error";

impl Node {
    fn tensor_file(&self) -> Option<TensorFile<'_>> {
        let (source, tensor, widen, npy) = match &self.content {
            Content::Tensor {
                source,
                tensor,
                widen,
            } => (source, tensor, *widen, false),
            Content::Npy {
                source,
                tensor,
                widen,
            } => (source, tensor, *widen, true),
            _ => return None,
        };
        Some(TensorFile {
            source,
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
                .map(|(key, _)| format!("{PREFIX}{key}"))
                .collect();
        }
        match &self.content {
            Content::Dir(d) => d.xattrs.keys().cloned().collect(),
            Content::Mirror { error: Some(_), .. } => vec![format!("{PREFIX}{ERROR}")],
            _ => Vec::new(),
        }
    }

    /// The value of one extended attribute, or `None` if there is no such attribute.
    pub fn xattr(&self, name: &str) -> Option<Vec<u8>> {
        if let Content::Dir(d) = &self.content {
            return d.xattrs.get(name).map(|v| v.clone().into_bytes());
        }
        let key = name.strip_prefix(PREFIX)?;
        if let Some(t) = self.tensor_file() {
            let (_, value) = TENSOR.iter().find(|(k, _)| *k == key)?;
            return value(&t);
        }
        match &self.content {
            Content::Mirror { error: Some(e), .. } if key == ERROR => {
                Some(e.to_string().into_bytes())
            }
            _ => None,
        }
    }
}

/// `user.safetensors.metadata.KEY` for each metadata entry the kernel can carry (name, value and
/// list limits): the xattrs of a tensor directory.
pub fn metadata_xattrs<'a>(entries: impl Iterator<Item = (&'a String, String)>) -> Arc<Xattrs> {
    let mut out = Xattrs::new();
    let mut list_len = 0;
    for (key, value) in entries {
        let name = format!("{PREFIX}metadata.{key}");
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
