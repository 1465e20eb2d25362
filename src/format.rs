//! Reading and validating safetensors headers. Knows nothing of FUSE.
//!
//! The rules are the official `safetensors` crate's: this module only reads the 8-byte length and the
//! header with `pread` (never through a mapping, so a source truncated later cannot kill the daemon),
//! reads the JSON into the crate's own types and lets the crate's public constructor validate them,
//! and adds the crate's last rule (the data fills the file exactly), which needs the file size the
//! crate never sees here.
//!
//! The crate's own deserializer (`serde(flatten)` over a map of tensors) first copies the whole
//! header into a generic tree, about ten times the size of the JSON: near 1 GiB for a header at the
//! format's 100 MB limit. [`Entries`] reads the same JSON in one pass straight into what
//! `Metadata::new` takes. Where that finds the text is not JSON, the crate would reject it for the
//! same rule; where it rejects a header for anything else, the crate's deserializer reads the header
//! again and has the last word. So what is accepted, and the rule named otherwise, stay the crate's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use safetensors::SafeTensorError;
use safetensors::tensor::{Metadata, TensorInfo};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

pub use safetensors::Dtype;

/// Length of the little-endian header-length prefix.
const PREFIX_LEN: u64 = 8;

/// How much of the start of a rejected file is looked at to tell what it is instead.
const SNIFF_LEN: usize = 512;

/// A validated safetensors header.
#[derive(Debug)]
pub struct Header {
    /// Absolute offset of the data buffer in the file: 8 + header length.
    pub data_start: u64,
    /// Tensors in data order (ascending offsets).
    pub tensors: Vec<Tensor>,
    /// The `__metadata__` map; `None` when absent or `null`.
    pub metadata: Option<BTreeMap<String, String>>,
}

/// One tensor of a header.
#[derive(Debug)]
pub struct Tensor {
    /// Shared with the tensor's file names where those are the name itself.
    pub name: Arc<str>,
    pub dtype: Dtype,
    pub shape: Box<[usize]>,
    /// `[begin, end)` relative to the data buffer, as in the header.
    pub begin: u64,
    pub end: u64,
}

impl Tensor {
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.end - self.begin
    }

    /// The dtype as the header spells it (`BF16`, `F8_E4M3`, ...).
    pub fn dtype_name(&self) -> String {
        format!("{:?}", self.dtype)
    }

    /// The shape as a JSON array without spaces, e.g. `[4096,11008]`.
    pub fn shape_json(&self) -> String {
        let dims: Vec<String> = self.shape.iter().map(usize::to_string).collect();
        format!("[{}]", dims.join(","))
    }
}

/// Why a file is not a valid safetensors file.
#[derive(Debug)]
pub enum FormatError {
    /// The file could not be read.
    Io(PathBuf, io::Error),
    /// The file breaks a rule of the format, as the official crate names it, and what the file
    /// looks like instead where that is a common accident (told in the message before the rule).
    Invalid(PathBuf, SafeTensorError, Option<Accident>),
    /// The file ends before the data its header describes (the crate's `MetadataIncompleteBuffer`,
    /// which it also reports for a file that goes on past its data): `data` bytes of data
    /// described, `present` there.
    Short {
        path: PathBuf,
        data: u64,
        present: u64,
    },
}

/// What a file that is not safetensors seems to be: the usual ways a wrong file ends up with the
/// name, told in plain words because the format's rule alone (`HeaderTooLarge` for a Git LFS
/// pointer) does not say what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accident {
    /// Zero bytes.
    Empty,
    /// Fewer bytes than the 8-byte length prefix.
    TooShort(u64),
    /// The file ends inside the header it declares.
    EndsInHeader { declared: u64, present: u64 },
    /// A Git LFS pointer: the repository was cloned without fetching the large files.
    LfsPointer,
    /// HTML or XML: a server's error page saved in place of the download.
    Markup,
    /// JSON text, e.g. an index or config saved under the name.
    Json,
    /// A ZIP archive: what `torch.save` writes (`.bin`, `.pt`).
    Zip,
    /// A Python pickle: an older PyTorch checkpoint.
    Pickle,
    /// A GGUF file (llama.cpp's format).
    Gguf,
}

impl Accident {
    /// What a file that breaks a framing rule (its first 8 bytes are no usable header length)
    /// seems to be, if anything known. `start` is its first bytes, `file_len` its whole size,
    /// `declared` the header length its prefix gives.
    ///
    /// Other formats are only recognised in files whose prefix is too large a length: the start
    /// of a file cut short, or of one whose header is cut short, is a plausible length (60 is
    /// `<` and seven zero bytes), not text.
    fn of(start: &[u8], file_len: u64, declared: u64, e: &SafeTensorError) -> Option<Accident> {
        match e {
            SafeTensorError::HeaderTooSmall if file_len == 0 => Some(Accident::Empty),
            SafeTensorError::HeaderTooSmall => Some(Accident::TooShort(file_len)),
            SafeTensorError::InvalidHeaderLength => Some(Accident::EndsInHeader {
                declared,
                present: file_len.saturating_sub(PREFIX_LEN),
            }),
            SafeTensorError::HeaderTooLarge => Accident::foreign(start),
            _ => None,
        }
    }

