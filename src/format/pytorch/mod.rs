//! The reader of PyTorch checkpoints written by `torch.save`: the zip format (PyTorch 1.6 and
//! later) and the legacy format before it. The pickle is interpreted by the kit's machine, which
//! only builds data ([`crate::format::kit::pickle`]): no global is ever imported, looked up or
//! called.
//!
//! - [`dtypes`]: torch's element types and the safetensors dtypes they are;
//! - [`torch`]: what torch's rebuild functions, storages and dtypes in a pickle mean: tensors;
//! - [`rule`]: the rules a checkpoint breaks, each refusal's name;
//! - [`danger`]: the allow-list of the globals `torch.save` writes, which the machine is given:
//!   any other says a pickle is a trap (nothing is run either way);
//! - [`zip`] and [`legacy`]: where each storage's bytes lie in the file, by container, each giving
//!   a [`container::Container`]; the zip archive's records are the kit's
//!   ([`crate::format::kit::zip`]), its rules mapped to this reader's.
//!
//! This module tells the containers apart by the file's first bytes and places each tensor in its
//! storage: tensor offsets are absolute file offsets (`data_start` is 0).

mod container;
pub(crate) mod danger;
pub(crate) mod dtypes;
mod legacy;
mod rule;
mod torch;
mod zip;

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::description::{Conversion, Description, NotOffered, Tensor};
use super::error::FormatError;
use super::kit::notes;
use super::kit::pickle;
use crate::format::kit::zip::Archive;
use container::{Container, NOT_OFFERED, Span, UNSAFE, checkpoint, load_at, trap, trap_found};
pub use rule::Rule;
use torch::Found;

/// Reads `file` (whose path is `path`, for messages) as a PyTorch checkpoint.
pub fn describe(file: &File, path: &Path) -> Result<Description, FormatError> {
    let len = file
        .metadata()
        .map_err(|e| FormatError::Io(path.to_path_buf(), e))?
        .len();
    let mut head = vec![0u8; len.min(legacy::SNIFF_LEN) as usize];
    file.read_exact_at(&mut head, 0)
        .map_err(|e| FormatError::Io(path.to_path_buf(), e))?;
    let container = if head.starts_with(b"PK\x03\x04") {
        zip::read(Archive { file, start: 0 }, len, path)?
    } else if legacy::is_tar_checkpoint(&head) {
        return Err(checkpoint(
            path,
            Rule::TarCheckpoint,
            "a tar checkpoint of PyTorch before 0.4, which this reader does not read",
            false,
        ));
    } else {
        match legacy::read(file, len, path) {
            Err(FormatError::Foreign(_)) => return Err(plain_pickle(file, len, path)),
            c => c?,
        }
    };
    build(container, path)
}

/// Reads the `torch.save` archive that lies at `[start, start + len)` of `file` (whose path is
/// `path`, for messages), as a checkpoint of its own: what DCP writes for each chunk of a tensor
/// and each object. Its tensors' places are offsets in `file`.
pub(crate) fn describe_archive(
    file: &File,
    start: u64,
    len: u64,
    path: &Path,
) -> Result<Description, FormatError> {
    build(zip::read(Archive { file, start }, len, path)?, path)
}

/// What a reading of a checkpoint says it calls, if it is a trap (nothing was run): refused for
/// it, or read and not offered for it; without the words on the file's conversion (for a reader
/// that reads the checkpoint as part of its own file).
pub(crate) fn trap_in(read: &Result<Description, FormatError>) -> Option<String> {
    let why = match read {
        Ok(d) => match &d.conversion {
            Some(Err(NotOffered::Trap(why))) => why.as_str(),
            _ => return None,
        },
        Err(e) => trap_found(e)?,
    };
    Some(why.replace(NOT_OFFERED, ""))
}

