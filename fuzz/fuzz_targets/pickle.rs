//! The pickle machine and torch's meaning of it, on arbitrary pickle bytes.
//!
//! The input is placed as the main pickle of a legacy checkpoint (after the magic number, the
//! protocol version and an empty `sys_info`): whatever follows its `STOP` in the input is the
//! rest of the file (the list of storage keys, the storages). Then as for the `checkpoint`
//! target: no panic, and on success every tensor inside the file.
#![no_main]

mod common;
mod pytorch_checks;

use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tensormount::format;

/// The legacy format's first three pickles: the magic number, 1001, `{}`.
const PREFIX: &[u8] =
    b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.\x80\x02M\xe9\x03.\x80\x02}.";

fn file() -> &'static File {
    static FILE: OnceLock<File> = OnceLock::new();
    FILE.get_or_init(|| common::memfd(c"tensormount-fuzz-pickle"))
}

fuzz_target!(|data: &[u8]| {
    let file = file();
    let mut bytes = PREFIX.to_vec();
    bytes.extend_from_slice(data);
    common::rewrite(file, &bytes);
    if let Ok(d) = format::PYTORCH.describe(file, Path::new("fuzz.pt")) {
        pytorch_checks::check(&d, bytes.len() as u64);
    }
});
