//! The mount is read-only: every modification fails with `EROFS` and the sources stay unchanged.

use super::{cpath, last_errno, mount, names, u8t};
use crate::common::*;

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn every_modification_fails_with_erofs_and_sources_stay_unchanged() {
    require_fuse();
    let tmp = TempDir::new("rofs");
    let s = tmp.join("src");
    fs::create_dir_all(s.join("sub")).unwrap();
    write_safetensors(
        &s.join("m.safetensors"),
        &[u8t("a", 30, 1), u8t("b", 40, 2)],
        Some(&[("format", "pt")]),
    );
    fs::write(s.join("sub/f.txt"), b"text\n").unwrap();
    // Each source file's bytes, mtime and mode.
    let state = || -> Vec<(Vec<u8>, i64, i64, u32)> {
        ["m.safetensors", "sub/f.txt"]
            .iter()
            .map(|f| {
                let md = fs::metadata(s.join(f)).unwrap();
                let bytes = fs::read(s.join(f)).unwrap();
                (bytes, md.mtime(), md.mtime_nsec(), md.mode())
            })
            .collect()
    };
    let before = state();

    let (m, _) = mount(&s, "");
    let tensor = m.path("m.tensors/a");
    let mirror = m.path("m.safetensors");
    let erofs = Some(libc::EROFS);
    let mut failures = Vec::new();
    let mut check = |what: &str, got: Option<i32>| {
        if got != erofs {
            failures.push(format!(
                "{what}: errno {got:?} ({}), want EROFS",
                got.map(|e| io::Error::from_raw_os_error(e).to_string())
                    .unwrap_or_default()
            ));
        }
    };
    let err_of = |r: io::Result<()>| r.err().map(|e| e.raw_os_error().unwrap_or(-1));
    for p in [
        &tensor,
        &mirror,
        &m.path("sub/f.txt"),
        &m.path("m.tensors/__metadata__"),
    ] {
        check(
            &format!("open for write {}", p.display()),
            err_of(fs::OpenOptions::new().write(true).open(p).map(drop)),
        );
        check(
            &format!("open for append {}", p.display()),
            err_of(fs::OpenOptions::new().append(true).open(p).map(drop)),
        );
    }
    check(
        "create",
        err_of(fs::File::create(m.path("new.txt")).map(drop)),
    );
    check(
        "create in tensor dir",
        err_of(fs::File::create(m.path("m.tensors/new")).map(drop)),
    );
    check("mkdir", err_of(fs::create_dir(m.path("newdir"))));
    check("unlink tensor", err_of(fs::remove_file(&tensor)));
    check("unlink mirror", err_of(fs::remove_file(&mirror)));
    check("rmdir", err_of(fs::remove_dir(m.path("sub"))));
    check(
        "rename",
        err_of(fs::rename(&tensor, m.path("m.tensors/renamed"))),
    );
    check("rename mirror", err_of(fs::rename(&mirror, m.path("x"))));
    // SAFETY: valid C string.
    let rc = unsafe { libc::truncate(cpath(&tensor).as_ptr(), 0) };
    check("truncate", (rc != 0).then(last_errno));
    // SAFETY: valid C string.
    let rc = unsafe { libc::truncate(cpath(&mirror).as_ptr(), 1) };
    check("truncate mirror", (rc != 0).then(last_errno));
    check(
        "chmod",
        err_of(fs::set_permissions(
            &tensor,
            fs::Permissions::from_mode(0o777),
        )),
    );
    check(
        "chmod dir",
        err_of(fs::set_permissions(
            &m.dir,
            fs::Permissions::from_mode(0o777),
        )),
    );
    check(
        "symlink",
        err_of(std::os::unix::fs::symlink("a", m.path("m.tensors/link"))),
    );
    check(
        "link",
        err_of(fs::hard_link(&tensor, m.path("m.tensors/hard"))),
    );
    // SAFETY: valid C strings; a plain setxattr.
    let rc = unsafe {
        libc::setxattr(
            cpath(&tensor).as_ptr(),
            c"user.x".as_ptr(),
            b"1".as_ptr().cast(),
            1,
            0,
        )
    };
    check("setxattr", (rc != 0).then(last_errno));
    // SAFETY: valid C strings.
    let rc =
        unsafe { libc::removexattr(cpath(&tensor).as_ptr(), c"user.safetensors.dtype".as_ptr()) };
    check("removexattr", (rc != 0).then(last_errno));

    // setfattr, the real tool.
    let out = Command::new("setfattr")
        .args(["-n", "user.x", "-v", "1"])
        .arg(&tensor)
        .output()
        .unwrap();
    if out.status.success() || !stderr(&out).contains("Read-only file system") {
        failures.push(format!(
            "setfattr: status {}, stderr {:?}",
            out.status,
            stderr(&out)
        ));
    }
    // Nothing changed: the mount still shows the same things.
    assert!(!m.path("new.txt").exists());
    assert!(!m.path("newdir").exists());
    assert!(tensor.exists() && mirror.exists());
    drop(m);

    assert!(before == state(), "source files changed");
    assert_eq!(
        names(&s),
        ["m.safetensors", "sub"].map(String::from).to_vec()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
