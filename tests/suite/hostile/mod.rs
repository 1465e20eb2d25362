//! Hostile input: the corpus of malformed safetensors files (`tests/corpus`, written by
//! `tests/corpus/make_corpus.py`), broken and malicious index files, hostile directory contents
//! (unreadable entries, names that are not UTF-8, link loops, deep trees) and hostile tensor names.
//!
//! Expectations come from `doc/layout.md` and from the reference implementation's rules; the official
//! Python package is the outside oracle for which rule a file breaks.
//!
//! The helpers the submodules share are here; each submodule is one theme.

use crate::common::*;

use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::process::Output;
use std::sync::mpsc;
use std::time::Duration;

mod corpus;
mod directories;
mod indexes;
mod tensor_names;

fn show(o: &Output) -> String {
    format!(
        "status {}\nstdout: {:?}\nstderr: {:?}",
        o.status,
        stdout(o),
        stderr(o)
    )
}

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// getxattr(2) of a whole value (probing the size first): the value or the errno.
fn xattr(path: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let p = cpath(path);
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings; a null buffer of size 0 asks for the value's size.
    let size = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
    if size < 0 {
        return Err(io::Error::last_os_error().raw_os_error().unwrap());
    }
    let mut buf = vec![0u8; size as usize + 1];
    // SAFETY: valid C strings; `buf` has `buf.len()` writable bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(io::Error::last_os_error().raw_os_error().unwrap());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

/// Names of a directory as raw bytes, in readdir order.
fn listing(dir: &Path) -> Vec<Vec<u8>> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_vec())
        .collect()
}

fn listing_set(dir: &Path) -> BTreeSet<String> {
    listing(dir)
        .into_iter()
        .map(|n| String::from_utf8(n).unwrap())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// A U8 tensor of `n` pseudo-random bytes (name and shape leaked: [`T`] borrows them).
fn u8t(name: &str, n: usize, seed: u64) -> T<'static> {
    T {
        name: Box::leak(name.to_string().into_boxed_str()),
        dtype: "U8",
        shape: Box::leak(vec![n].into_boxed_slice()),
        data: bytes(n, seed),
    }
}

/// Mounts `source` with `opts` in a thread, failing (instead of hanging) after 15 s.
fn try_mount_within(source: &Path, opts: &str) -> (Option<Mounted>, Output) {
    let (tx, rx) = mpsc::channel();
    let (src, o) = (source.to_path_buf(), opts.to_string());
    std::thread::spawn(move || {
        let _ = tx.send(Mounted::try_new(&src, &o));
    });
    rx.recv_timeout(Duration::from_secs(15))
        .unwrap_or_else(|_| panic!("mount of {} hung", source.display()))
}

/// A line of `stderr` naming `path`, if any.
fn line_naming<'a>(stderr: &'a str, path: &Path) -> Option<&'a str> {
    let p = path.to_str().unwrap();
    stderr.lines().find(|l| l.contains(p))
}
