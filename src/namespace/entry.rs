//! A tensor as the namespace lays it out: with the file that describes it and, where another
//! file holds its bytes, that file.

use std::sync::Arc;

use crate::format::Tensor;
use crate::source::Source;

/// A tensor with the source that describes it, and the one its bytes are served from where that
/// is another file (a model's data file).
#[derive(Clone)]
pub struct Entry {
    pub tensor: Arc<Tensor>,
    pub source: Arc<Source>,
    pub data: Option<Arc<Source>>,
}

impl Entry {
    /// A tensor of `source`, served from it.
    pub fn of(tensor: Arc<Tensor>, source: Arc<Source>) -> Entry {
        Entry {
            tensor,
            source,
            data: None,
        }
    }

    /// The source its bytes are served from.
    pub fn bytes(&self) -> &Arc<Source> {
        self.data.as_ref().unwrap_or(&self.source)
    }
}