    /// The format a file's first bytes show, among those commonly saved as `.safetensors` by
    /// mistake.
    fn foreign(start: &[u8]) -> Option<Accident> {
        let text = start.trim_ascii_start();
        if start.starts_with(b"version https://git-lfs.github.com/spec/") {
            Some(Accident::LfsPointer)
        } else if text.starts_with(b"<") {
            Some(Accident::Markup)
        } else if text.starts_with(b"{") || text.starts_with(b"[") {
            Some(Accident::Json)
        } else if start.starts_with(b"PK\x03\x04") {
            Some(Accident::Zip)
        } else if start.starts_with(b"GGUF") {
            Some(Accident::Gguf)
        } else if matches!(start, [0x80, 2..=5, ..]) {
            Some(Accident::Pickle)
        } else {
            None
        }
    }
}

/// The guess at the cause added to the messages of files that end too soon.
const CUT_SHORT: &str = "cut short by an interrupted download or copy, or a full disk?";

impl fmt::Display for Accident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Accident::Empty => write!(f, "the file is empty ({CUT_SHORT})"),
            Accident::TooShort(n) => write!(
                f,
                "the file is only {n} bytes, too short for the 8-byte header length ({CUT_SHORT})"
            ),
            Accident::EndsInHeader { declared, present } => write!(
                f,
                "the file ends inside its header: {declared} header bytes declared, {present} \
                 there ({CUT_SHORT})"
            ),
            Accident::LfsPointer => f.write_str(
                "this is a Git LFS pointer, not the file's contents: run `git lfs pull` in its \
                 repository to download them",
            ),
            Accident::Markup => f.write_str(
                "this is an HTML or XML page, not a safetensors file: likely a server's error \
                 page saved by a failed download; download the file again",
            ),
            Accident::Json => f.write_str(
                "this is JSON text, not a safetensors file (an index or config file saved under \
                 this name?)",
            ),
            Accident::Zip => f.write_str(
                "this is a ZIP archive, not a safetensors file: likely a PyTorch checkpoint \
                 written by torch.save; convert it to safetensors",
            ),
            Accident::Pickle => f.write_str(
                "this is a Python pickle, not a safetensors file: likely an old PyTorch \
                 checkpoint; convert it to safetensors",
            ),
            Accident::Gguf => {
                f.write_str("this is a GGUF file (llama.cpp's format), not a safetensors file")
            }
        }
    }
}

impl FormatError {
    /// The reason without the path (for the `user.safetensors.error` xattr): what is wrong in
    /// plain words, then the crate's rule in brackets.
    pub fn reason(&self) -> String {
        match self {
            FormatError::Io(_, e) => format!("cannot read: {e}"),
            FormatError::Invalid(_, e, Some(accident)) => format!("{accident} [{}]", rule_name(e)),
            FormatError::Invalid(_, e, None) => format!("{e} [{}]", rule_name(e)),
            FormatError::Short { data, present, .. } => format!(
                "the file ends before its data: {data} bytes described, {present} there \
                 ({CUT_SHORT}) [MetadataIncompleteBuffer]"
            ),
        }
    }

    /// The crate's name for the rule the file breaks (none for an I/O error).
    pub fn rule(&self) -> Option<String> {
        match self {
            FormatError::Io(..) => None,
            FormatError::Invalid(_, e, _) => Some(rule_name(e)),
            FormatError::Short { .. } => Some("MetadataIncompleteBuffer".into()),
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            FormatError::Io(p, _)
            | FormatError::Invalid(p, ..)
            | FormatError::Short { path: p, .. } => p,
        }
    }

    /// Whether the file ends too soon for the length prefix, the header, or the data: what a file
    /// still being written looks like.
    pub fn cut_short(&self) -> bool {
        matches!(
            self,
            FormatError::Short { .. }
                | FormatError::Invalid(
                    _,
                    SafeTensorError::HeaderTooSmall | SafeTensorError::InvalidHeaderLength,
                    _
                )
        )
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path().display(), self.reason())
    }
}

impl std::error::Error for FormatError {}

