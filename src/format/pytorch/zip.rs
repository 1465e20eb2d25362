//! The zip container of `torch.save` (PyTorch 1.6 and later), read as torch's reader reads it:
//! its records are the directory's ([`zip_directory`](super::zip_directory): raw names, the last
//! end record, every record accounted for), its top folder is the first record's, and `data.pkl`,
//! `byteorder`, `constants.pkl` and `data/<key>` (each storage's bytes, stored uncompressed) are
//! found in that folder by name in any case, as miniz finds them.
//!
//! Every pickle of the archive is scanned before anything is refused, so that an archive refused
//! for how it is laid out is still named as a trap whichever record torch would take. Records
//! must lie in the file without overlapping, so that no storage's bytes are another's.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use flate2::read::DeflateDecoder;

use super::container::{Container, MAX_PICKLE, Rule, Span, checkpoint, pickle_error, refused_trap};
use super::danger;
use crate::format::error::FormatError;
use crate::format::kit::pickle;
use crate::format::kit::zip::{self as zip_directory, Archive, At, Record, ZipError};

/// Longest `byteorder` entry read (`little` or `big`).
const MAX_BYTEORDER: u64 = 16;

/// Most bytes of deflated pickles inflated to be scanned, all of an archive's together (a pickle
/// cut there still names what it named before the cut).
const MAX_INFLATED: u64 = 64 << 20;

/// Compression methods: stored, deflated.
const STORED: u16 = 0;
const DEFLATED: u16 = 8;
/// Flags that make torch's reader refuse to read a record: encrypted, strong encryption, patch.
const UNREADABLE: u16 = 1 | 1 << 6 | 1 << 5;

/// The error of the archive at `path` whose directory breaks a rule of the zip reader's, as a
/// checkpoint's (the rule keeps its name: `[NoEndRecord]`).
fn zip_error(path: &Path, e: ZipError) -> FormatError {
    match e {
        ZipError::Broken {
            rule,
            what,
            cut_short,
        } => checkpoint(path, Rule::Zip(rule), what, cut_short),
        ZipError::Io(e) => FormatError::Io(path.to_path_buf(), e),
    }
}

