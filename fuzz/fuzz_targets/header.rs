//! `format::describe` (the safetensors reader) on arbitrary file contents.
//!
//! The input is the whole file. On success the header must describe the file exactly: data after
//! the 8-byte prefix and the JSON, tensors in data order, contiguous, each exactly as large as its
//! dtype and shape say, filling the data to the end of the file. It is also checked against the
//! official crate reading the same bytes from memory (the module follows its rules): both accept
//! (the same tensors and `__metadata__`: this is what checks the module's own one-pass JSON reader
//! against the crate's deserializer) or both reject, and for the same rule, which ends the reason.
#![no_main]

mod common;

use std::collections::HashSet;
use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tensormount::format::{self, FormatError};

fn file() -> &'static File {
    static FILE: OnceLock<File> = OnceLock::new();
    FILE.get_or_init(|| common::memfd(c"tensormount-fuzz-header"))
}

fuzz_target!(|data: &[u8]| {
    let file = file();
    common::rewrite(file, data);
    let path = Path::new("fuzz.safetensors");
    let ours = format::SAFETENSORS.describe(file, path);
    if crate_would_overflow(data) {
        // The crate's `read_metadata` adds 8 + N + data length unchecked (a panic with overflow
        // checks on, as here): no reference for these. The data cannot fill the file.
        match ours {
            Err(ref e @ FormatError::Invalid(..)) => {
                assert_eq!(e.rule().as_deref(), Some("MetadataIncompleteBuffer"))
            }
            other => panic!("data length past 2^64 gave {other:?}"),
        }
        return;
    }
    let reference = safetensors::SafeTensors::read_metadata(data);

    let header = match (ours, reference) {
        (Ok(h), Ok((n, reference))) => {
            assert_eq!(h.data_start, 8 + n as u64);
            check_against_reference(&h, &reference);
            h
        }
        (Err(e), Err(reference)) => {
            // Messages never panic, and name the same rule as the crate, in brackets at the end
            // of one line.
            let _ = (e.to_string(), e.path());
            match e.rule() {
                Some(rule) => {
                    let reason = e.reason();
                    assert!(
                        reason.ends_with(&format!(" [{rule}]")) && !reason.contains('\n'),
                        "reason {reason:?} for rule {rule}"
                    );
                    // The crate sorts tensors by offsets out of a HashMap: when two share their
                    // offsets, which one it checks first (and so which rule it reports) changes
                    // from one parse to the next. Ours must be one the crate can report.
                    let same = |r: &safetensors::SafeTensorError| format::rule_name(r) == rule;
                    assert!(
                        same(&reference)
                            || (0..32).any(|_| {
                                safetensors::SafeTensors::read_metadata(data)
                                    .err()
                                    .is_some_and(|r| same(&r))
                            }),
                        "ours: {e:?}, crate: {reference:?}"
                    );
                }
                None => panic!("I/O error on a memfd: {e}"),
            }
            return;
        }
        (Ok(h), Err(reference)) => panic!("accepted what the crate rejects ({reference:?}): {h:?}"),
        (Err(e), Ok(_)) => panic!("rejected what the crate accepts: {e}"),
    };

    // The prefix is the header length.
    let declared = u64::from_le_bytes(data[..8].try_into().unwrap());
    assert_eq!(header.data_start, 8 + declared);
    assert!(header.data_start <= data.len() as u64);
    let data_len = data.len() as u64 - header.data_start;

    // Tensors in data order, contiguous from 0 to the end of the file.
    let mut next = 0u64;
    let mut names = HashSet::new();
    for t in &header.tensors {
        assert!(names.insert(&*t.name), "tensor `{}` listed twice", t.name);
        assert_eq!(t.begin, next, "tensor `{}` not contiguous", t.name);
        assert!(
            t.end >= t.begin,
            "tensor `{}` ends before it begins",
            t.name
        );
        assert_eq!(t.size(), t.end - t.begin);
        assert_eq!(
            Some(t.size()),
            common::expected_size(&t.shape, t.dtype.safetensors().map_or(8, |d| d.bitsize())),
            "tensor `{}`: size does not match dtype and shape",
            t.name
        );
        next = t.end;
        // Attributes shown for it: the shape as a JSON array of integers, the dtype as a name the
        // format knows.
        let shape = common::json_usize_array(&t.shape_json()).unwrap_or_else(|| {
            panic!(
                "shape_json {:?} is not an array of integers",
                t.shape_json()
            )
        });
        assert_eq!(shape, t.shape.iter().map(|&d| d as u64).collect::<Vec<_>>());
        let dtype: safetensors::Dtype =
            serde_json::from_value(serde_json::Value::String(t.dtype_name().into()))
                .unwrap_or_else(|e| {
                    panic!("dtype_name {:?} does not parse back: {e}", t.dtype_name())
                });
        assert_eq!(format::Dtype::from(dtype), t.dtype);
    }
    assert_eq!(next, data_len, "tensors do not fill the data");
});

fn check_against_reference(h: &format::Description, reference: &safetensors::tensor::Metadata) {
    let theirs = reference.tensors();
    assert_eq!(
        h.tensors.len(),
        theirs.len(),
        "tensor count differs from the crate's"
    );
    for t in &h.tensors {
        let info = theirs
            .get(&*t.name)
            .unwrap_or_else(|| panic!("tensor `{}` unknown to the crate", t.name));
        assert_eq!(Some(info.dtype), t.dtype.safetensors());
        assert_eq!(&info.shape[..], &t.shape[..]);
        assert_eq!(
            (info.data_offsets.0 as u64, info.data_offsets.1 as u64),
            (t.begin, t.end)
        );
    }
    let ours = h.metadata.as_ref().map(|m| m.iter().collect::<Vec<_>>());
    // The crate's map, its values as our JSON strings, in key order as ours is.
    let mut theirs: Option<Vec<(String, serde_json::Value)>> =
        reference.metadata().as_ref().map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str())))
                .collect()
        });
    if let Some(v) = theirs.as_mut() {
        v.sort_by(|a, b| a.0.cmp(&b.0));
    }
    let theirs = theirs
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (k, v)).collect::<Vec<_>>());
    assert_eq!(ours, theirs, "__metadata__ differs from the crate's");
}

/// Whether the crate's `read_metadata` would overflow on `data`: a complete, valid header whose data
/// length plus 8 + N passes 2^64.
fn crate_would_overflow(data: &[u8]) -> bool {
    let Some(prefix) = data.get(..8) else {
        return false;
    };
    let n = u64::from_le_bytes(prefix.try_into().unwrap());
    if n > 100_000_000 {
        return false;
    }
    let Some(json) = data.get(8..8 + n as usize) else {
        return false;
    };
    match serde_json::from_slice::<safetensors::tensor::Metadata>(json) {
        Ok(m) => (m.data_len() as u64).checked_add(8 + n).is_none(),
        Err(_) => false,
    }
}
