//! What a read of a file of the tree sends: which bytes the daemon has, and which span of which
//! source, presented how (see [`Reading`]). Sending them is the source layer's job.

use std::borrow::Cow;
use std::sync::Arc;

use super::node::{Content, Node, presented};
use crate::format::Tensor;
use crate::npy;
use crate::source::{Body, Reading, Source};
use crate::widen::Widening;

/// Why a file of the tree has nothing to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReadable {
    /// A directory.
    IsDir,
    /// A symbolic link (the kernel follows it rather than read it), or an NPY view whose header
    /// cannot be made (never expected: views are only made where it can).
    Nothing,
}

impl Node {
    /// What a read of up to `size` bytes from `offset` sends: bytes the daemon has, or a span of
    /// a source, after the NPY header's bytes for the start of an NPY view.
    pub fn read(&self, offset: u64, size: u32) -> Result<Reading<'_>, NotReadable> {
        let size = u64::from(size);
        Ok(match &self.content {
            Content::Mirror { source, .. } => source_span(
                source,
                0,
                self.attr.size,
                None,
                offset,
                size,
                Cow::Borrowed(&[]),
            ),
            Content::Tensor {
                source,
                tensor,
                widen,
            } => tensor_span(source, tensor, *widen, offset, size, Cow::Borrowed(&[])),
            Content::Npy {
                source,
                tensor,
                widen,
            } => {
                let header_len = self.attr.size - presented(tensor, *widen).1;
                let (offset, head) = if offset >= header_len {
                    (offset - header_len, Vec::new())
                } else {
                    let dtype = presented(tensor, *widen).0;
                    let header = npy::header_as(dtype, tensor).ok_or(NotReadable::Nothing)?;
                    (0, window(&header, offset, size).to_vec())
                };
                tensor_span(source, tensor, *widen, offset, size, Cow::Owned(head))
            }
            Content::Generated(bytes) => Reading {
                head: Cow::Borrowed(window(bytes, offset, size)),
                body: None,
            },
            Content::Dir(_) => return Err(NotReadable::IsDir),
            Content::Link(_) => return Err(NotReadable::Nothing),
        })
    }
}

/// A read of the presented bytes of `tensor`, after `head`.
fn tensor_span<'a>(
    source: &'a Arc<Source>,
    tensor: &Tensor,
    widen: Option<Widening>,
    offset: u64,
    size: u64,
    head: Cow<'a, [u8]>,
) -> Reading<'a> {
    let start = source.data_start() + tensor.begin;
    let len = presented(tensor, widen).1;
    source_span(source, start, len, widen, offset, size, head)
}

/// `head`, then up to `size` bytes (head included) from `offset` of the `len` presented bytes
/// that start at byte `start` of `source`: fewer at the end, none past it.
fn source_span<'a>(
    source: &'a Arc<Source>,
    start: u64,
    len: u64,
    widen: Option<Widening>,
    offset: u64,
    size: u64,
    head: Cow<'a, [u8]>,
) -> Reading<'a> {
    let offset = offset.min(len);
    let want = size.saturating_sub(head.len() as u64).min(len - offset);
    Reading {
        head,
        body: Some(Body {
            source: Cow::Borrowed(source),
            start,
            offset,
            len: want,
            widen,
        }),
    }
}

/// `size` bytes of `bytes` from `offset`, fewer at the end.
fn window(bytes: &[u8], offset: u64, size: u64) -> &[u8] {
    let start = offset.min(bytes.len() as u64) as usize;
    let end = start + (size.min((bytes.len() - start) as u64)) as usize;
    &bytes[start..end]
}
