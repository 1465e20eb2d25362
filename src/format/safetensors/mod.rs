//! The safetensors reader: the 8-byte length and the header, read with `pread` (never through a
//! mapping, so a source truncated later cannot kill the daemon), validated by the official
//! `safetensors` crate.
//!
//! The rules are the crate's: this module reads the JSON into the crate's own types (through the
//! one-pass reader of [`entries`])), lets the crate's public constructor validate
//! them, and adds the crate's last rule (the data fills the file exactly), which needs the file
//! size the crate never sees here.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use ::safetensors::SafeTensorError;

mod entries;
mod error;

pub use error::rule_name;

use self::entries::Entries;
use self::error::{Accident, PREFIX_LEN, SafetensorsError};
use super::description::Description;
use super::error::FormatError;

/// How much of the start of a rejected file is looked at to tell what it is instead.
const SNIFF_LEN: usize = 512;

/// Reads and validates the header of `file` (whose path is `path`, for messages).
pub fn describe(file: &File, path: &Path) -> Result<Description, FormatError> {
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
        FormatError::invalid(path, SafetensorsError::Invalid(e, accident))
    };
    // The crate's own limit on the declared length, checked on the prefix alone before anything
    // of that length is read.
    if let Err(e @ SafeTensorError::HeaderTooLarge) =
        ::safetensors::SafeTensors::read_metadata(&buf)
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
    let (tensors, metadata) = entries.validate().map_err(invalid)?;
    let data = tensors.last().map_or(0, |t| t.end);
    // Offsets near 2^64 must not wrap around into a match.
    match data_start.checked_add(data) {
        Some(end) if end == file_len => {}
        Some(end) if end > file_len => {
            return Err(FormatError::invalid(
                path,
                SafetensorsError::Short {
                    data,
                    present: file_len.saturating_sub(data_start),
                },
            ));
        }
        _ => return Err(invalid(SafeTensorError::MetadataIncompleteBuffer)),
    }
    Ok(Description {
        data_start,
        tensors,
        metadata: metadata.map(|m| m.into_iter().map(|(k, v)| (k, v.into())).collect()),
        ..Description::new("safetensors")
    })
}

/// The error the crate's whole-buffer reader reports for a header we could not accept.
fn canonical_error(buf: &[u8]) -> SafeTensorError {
    match ::safetensors::SafeTensors::read_metadata(buf) {
        Err(e) => e,
        // The crate accepted what its own deserializer rejected: cannot happen, as both run the
        // same code; report it as the JSON rule rather than panic.
        Ok(_) => SafeTensorError::InvalidHeaderLength,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::testing::TempDir;
    use std::io::{self, Write};
    use std::path::PathBuf;

    fn file_with(bytes: &[u8]) -> (TempDir, File, PathBuf) {
        let dir = TempDir::new("format");
        let path = dir.join("t.safetensors");
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
        match describe(&f, &p) {
            Ok(_) => "ok".into(),
            Err(e) => e.rule().unwrap_or_else(|| panic!("unexpected {e}")),
        }
    }

    /// A reason is one line, whatever the tensor names in it hold (found by the `header` fuzz
    /// target).
    #[test]
    fn a_reason_naming_a_tensor_with_a_newline_is_one_line() {
        let json = r#"{"a\nb":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
        let (_d, f, p) = file_with(&with_header(json, &[0; 2]));
        let reason = describe(&f, &p).unwrap_err().reason();
        assert!(
            !reason.contains('\n') && reason.contains(r"a\nb"),
            "{reason}"
        );
        assert!(reason.ends_with(" [InvalidOffset]"), "{reason}");
    }

    #[test]
    fn accepts_golden_file_from_reference() {
        // {"test": I32 zeros (2,2)} as the reference writes it: N = 64, 88 bytes.
        let json = r#"{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}    "#;
        let bytes = with_header(json, &[0u8; 16]);
        assert_eq!(bytes.len(), 88);
        let (_d, f, p) = file_with(&bytes);
        let h = describe(&f, &p).unwrap();
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
            E::InvalidTensorView(::safetensors::Dtype::U8, vec![1], 1),
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
            describe(&f, &p).unwrap_err().cut_short()
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
        let h = describe(&f, &p).unwrap();
        assert_eq!(h.metadata.unwrap()["format"], "pt");
        let bad = r#"{"__metadata__":{"n":1}}"#;
        assert_eq!(rule(&with_header(bad, b"")), "InvalidHeaderDeserialization");
    }

    #[test]
    fn message_names_file_and_tensor() {
        let json = r#"{"a.weight":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
        let (_d, f, p) = file_with(&with_header(json, &[0, 0]));
        let msg = describe(&f, &p).unwrap_err().to_string();
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
        let h = describe(&f, &p).map_err(|e| e.rule().unwrap_or_default())?;
        let tensors = h.tensors.iter().map(|t| {
            (
                t.name.to_string(),
                t.dtype_name().to_string(),
                t.shape_json(),
                t.begin,
                t.end,
            )
        });
        let metadata = h.metadata.map(|m| {
            m.into_iter()
                .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string()))
                .collect()
        });
        Ok((tensors.collect(), metadata))
    }

    /// The same as the crate reading the whole file from memory.
    fn crate_seen(bytes: &[u8]) -> Result<Seen, String> {
        let (_, m) = ::safetensors::SafeTensors::read_metadata(bytes).map_err(|e| rule_name(&e))?;
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
        let e = describe(&f, &p).unwrap_err();
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
