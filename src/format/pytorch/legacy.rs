//! The legacy container of `torch.save` (before PyTorch 1.6, or with
//! `_use_new_zipfile_serialization=False`): pickles in a row (the magic number, the protocol
//! version 1001, the `sys_info` dict, the main pickle, the list of storage keys), then each storage
//! in that list's order: an 8-byte little-endian count of its elements, then its bytes.
//!
//! The pickles are read with `pread` into a buffer that grows (doubling) until the pickle's
//! `STOP` is in it, so only the pickles, never the data, are read into memory.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::container::{Container, Rule, Span, checkpoint, load_at, refused_trap, trap_found};
use super::{danger, torch};
use crate::format::error::FormatError;
use crate::format::kit::pickle::{Pickle, Value};

/// How much of the file's start is looked at to tell what it is (a tar header is 512 bytes).
pub(super) const SNIFF_LEN: u64 = 512;

/// The first pickle of a legacy checkpoint is the magic number 0x1950a86a20f9469cfc6c: its
/// little-endian bytes. `torch.save` writes it as `LONG1` in protocol 2; `torch.load` compares the
/// number, however the pickle spells it.
const MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];

/// How many pickles a legacy checkpoint holds, one after another (`torch.load` unpickles no more).
pub(super) const PICKLES: usize = 5;

/// The protocol version of the legacy format.
const PROTOCOL_VERSION: i64 = 1001;

/// Whether the file is a tar checkpoint of PyTorch before 0.4: a tar archive (`ustar` at 257)
/// whose first member is one of torch's.
pub(super) fn is_tar_checkpoint(head: &[u8]) -> bool {
    let name = head.get(..100).unwrap_or_default();
    let name = name.split(|&b| b == 0).next().unwrap_or_default();
    head.get(257..262) == Some(b"ustar")
        && [&b"sys_info"[..], b"pickle", b"tensors", b"storages"].contains(&name)
}

/// Reads the pickles and the storages' places; [`FormatError::Foreign`] if the first pickle is not
/// the magic number. A file whose pickles name an unsafe global is refused for it, whatever else
/// is wrong with it.
pub(super) fn read(file: &File, len: u64, path: &Path) -> Result<Container, FormatError> {
    let mut unsafe_globals = Vec::new();
    match read_pickles(file, len, path, &mut unsafe_globals) {
        Ok(c) => Ok(Container {
            unsafe_globals,
            ..c
        }),
        Err(e) => Err(refused_trap(path, &unsafe_globals, e)),
    }
}

fn read_pickles(
    file: &File,
    len: u64,
    path: &Path,
    unsafe_globals: &mut Vec<String>,
) -> Result<Container, FormatError> {
    let mut at = 0;
    let mut next = |part: &str, at: &mut u64| -> Result<Pickle, FormatError> {
        let p = load_at(file, len, *at, path, part)?;
        danger::unsafe_globals(&p.values, unsafe_globals);
        *at = at.saturating_add(p.consumed as u64);
        Ok(p)
    };
    match next("the magic number", &mut at) {
        Ok(magic) if magic.get(magic.top) == &Value::BigInt(MAGIC.into()) => {}
        _ => return Err(FormatError::Foreign(path.to_path_buf())),
    }
    let version = next("the protocol version", &mut at)?;
    if version.int(version.top) != Some(PROTOCOL_VERSION) {
        return Err(checkpoint(
            path,
            Rule::UnsupportedVersion,
            "the legacy format's protocol version is not 1001",
            false,
        ));
    }
    let sys_info = next("sys_info", &mut at)?;
    let big_endian = matches!(sys_info.get(sys_info.top), Value::Dict(pairs) if pairs.iter().any(|&(k, v)| {
        sys_info.str(k) == Some("little_endian") && sys_info.get(v) == &Value::Bool(false)
    }));
    // The rest is read before the byte order is refused: torch.load unpickles it all the same, and
    // a trap is refused as one (a pickle that fails after an unsafe global, at once).
    let rest = match next("the main pickle", &mut at)
        .and_then(|main| Ok((main, next("the list of storage keys", &mut at)?)))
    {
        Err(e) if trap_found(&e).is_some() => return Err(e),
        rest => rest,
    };
    if big_endian {
        let what = "a big-endian checkpoint: its tensors' bytes are not safetensors' order";
        return Err(checkpoint(path, Rule::BigEndian, what, false));
    }
    let (main, keys) = rest?;
    let keys: Vec<String> = keys
        .items(keys.top)
        .and_then(|items| {
            items
                .iter()
                .map(|&k| keys.str(k).map(str::to_string))
                .collect::<Option<_>>()
        })
        .ok_or_else(|| {
            checkpoint(
                path,
                Rule::BadStorageKeys,
                "the storage keys are not a list of strings",
                false,
            )
        })?;
    let storages = place_storages(file, len, at, &keys, &torch::storages(&main), path)?;
    Ok(Container {
        kind: "pytorch-legacy",
        main,
        storages,
        unsafe_globals: Vec::new(),
    })
}

/// Each storage's bytes, in the keys' order from `at`: an 8-byte count of elements, then the
/// elements (whose size the main pickle's persistent ids give).
fn place_storages(
    file: &File,
    len: u64,
    mut at: u64,
    keys: &[String],
    elem_sizes: &[(String, u64)],
    path: &Path,
) -> Result<HashMap<String, Span>, FormatError> {
    let elem_sizes: HashMap<&str, u64> = elem_sizes.iter().map(|(k, s)| (k.as_str(), *s)).collect();
    let mut storages = HashMap::with_capacity(keys.len());
    for key in keys {
        let out_of_file = |what: String| checkpoint(path, Rule::StorageOutOfFile, what, true);
        let &elem_size = elem_sizes.get(key.as_str()).ok_or_else(|| {
            checkpoint(
                path,
                Rule::UnknownStorage,
                format!("storage `{key}` is listed but no tensor's storage is it"),
                false,
            )
        })?;
        let start = at.checked_add(8).filter(|&s| s <= len).ok_or_else(|| {
            out_of_file(format!("the file ends before the size of storage `{key}`"))
        })?;
        let mut count = [0u8; 8];
        file.read_exact_at(&mut count, at)
            .map_err(|e| FormatError::Io(path.to_path_buf(), e))?;
        let bytes = u64::from_le_bytes(count).checked_mul(elem_size);
        let end = bytes.and_then(|b| start.checked_add(b));
        at = end.filter(|&e| e <= len).ok_or_else(|| {
            out_of_file(format!(
                "storage `{key}` ends past the end of the file ({len} bytes)"
            ))
        })?;
        let len = at - start;
        storages.insert(key.clone(), Span { start, len });
    }
    Ok(storages)
}
