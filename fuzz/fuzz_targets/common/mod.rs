//! Helpers shared by the fuzz targets (each target uses some of them).
#![allow(dead_code)]

use std::fs::File;
use std::os::fd::FromRawFd;

/// The kernel's NAME_MAX.
pub const NAME_MAX: usize = 255;

/// Panics unless `name` is a name Linux accepts in a directory: 1 to 255 bytes, no `/` or NUL,
/// not `.` or `..`.
pub fn assert_file_name(name: &[u8], what: &str) {
    assert!(!name.is_empty(), "{what}: empty file name");
    assert!(
        name.len() <= NAME_MAX,
        "{what}: file name of {} bytes: {:?}",
        name.len(),
        String::from_utf8_lossy(name)
    );
    assert!(
        !name.contains(&b'/') && !name.contains(&0),
        "{what}: file name with `/` or NUL: {:?}",
        String::from_utf8_lossy(name)
    );
    assert!(
        name != b"." && name != b"..",
        "{what}: file name {:?}",
        String::from_utf8_lossy(name)
    );
}

/// An anonymous in-memory file (memfd), created once per process and rewritten for every input.
pub fn memfd(name: &std::ffi::CStr) -> File {
    // SAFETY: memfd_create takes a NUL-terminated name and returns a new descriptor we then own.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    unsafe { File::from_raw_fd(fd) }
}

/// Replaces the whole content of `file` with `bytes`.
pub fn rewrite(file: &File, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    file.set_len(0).expect("truncate memfd");
    file.write_all_at(bytes, 0).expect("write memfd");
}

/// The number of bytes a tensor of `shape` and `bits` bits per element takes, computed here on
/// its own (`None` on overflow or a partial byte).
pub fn expected_size(shape: &[usize], bits: usize) -> Option<u64> {
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    let total = n.checked_mul(bits)?;
    (total % 8 == 0).then_some((total / 8) as u64)
}

/// Parses `text` as a JSON array of unsigned integers.
pub fn json_usize_array(text: &str) -> Option<Vec<u64>> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.as_array()?.iter().map(|x| x.as_u64()).collect()
}
