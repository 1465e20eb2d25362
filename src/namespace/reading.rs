//! What a read of a file of the tree sends: which bytes the daemon has, and which span of which
//! source, presented how (see [`Reading`]). Sending them is the source layer's job.

use std::borrow::Cow;
use std::sync::Arc;

use super::entry::lies_in;
use super::node::{Content, Node, presented};
use crate::format::Tensor;
use crate::format::kit::npy;
use crate::format::widen::Widening;
use crate::source::{Body, Piece, ReadError, Reading, Source, Stored, Wait};

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
            Content::Mirror { source, .. } => {
                let offset = offset.min(self.attr.size);
                let piece = Piece {
                    start: 0,
                    offset,
                    len: size.min(self.attr.size - offset),
                    widen: None,
                    stored: Stored::Contiguous,
                    source: None,
                };
                reading(source, Cow::Borrowed(&[]), vec![piece])
            }
            Content::Converted { source, file, data } => {
                let header = &file.header[..];
                let header_len = header.len() as u64;
                let (offset, head) = if offset >= header_len {
                    (offset - header_len, &[][..])
                } else {
                    (0, window(header, offset, size))
                };
                // The tensors under the rest of the read, each read as its tensor file is.
                let end = offset
                    .saturating_add(size - head.len() as u64)
                    .min(file.data_len);
                let parts = file.parts[file.part_at(offset)..]
                    .iter()
                    .take_while(|part| part.start < end);
                // Each tensor is read where it lies: the checkpoint, or a data file it names.
                let read: Vec<(Piece, &Arc<Source>)> = parts
                    .map(|part| {
                        let from = offset.max(part.start) - part.start;
                        let to = end.min(part.end()) - part.start;
                        let at = lies_in(&part.tensor, source, data);
                        piece(at, &part.tensor, part.widen, from, to - from, data)
                    })
                    .collect();
                // A read whose pieces all lie in one file reads that file as one body (the fast
                // paths); one whose pieces lie in several gives each piece its own.
                let body = read.first().map_or(source, |(_, s)| *s);
                let one = read.iter().all(|(_, s)| Arc::ptr_eq(s, body));
                let pieces = read
                    .into_iter()
                    .map(|(mut p, s)| {
                        if !one {
                            p.source = Some(s.clone());
                        }
                        p
                    })
                    .collect();
                reading(body, Cow::Borrowed(head), pieces)
            }
            Content::Tensor {
                source,
                tensor,
                widen,
                data,
            } => {
                let at = lies_in(tensor, source, data);
                let (piece, source) = piece(at, tensor, *widen, offset, size, data);
                reading(source, Cow::Borrowed(&[]), vec![piece])
            }
            Content::Npy {
                source,
                tensor,
                widen,
                data,
            } => {
                let source = lies_in(tensor, source, data);
                let header_len = self.attr.size - presented(tensor, *widen).1;
                let (offset, head) = if offset >= header_len {
                    (offset - header_len, Vec::new())
                } else {
                    let dtype = presented(tensor, *widen).0;
                    let header = npy::header_as(dtype, tensor).ok_or(NotReadable::Nothing)?;
                    (0, window(&header, offset, size).to_vec())
                };
                let size = size.saturating_sub(head.len() as u64);
                let (piece, source) = piece(source, tensor, *widen, offset, size, data);
                reading(source, Cow::Owned(head), vec![piece])
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

/// How much of a file [`Node::read_all`] and [`tensor_bytes`] read at a time.
const CHUNK: u32 = 4 << 20;

impl Node {
    /// All the bytes of this file, in order, [`CHUNK`] at a time, each copied into a buffer the
    /// caller may read (to hash or compare them: see [`Wait::Copied`]); `each` returns false to stop
    /// early. Waits on storage: never on a FUSE thread.
    pub fn read_all(&self, mut each: impl FnMut(&[u8]) -> bool) -> Result<(), ReadAllError> {
        let mut offset = 0;
        while offset < self.attr.size {
            let reading = self
                .read(offset, CHUNK)
                .map_err(ReadAllError::NotReadable)?;
            if !send_copied(&reading, &mut offset, &mut each)? {
                break;
            }
        }
        Ok(())
    }
}

/// The stored bytes of `tensor` of `source` (as its tensor file serves them without `-o dtype=`),
/// as [`Node::read_all`] gives a file's; `data` are the data files of its description.
pub fn tensor_bytes(
    source: &Arc<Source>,
    tensor: &Arc<Tensor>,
    data: &Arc<[Arc<Source>]>,
    mut each: impl FnMut(&[u8]) -> bool,
) -> Result<(), ReadError> {
    let mut offset = 0;
    while offset < tensor.size() {
        let at = lies_in(tensor, source, data);
        let (piece, source) = piece(at, tensor, None, offset, u64::from(CHUNK), data);
        let reading = reading(source, Cow::Borrowed(&[]), vec![piece]);
        match send_copied(&reading, &mut offset, &mut each) {
            Ok(true) => {}
            Ok(false) => break,
            Err(ReadAllError::Source(e)) => return Err(e),
            Err(ReadAllError::NotReadable(_)) => {
                return Err(ReadError::io(&source.path, "tensor bytes not readable"));
            }
        }
    }
    Ok(())
}

/// Sends `reading` copied to `each`, moving `offset` past its bytes; false when `each` says stop.
fn send_copied(
    reading: &Reading<'_>,
    offset: &mut u64,
    each: &mut impl FnMut(&[u8]) -> bool,
) -> Result<bool, ReadAllError> {
    let mut go_on = true;
    let mut sent = 0;
    match reading.send(Wait::Copied, &mut |b: &[u8]| {
        sent = b.len() as u64;
        go_on = each(b);
    }) {
        Some(Ok(())) if sent > 0 => {
            *offset += sent;
            Ok(go_on)
        }
        // Nothing sent before the end: the file is shorter than its size says.
        Some(Ok(())) => Err(ReadAllError::Source(failed(
            reading,
            "ends before its size",
        ))),
        Some(Err(e)) => Err(ReadAllError::Source(e)),
        // Only a read that may not wait gives up.
        None => Err(ReadAllError::Source(failed(reading, "read gave up"))),
    }
}

/// A read of `reading` that did not complete, for `why`, naming its source if it has one.
fn failed(reading: &Reading<'_>, why: &str) -> ReadError {
    match &reading.body {
        Some(b) => ReadError::io(&b.source.path, why),
        None => ReadError::Io(why.into()),
    }
}

/// Why [`Node::read_all`] could not read a file through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadAllError {
    NotReadable(NotReadable),
    Source(ReadError),
}

