//! `--list` (table, JSON, summary, invalid files), `--help`, `--version`, and sources named like a
//! command.

use super::{MountGuard, mnt_dir, poll_until, show};
use crate::common::*;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A small single-file fixture: (tensor name, dtype, shape, begin, end) as written, data order.
struct Fixture {
    path: PathBuf,
    header_len: u64,
    tensors: Vec<(&'static str, &'static str, Vec<usize>, u64, u64)>,
    data: Vec<Vec<u8>>,
}

fn write_fixture(path: &Path) -> Fixture {
    let specs: [(&str, &str, &[usize], usize); 4] = [
        ("zeta", "F32", &[2, 3], 24),
        ("alpha", "BF16", &[4], 8),
        ("mid.x", "I64", &[2, 2], 32),
        ("beta", "U8", &[], 1),
    ];
    let data: Vec<Vec<u8>> = specs
        .iter()
        .enumerate()
        .map(|(i, sp)| bytes(sp.3, i as u64 + 7))
        .collect();
    let ts: Vec<T<'_>> = specs
        .iter()
        .zip(&data)
        .map(|(sp, d)| T {
            name: sp.0,
            dtype: sp.1,
            shape: sp.2,
            data: d.clone(),
        })
        .collect();
    write_safetensors(path, &ts, Some(&[("format", "pt")]));
    let raw = fs::read(path).unwrap();
    let header_len = u64::from_le_bytes(raw[..8].try_into().unwrap());
    let mut begin = 0u64;
    let tensors = specs
        .iter()
        .map(|sp| {
            let b = begin;
            begin += sp.3 as u64;
            (sp.0, sp.1, sp.2.to_vec(), b, begin)
        })
        .collect();
    Fixture {
        path: fs::canonicalize(path).unwrap(),
        header_len,
        tensors,
        data,
    }
}

/// A file whose declared header length exceeds the crate's limit (`HeaderTooLarge`).
fn write_header_too_large(path: &Path) {
    let mut b = 200_000_000u64.to_le_bytes().to_vec();
    b.extend_from_slice(b"{}      ");
    fs::write(path, b).unwrap();
}

#[test]
fn list_table_rows_match_fixture() {
    let tmp = TempDir::new("listtable");
    let fx = write_fixture(&tmp.join("m.safetensors"));
    let out = run(&["--list", s(&fx.path)]);
    assert!(out.status.success(), "{}", show(&out));
    // Nothing mounted from this source.
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(s(tmp.path())), "--list mounted something");

    let text = stdout(&out);
    // The per-tensor table ends at the first blank line; the summary follows.
    let lines: Vec<&str> = text.lines().take_while(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 1 + fx.tensors.len(), "{text}");
    let header = lines[0].to_lowercase();
    for col in ["path", "dtype", "shape", "offset"] {
        assert!(header.contains(col), "header lacks {col}: {}", lines[0]);
    }
    let mut expected: Vec<Vec<String>> = fx
        .tensors
        .iter()
        .map(|(name, dtype, shape, b, e)| {
            let shape = format!(
                "[{}]",
                shape
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            );
            vec![
                name.to_string(),
                dtype.to_string(),
                shape,
                (e - b).to_string(),
                s(&fx.path).to_string(),
                (8 + fx.header_len + b).to_string(),
            ]
        })
        .collect();
    expected.sort();
    let rows: Vec<Vec<String>> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    assert_eq!(rows, expected, "{text}");
}

