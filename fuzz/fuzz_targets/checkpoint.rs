//! `format::describe` for PyTorch checkpoints on arbitrary file contents.
//!
//! The input is the whole file (zip, legacy pickles, or anything). Besides no panic: on success
//! every tensor lies inside the file (every element a strided tensor can reach), in data order,
//! `end - begin` is its size, the notes are bounded, and the conversion's tensors are listed ones.
#![no_main]

mod common;
mod pytorch_checks;

use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tensormount::format;

fn file() -> &'static File {
    static FILE: OnceLock<File> = OnceLock::new();
    FILE.get_or_init(|| common::memfd(c"tensormount-fuzz-checkpoint"))
}

fuzz_target!(|data: &[u8]| {
    let file = file();
    common::rewrite(file, data);
    if let Ok(d) = format::PYTORCH.describe(file, Path::new("fuzz.pt")) {
        pytorch_checks::check(&d, data.len() as u64);
    }
});