/// Up to `size` presented bytes of `tensor` of `source` from `offset` (widened by `widen`): fewer
/// at the end, none past it; with the source they are read from: `source`, or the data file of
/// `data` that holds them as one stretch (a part of a gathered tensor that lies in one chunk).
fn piece<'a>(
    source: &'a Arc<Source>,
    tensor: &Arc<Tensor>,
    widen: Option<Widening>,
    offset: u64,
    size: u64,
    data: &'a Arc<[Arc<Source>]>,
) -> (Piece, &'a Arc<Source>) {
    let len = presented(tensor, widen).1;
    let offset = offset.min(len);
    let len = size.min(len - offset);
    let stretch = match (&tensor.computed, widen) {
        (Some(c), None) => c.stretch(offset, len),
        _ => None,
    };
    if let Some((k, at)) = stretch
        && let Some(file) = data.get(k as usize)
        && at >= offset
    {
        let piece = Piece {
            start: at - offset,
            offset,
            len,
            widen,
            stored: Stored::Contiguous,
            source: None,
        };
        return (piece, file);
    }
    let piece = Piece {
        start: tensor.start(source.data_start()),
        offset,
        len,
        widen,
        stored: match (&tensor.strides, &tensor.computed) {
            (_, Some(_)) => Stored::Computed(tensor.clone(), data.clone()),
            (Some(_), None) => Stored::Strided(tensor.clone()),
            (None, None) => Stored::Contiguous,
        },
        source: None,
    };
    (piece, source)
}

/// A read of `head`, then `pieces` of `source`.
fn reading<'a>(source: &'a Arc<Source>, head: Cow<'a, [u8]>, pieces: Vec<Piece>) -> Reading<'a> {
    Reading {
        head,
        body: Some(Body {
            source: Cow::Borrowed(source),
            pieces,
        }),
    }
}

/// `size` bytes of `bytes` from `offset`, fewer at the end.
fn window(bytes: &[u8], offset: u64, size: u64) -> &[u8] {
    let start = offset.min(bytes.len() as u64) as usize;
    let end = start + (size.min((bytes.len() - start) as u64)) as usize;
    &bytes[start..end]
}
