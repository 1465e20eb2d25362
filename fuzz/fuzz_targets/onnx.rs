//! `format::ONNX.describe` on arbitrary file contents (seeds: models the `onnx` package wrote,
//! merged and unpacked fields, external data, nesting past the bound).
//!
//! Besides no panic: on success every tensor is where it may be: a stretch inside the file, or
//! in one of the data files the description names (its location relative, with no `.` or `..`
//! component), or computed; a computed tensor is read whole and in two pieces that cut a value,
//! reading only inside the file, giving the same bytes; the conversion's tensors are listed ones.
#![no_main]

mod common;

use std::fs::File;
use std::io::IoSliceMut;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use tensormount::format;

fn file() -> &'static File {
    static FILE: OnceLock<File> = OnceLock::new();
    FILE.get_or_init(|| common::memfd(c"tensormount-fuzz-onnx"))
}

fuzz_target!(|data: &[u8]| {
    let file = file();
    common::rewrite(file, data);
    let Ok(d) = format::ONNX.describe(file, Path::new("fuzz.onnx")) else {
        return;
    };
    assert_eq!(d.kind, "onnx");
    for location in &d.files {
        assert!(
            !location.is_empty() && !location.starts_with('/'),
            "{location:?}"
        );
        assert!(
            location
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".."),
            "{location:?}"
        );
    }
    let len = data.len() as u64;
    for t in &d.tensors {
        assert!(t.begin <= t.end, "{t:?}");
        match (&t.computed, t.file) {
            (Some(c), None) => {
                let size = t.size() as usize;
                let mut read = |_: Option<u32>, bufs: &mut [IoSliceMut<'_>], at: u64| {
                    let want: u64 = bufs.iter().map(|b| b.len() as u64).sum();
                    assert!(at + want <= len, "{t:?} reads past the file");
                    let mut at = at;
                    for buf in bufs {
                        file.read_exact_at(buf, at)?;
                        at += buf.len() as u64;
                    }
                    Ok(())
                };
                let mut whole = vec![0u8; size.min(1 << 20)];
                if c.read(&mut read, 0, &mut whole).is_ok() {
                    let cut = whole.len() / 2 + 1;
                    let mut pieces = vec![0u8; whole.len()];
                    let (a, b) = pieces.split_at_mut(cut.min(whole.len()));
                    if c.read(&mut read, 0, a).is_ok()
                        && c.read(&mut read, a.len() as u64, b).is_ok()
                    {
                        assert_eq!(whole, pieces, "{t:?}: read in two pieces");
                    }
                }
            }
            (None, Some(k)) => assert!((k as usize) < d.files.len(), "{t:?}"),
            (None, None) => assert!(t.end <= len, "{t:?} ends past the file ({len} bytes)"),
            (Some(_), Some(_)) => panic!("{t:?}: computed and in a data file"),
        }
    }
    if let Some(Ok(conversion)) = &d.conversion {
        for (_, t) in &conversion.state_dict {
            assert!(d.tensors.iter().any(|u| Arc::ptr_eq(u, t)));
        }
    }
});
