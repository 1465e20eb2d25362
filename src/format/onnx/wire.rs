//! Protocol buffers' wire format, read from a file by `pread` through a small window, never read
//! whole: a message is walked field by field, and a length-delimited field (a string, a packed
//! array, `raw_data`, a sub-message) is only its place in the file until the walker asks for its
//! bytes.
//!
//! A message is its [`Spans`]: protobuf merges every occurrence of a singular message field into
//! one (repeated fields concatenated, the last scalar winning), which is what parsing the
//! occurrences one after the other gives. A field never runs past the end of its span.

use std::io;

use super::error::OnnxError;

/// The bytes of a message: each occurrence's `[start, end)` in the file, in order.
pub(super) type Spans = Vec<(u64, u64)>;

/// Reads bytes at an offset of the file (a `pread`).
pub(super) trait At {
    fn read_exact_at(&mut self, buf: &mut [u8], at: u64) -> io::Result<()>;
}

impl At for &std::fs::File {
    fn read_exact_at(&mut self, buf: &mut [u8], at: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(*self, buf, at)
    }
}

/// Bytes read ahead of the walk.
const WINDOW: usize = 1 << 16;

/// A field's value as the wire carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wire {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    /// Length-delimited: `len` bytes from `at`.
    Len {
        at: u64,
        len: u64,
    },
}

/// One field: its number, its value, and where its value starts (for a varint or fixed value,
/// the bytes of the value itself).
#[derive(Debug, Clone, Copy)]
pub(super) struct Field {
    pub number: u32,
    pub wire: Wire,
    pub at: u64,
}

/// The file, read through a window of [`WINDOW`] bytes.
pub(super) struct Window<A: At> {
    file: A,
    /// The file's length: nothing past it is read.
    len: u64,
    start: u64,
    buf: Vec<u8>,
}

impl<A: At> Window<A> {
    pub fn new(file: A, len: u64) -> Self {
        Window {
            file,
            len,
            start: 0,
            buf: Vec::new(),
        }
    }

    /// The byte at `pos`, which the caller has checked lies in the file.
    fn byte(&mut self, pos: u64) -> Result<u8, OnnxError> {
        let i = pos.wrapping_sub(self.start);
        if let Some(&b) = usize::try_from(i).ok().and_then(|i| self.buf.get(i)) {
            return Ok(b);
        }
        let n = (self.len.saturating_sub(pos)).min(WINDOW as u64) as usize;
        self.buf.resize(n, 0);
        self.file
            .read_exact_at(&mut self.buf, pos)
            .map_err(OnnxError::Io)?;
        self.start = pos;
        self.buf.first().copied().ok_or(OnnxError::Truncated {
            inside: "the file".into(),
        })
    }

    /// The `len` bytes at `at`, read whole.
    fn bytes(&mut self, at: u64, len: u64) -> Result<Vec<u8>, OnnxError> {
        let mut out = vec![
            0;
            usize::try_from(len).map_err(|_| OnnxError::Truncated {
                inside: "a field".into(),
            })?
        ];
        let i = at.wrapping_sub(self.start);
        let cached = usize::try_from(i)
            .ok()
            .and_then(|i| self.buf.get(i..i + out.len()));
        match cached {
            Some(bytes) => out.copy_from_slice(bytes),
            None => self
                .file
                .read_exact_at(&mut out, at)
                .map_err(OnnxError::Io)?,
        }
        Ok(out)
    }

    /// A varint at `*pos`, before `end`; `*pos` moves past it.
    pub fn varint(&mut self, pos: &mut u64, end: u64, inside: &str) -> Result<u64, OnnxError> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            if *pos >= end {
                return Err(OnnxError::Truncated {
                    inside: inside.into(),
                });
            }
            let b = self.byte(*pos)?;
            *pos += 1;
            if shift < 64 {
                value |= u64::from(b & 0x7f) << shift;
            }
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(OnnxError::BadVarint {
            inside: inside.into(),
        })
    }

    /// The `N` bytes at `*pos`, before `end`; `*pos` moves past them.
    pub fn fixed<const N: usize>(
        &mut self,
        pos: &mut u64,
        end: u64,
        inside: &str,
    ) -> Result<[u8; N], OnnxError> {
        if end.saturating_sub(*pos) < N as u64 {
            return Err(OnnxError::Truncated {
                inside: inside.into(),
            });
        }
        let mut out = [0; N];
        for b in &mut out {
            *b = self.byte(*pos)?;
            *pos += 1;
        }
        Ok(out)
    }

    /// The next field at `*pos`, before `end`; `*pos` moves past it (past a length-delimited
    /// field's bytes, unread).
    pub fn field(&mut self, pos: &mut u64, end: u64, inside: &str) -> Result<Field, OnnxError> {
        let key = self.varint(pos, end, inside)?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| OnnxError::BadField {
                inside: inside.into(),
                what: format!("a field number of {}", key >> 3),
            })?;
        let at = *pos;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint(pos, end, inside)?),
            1 => Wire::Fixed64(u64::from_le_bytes(self.fixed(pos, end, inside)?)),
            5 => Wire::Fixed32(u32::from_le_bytes(self.fixed(pos, end, inside)?)),
            2 => {
                let len = self.varint(pos, end, inside)?;
                let at = *pos;
                if end.saturating_sub(at) < len {
                    return Err(OnnxError::Truncated {
                        inside: inside.into(),
                    });
                }
                *pos = at + len;
                Wire::Len { at, len }
            }
            t => {
                return Err(OnnxError::BadField {
                    inside: inside.into(),
                    what: format!("field {number} of wire type {t} (groups are not used)"),
                });
            }
        };
        Ok(Field { number, wire, at })
    }

    /// Every field of the message `spans`, in order, given to `each` (which may read more of the
    /// file).
    pub fn fields(
        &mut self,
        spans: &[(u64, u64)],
        inside: &str,
        mut each: impl FnMut(&mut Self, Field) -> Result<(), OnnxError>,
    ) -> Result<(), OnnxError> {
        for &(start, end) in spans {
            let mut pos = start;
            while pos < end {
                let f = self.field(&mut pos, end, inside)?;
                each(self, f)?;
            }
        }
        Ok(())
    }

    /// A string field's text (at most `max` bytes; a longer one is refused).
    pub fn text(&mut self, wire: Wire, max: u64, inside: &str) -> Result<String, OnnxError> {
        match wire {
            Wire::Len { len, .. } if len > max => Err(OnnxError::TooLong {
                inside: inside.into(),
                len,
                max,
            }),
            Wire::Len { at, len } => {
                Ok(String::from_utf8_lossy(&self.bytes(at, len)?).into_owned())
            }
            _ => Err(wire_type(inside, "a string")),
        }
    }
}

/// The error of a field whose wire type is not what its message declares.
pub(super) fn wire_type(inside: &str, wanted: &str) -> OnnxError {
    OnnxError::BadField {
        inside: inside.into(),
        what: format!("a field that should be {wanted} has another wire type"),
    }
}
