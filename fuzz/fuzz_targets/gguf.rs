//! `format::GGUF.describe` (the GGUF header reader) on arbitrary file contents.
//!
//! The input is the whole `.gguf` file (a memfd). Besides no panic: on success the tensors are in
//! data order, do not overlap, lie inside the file after `data_start`, and each is exactly as large
//! as its element type and shape say; every shape has at most 4 dimensions.
#![no_main]

mod common;

use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tensormount::format;

fn file() -> &'static File {
    static FILE: OnceLock<File> = OnceLock::new();
    FILE.get_or_init(|| common::memfd(c"tensormount-fuzz-gguf"))
}

fuzz_target!(|data: &[u8]| {
    let file = file();
    common::rewrite(file, data);
    let Ok(d) = format::GGUF.describe(file, Path::new("fuzz.gguf")) else {
        return;
    };
    let len = data.len() as u64;
    let mut end = 0;
    for t in &d.tensors {
        assert!(t.begin >= end, "{}: overlaps the tensor before it", t.name);
        assert!(d.data_start + t.end <= len, "{}: past the end", t.name);
        assert!(
            t.shape.len() <= 4,
            "{}: {} dimensions",
            t.name,
            t.shape.len()
        );
        let elements = t.shape.iter().map(|&n| n as u64).product();
        assert_eq!(t.dtype.size_of(elements), Some(t.size()), "{}", t.name);
        end = t.end;
    }
});
