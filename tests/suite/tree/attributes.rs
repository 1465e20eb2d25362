//! Attributes: `stat` (sizes, modes, owners, times, links, blocks), stable inode numbers and
//! `statfs`.

use super::{cpath, mount, stat_c, u8t};
use crate::common::*;

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

fn set_mode(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn stat_shows_sizes_modes_owners_times_links_and_blocks() {
    require_fuse();
    let tmp = TempDir::new("attrs");
    let s = tmp.join("src");
    fs::create_dir_all(s.join("sub")).unwrap();
    let ro_t = [
        T {
            name: "w",
            dtype: "F32",
            shape: &[2, 3],
            data: bytes(24, 1),
        },
        u8t("big", 1000, 2),
        u8t("page", 512, 3),
    ];
    write_safetensors(&s.join("ro.safetensors"), &ro_t, None);
    write_safetensors(&s.join("exec.safetensors"), &[u8t("x", 3, 4)], None);
    write_safetensors(&s.join("other.safetensors"), &[u8t("y", 5, 5)], None);
    let ro = s.join("ro.safetensors");
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::chown(cpath(&ro).as_ptr(), 1234, 5678) }, 0);
    set_mode(&ro, 0o640);
    set_mode(&s.join("exec.safetensors"), 0o755);
    set_mode(&s.join("other.safetensors"), 0o604);
    set_mode(&s.join("sub"), 0o751);
    set_mode(&s, 0o775);
    let mtime = 981_173_106i64; // 2001-02-03 04:05:06 UTC
    let st = Command::new("touch")
        .arg("-d")
        .arg(format!("@{mtime}"))
        .arg(&ro)
        .status()
        .unwrap();
    assert!(st.success());
    let src_len = fs::metadata(&ro).unwrap().len();

    let (m, _) = mount(&s, "");
    let fmt = "%s %a %u %g %Y %h %b %F";
    let file = |size: u64, mode: &str, uid: u32, gid: u32, mtime: i64| {
        format!(
            "{size} {mode} {uid} {gid} {mtime} 1 {} regular file",
            size.div_ceil(512)
        )
    };
    for t in &ro_t {
        let p = m.path("ro.tensors").join(t.name);
        assert_eq!(
            stat_c(&p, fmt),
            file(t.data.len() as u64, "440", 1234, 5678, mtime),
            "{}",
            p.display()
        );
    }
    assert_eq!(
        stat_c(&m.path("ro.safetensors"), fmt),
        file(src_len, "440", 1234, 5678, mtime)
    );
    let exec = fs::metadata(s.join("exec.safetensors")).unwrap();
    assert_eq!(
        stat_c(&m.path("exec.safetensors"), "%a %u %g %Y"),
        format!("555 {} {} {}", exec.uid(), exec.gid(), exec.mtime())
    );
    assert_eq!(stat_c(&m.path("exec.tensors/x"), "%a %s"), "555 3");
    assert_eq!(stat_c(&m.path("other.tensors/y"), "%a %s"), "404 5");

    // Tensor dirs: r-x for whoever may read the source.
    assert_eq!(
        stat_c(&m.path("ro.tensors"), "%a %u %g %F %h"),
        "550 1234 5678 directory 2"
    );
    assert_eq!(stat_c(&m.path("other.tensors"), "%a %F"), "505 directory");
    assert_eq!(stat_c(&m.path("exec.tensors"), "%a %F"), "555 directory");
    // Mirrored dirs: the source's mode without write bits; nlink = 2 + subdirectories.
    assert_eq!(stat_c(&m.path("sub"), "%a %F %h"), "551 directory 2");
    // Root: sub, ro.tensors, exec.tensors, other.tensors.
    assert_eq!(stat_c(&m.dir, "%a %F %h"), "555 directory 6");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn inode_numbers_are_stable() {
    require_fuse();
    let tmp = TempDir::new("ino");
    let s = tmp.join("src");
    fs::create_dir_all(s.join("sub")).unwrap();
    write_safetensors(
        &s.join("m.safetensors"),
        &[u8t("a", 3, 1), u8t("b", 4, 2)],
        None,
    );
    fs::write(s.join("sub/f"), b"f").unwrap();
    let (m, _) = mount(&s, "");
    let paths = [
        "m.safetensors",
        "m.tensors",
        "m.tensors/a",
        "m.tensors/b",
        "sub",
        "sub/f",
    ];
    let first: Vec<String> = paths.iter().map(|p| stat_c(&m.path(p), "%i")).collect();
    let second: Vec<String> = paths.iter().map(|p| stat_c(&m.path(p), "%i")).collect();
    assert_eq!(first, second);
    let distinct: HashSet<&String> = first.iter().collect();
    assert_eq!(distinct.len(), first.len(), "inode numbers not distinct");
    // readdir's d_ino agrees with stat.
    for e in fs::read_dir(m.path("m.tensors")).unwrap() {
        let e = e.unwrap();
        use std::os::unix::fs::DirEntryExt;
        assert_eq!(
            e.ino().to_string(),
            stat_c(&e.path(), "%i"),
            "{}",
            e.path().display()
        );
    }
    // A fresh lookup: drop the kernel's dentries where allowed, and look up again in a second
    // mount of the same source.
    if fs::write("/proc/sys/vm/drop_caches", "2").is_ok() {
        let again: Vec<String> = paths.iter().map(|p| stat_c(&m.path(p), "%i")).collect();
        assert_eq!(first, again, "after dropping dentries");
    }
    let (m2, _) = mount(&s, "");
    let fresh: Vec<String> = paths.iter().map(|p| stat_c(&m2.path(p), "%i")).collect();
    assert_eq!(first, fresh, "after a fresh lookup in a second mount");
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn statfs_reports_the_source_size_and_nothing_free() {
    require_fuse();
    let tmp = TempDir::new("statfs");
    let s = tmp.join("src");
    fs::create_dir_all(s.join("sub")).unwrap();
    write_safetensors(&s.join("m.safetensors"), &[u8t("a", 10_000, 1)], None);
    fs::write(s.join("sub/blob.bin"), bytes(50_000, 2)).unwrap();
    fs::write(s.join("c.json"), b"{}").unwrap();
    let total: u64 = ["m.safetensors", "sub/blob.bin", "c.json"]
        .iter()
        .map(|p| fs::metadata(s.join(p)).unwrap().len())
        .sum();
    let (m, _) = mount(&s, "");
    let out = Command::new("stat")
        .args(["-f", "-c", "%b %a %S"])
        .arg(&m.dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "stat -f: {}", stderr(&out));
    let v: Vec<u64> = stdout(&out)
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let (blocks, avail, bsize) = (v[0], v[1], v[2]);
    assert!(
        blocks * bsize >= total,
        "statfs total {} < source bytes {total}",
        blocks * bsize
    );
    assert_eq!(avail, 0, "available blocks");
    // `df` works too.
    let df = Command::new("df").arg(&m.dir).output().unwrap();
    assert!(df.status.success(), "df: {}", stderr(&df));
}
