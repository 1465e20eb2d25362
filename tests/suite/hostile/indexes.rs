//! Broken and malicious `model.safetensors.index.json` files: their set is left out, strict
//! mounts fail.

use super::{cpath, line_naming, listing_set, set, show, try_mount_within, u8t, xattr};
use crate::common::*;

use std::fs;
use std::io;

const SHARD1: &str = "model-00001-of-00002.safetensors";

const SHARD2: &str = "model-00002-of-00002.safetensors";

const INDEX: &str = "model.safetensors.index.json";

/// What a case does to its model directory (which already holds SHARD1 with tensor `t`).
enum Setup {
    /// SHARD2 (tensor `u`) is written and the index gets this text.
    Index(String),
    /// SHARD2 is a directory; the index is the valid one.
    Shard2Dir,
    /// SHARD2 is a FIFO; the index is the valid one.
    Shard2Fifo,
    /// SHARD2 is missing; the index is the valid one.
    Shard2Missing,
    /// SHARD1 also holds `extra`, which the valid index does not list.
    Shard1Extra,
}

fn valid_index_text() -> String {
    format!(r#"{{"metadata":{{"total_size":8}},"weight_map":{{"t":"{SHARD1}","u":"{SHARD2}"}}}}"#)
}

/// Each broken or malicious index leaves its merged directory out with a warning naming it (and
/// its reason in `user.safetensors.error`), the rest of its directory mounts, `-o strict` fails,
/// no file outside SOURCE is opened and no FIFO makes the mount hang.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn hostile_indexes_leave_their_set_out_and_fail_strict_mounts() {
    require_fuse();
    let tmp = TempDir::new("hostidx");
    // A real, valid shard holding `u` one level above every SOURCE: an index naming it must not
    // get it opened.
    let outside = tmp.join("x.safetensors");
    let u = u8t("u", 4, 2);
    write_safetensors(&outside, &[u8t("u", 4, 2)], None);
    let outside_abs = fs::canonicalize(&outside).unwrap();
    let outside_c = cpath(&outside_abs);
    // SAFETY: plain inotify calls on a valid C string; the descriptor is closed below.
    let inotify = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    assert!(inotify >= 0);
    // SAFETY: valid descriptor and C string.
    let wd = unsafe {
        libc::inotify_add_watch(inotify, outside_c.as_ptr(), libc::IN_OPEN | libc::IN_ACCESS)
    };
    assert!(wd >= 0);

    let wm = |body: &str| format!(r#"{{"metadata":{{"total_size":8}},"weight_map":{body}}}"#);
    let big = {
        let pad = "x".repeat(50 << 20);
        format!(
            r#"{{"metadata":{{"pad":"{pad}"}},"weight_map":{{"t":"{SHARD1}","u":"{SHARD2}"}}}}"#
        )
    };
    let cases: Vec<(&str, Setup)> = vec![
        (
            "parent-relative shard",
            Setup::Index(wm(&format!(r#"{{"t":"{SHARD1}","u":"../x.safetensors"}}"#))),
        ),
        (
            "absolute shard outside SOURCE",
            Setup::Index(wm(&format!(
                r#"{{"t":"{SHARD1}","u":"{}"}}"#,
                outside_abs.display()
            ))),
        ),
        (
            "/etc/passwd as shard",
            Setup::Index(wm(&format!(r#"{{"t":"{SHARD1}","u":"/etc/passwd"}}"#))),
        ),
        ("shard is a directory", Setup::Shard2Dir),
        ("shard is a FIFO", Setup::Shard2Fifo),
        ("shard is missing", Setup::Shard2Missing),
        (
            "tensor absent from its shard",
            Setup::Index(wm(&format!(
                r#"{{"t":"{SHARD1}","u":"{SHARD2}","ghost":"{SHARD1}"}}"#
            ))),
        ),
        ("shard tensor missing from the index", Setup::Shard1Extra),
        (
            "tensor listed twice, same shard",
            Setup::Index(wm(&format!(
                r#"{{"t":"{SHARD1}","u":"{SHARD2}","t":"{SHARD1}"}}"#
            ))),
        ),
        (
            "tensor listed twice, two shards",
            Setup::Index(wm(&format!(
                r#"{{"t":"{SHARD1}","u":"{SHARD2}","t":"{SHARD2}"}}"#
            ))),
        ),
        (
            "weight_map given twice",
            Setup::Index(format!(
                r#"{{"weight_map":{{"t":"{SHARD1}","u":"{SHARD2}"}},"weight_map":{{"t":"{SHARD1}","u":"{SHARD2}"}}}}"#
            )),
        ),
        (
            "weight_map is an array",
            Setup::Index(wm(&format!(r#"[["t","{SHARD1}"],["u","{SHARD2}"]]"#))),
        ),
        (
            "weight_map is a string",
            Setup::Index(wm(&format!(r#""{SHARD1}""#))),
        ),
        ("weight_map is null", Setup::Index(wm("null"))),
        (
            "index is an HTML page",
            Setup::Index("<!DOCTYPE html><html><body>502 Bad Gateway</body></html>\n".into()),
        ),
        ("index of 50 MB", Setup::Index(big)),
    ];

    let t = u8t("t", 4, 1);
    let mut failures = Vec::new();
    for (i, (what, setup)) in cases.iter().enumerate() {
        let d = tmp.join(format!("case{i}"));
        fs::create_dir(&d).unwrap();
        let extra = matches!(setup, Setup::Shard1Extra);
        let shard1 = [u8t("t", 4, 1), u8t("extra", 4, 3)];
        write_safetensors(&d.join(SHARD1), &shard1[..1 + extra as usize], None);
        let index_text = match setup {
            Setup::Index(text) => {
                write_safetensors(&d.join(SHARD2), &[u8t("u", 4, 2)], None);
                text.clone()
            }
            Setup::Shard1Extra => {
                write_safetensors(&d.join(SHARD2), &[u8t("u", 4, 2)], None);
                valid_index_text()
            }
            Setup::Shard2Missing => valid_index_text(),
            Setup::Shard2Dir => {
                fs::create_dir(d.join(SHARD2)).unwrap();
                write_safetensors(
                    &d.join(SHARD2).join("inner.safetensors"),
                    &[u8t("u", 4, 2)],
                    None,
                );
                valid_index_text()
            }
            Setup::Shard2Fifo => {
                let fifo = cpath(&d.join(SHARD2));
                // SAFETY: valid C string.
                assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
                valid_index_text()
            }
        };
        fs::write(d.join(INDEX), &index_text).unwrap();
        let d = fs::canonicalize(&d).unwrap();
        let index_path = d.join(INDEX);

        let (m, out) = try_mount_within(&d, "");
        let Some(m) = m.filter(|_| out.status.success()) else {
            failures.push(format!("{what}: mount failed: {}", show(&out)));
            continue;
        };
        let mut want = set(&[SHARD1, "model-00001-of-00002.tensors", INDEX]);
        match setup {
            Setup::Index(_) | Setup::Shard1Extra => {
                want.insert(SHARD2.into());
                want.insert("model-00002-of-00002.tensors".into());
            }
            Setup::Shard2Dir => {
                want.insert(SHARD2.into());
            }
            Setup::Shard2Fifo | Setup::Shard2Missing => {}
        }
        let got = listing_set(&m.dir);
        if got != want {
            failures.push(format!("{what}: listing {got:?}, want {want:?}"));
        }
        if fs::read(m.path("model-00001-of-00002.tensors/t"))
            .ok()
            .as_ref()
            != Some(&t.data)
        {
            failures.push(format!("{what}: shard 1's tensor not served"));
        }
        if let Setup::Index(_) | Setup::Shard1Extra = setup
            && fs::read(m.path("model-00002-of-00002.tensors/u"))
                .ok()
                .as_ref()
                != Some(&u.data)
        {
            failures.push(format!("{what}: shard 2's tensor not served"));
        }
        if fs::read(m.path(INDEX)).ok().as_deref() != Some(index_text.as_bytes()) {
            failures.push(format!("{what}: index not mirrored byte for byte"));
        }
        if line_naming(&stderr(&out), &index_path).is_none() {
            failures.push(format!(
                "{what}: no warning names {}: {:?}",
                index_path.display(),
                stderr(&out)
            ));
        }
        match xattr(&m.path(INDEX), "user.safetensors.error") {
            Ok(v) if !v.is_empty() => {}
            other => failures.push(format!(
                "{what}: the index's user.safetensors.error is {:?}",
                other.map(|v| String::from_utf8_lossy(&v).into_owned())
            )),
        }
        drop(m);

        let (m, out) = try_mount_within(&d, "strict");
        let err = stderr(&out);
        if m.is_some() || out.status.success() {
            failures.push(format!("{what}: strict mount succeeded: {}", show(&out)));
        } else if err.lines().count() != 1
            || !err.starts_with(&format!("tensormount: {}", index_path.display()))
        {
            failures.push(format!(
                "{what}: strict: want one line `tensormount: {}...`: {err:?}",
                index_path.display()
            ));
        }
    }

    let mut buf = [0u8; 4096];
    // SAFETY: reading into a local buffer from our own non-blocking inotify descriptor.
    let n = unsafe { libc::read(inotify, buf.as_mut_ptr().cast(), buf.len()) };
    let errno = io::Error::last_os_error().raw_os_error().unwrap();
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(inotify) };
    if !(n < 0 && errno == libc::EAGAIN) {
        failures.push(format!(
            "{} outside SOURCE was opened or read ({n} bytes of inotify events)",
            outside_abs.display()
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