/// The crate's name for the rule an error breaks (its variant name, e.g. `HeaderTooLarge`). The
/// match is exhaustive: a rule the crate adds fails the build here until it is named.
pub fn rule_name(e: &SafeTensorError) -> String {
    use SafeTensorError as E;
    match e {
        E::InvalidHeader(_) => "InvalidHeader",
        E::InvalidHeaderDeserialization(_) => "InvalidHeaderDeserialization",
        E::HeaderTooLarge => "HeaderTooLarge",
        E::HeaderTooSmall => "HeaderTooSmall",
        E::InvalidHeaderLength => "InvalidHeaderLength",
        E::TensorNotFound(_) => "TensorNotFound",
        E::TensorInvalidInfo => "TensorInvalidInfo",
        E::InvalidOffset(_) => "InvalidOffset",
        E::IoError(_) => "IoError",
        E::JsonError(_) => "JsonError",
        E::InvalidTensorView(..) => "InvalidTensorView",
        E::MetadataIncompleteBuffer => "MetadataIncompleteBuffer",
        E::ValidationOverflow => "ValidationOverflow",
        E::MisalignedSlice => "MisalignedSlice",
    }
    .to_string()
}

/// Reads and validates the header of `file` (whose path is `path`, for messages).
pub fn read_header(file: &File, path: &Path) -> Result<Header, FormatError> {
    let io_err = |e| FormatError::Io(path.to_path_buf(), e);
    let file_len = file.metadata().map_err(io_err)?.len();

    // The prefix and as much of the header as the file holds, bounded by the crate's limit.
    let prefix_len = file_len.min(PREFIX_LEN) as usize;
    let mut buf = vec![0u8; prefix_len];
    file.read_exact_at(&mut buf, 0).map_err(io_err)?;
    let declared = match <[u8; 8]>::try_from(&buf[..]) {
        Ok(bytes) => u64::from_le_bytes(bytes),
        Err(_) => 0,
    };
    let invalid = |e: SafeTensorError| {
        // A file whose first bytes are no header length is often some other file under the name:
        // look at its start to say which.
        let mut start = Vec::new();
        if matches!(e, SafeTensorError::HeaderTooLarge) {
            start.resize(file_len.min(SNIFF_LEN as u64) as usize, 0);
            if file.read_exact_at(&mut start, 0).is_err() {
                start.clear();
            }
        }
        let accident = Accident::of(&start, file_len, declared, &e);
        FormatError::Invalid(path.to_path_buf(), e, accident)
    };
    // The crate's own limit on the declared length, checked on the prefix alone before anything
    // of that length is read.
    if let Err(e @ SafeTensorError::HeaderTooLarge) = safetensors::SafeTensors::read_metadata(&buf)
    {
        return Err(invalid(e));
    }
    let want = declared.min(file_len.saturating_sub(PREFIX_LEN));
    if prefix_len == PREFIX_LEN as usize && want > 0 {
        buf.resize(PREFIX_LEN as usize + want as usize, 0);
        file.read_exact_at(&mut buf[PREFIX_LEN as usize..], PREFIX_LEN)
            .map_err(io_err)?;
    }

    let complete = buf.len() as u64 == PREFIX_LEN + declared;
    let header = buf.get(PREFIX_LEN as usize..).filter(|_| complete);
    let json = match header.map(std::str::from_utf8) {
        Some(Ok(json)) => json,
        // Something is wrong: let the crate's own reader name the rule. It runs the same checks in
        // its own order, on the bytes we have, so its first failure is the file's.
        _ => return Err(invalid(canonical_error(&buf))),
    };
    let entries = match Entries::parse(json) {
        Ok(entries) => entries,
        // Not JSON: the crate reads every byte of the header as strictly, so it rejects it for the
        // same rule, and finding out from the crate would buffer up to the whole header.
        Err(e) if e.is_syntax() || e.is_eof() => {
            return Err(invalid(SafeTensorError::InvalidHeaderDeserialization(e)));
        }
        Err(_) => Entries::from_crate(json).ok_or_else(|| invalid(canonical_error(&buf)))?,
    };
    drop(buf);

    let data_start = PREFIX_LEN + declared;
    let header = entries.validate(data_start).map_err(invalid)?;
    let data = header.tensors.last().map_or(0, |t| t.end);
    // Offsets near 2^64 must not wrap around into a match.
    match data_start.checked_add(data) {
        Some(end) if end == file_len => {}
        Some(end) if end > file_len => {
            return Err(FormatError::Short {
                path: path.to_path_buf(),
                data,
                present: file_len.saturating_sub(data_start),
            });
        }
        _ => return Err(invalid(SafeTensorError::MetadataIncompleteBuffer)),
    }
    Ok(header)
}

/// The error the crate's whole-buffer reader reports for a header we could not accept.
fn canonical_error(buf: &[u8]) -> SafeTensorError {
    match safetensors::SafeTensors::read_metadata(buf) {
        Err(e) => e,
        // The crate accepted what its own deserializer rejected: cannot happen, as both run the
        // same code; report it as the JSON rule rather than panic.
        Ok(_) => SafeTensorError::InvalidHeaderLength,
    }
}