#[test]
fn list_json_matches_fixture() {
    let tmp = TempDir::new("listjson");
    let fx = write_fixture(&tmp.join("m.safetensors"));
    let out = run(&["--list", "--json", s(&fx.path)]);
    assert!(out.status.success(), "{}", show(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("valid JSON");
    let items = v["tensors"].as_array().expect("a JSON array of tensors");
    assert_eq!(items.len(), fx.tensors.len());
    let mut expected: Vec<_> = fx.tensors.iter().collect();
    expected.sort_by_key(|t| t.0);
    let raw = fs::read(&fx.path).unwrap();
    for (item, (name, dtype, shape, b, e)) in items.iter().zip(expected) {
        let obj = item.as_object().expect("objects");
        let mut keys: Vec<&str> = obj.keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(
            keys,
            ["dtype", "name", "offset", "path", "shape", "size", "source"]
        );
        assert_eq!(obj["path"], *name);
        assert_eq!(obj["name"], *name);
        assert_eq!(obj["dtype"], *dtype);
        assert_eq!(obj["shape"], serde_json::json!(shape));
        assert_eq!(obj["size"], e - b);
        assert_eq!(obj["source"], s(&fx.path));
        let offset = 8 + fx.header_len + b;
        assert_eq!(obj["offset"], offset);
        // The offset really points at the tensor's bytes.
        let idx = fx.tensors.iter().position(|t| t.0 == *name).unwrap();
        assert_eq!(
            &raw[offset as usize..(offset + e - b) as usize],
            &fx.data[idx][..]
        );
    }
    let paths: Vec<&str> = items.iter().map(|i| i["path"].as_str().unwrap()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted, "rows not sorted by path");
}

#[test]
fn list_invalid_single_file_fails_naming_file_and_rule() {
    let tmp = TempDir::new("listbad");
    let bad = tmp.join("bad.safetensors");
    write_header_too_large(&bad);
    let bad = fs::canonicalize(&bad).unwrap();
    let out = run(&["--list", s(&bad)]);
    assert!(!out.status.success(), "{}", show(&out));
    let err = stderr(&out);
    assert!(err.starts_with("tensormount: "), "{}", show(&out));
    assert!(err.contains("bad.safetensors"), "{}", show(&out));
    assert!(err.contains("HeaderTooLarge"), "{}", show(&out));
    assert!(stdout(&out).is_empty(), "{}", show(&out));
}

#[test]
fn list_directory_with_invalid_file_warns_or_fails_when_strict() {
    let tmp = TempDir::new("listdir");
    let dir = tmp.join("model");
    fs::create_dir(&dir).unwrap();
    write_fixture(&dir.join("good.safetensors"));
    write_header_too_large(&dir.join("bad.safetensors"));

    let out = run(&["--list", s(&dir)]);
    assert!(out.status.success(), "{}", show(&out));
    let err = stderr(&out);
    assert!(
        err.contains("bad.safetensors") && err.contains("HeaderTooLarge"),
        "no warning naming the bad file\n{}",
        show(&out)
    );
    let text = stdout(&out);
    let table = text.lines().take_while(|l| !l.is_empty()).count();
    assert_eq!(table, 1 + 4, "{text}");
    assert!(text.contains("good.tensors/alpha"), "{text}");

    let out = run(&["--list", "-o", "strict", s(&dir)]);
    assert!(!out.status.success(), "{}", show(&out));
    let err = stderr(&out);
    assert!(
        err.starts_with("tensormount: ") && err.contains("bad.safetensors"),
        "{}",
        show(&out)
    );
}

#[test]
fn help_and_version() {
    let out = run(&["--help"]);
    assert!(out.status.success(), "{}", show(&out));
    let help = stdout(&out);
    assert!(help.contains("Usage"), "{help}");
    assert!(help.contains("tensormount"), "{help}");
    for word in ["--list", "-f", "-o", "SOURCE", "MOUNTPOINT"] {
        assert!(help.contains(word), "help lacks {word}: {help}");
    }

    // The commands beside the mount, each with its own help.
    for word in ["verify", "diff"] {
        assert!(help.contains(word), "help lacks the command {word}: {help}");
        let out = run(&[word, "--help"]);
        assert!(out.status.success(), "{}", show(&out));
        assert!(stdout(&out).contains("--json"), "{}", show(&out));
    }

    let out = run(&["--version"]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        stdout(&out).trim(),
        format!("tensormount {}", env!("CARGO_PKG_VERSION"))
    );
}

/// A SOURCE named like a command is mounted when given as `./verify`; bare, the word is the
/// command (which reads its argument as SOURCE, not as a mount point).
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn a_source_named_like_a_command_is_given_as_a_path() {
    require_fuse();
    let (tmp, mnt) = mnt_dir("named-verify");
    let _g = MountGuard(mnt.clone());
    let root = fs::canonicalize(tmp.path()).unwrap();
    let src = root.join("verify");
    fs::create_dir(&src).unwrap();
    write_fixture(&src.join("m.safetensors"));

    let out = Command::new(bin())
        .current_dir(&root)
        .args(["./verify", "mnt"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(is_mounted(&mnt), "{}", show(&out));
    assert!(mnt.join("m.tensors").is_dir());
    let um = Command::new("umount").arg(&mnt).output().unwrap();
    assert!(um.status.success(), "{}", show(&um));
    poll_until(Duration::from_secs(3), "the mount to go", || {
        !is_mounted(&mnt)
    });

    // `tensormount verify verify`: the command, on the directory named verify.
    let out = Command::new(bin())
        .current_dir(&root)
        .args(["verify", "verify"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        stdout(&out).starts_with("unknown   m.safetensors  sha256 "),
        "{}",
        show(&out)
    );
    assert!(!is_mounted(&mnt));
}

#[test]
fn list_summary_counts_each_tensor_once_per_file_and_in_total() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tiny-model");
    let out = run(&["--list", s(&example)]);
    assert!(out.status.success(), "{}", show(&out));
    let text = stdout(&out);
    let summary = text
        .split("\n\n")
        .nth(1)
        .expect("a summary after the table");

    // Expected figures from the shard headers, parsed here.
    let mut total = (0u64, 0u64, 0u64);
    let mut by_dtype: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for shard in [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ] {
        let path = fs::canonicalize(example.join(shard)).unwrap();
        let raw = fs::read(&path).unwrap();
        let n = u64::from_le_bytes(raw[..8].try_into().unwrap()) as usize;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&raw[8..8 + n]).unwrap();
        let mut file = (0u64, 0u64, 0u64);
        for (name, t) in &header {
            if name == "__metadata__" {
                continue;
            }
            let o = &t["data_offsets"];
            let bytes = o[1].as_u64().unwrap() - o[0].as_u64().unwrap();
            let params: u64 = t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .product();
            file = (file.0 + 1, file.1 + params, file.2 + bytes);
            let d = by_dtype
                .entry(t["dtype"].as_str().unwrap().to_string())
                .or_default();
            *d = (d.0 + 1, d.1 + bytes);
        }
        let row = format!("{} {} {} {}", path.display(), file.0, file.1, file.2);
        assert!(
            summary
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == row),
            "no row `{row}` in:\n{summary}"
        );
        total = (total.0 + file.0, total.1 + file.1, total.2 + file.2);
    }
    let total_row = format!("TOTAL {} {} {}", total.0, total.1, total.2);
    assert!(
        summary
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == total_row),
        "{summary}"
    );
    // The index's total_size agrees (tensors counted once although shown twice in the mount).
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(example.join("model.safetensors.index.json")).unwrap())
            .unwrap();
    assert_eq!(index["metadata"]["total_size"].as_u64(), Some(total.2));
    let dtypes = text.split("\n\n").nth(2).expect("bytes by dtype");
    for (dtype, (count, bytes)) in by_dtype {
        let row = format!("{dtype} {count} {bytes}");
        assert!(
            dtypes
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == row),
            "no `{row}` in:\n{dtypes}"
        );
    }
    let biggest = text.split("\n\n").nth(3).expect("biggest tensors");
    assert!(
        biggest
            .lines()
            .nth(1)
            .unwrap()
            .trim_start()
            .starts_with("32768 "),
        "{biggest}"
    );
}
