//! Reading and validating safetensors headers. Knows nothing of FUSE.
//!
//! The rules are the official `safetensors` crate's: this module only reads the 8-byte length and the
//! header with `pread` (never through a mapping, so a source truncated later cannot kill the daemon),
//! lets the crate deserialize and validate them, and adds the crate's last rule (the data fills the
//! file exactly), which needs the file size the crate never sees here.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use safetensors::SafeTensorError;
use safetensors::tensor::Metadata;

pub use safetensors::Dtype;

/// Length of the little-endian header-length prefix.
const PREFIX_LEN: u64 = 8;

/// A validated safetensors header.
#[derive(Debug)]
pub struct Header {
    /// Absolute offset of the data buffer in the file: 8 + header length.
    pub data_start: u64,
    /// Tensors in data order (ascending offsets).
    pub tensors: Vec<Tensor>,
    /// The `__metadata__` map; `None` when absent or `null`.
    pub metadata: Option<std::collections::BTreeMap<String, String>>,
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
    /// The file breaks a rule of the format, as the official crate names it.
    Invalid(PathBuf, SafeTensorError),
    /// The file ends before the data its header describes (the crate's `MetadataIncompleteBuffer`,
    /// which it also reports for a file that goes on past its data).
    Short(PathBuf),
}

impl FormatError {
    /// The reason without the path (for the `user.safetensors.error` xattr).
    pub fn reason(&self) -> String {
        match self {
            FormatError::Io(_, e) => format!("cannot read: {e}"),
            FormatError::Invalid(_, e) => format!("{e} [{}]", rule_name(e)),
            FormatError::Short(_) => format!(
                "{} (it ends before its data) [MetadataIncompleteBuffer]",
                SafeTensorError::MetadataIncompleteBuffer
            ),
        }
    }

    /// The crate's name for the rule the file breaks (none for an I/O error).
    pub fn rule(&self) -> Option<String> {
        match self {
            FormatError::Io(..) => None,
            FormatError::Invalid(_, e) => Some(rule_name(e)),
            FormatError::Short(_) => Some("MetadataIncompleteBuffer".into()),
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            FormatError::Io(p, _) | FormatError::Invalid(p, _) | FormatError::Short(p) => p,
        }
    }

    /// Whether the file ends too soon for the length prefix, the header, or the data: what a file
    /// still being written looks like.
    pub fn cut_short(&self) -> bool {
        matches!(
            self,
            FormatError::Short(_)
                | FormatError::Invalid(
                    _,
                    SafeTensorError::HeaderTooSmall | SafeTensorError::InvalidHeaderLength
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

/// The crate's name for the rule an error breaks (its variant name, e.g. `HeaderTooLarge`).
pub fn rule_name(e: &SafeTensorError) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_ascii_alphanumeric())
        .next()
        .unwrap_or_default()
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
    let invalid = |e| FormatError::Invalid(path.to_path_buf(), e);
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
    let parsed = if complete {
        serde_json::from_slice::<Metadata>(&buf[PREFIX_LEN as usize..]).ok()
    } else {
        None
    };
    let Some(metadata) = parsed else {
        // Something is wrong: let the crate's own reader name the rule. It runs the same checks in
        // its own order, on the bytes we have, so its first failure is the file's.
        return Err(invalid(canonical_error(&buf)));
    };

    let data_start = PREFIX_LEN + declared;
    // Offsets near 2^64 must not wrap around into a match.
    match data_start.checked_add(metadata.data_len() as u64) {
        Some(end) if end == file_len => {}
        Some(end) if end > file_len => return Err(FormatError::Short(path.to_path_buf())),
        _ => return Err(invalid(SafeTensorError::MetadataIncompleteBuffer)),
    }
    Ok(Header {
        data_start,
        tensors: tensors_in_data_order(&metadata),
        metadata: metadata
            .metadata()
            .as_ref()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
    })
}

/// The error the crate's whole-buffer reader reports for a header we could not accept.
fn canonical_error(buf: &[u8]) -> SafeTensorError {
    match safetensors::SafeTensors::read_metadata(buf) {
        Err(e) => e,
        // The crate accepted what serde_json rejected: cannot happen, as both run the same
        // deserializer; report it as the JSON rule rather than panic.
        Ok(_) => SafeTensorError::InvalidHeaderLength,
    }
}

fn tensors_in_data_order(metadata: &Metadata) -> Vec<Tensor> {
    // `offset_keys` clones each name once, already in data order; `tensors()` would build a
    // second hash map of the whole header.
    metadata
        .offset_keys()
        .into_iter()
        .filter_map(|name| {
            let info = metadata.info(&name)?;
            Some(Tensor {
                dtype: info.dtype,
                shape: info.shape.clone().into_boxed_slice(),
                begin: info.data_offsets.0 as u64,
                end: info.data_offsets.1 as u64,
                name: Arc::from(name),
            })
        })
        .collect()
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
}