/// A header's JSON read into what `Metadata::new` takes: the crate's deserializer does the same
/// after buffering the whole header, and both accept the same JSON where [`Entries::parse`]
/// succeeds; where it finds the text is not JSON the crate does too (the fuzz target `header`
/// checks both against the crate).
///
/// Equivalences kept: `__metadata__` is read as the crate reads it (`null` is none, values must be
/// strings, the last of repeated keys wins, a second `__metadata__` is an error); every other key
/// is a tensor, the last of repeated names wins; a tensor's unknown fields are ignored but must be
/// valid JSON as the crate's buffering requires (no lone surrogate escapes, nesting within
/// serde_json's limit), where serde's own skipping of ignored values checks less.
struct Entries {
    metadata: Option<HashMap<String, String>>,
    /// In the order of the JSON, repeats included.
    tensors: Vec<(String, TensorInfo)>,
}

impl Entries {
    /// The header read in one pass, or why this reader does not accept it.
    fn parse(json: &str) -> Result<Entries, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(json);
        let entries = Entries::deserialize(&mut de)?;
        de.end()?;
        Ok(entries)
    }

    /// The header read by the crate's own deserializer (which also validates it), for what
    /// [`Entries::parse`] rejects: `None` where the crate rejects it too.
    fn from_crate(json: &str) -> Option<Entries> {
        let metadata: Metadata = serde_json::from_str(json).ok()?;
        let tensors = metadata
            .offset_keys()
            .into_iter()
            .filter_map(|name| {
                let info = metadata.info(&name)?.clone();
                Some((name, info))
            })
            .collect();
        Some(Entries {
            metadata: metadata.metadata().clone(),
            tensors,
        })
    }

    /// The header, its data at `data_start`, if the crate's `Metadata::new` accepts it (the data
    /// filling the file is left to check).
    fn validate(self, data_start: u64) -> Result<Header, SafeTensorError> {
        let Entries {
            metadata,
            mut tensors,
        } = self;
        keep_last_of_each_name(&mut tensors);
        // As the crate orders them (a stable sort of its hash map's entries: the order of tensors
        // with equal offsets is arbitrary there too).
        tensors.sort_by_key(|(_, info)| info.data_offsets);
        let ours: Vec<Tensor> = tensors
            .iter()
            .map(|(name, info)| Tensor {
                name: Arc::from(name.as_str()),
                dtype: info.dtype,
                shape: info.shape.clone().into_boxed_slice(),
                begin: info.data_offsets.0 as u64,
                end: info.data_offsets.1 as u64,
            })
            .collect();
        let sorted_metadata = metadata
            .as_ref()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
        Metadata::new(metadata, tensors)?;
        Ok(Header {
            data_start,
            tensors: ours,
            metadata: sorted_metadata,
        })
    }
}

/// Drops all but the last entry of each name, as the crate's map of tensors keeps the last value
/// of a repeated key.
fn keep_last_of_each_name(tensors: &mut Vec<(String, TensorInfo)>) {
    let mut seen = HashSet::with_capacity(tensors.len());
    let keep: Vec<bool> = tensors
        .iter()
        .rev()
        .map(|(name, _)| seen.insert(name.as_str()))
        .collect();
    drop(seen);
    let mut keep = keep.into_iter().rev();
    tensors.retain(|_| keep.next().unwrap_or(true));
}

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Top;
        impl<'de> Visitor<'de> for Top {
            type Value = Entries;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a safetensors header object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut metadata = None;
                let mut tensors = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "__metadata__" {
                        if metadata.is_some() {
                            return Err(de::Error::duplicate_field("__metadata__"));
                        }
                        metadata = Some(map.next_value::<Option<HashMap<String, String>>>()?);
                    } else {
                        tensors.push((key, map.next_value::<Entry>()?.0));
                    }
                }
                Ok(Entries {
                    metadata: metadata.flatten(),
                    tensors,
                })
            }
        }
        d.deserialize_map(Top)
    }
}

/// One tensor's entry, read as the crate's `TensorInfo` but with unknown fields checked in full.
struct Entry(TensorInfo);

/// The fields of a tensor's entry.
enum Field {
    Dtype,
    Shape,
    DataOffsets,
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = Field;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
                Ok(match v {
                    "dtype" => Field::Dtype,
                    "shape" => Field::Shape,
                    "data_offsets" => Field::DataOffsets,
                    _ => Field::Other,
                })
            }
        }
        d.deserialize_identifier(Name)
    }
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Entry;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a tensor's entry")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
                fn once<T, E: de::Error>(slot: &Option<T>, name: &'static str) -> Result<(), E> {
                    match slot {
                        Some(_) => Err(E::duplicate_field(name)),
                        None => Ok(()),
                    }
                }
                let (mut dtype, mut shape, mut data_offsets) = (None, None, None);
                while let Some(field) = map.next_key::<Field>()? {
                    match field {
                        Field::Dtype => {
                            once(&dtype, "dtype")?;
                            dtype = Some(map.next_value()?);
                        }
                        Field::Shape => {
                            once(&shape, "shape")?;
                            shape = Some(map.next_value()?);
                        }
                        Field::DataOffsets => {
                            once(&data_offsets, "data_offsets")?;
                            data_offsets = Some(map.next_value()?);
                        }
                        Field::Other => {
                            map.next_value::<Checked>()?;
                        }
                    }
                }
                Ok(Entry(TensorInfo {
                    dtype: dtype.ok_or_else(|| de::Error::missing_field("dtype"))?,
                    shape: shape.ok_or_else(|| de::Error::missing_field("shape"))?,
                    data_offsets: data_offsets
                        .ok_or_else(|| de::Error::missing_field("data_offsets"))?,
                }))
            }
        }
        d.deserialize_map(Fields)
    }
}