/// Reads the archive's directory, its pickle and its storages' places.
pub(super) fn read(file: Archive<'_>, len: u64, path: &Path) -> Result<Container, FormatError> {
    let dir = zip_directory::read(file, len).map_err(|e| zip_error(path, e))?;
    let records = &dir.records;
    // torch takes the top folder from the first record (it refuses an archive whose first record
    // is in none), and looks every name up in it in any case.
    let Some(top) = records.first().and_then(|r| {
        r.name
            .iter()
            .position(|&b| b == b'/')
            .map(|i| &r.name[..=i])
    }) else {
        return Err(FormatError::Foreign(path.to_path_buf()));
    };
    let named = |rest: &'static str| named(records, top, rest);
    let Some(pkl) = named("data.pkl").next() else {
        return Err(FormatError::Foreign(path.to_path_buf()));
    };
    // The main pickle, then every other pickle of the archive, scanned before any refusal: what
    // each names is as unsafe, and a refused file that is a trap is refused as one.
    let mut unsafe_globals = Vec::new();
    let main = read_record(file, pkl, MAX_PICKLE, path).and_then(|b| {
        pickle::load(&b, danger::allowed).map_err(|e| {
            pickle::merge(&mut unsafe_globals, e.unsafe_globals.clone());
            pickle_error(path, &pkl.shown(), e)
        })
    });
    if let Ok(p) = &main {
        danger::unsafe_globals(&p.values, &mut unsafe_globals);
    }
    let mut inflated = 0;
    // Stored pickles are read once each, as many bytes in all as the file holds: records that
    // claim more overlap, and are refused for it (not read again and again).
    let mut stored = len.saturating_sub(pkl.size);
    for r in records {
        let scanned = std::ptr::eq(r, pkl) && main.is_ok();
        if scanned || !r.name.to_ascii_lowercase().ends_with(b".pkl") {
            continue;
        }
        if r.method == STORED {
            if r.size > stored {
                continue;
            }
            stored -= r.size;
        }
        let Some(bytes) = pickle_bytes(file, len, r, MAX_INFLATED - inflated) else {
            continue;
        };
        if r.method == DEFLATED {
            inflated += bytes.len() as u64;
        }
        match pickle::load(&bytes, danger::allowed) {
            Ok(p) => danger::unsafe_globals(&p.values, &mut unsafe_globals),
            Err(err) => pickle::merge(&mut unsafe_globals, err.unsafe_globals),
        }
    }
    // A file refused for another rule whose pickles name an unsafe global is refused as a trap.
    let refuse = |e| refused_trap(path, &unsafe_globals, e);
    if let Some(e) = dir.fault {
        return Err(refuse(zip_error(path, e)));
    }
    if let Some(e) = layout(records, top, dir.central, path) {
        return Err(refuse(e));
    }
    // torch takes an archive for TorchScript by its `constants.pkl` alone.
    if named("constants.pkl").next().is_some() {
        return Err(refuse(checkpoint(
            path,
            Rule::TorchScript,
            "a TorchScript archive: its tensors are not stored as torch.save's",
            false,
        )));
    }
    if let Some(order) = named("byteorder").next() {
        let bytes = read_record(file, order, MAX_BYTEORDER, path).map_err(refuse)?;
        if bytes.trim_ascii() == b"big" {
            return Err(refuse(checkpoint(
                path,
                Rule::BigEndian,
                "a big-endian checkpoint: its tensors' bytes are not safetensors' order",
                false,
            )));
        }
    }
    let main = main.map_err(refuse)?;

    let mut storages = HashMap::new();
    for r in records {
        let Some(key) = in_folder(&r.name, top).and_then(|n| strip_prefix_ignore_case(n, b"data/"))
        else {
            continue;
        };
        let (Some(start), STORED) = (r.data, r.method) else {
            return Err(refuse(compressed(path, r)));
        };
        // A name that is not UTF-8 is no key a pickle can name.
        if let Ok(key) = std::str::from_utf8(key) {
            storages.insert(
                key.to_string(),
                Span {
                    start: file.start.saturating_add(start),
                    len: r.size,
                },
            );
        }
    }
    Ok(Container {
        kind: "pytorch-zip",
        main,
        storages,
        unsafe_globals,
    })
}

/// The records named `rest` in the top folder `top`, in any case (as miniz looks a name up).
fn named<'r>(
    records: &'r [Record],
    top: &'r [u8],
    rest: &'static str,
) -> impl Iterator<Item = &'r Record> {
    records.iter().filter(move |r| {
        in_folder(&r.name, top).is_some_and(|n| n.eq_ignore_ascii_case(rest.as_bytes()))
    })
}

/// The rest of `name` after the top folder `top` (torch's reader compares the folder as bytes).
fn in_folder<'n>(name: &'n [u8], top: &[u8]) -> Option<&'n [u8]> {
    name.strip_prefix(top)
}

fn strip_prefix_ignore_case<'n>(name: &'n [u8], prefix: &[u8]) -> Option<&'n [u8]> {
    let head = name.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &name[prefix.len()..])
}

