//! The zip container of `torch.save` (PyTorch 1.6 and later): entries under one top folder whose
//! name varies (`archive/`, the file's stem, ...): `data.pkl` (the pickle), `data/<key>` (each
//! storage's bytes, stored uncompressed), `byteorder` and `version`.
//!
//! The central directory is read by the `zip` crate (ZIP64 included), through `pread` on the file
//! (never a mapping); each entry's data starts where its local header says. Entries must lie in
//! the file without overlapping, so that no storage's bytes are another's.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

use ::zip::result::ZipError;
use ::zip::{CompressionMethod, ZipArchive};

use super::container::{Container, MAX_PICKLE, Span, UNSAFE, checkpoint, load, refused_trap};
use super::danger;
use super::pickle;
use crate::format::error::FormatError;

/// Longest `byteorder` entry read (`little` or `big`).
const MAX_BYTEORDER: u64 = 16;

/// The file as `Read + Seek` for the zip crate, by `pread` at its own position.
struct At<'f> {
    file: &'f File,
    len: u64,
    pos: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos = self.pos.saturating_add(n as u64);
        Ok(n)
    }
}

impl Seek for At<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos =
            pos.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before 0"))?;
        Ok(self.pos)
    }
}

/// One entry of the archive: its name and where its (stored) data lies.
struct Entry {
    name: String,
    /// From its local header to the end of its data.
    whole: (u64, u64),
    data: Span,
    stored: bool,
    /// Compressed with deflate, which torch's reader inflates: its pickle is scanned inflated.
    deflated: bool,
    /// Its place in the archive's directory.
    index: usize,
}

/// Most bytes of deflated pickles inflated to be scanned, all of an archive's together (a pickle
/// cut there still names what it named before the cut).
const MAX_INFLATED: u64 = 64 << 20;

/// Reads the archive's directory, its pickle and its storages' places.
pub(super) fn read(file: &File, len: u64, path: &Path) -> Result<Container, FormatError> {
    let entries = entries(file, len, path)?;
    // torch's reader (miniz) finds an entry by its name in any case; of two entries of one name it
    // may take either (which one depends on its sort), so such an archive is refused below.
    let mut by_name: HashMap<String, &Entry> = HashMap::new();
    let mut duplicate = None;
    for e in &entries {
        if by_name.insert(e.name.to_ascii_lowercase(), e).is_some() {
            duplicate.get_or_insert(e.name.as_str());
        }
    }
    // torch names the top folder after the file it wrote; whatever it is, `data.pkl` is in it.
    let Some(pkl) = entries.iter().find(|e| {
        e.name
            .to_ascii_lowercase()
            .strip_suffix("/data.pkl")
            .is_some_and(|top| !top.contains('/'))
    }) else {
        return Err(FormatError::Foreign(path.to_path_buf()));
    };
    let top = pkl.name[..pkl.name.len() - "data.pkl".len()].to_ascii_lowercase();
    // The main pickle, then every other pickle of the archive, scanned before any refusal: what
    // each names is as unsafe, and a refused file that is a trap is refused as one.
    let bytes = read_entry(file, pkl, MAX_PICKLE.min(len), path);
    let main = match bytes.and_then(|b| load(path, &pkl.name, &b)) {
        Err(e @ FormatError::Checkpoint { rule: UNSAFE, .. }) => return Err(e),
        main => main,
    };
    let mut unsafe_globals = Vec::new();
    if let Ok(p) = &main {
        danger::unsafe_globals(&p.values, &mut unsafe_globals);
    }
    let mut inflated = 0;
    for e in &entries {
        let scanned = std::ptr::eq(e, pkl) && main.is_ok();
        if e.name.to_ascii_lowercase().ends_with(".pkl") && !scanned {
            let bytes = match (e.stored, e.deflated) {
                (true, _) if e.data.len <= MAX_PICKLE => read_entry(file, e, MAX_PICKLE, path)?,
                (false, true) => match inflate(file, len, e, MAX_INFLATED - inflated) {
                    Some(bytes) => {
                        inflated += bytes.len() as u64;
                        bytes
                    }
                    None => continue,
                },
                _ => continue,
            };
            match pickle::load(&bytes) {
                Ok(p) => danger::unsafe_globals(&p.values, &mut unsafe_globals),
                Err(err) => danger::merge(&mut unsafe_globals, err.unsafe_globals),
            }
        }
    }
    // A file refused for another rule whose pickles name an unsafe global is refused as a trap.
    let refuse = |e| refused_trap(path, &unsafe_globals, e);
    if let Some(name) = duplicate {
        return Err(refuse(checkpoint(
            path,
            "DuplicateEntry",
            format!(
                "two entries are named `{name}` (in some case): torch's reader may take either, \
                 so what torch.load gives is not known"
            ),
            false,
        )));
    }
    if let Some(e) = overlap(&entries, path) {
        return Err(refuse(e));
    }
    // torch takes an archive for TorchScript by its `constants.pkl` alone.
    if by_name.contains_key(&format!("{top}constants.pkl")) {
        return Err(refuse(checkpoint(
            path,
            "TorchScript",
            "a TorchScript archive: its tensors are not stored as torch.save's",
            false,
        )));
    }
    if let Some(order) = by_name.get(&format!("{top}byteorder")) {
        let bytes = read_entry(file, order, MAX_BYTEORDER, path).map_err(refuse)?;
        if bytes.trim_ascii() == b"big" {
            return Err(refuse(checkpoint(
                path,
                "BigEndian",
                "a big-endian checkpoint: its tensors' bytes are not safetensors' order",
                false,
            )));
        }
    }
    let main = main.map_err(refuse)?;

    let data = format!("{top}data/");
    let mut storages = HashMap::new();
    for e in &entries {
        if e.name.to_ascii_lowercase().starts_with(&data) {
            if !e.stored {
                return Err(refuse(compressed(path, &e.name)));
            }
            let key = &e.name[data.len()..];
            storages.entry(key.to_string()).or_insert(e.data);
        }
    }
    Ok(Container {
        kind: "pytorch-zip",
        main,
        storages,
        unsafe_globals,
    })
}