/// Any JSON value, parsed in full and dropped: how the crate's buffering reads what it then
/// ignores.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Any;
        impl<'de> Visitor<'de> for Any {
            type Value = Checked;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
                Ok(Checked)
            }

            fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
                Ok(Checked)
            }

            fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
                Ok(Checked)
            }

            fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
                Ok(Checked)
            }

            fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
                Ok(Checked)
            }

            fn visit_unit<E>(self) -> Result<Checked, E> {
                Ok(Checked)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
                while seq.next_element::<Checked>()?.is_some() {}
                Ok(Checked)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
                while map.next_entry::<Checked, Checked>()?.is_some() {}
                Ok(Checked)
            }
        }
        d.deserialize_any(Any)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_with(bytes: &[u8]) -> (tempdir::Dir, File, PathBuf) {
        let dir = tempdir::Dir::new();
        let path = dir.0.join("t.safetensors");
        File::create(&path).unwrap().write_all(bytes).unwrap();
        let file = File::open(&path).unwrap();
        (dir, file, path)
    }

    fn with_header(json: &str, data: &[u8]) -> Vec<u8> {
        let mut v = (json.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(json.as_bytes());
        v.extend_from_slice(data);
        v
    }

    fn rule(bytes: &[u8]) -> String {
        let (_d, f, p) = file_with(bytes);
        match read_header(&f, &p) {
            Ok(_) => "ok".into(),
            Err(e) => e.rule().unwrap_or_else(|| panic!("unexpected {e}")),
        }
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicUsize, Ordering};
                static N: AtomicUsize = AtomicUsize::new(0);
                let p = std::env::temp_dir().join(format!(
                    "tm-format-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::SeqCst)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn accepts_golden_file_from_reference() {
        // {"test": I32 zeros (2,2)} as the reference writes it: N = 64, 88 bytes.
        let json = r#"{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}    "#;
        let bytes = with_header(json, &[0u8; 16]);
        assert_eq!(bytes.len(), 88);
        let (_d, f, p) = file_with(&bytes);
        let h = read_header(&f, &p).unwrap();
        assert_eq!(h.data_start, 72);
        assert_eq!(h.tensors.len(), 1);
        assert_eq!(&*h.tensors[0].name, "test");
        assert_eq!(h.tensors[0].shape_json(), "[2,2]");
        assert_eq!(h.tensors[0].dtype_name(), "I32");
        assert!(h.metadata.is_none());
    }

    #[test]
    fn rule_names_are_the_crates_variant_names() {
        use SafeTensorError as E;
        let json = || serde_json::from_str::<u8>("x").unwrap_err();
        let not_utf8 = vec![0xff_u8];
        let all = [
            E::InvalidHeader(std::str::from_utf8(&not_utf8).unwrap_err()),
            E::InvalidHeaderDeserialization(json()),
            E::HeaderTooLarge,
            E::HeaderTooSmall,
            E::InvalidHeaderLength,
            E::TensorNotFound("t".into()),
            E::TensorInvalidInfo,
            E::InvalidOffset("t".into()),
            E::IoError(io::Error::other("x")),
            E::JsonError(json()),
            E::InvalidTensorView(Dtype::U8, vec![1], 1),
            E::MetadataIncompleteBuffer,
            E::ValidationOverflow,
            E::MisalignedSlice,
        ];
        for e in &all {
            let debug = format!("{e:?}");
            let variant = debug.split(['(', ' ']).next().unwrap();
            assert_eq!(rule_name(e), variant);
        }
    }

    #[test]
    fn framing_rules() {
        assert_eq!(rule(b""), "HeaderTooSmall");
        assert_eq!(rule(b"1234567"), "HeaderTooSmall");
        assert_eq!(rule(&[0xff; 8]), "HeaderTooLarge");
        assert_eq!(rule(&100_000_001u64.to_le_bytes()), "HeaderTooLarge");
        assert_eq!(rule(&100_000_000u64.to_le_bytes()), "InvalidHeaderLength");
        assert_eq!(rule(&60u64.to_le_bytes()), "InvalidHeaderLength");
        assert_eq!(rule(&0u64.to_le_bytes()), "InvalidHeaderDeserialization");
        assert_eq!(
            rule(&with_header("\u{ff}", b"")),
            "InvalidHeaderDeserialization"
        );
        let mut bad_utf8 = 1u64.to_le_bytes().to_vec();
        bad_utf8.push(0xff);
        assert_eq!(rule(&bad_utf8), "InvalidHeader");
    }

    #[test]
    fn whitespace_and_padding() {
        assert_eq!(rule(&with_header("{}\r \t\n", b"")), "ok");
        assert_eq!(rule(&with_header("\t\n{}\r ", b"")), "ok");
        assert_eq!(
            rule(&with_header("{}\0\0", b"")),
            "InvalidHeaderDeserialization"
        );
        assert_eq!(
            rule(&with_header("\u{feff}{}", b"")),
            "InvalidHeaderDeserialization"
        );
    }

    #[test]
    fn offset_and_size_rules() {
        let t = |o: &str, shape: &str, dtype: &str| {
            format!(r#"{{"t":{{"dtype":"{dtype}","shape":{shape},"data_offsets":{o}}}}}"#)
        };
        assert_eq!(
            rule(&with_header(&t("[0,4]", "[2,2]", "I32"), &[0; 4])),
            "TensorInvalidInfo"
        );
        assert_eq!(
            rule(&with_header(&t("[4,20]", "[2,2]", "I32"), &[0; 20])),
            "InvalidOffset"
        );
        assert_eq!(
            rule(&with_header(&t("[0,16]", "[2,2]", "I32"), &[0; 18])),
            "MetadataIncompleteBuffer"
        );
        assert_eq!(
            rule(&with_header(&t("[0,16]", "[2,2]", "I32"), &[0; 14])),
            "MetadataIncompleteBuffer"
        );
        assert_eq!(
            rule(&with_header(
                &t("[0,16]", "[2,18446744073709551614]", "I32"),
                &[0; 16]
            )),
            "ValidationOverflow"
        );
        assert_eq!(
            rule(&with_header(&t("[0,2]", "[3]", "F4"), &[0; 2])),
            "MisalignedSlice"
        );
        assert_eq!(rule(&with_header(&t("[0,1]", "[2]", "F4"), &[0; 1])), "ok");
        assert_eq!(rule(&with_header(&t("[0,4]", "[]", "I32"), &[0; 4])), "ok");
        assert_eq!(
            rule(&with_header(&t("[0,2]", "[2]", "bf16"), &[0; 2])),
            "InvalidHeaderDeserialization"
        );
    }

    #[test]
    fn cut_short_is_a_file_that_ends_too_soon() {
        let cut = |bytes: &[u8]| {
            let (_d, f, p) = file_with(bytes);
            read_header(&f, &p).unwrap_err().cut_short()
        };
        let json = r#"{"t":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}"#;
        let whole = with_header(json, &[0; 16]);
        // Every proper prefix of a valid file is one still being written.
        for len in 0..whole.len() {
            assert!(cut(&whole[..len]), "prefix of {len} bytes");
        }
        // Longer than its data, or broken in itself: not a matter of waiting.
        assert!(!cut(&with_header(json, &[0; 18])));
        assert!(!cut(&with_header(r#"{"t":1}"#, b"")));
        assert!(!cut(&[0xff; 8]));
    }

    #[test]
    fn data_length_near_u64_max_does_not_overflow() {
        // Found by fuzzing: 8 tensors of 2^61 - 1 bytes end at 2^64 - 8, and 8 + N + that
        // overflowed.
        let n = (1u64 << 61) - 1;
        let entries: Vec<String> = (0..8)
            .map(|i| {
                let (b, e) = (i * n, (i + 1) * n);
                format!(r#""t{i}":{{"dtype":"U8","shape":[{n}],"data_offsets":[{b},{e}]}}"#)
            })
            .collect();
        let json = format!("{{{}}}", entries.join(","));
        assert_eq!(rule(&with_header(&json, b"")), "MetadataIncompleteBuffer");
    }

    #[test]
    fn metadata_must_be_strings() {
        let ok = r#"{"__metadata__":{"format":"pt"},"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#;
        let (_d, f, p) = file_with(&with_header(ok, &[7]));
        let h = read_header(&f, &p).unwrap();
        assert_eq!(h.metadata.unwrap()["format"], "pt");
        let bad = r#"{"__metadata__":{"n":1}}"#;
        assert_eq!(rule(&with_header(bad, b"")), "InvalidHeaderDeserialization");
    }

    #[test]
    fn message_names_file_and_tensor() {
        let json = r#"{"a.weight":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
        let (_d, f, p) = file_with(&with_header(json, &[0, 0]));
        let msg = read_header(&f, &p).unwrap_err().to_string();
        assert!(msg.contains("t.safetensors"), "{msg}");
        assert!(msg.contains("a.weight"), "{msg}");
        assert!(msg.contains("InvalidOffset"), "{msg}");
    }

    /// The tensors (name, dtype, shape, offsets in data order) and metadata of a valid file.
    type Seen = (
        Vec<(String, String, String, u64, u64)>,
        Option<Vec<(String, String)>>,
    );

    fn seen(bytes: &[u8]) -> Result<Seen, String> {
        let (_d, f, p) = file_with(bytes);
        let h = read_header(&f, &p).map_err(|e| e.rule().unwrap_or_default())?;
        let tensors = h.tensors.iter().map(|t| {
            (
                t.name.to_string(),
                t.dtype_name(),
                t.shape_json(),
                t.begin,
                t.end,
            )
        });
        let metadata = h.metadata.map(|m| m.into_iter().collect());
        Ok((tensors.collect(), metadata))
    }

    /// The same as the crate reading the whole file from memory.
    fn crate_seen(bytes: &[u8]) -> Result<Seen, String> {
        let (_, m) = safetensors::SafeTensors::read_metadata(bytes).map_err(|e| rule_name(&e))?;
        let tensors = m.offset_keys().into_iter().map(|name| {
            let i = m.info(&name).unwrap();
            let shape = serde_json::to_string(&i.shape).unwrap();
            let (b, e) = i.data_offsets;
            (name, format!("{:?}", i.dtype), shape, b as u64, e as u64)
        });
        let metadata = m.metadata().clone().map(|m| {
            let mut v: Vec<_> = m.into_iter().collect();
            v.sort();
            v
        });
        Ok((tensors.collect(), metadata))
    }

    fn u8_entry(len: usize, begin: usize) -> String {
        let end = begin + len;
        format!(r#"{{"dtype":"U8","shape":[{len}],"data_offsets":[{begin},{end}]}}"#)
    }

    #[test]
    fn json_reader_agrees_with_the_crate_on_its_subtle_cases() {
        let w3 = u8_entry(3, 0);
        let w1 = u8_entry(1, 0);
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let cases: Vec<(&str, String, usize, Result<Seen, String>)> = vec![
            (
                "repeated name: the last wins",
                format!(r#"{{"w":{w3},"w":{w1}}}"#),
                1,
                Ok((vec![("w".into(), "U8".into(), "[1]".into(), 0, 1)], None)),
            ),
            (
                "repeated name: the first is gone, leaving a gap",
                format!(r#"{{"a":{w3},"b":{},"a":{}}}"#, u8_entry(3, 3), u8_entry(3, 6)),
                9,
                Err("InvalidOffset".into()),
            ),
            (
                "__metadata__ null is none",
                format!(r#"{{"__metadata__":null,"w":{w1}}}"#),
                1,
                Ok((vec![("w".into(), "U8".into(), "[1]".into(), 0, 1)], None)),
            ),
            (
                "repeated metadata key: the last wins",
                r#"{"__metadata__":{"k":"1","k":"2"}}"#.into(),
                0,
                Ok((vec![], Some(vec![("k".into(), "2".into())]))),
            ),
            (
                "escaped __metadata__ is still the metadata",
                r#"{"__metadata\u005f_":{"k":"v"}}"#.into(),
                0,
                Ok((vec![], Some(vec![("k".into(), "v".into())]))),
            ),
            (
                "__metadata__ twice, the first null",
                r#"{"__metadata__":null,"__metadata__":{}}"#.into(),
                0,
                Err("InvalidHeaderDeserialization".into()),
            ),
            (
                "non-string metadata value",
                r#"{"__metadata__":{"n":null}}"#.into(),
                0,
                Err("InvalidHeaderDeserialization".into()),
            ),
            (
                "unknown fields are ignored",
                r#"{"w":{"x":{"y":[1,-2,0.5,true,null,"\u00e9"]},"dtype":"U8","shape":[1],"data_offsets":[0,1],"z":{}}}"#.into(),
                1,
                Ok((vec![("w".into(), "U8".into(), "[1]".into(), 0, 1)], None)),
            ),
            (
                "an unknown field with a lone surrogate escape is not JSON",
                r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"z":"\ud800"}}"#.into(),
                1,
                Err("InvalidHeaderDeserialization".into()),
            ),
            (
                "an unknown field nested past serde_json's depth limit",
                format!(r#"{{"w":{{"dtype":"U8","shape":[1],"data_offsets":[0,1],"z":{deep}}}}}"#),
                1,
                Err("InvalidHeaderDeserialization".into()),
            ),
            (
                "an unknown number out of range",
                r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"z":1e999}}"#.into(),
                1,
                Err("InvalidHeaderDeserialization".into()),
            ),
            (
                "a field given twice",
                r#"{"w":{"shape":[1],"dtype":"U8","data_offsets":[0,1],"shape":[1]}}"#.into(),
                1,
                Err("InvalidHeaderDeserialization".into()),
            ),
            (
                "an entry written as an array (only the crate's own reader takes it)",
                r#"{"w":["U8",[1],[0,1]]}"#.into(),
                1,
                Ok((vec![("w".into(), "U8".into(), "[1]".into(), 0, 1)], None)),
            ),
            (
                "tensors in any order come out in data order",
                format!(r#"{{"b":{},"a":{}}}"#, u8_entry(2, 1), u8_entry(1, 0)),
                3,
                Ok((
                    vec![
                        ("a".into(), "U8".into(), "[1]".into(), 0, 1),
                        ("b".into(), "U8".into(), "[2]".into(), 1, 3),
                    ],
                    None,
                )),
            ),
            (
                "trailing text",
                format!(r#"{{"w":{w1}}} x"#),
                1,
                Err("InvalidHeaderDeserialization".into()),
            ),
        ];
        for (what, json, data, want) in cases {
            let bytes = with_header(&json, &vec![0; data]);
            assert_eq!(seen(&bytes), want, "{what}");
            assert_eq!(crate_seen(&bytes), want, "{what}: the crate");
        }
    }

    fn reason(bytes: &[u8]) -> String {
        let (_d, f, p) = file_with(bytes);
        let e = read_header(&f, &p).unwrap_err();
        let reason = e.reason();
        assert_eq!(e.to_string(), format!("{}: {reason}", p.display()));
        reason
    }

    #[test]
    fn common_accidents_are_told_in_plain_words_before_the_rule() {
        let lfs = b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 4949453792\n";
        assert_eq!(
            reason(lfs),
            "this is a Git LFS pointer, not the file's contents: run `git lfs pull` in its \
             repository to download them [HeaderTooLarge]"
        );
        let web = "this is an HTML or XML page, not a safetensors file: likely a server's error page \
                   saved by a failed download; download the file again [HeaderTooLarge]";
        assert_eq!(reason(b"<!DOCTYPE html><html><body>404</body></html>"), web);
        assert_eq!(reason(b"\r\n  <html><head><title>502 Bad Gateway"), web);
        assert_eq!(
            reason(b"<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code></Error>"),
            web
        );
        // Files whose first bytes are a plausible length are cut short, whatever those bytes
        // look like as text: 60 is `<` and seven zero bytes.
        assert_eq!(
            reason(&60u64.to_le_bytes()),
            "the file ends inside its header: 60 header bytes declared, 0 there (cut short by an \
             interrupted download or copy, or a full disk?) [InvalidHeaderLength]"
        );
        assert_eq!(
            reason(b"{\0"),
            "the file is only 2 bytes, too short for the 8-byte header length (cut short by an \
             interrupted download or copy, or a full disk?) [HeaderTooSmall]"
        );
        assert_eq!(
            reason(br#"{"metadata":{"total_size":16},"weight_map":{"w":"a.safetensors"}}"#),
            "this is JSON text, not a safetensors file (an index or config file saved under this \
             name?) [HeaderTooLarge]"
        );
        assert_eq!(
            reason(b"PK\x03\x04\x00\x00\x08\x00\x00\x00archive/data.pkl"),
            "this is a ZIP archive, not a safetensors file: likely a PyTorch checkpoint written by \
             torch.save; convert it to safetensors [HeaderTooLarge]"
        );
        assert_eq!(
            reason(b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."),
            "this is a Python pickle, not a safetensors file: likely an old PyTorch checkpoint; \
             convert it to safetensors [HeaderTooLarge]"
        );
        assert_eq!(
            reason(b"GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
            "this is a GGUF file (llama.cpp's format), not a safetensors file [HeaderTooLarge]"
        );
        assert_eq!(
            reason(b""),
            "the file is empty (cut short by an interrupted download or copy, or a full disk?) \
             [HeaderTooSmall]"
        );
        assert_eq!(
            reason(b"\x40\x00\x00"),
            "the file is only 3 bytes, too short for the 8-byte header length (cut short by an \
             interrupted download or copy, or a full disk?) [HeaderTooSmall]"
        );
        let json = r#"{"t":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}"#;
        let whole = with_header(json, &[0; 16]);
        assert_eq!(
            reason(&whole[..20]),
            "the file ends inside its header: 57 header bytes declared, 12 there (cut short by an \
             interrupted download or copy, or a full disk?) [InvalidHeaderLength]"
        );
        assert_eq!(
            reason(&whole[..whole.len() - 6]),
            "the file ends before its data: 16 bytes described, 10 there (cut short by an \
             interrupted download or copy, or a full disk?) [MetadataIncompleteBuffer]"
        );
        // Anything else keeps the crate's own words.
        assert_eq!(reason(&[0xff; 8]), "header too large [HeaderTooLarge]");
        assert_eq!(
            reason(&with_header(json, &[0; 18])),
            "incomplete metadata, file not fully covered [MetadataIncompleteBuffer]"
        );
        // The start of a header whose length prefix is plausible is not sniffed: this is a
        // safetensors file with broken JSON, not a JSON file.
        assert_eq!(
            reason(&with_header("{", b"")),
            "invalid JSON in header: EOF while parsing an object at line 1 column 1 \
             [InvalidHeaderDeserialization]"
        );
    }
}