/// Why the records are not laid out as one archive of torch's: two of one name in any case
/// (torch's reader may take either), one outside the top folder (torch.load refuses the
/// archive), one torch's reader cannot read (encrypted, or compressed by a method other than
/// deflate), one whose name holds a NUL byte, records that overlap each other or the directory.
fn layout(records: &[Record], top: &[u8], central: (u64, u64), path: &Path) -> Option<FormatError> {
    let mut names = HashMap::with_capacity(records.len());
    for r in records {
        if names.insert(r.name.to_ascii_lowercase(), ()).is_some() {
            return Some(checkpoint(
                path,
                Rule::DuplicateEntry,
                format!(
                    "two records are named `{}` (in some case): torch's reader may take either, \
                     so what torch.load gives is not known",
                    r.shown()
                ),
                false,
            ));
        }
    }
    if let Some(r) = records.iter().find(|r| in_folder(&r.name, top).is_none()) {
        return Some(checkpoint(
            path,
            Rule::OutsideTopFolder,
            format!(
                "record `{}` is not in the folder `{}` of the first record, which torch.load \
                 refuses",
                r.shown(),
                String::from_utf8_lossy(top).escape_debug()
            ),
            false,
        ));
    }
    if let Some(r) = records
        .iter()
        .find(|r| r.flags & UNREADABLE != 0 || !matches!(r.method, STORED | DEFLATED))
    {
        return Some(checkpoint(
            path,
            Rule::UnreadableEntry,
            format!(
                "record `{}` is encrypted or compressed by method {}, which torch's reader \
                 does not read",
                r.shown(),
                r.method
            ),
            false,
        ));
    }
    if let Some(r) = records.iter().find(|r| r.name.contains(&0)) {
        return Some(checkpoint(
            path,
            Rule::BadName,
            format!("record `{}` has a NUL byte in its name", r.shown()),
            false,
        ));
    }
    overlap(records, central, path)
}

fn compressed(path: &Path, r: &Record) -> FormatError {
    checkpoint(
        path,
        Rule::CompressedEntry,
        format!(
            "entry `{}` is compressed: torch.save stores its entries uncompressed",
            r.shown()
        ),
        false,
    )
}

/// The bytes of a pickle record as torch's reader would give them (a deflated one inflated, at
/// most `max` bytes of it); `None` if torch's reader cannot read it either.
fn pickle_bytes(file: Archive<'_>, len: u64, r: &Record, max: u64) -> Option<Vec<u8>> {
    let start = r.data?;
    if r.flags & UNREADABLE != 0 {
        return None;
    }
    match r.method {
        STORED => {
            let n = r.size.min(len.saturating_sub(start)).min(MAX_PICKLE);
            let mut buf = vec![0; n as usize];
            file.read_exact_at(&mut buf, start).ok()?;
            Some(buf)
        }
        DEFLATED => {
            let n = r.compressed.min(len.saturating_sub(start));
            let mut out = Vec::new();
            // What it inflates to before an error (or the cut) is still scanned.
            let _ = DeflateDecoder::new(At { file, pos: start }.take(n))
                .take(max.min(r.size))
                .read_to_end(&mut out);
            Some(out)
        }
        _ => None,
    }
}

/// The whole (stored) data of a small record.
fn read_record(
    file: Archive<'_>,
    r: &Record,
    max: u64,
    path: &Path,
) -> Result<Vec<u8>, FormatError> {
    let (Some(start), STORED) = (r.data, r.method) else {
        return Err(compressed(path, r));
    };
    if r.size > max {
        return Err(checkpoint(
            path,
            Rule::EntryTooLarge,
            format!("entry `{}` is {} bytes, more than {max}", r.shown(), r.size),
            false,
        ));
    }
    let mut buf = vec![0; r.size as usize];
    file.read_exact_at(&mut buf, start)
        .map_err(|err| FormatError::Io(path.to_path_buf(), err))?;
    Ok(buf)
}

/// Why the records (each from its local header to the end of its data) and the directory do not
/// each lie apart from the others, if they do not (so that no storage's bytes are another's).
fn overlap(records: &[Record], central: (u64, u64), path: &Path) -> Option<FormatError> {
    let mut ranges: Vec<(u64, u64, String)> = records
        .iter()
        .filter_map(|r| {
            let end = r.data?.saturating_add(r.span());
            Some((r.header, end, format!("entry `{}`", r.shown())))
        })
        .collect();
    ranges.push((central.0, central.1, "the central directory".to_string()));
    ranges.sort_unstable();
    ranges.windows(2).find_map(|pair| match pair {
        [(_, end, a), (start, _, b)] if start < end => Some(checkpoint(
            path,
            Rule::OverlappingEntries,
            format!("{a} and {b} overlap"),
            false,
        )),
        _ => None,
    })
}
