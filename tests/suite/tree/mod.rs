//! The mounted tree: layout, names, attributes and extended attributes, checked with real tools.
//!
//! Every expectation comes from the spec and from the fixtures the tests write themselves (or the
//! source files read directly), never from tensormount's own output.
//!
//! The helpers the submodules share are here; each submodule is one theme.

use crate::common::*;

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

mod attributes;
mod links;
mod read_only;
mod sources;
mod xattrs;

/// Mounts `source`, asserting that the command succeeded; returns the mount and the command's
/// stderr (its warnings).
fn mount(source: &Path, opts: &str) -> (Mounted, String) {
    let (m, out) = Mounted::try_new(source, opts);
    assert!(
        out.status.success(),
        "mount of {} failed ({}): {}",
        source.display(),
        out.status,
        stderr(&out)
    );
    (m.expect("mounted after exit 0"), stderr(&out))
}

/// Names of a directory in the order readdir returns them (`.` and `..` left out by std).
fn listing(dir: &Path) -> Vec<Vec<u8>> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect()
}

/// Names of a directory as strings, in readdir order.
fn names(dir: &Path) -> Vec<String> {
    listing(dir)
        .into_iter()
        .map(|n| String::from_utf8(n).unwrap())
        .collect()
}

/// `stat -c FMT PATH`, trimmed.
fn stat_c(path: &Path, fmt: &str) -> String {
    let out = Command::new("stat")
        .args(["-c", fmt])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stat {}: {}",
        path.display(),
        stderr(&out)
    );
    stdout(&out).trim_end().to_string()
}

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap()
}

/// getxattr(2) with a buffer of `size` bytes: the value, or the errno.
fn getxattr_sized(path: &Path, name: &str, size: usize) -> Result<Vec<u8>, i32> {
    let p = cpath(path);
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: valid C strings; `ptr` is null with size 0 or points to `size` writable bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), ptr, size) };
    if r < 0 {
        return Err(last_errno());
    }
    buf.truncate(r as usize);
    if size == 0 {
        buf = vec![0; r as usize];
    }
    Ok(buf)
}

/// getxattr(2) of a whole value.
fn xattr_raw(path: &Path, name: &str) -> Result<Vec<u8>, i32> {
    getxattr_sized(path, name, 65536)
}

/// listxattr(2) with a buffer of `size` bytes: the raw list (or its length for size 0), or errno.
fn listxattr_sized(path: &Path, size: usize) -> Result<(isize, Vec<u8>), i32> {
    let p = cpath(path);
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: valid C string; `ptr` is null with size 0 or points to `size` writable bytes.
    let r = unsafe { libc::listxattr(p.as_ptr(), ptr, size) };
    if r < 0 {
        return Err(last_errno());
    }
    buf.truncate(if size == 0 { 0 } else { r as usize });
    Ok((r, buf))
}

/// The xattr names of a path, sorted.
fn xattr_names(path: &Path) -> Vec<String> {
    let (_, list) = listxattr_sized(path, 65536).unwrap();
    let mut v: Vec<String> = list
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect();
    v.sort();
    v
}

/// A U8 tensor of `n` pseudo-random bytes. The name and shape are leaked (a few bytes per test
/// tensor) because [`T`] borrows them.
fn u8t(name: &str, n: usize, seed: u64) -> T<'static> {
    let name: &'static str = Box::leak(name.to_string().into_boxed_str());
    let shape: &'static [usize] = Box::leak(vec![n].into_boxed_slice());
    T {
        name,
        dtype: "U8",
        shape,
        data: bytes(n, seed),
    }
}

fn canonical(p: &Path) -> String {
    fs::canonicalize(p)
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap()
        .to_string()
}

/// Checks a tensor directory against the tensors written to `source`: the listing (readdir order
/// = byte order), each file's bytes, `user.safetensors.name` and `user.safetensors.source`.
fn check_tensor_dir(dir: &Path, tensors: &[&T<'_>], source: &Path, has_metadata: bool) {
    let mut want: Vec<Vec<u8>> = tensors
        .iter()
        .map(|t| escaped(t.name).into_bytes())
        .collect();
    if has_metadata {
        want.push(b"__metadata__".to_vec());
    }
    want.sort();
    assert_eq!(
        listing(dir),
        want,
        "listing of {} (want byte order)",
        dir.display()
    );
    let src = canonical(source);
    for t in tensors {
        let f = dir.join(escaped(t.name));
        assert_eq!(fs::read(&f).unwrap(), t.data, "bytes of {}", f.display());
        assert_eq!(
            xattr_raw(&f, "user.safetensors.name").unwrap(),
            t.name.as_bytes(),
            "name xattr of {}",
            f.display()
        );
        assert_eq!(
            String::from_utf8(xattr_raw(&f, "user.safetensors.source").unwrap()).unwrap(),
            src,
            "source xattr of {}",
            f.display()
        );
    }
}