fn compressed(path: &Path, name: &str) -> FormatError {
    checkpoint(
        path,
        "CompressedEntry",
        format!("entry `{name}` is compressed: torch.save stores its entries uncompressed"),
        false,
    )
}

/// The inflated data of a deflated entry, at most `max` bytes of it; `None` if it cannot be
/// inflated.
fn inflate(file: &File, len: u64, e: &Entry, max: u64) -> Option<Vec<u8>> {
    let mut archive = ZipArchive::new(At { file, len, pos: 0 }).ok()?;
    let entry = archive.by_index(e.index).ok()?;
    let mut out = Vec::new();
    // What it inflates to before an error (or the cut) is still scanned.
    let _ = entry.take(max).read_to_end(&mut out);
    Some(out)
}

/// The whole (uncompressed) data of a small entry.
fn read_entry(file: &File, e: &Entry, max: u64, path: &Path) -> Result<Vec<u8>, FormatError> {
    if !e.stored {
        return Err(compressed(path, &e.name));
    }
    if e.data.len > max {
        return Err(checkpoint(
            path,
            "EntryTooLarge",
            format!(
                "entry `{}` is {} bytes, more than {max}",
                e.name, e.data.len
            ),
            false,
        ));
    }
    let mut buf = vec![0; e.data.len as usize];
    file.read_exact_at(&mut buf, e.data.start)
        .map_err(|err| FormatError::Io(path.to_path_buf(), err))?;
    Ok(buf)
}

/// Every entry of the archive, checked to lie in the file.
fn entries(file: &File, len: u64, path: &Path) -> Result<Vec<Entry>, FormatError> {
    let bad_zip = |e: ZipError| match e {
        ZipError::Io(e) if e.kind() != io::ErrorKind::UnexpectedEof => {
            FormatError::Io(path.to_path_buf(), e)
        }
        // A zip whose end (the central directory) is missing is most likely one being written.
        e => checkpoint(
            path,
            "BadZip",
            format!("not a readable zip archive: {e}"),
            true,
        ),
    };
    let mut archive = ZipArchive::new(At { file, len, pos: 0 }).map_err(bad_zip)?;
    let mut entries = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let entry = archive.by_index_raw(i).map_err(bad_zip)?;
        let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        let start = entry.data_start().unwrap_or(0);
        let size = entry.compressed_size();
        let stored = entry.compression() == CompressionMethod::Stored
            && !entry.encrypted()
            && size == entry.size();
        let deflated = entry.compression() == CompressionMethod::Deflated && !entry.encrypted();
        let end = start
            .checked_add(size)
            .filter(|&end| end <= len)
            .ok_or_else(|| {
                checkpoint(
                    path,
                    "EntryOutOfFile",
                    format!("entry `{name}` ends past the end of the file ({len} bytes)"),
                    true,
                )
            })?;
        entries.push(Entry {
            name,
            whole: (entry.header_start(), end),
            data: Span { start, len: size },
            stored,
            deflated,
            index: i,
        });
    }
    Ok(entries)
}

/// Why the entries do not each lie apart from the others, if they do not (so that no storage's
/// bytes are another's).
fn overlap(entries: &[Entry], path: &Path) -> Option<FormatError> {
    let mut ranges: Vec<(u64, u64, &str)> = entries
        .iter()
        .map(|e| (e.whole.0, e.whole.1, e.name.as_str()))
        .collect();
    ranges.sort_unstable();
    ranges.windows(2).find_map(|pair| match pair {
        [(_, end, a), (start, _, b)] if start < end => Some(checkpoint(
            path,
            "OverlappingEntries",
            format!("entries `{a}` and `{b}` overlap"),
            false,
        )),
        _ => None,
    })
}
