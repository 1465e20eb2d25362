//! Extended attributes: the exact `user.safetensors.*` values, size probes and `ERANGE`, other
//! namespaces, and metadata values too large for an xattr.

use super::{canonical, getxattr_sized, listxattr_sized, mount, u8t, xattr_names, xattr_raw};
use crate::common::*;

use std::fs;
use std::path::Path;
use std::process::Command;

/// Data start (8 + header length) of a safetensors file, read from its first 8 bytes.
fn data_start(path: &Path) -> u64 {
    let b = fs::read(path).unwrap();
    8 + u64::from_le_bytes(b[..8].try_into().unwrap())
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn tensor_files_carry_exact_xattrs() {
    require_fuse();
    let tmp = TempDir::new("xattr");
    let src = tmp.join("x.safetensors");
    let tensors = [
        T {
            name: "w",
            dtype: "F32",
            shape: &[2, 3],
            data: bytes(24, 1),
        },
        T {
            name: "s",
            dtype: "F64",
            shape: &[],
            data: bytes(8, 2),
        },
        T {
            name: "layer/0.bias",
            dtype: "BF16",
            shape: &[4],
            data: bytes(8, 3),
        },
    ];
    write_safetensors(&src, &tensors, Some(&[("format", "pt")]));
    let start = data_start(&src);
    let abs = canonical(&src);
    let (m, _) = mount(&src, "");

    let mut begin = 0u64;
    for t in &tensors {
        let end = begin + t.data.len() as u64;
        let f = m.path(escaped(t.name));
        let shape = format!(
            "[{}]",
            t.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let want = [
            ("user.safetensors.data_offsets", format!("[{begin},{end}]")),
            ("user.safetensors.dtype", t.dtype.to_string()),
            ("user.safetensors.name", t.name.to_string()),
            ("user.safetensors.offset", (start + begin).to_string()),
            ("user.safetensors.shape", shape),
            ("user.safetensors.source", abs.clone()),
        ];
        for (k, v) in &want {
            assert_eq!(getxattr(&f, k).as_ref(), Some(v), "{k} of {}", t.name);
        }
        // `getfattr -d -m -` (every namespace) lists exactly those six.
        let out = Command::new("getfattr")
            .args(["-d", "-m", "-", "--absolute-names"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(out.status.success(), "getfattr -d: {}", stderr(&out));
        let mut listed: Vec<String> = stdout(&out)
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.split('=').next().unwrap().to_string())
            .collect();
        listed.sort();
        assert_eq!(
            listed,
            want.iter().map(|(k, _)| k.to_string()).collect::<Vec<_>>(),
            "getfattr -d of {}",
            t.name
        );
        // The bytes at `offset` in the source are the file's bytes.
        let src_bytes = fs::read(&src).unwrap();
        let at = (start + begin) as usize;
        assert_eq!(
            fs::read(&f).unwrap(),
            &src_bytes[at..at + t.data.len()],
            "{}",
            t.name
        );
        begin = end;
    }

    // A missing attribute.
    let out = Command::new("getfattr")
        .args(["-n", "user.nope"])
        .arg(m.path("w"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("No such attribute"),
        "{}",
        stderr(&out)
    );
    assert_eq!(xattr_raw(&m.path("w"), "user.nope"), Err(libc::ENODATA));
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn xattr_size_probe_and_erange() {
    require_fuse();
    let tmp = TempDir::new("erange");
    let src = tmp.join("x.safetensors");
    write_safetensors(
        &src,
        &[T {
            name: "w",
            dtype: "F32",
            shape: &[2, 3],
            data: bytes(24, 1),
        }],
        None,
    );
    let (m, _) = mount(&src, "");
    let f = m.path("w");
    // getxattr: size 0 gives the length, a short buffer ERANGE, an exact one the value.
    assert_eq!(
        getxattr_sized(&f, "user.safetensors.dtype", 0).map(|v| v.len()),
        Ok(3)
    );
    assert_eq!(
        getxattr_sized(&f, "user.safetensors.dtype", 2),
        Err(libc::ERANGE)
    );
    assert_eq!(
        getxattr_sized(&f, "user.safetensors.dtype", 3),
        Ok(b"F32".to_vec())
    );
    let src_len = canonical(&src).len();
    assert_eq!(
        getxattr_sized(&f, "user.safetensors.source", 0).map(|v| v.len()),
        Ok(src_len)
    );
    assert_eq!(
        getxattr_sized(&f, "user.safetensors.source", src_len - 1),
        Err(libc::ERANGE)
    );
    // listxattr likewise.
    let want_list: Vec<u8> = ["dtype", "shape", "data_offsets", "offset", "source", "name"]
        .iter()
        .flat_map(|k| format!("user.safetensors.{k}\0").into_bytes())
        .collect();
    let (len, _) = listxattr_sized(&f, 0).unwrap();
    assert_eq!(len as usize, want_list.len(), "listxattr size probe");
    assert_eq!(listxattr_sized(&f, len as usize - 1), Err(libc::ERANGE));
    let (_, list) = listxattr_sized(&f, len as usize).unwrap();
    let mut got: Vec<&[u8]> = list.split(|&b| b == 0).filter(|s| !s.is_empty()).collect();
    let mut want: Vec<&[u8]> = want_list
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn foreign_xattr_namespaces_are_eopnotsupp_and_user_xattrs_keep_working() {
    require_fuse();
    let tmp = TempDir::new("selinux");
    let src = tmp.join("x.safetensors");
    write_safetensors(&src, &[u8t("w", 4, 1)], None);
    let (m, _) = mount(&src, "");
    let f = m.path("w");
    assert_eq!(
        xattr_raw(&f, "security.selinux"),
        Err(libc::EOPNOTSUPP),
        "security.selinux"
    );
    assert_eq!(xattr_raw(&m.dir, "security.selinux"), Err(libc::EOPNOTSUPP));
    // Had the daemon answered ENOSYS, the kernel would now refuse every getxattr of the mount.
    assert_eq!(xattr_raw(&f, "user.safetensors.dtype"), Ok(b"U8".to_vec()));
    assert_eq!(getxattr(&f, "user.safetensors.name").as_deref(), Some("w"));
    assert_eq!(xattr_names(&f).len(), 6);
}

#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn huge_metadata_values_are_left_out_of_xattrs_but_kept_in_metadata_file() {
    require_fuse();
    let tmp = TempDir::new("hugemeta");
    let s = tmp.join("src");
    fs::create_dir(&s).unwrap();
    let huge = "h".repeat(70_000);
    let src = s.join("m.safetensors");
    write_safetensors(
        &src,
        &[u8t("w", 4, 1)],
        Some(&[("format", "pt"), ("huge", &huge)]),
    );
    let (single, _) = mount(&src, "");
    let (dir, _) = mount(&s, "");
    for d in [single.dir.clone(), dir.path("m.tensors")] {
        // The root also has the mount's own `user.tensormount.*`.
        let names: Vec<String> = xattr_names(&d)
            .into_iter()
            .filter(|n| n.starts_with("user.safetensors."))
            .collect();
        assert_eq!(
            names,
            ["user.safetensors.metadata.format"],
            "{}",
            d.display()
        );
        assert_eq!(
            xattr_raw(&d, "user.safetensors.metadata.format"),
            Ok(b"pt".to_vec())
        );
        assert_eq!(
            xattr_raw(&d, "user.safetensors.metadata.huge"),
            Err(libc::ENODATA),
            "{}",
            d.display()
        );
        let text = fs::read_to_string(d.join("__metadata__")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v, serde_json::json!({"format": "pt", "huge": huge}));
    }
}