/// A file that is pickles rather than a `torch.save` archive: `torch.load` unpickles a file that is
/// no archive one pickle after another (as many as the legacy format has: the magic number, the
/// protocol version, `sys_info`, the main pickle, the storage keys), of any protocol and whatever
/// its first pickle is, so each is scanned, and one that names an unsafe global is refused by name
/// (nothing is run either way); any other file is simply not a checkpoint.
fn plain_pickle(file: &File, len: u64, path: &Path) -> FormatError {
    let mut at = 0;
    let mut unsafe_globals = Vec::new();
    // A later pickle that fails after an unsafe global: its own refusal, said after the others.
    let mut failed = None;
    for _ in 0..legacy::PICKLES {
        match load_at(file, len, at, path, "the pickle") {
            Ok(p) => {
                danger::unsafe_globals(&p.values, &mut unsafe_globals);
                at += p.consumed as u64;
            }
            Err(e) if trap_found(&e).is_some() && unsafe_globals.is_empty() => return e,
            Err(e) if trap_found(&e).is_some() => {
                failed = trap_found(&e).map(str::to_string);
                break;
            }
            Err(_) => break,
        }
        if at >= len {
            break;
        }
    }
    if unsafe_globals.is_empty() {
        return FormatError::Foreign(path.to_path_buf());
    }
    checkpoint(
        path,
        UNSAFE,
        format!(
            "pickles, not a torch.save checkpoint, that call {}; nothing was run, the file is not \
             offered as safetensors{}",
            unsafe_globals.join(", "),
            failed.map_or(String::new(), |f| format!("; then {f}"))
        ),
        false,
    )
}

/// The description of a read container: its tensors placed, the notes, the conversion.
fn build(c: Container, path: &Path) -> Result<Description, FormatError> {
    let walked =
        torch::walk(&c.main).map_err(|what| checkpoint(path, Rule::TooManyPaths, what, false))?;
    let mut notes = walked.notes;
    let mut tensors = Vec::with_capacity(walked.found.len());
    // The first tensor of each value, for the state dict (its names are the same tensor).
    let mut by_value: HashMap<pickle::Id, Arc<Tensor>> = HashMap::new();
    for found in walked.found {
        match place(&found, &c.storages) {
            Ok(t) => {
                let t = Arc::new(t);
                by_value
                    .entry(found.value)
                    .or_insert_with(|| Arc::clone(&t));
                tensors.push(t);
            }
            Err(why) => notes.push(format!("tensor `{}` {why}", found.name)),
        }
    }
    tensors.sort_by(|a, b| (a.begin, &a.name).cmp(&(b.begin, &b.name)));

    let conversion = if c.unsafe_globals.is_empty() {
        match walked.state_dict {
            Ok(keys) => {
                let mut entries = Vec::with_capacity(keys.len());
                let mut left_out = Vec::new();
                for (key, value) in keys {
                    // A file only (complex32, complex128) has no safetensors dtype to convert to.
                    match by_value.get(&value).filter(|t| !t.file_only()) {
                        Some(t) => entries.push((Arc::from(key.as_str()), Arc::clone(t))),
                        None => left_out.push(key),
                    }
                }
                if !left_out.is_empty() {
                    notes.push(left_out_note(&left_out));
                }
                if entries.is_empty() {
                    Err(NotOffered::Unfit("no tensors".to_string()))
                } else {
                    Ok(Conversion {
                        state_dict: entries,
                        metadata: [("format".to_string(), "pt".to_string())].into(),
                    })
                }
            }
            Err(why) => Err(NotOffered::Unfit(why)),
        }
    } else {
        let why = trap(&c.unsafe_globals);
        notes.insert(0, why.clone());
        Err(NotOffered::Trap(why))
    };
    Ok(Description {
        tensors,
        notes: notes::bounded(notes, walked.more_notes, path),
        conversion: Some(conversion),
        ..Description::new(c.kind)
    })
}

