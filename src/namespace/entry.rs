//! A tensor as the namespace lays it out: with the file that describes it and, where another
//! file holds its bytes, that file.

use std::sync::Arc;

use crate::format::Tensor;
use crate::source::Source;

/// A tensor with the source that describes it, and the data files of that description (see
/// [`Description::files`](crate::format::Description)), which its bytes may lie in.
#[derive(Clone)]
pub struct Entry {
    pub tensor: Arc<Tensor>,
    pub source: Arc<Source>,
    pub data: Arc<[Arc<Source>]>,
}

impl Entry {
    /// A tensor of `source`, served from it.
    pub fn of(tensor: Arc<Tensor>, source: Arc<Source>) -> Entry {
        Entry {
            tensor,
            source,
            data: Arc::from([]),
        }
    }

    /// The source its bytes are served from.
    pub fn bytes(&self) -> &Arc<Source> {
        lies_in(&self.tensor, &self.source, &self.data)
    }
}

/// The source the bytes of `tensor`, described by `source` whose data files are `data`, lie in:
/// its data file where it names one, else `source` (which a tensor gathered from several data
/// files is read through).
pub fn lies_in<'a>(
    tensor: &Tensor,
    source: &'a Arc<Source>,
    data: &'a [Arc<Source>],
) -> &'a Arc<Source> {
    tensor
        .file
        .and_then(|k| data.get(k as usize))
        .unwrap_or(source)
}