/// The one note on the tensors of the state dict that have no file (each has a note saying why).
fn left_out_note(names: &[String]) -> String {
    const LISTED: usize = 10;
    let listed: Vec<String> = names
        .iter()
        .take(LISTED)
        .map(|n| format!("`{n}`"))
        .collect();
    let more = match names.len().saturating_sub(LISTED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!(
        "the conversion to safetensors leaves out the tensors of the state dict that have no \
         file or no safetensors dtype: {}{more}",
        listed.join(", ")
    )
}

/// The tensor's place in the file, checked to lie inside its storage, which lies in the file (the
/// container checked the storage's span).
fn place(f: &Found, storages: &HashMap<String, Span>) -> Result<Tensor, String> {
    let s = &f.storage;
    let span = storages.get(&s.key).ok_or_else(|| {
        format!(
            "has its storage `{}` missing from the file: left out",
            s.key
        )
    })?;
    let overflow = || "has sizes that overflow: left out".to_string();
    // The storage (or the view of it) in bytes, from the start of the storage's span.
    let base = s.view_start.checked_mul(s.elem_size).ok_or_else(overflow)?;
    let storage_len = s.numel.checked_mul(s.elem_size).ok_or_else(overflow)?;
    if base
        .checked_add(storage_len)
        .is_none_or(|end| end > span.len)
    {
        return Err(format!(
            "has its storage `{}` claim {storage_len} bytes where the file holds {}: left out",
            s.key,
            span.len.saturating_sub(base)
        ));
    }
    let start = span.start.checked_add(base).ok_or_else(overflow)?;
    let size = f.elem.size;
    let shape = f
        .shape
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<Box<[usize]>>>()
        .ok_or_else(overflow)?;
    let numel = f
        .shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or_else(overflow)?;
    let tensor = |begin: u64, end: u64, strides: Option<Box<[u64]>>| Tensor {
        name: Arc::from(f.name.as_str()),
        dtype: f.dtype,
        shape: shape.clone(),
        begin,
        end,
        strides,
        computed: None,
        file: None,
    };
    if numel == 0 {
        let offset = f.offset.saturating_mul(size).min(storage_len);
        let at = start.checked_add(offset).ok_or_else(overflow)?;
        return Ok(tensor(at, at, None));
    }
    // The farthest element: offset + Σ (size_i − 1)·stride_i, which must be inside the storage.
    let reach = f
        .shape
        .iter()
        .zip(&f.strides)
        .try_fold(f.offset, |r, (&d, &st)| {
            r.checked_add((d - 1).checked_mul(st)?)
        })
        .ok_or_else(overflow)?;
    let reach_end = reach
        .checked_add(1)
        .and_then(|r| r.checked_mul(size))
        .ok_or_else(overflow)?;
    if reach_end > storage_len {
        return Err(format!(
            "reaches element {reach} of its storage `{}`, which holds {} of its dtype: left out",
            s.key,
            storage_len / size.max(1)
        ));
    }
    let begin = f
        .offset
        .checked_mul(size)
        .and_then(|o| start.checked_add(o))
        .ok_or_else(overflow)?;
    let end = numel
        .checked_mul(size)
        .and_then(|n| begin.checked_add(n))
        .ok_or_else(overflow)?;
    let strides = (!contiguous(&f.shape, &f.strides)).then(|| f.strides.clone().into_boxed_slice());
    Ok(tensor(begin, end, strides))
}

/// Whether the strides are C order's for the shape (dimensions of size 1 may have any stride).
fn contiguous(shape: &[u64], strides: &[u64]) -> bool {
    let mut expected = 1u64;
    for (&d, &st) in shape.iter().zip(strides).rev() {
        if d != 1 && st != expected {
            return false;
        }
        expected = expected.saturating_mul(d);
    }
    true
}

#[cfg(test)]
mod tests;

/// The stem Hugging Face gives the safetensors conversion of a checkpoint whose stem is `stem`:
/// `pytorch_model` becomes `model` (shards and variants keep the rest of their name); anything
/// else is kept.
pub(super) fn converted_stem(stem: &[u8]) -> Vec<u8> {
    match stem.strip_prefix(b"pytorch_model") {
        Some(rest) => [b"model", rest].concat(),
        None => stem.to_vec(),
    }
}
