//! `tensormount --list`: one row per tensor, as a table or as JSON.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use serde_json::json;

use crate::namespace::{Listed, presented, presented_name};

/// An aligned table: path, dtype, shape, bytes (as presented), source, offset (`-` for a gathered
/// tensor); with `-o dtype=` also the stored dtype and bytes.
pub fn table(rows: &[Listed<'_>]) -> String {
    let widened = rows.iter().any(|r| r.widen.is_some());
    let cells = rows
        .iter()
        .map(|r| {
            let size = presented(r.tensor, r.widen).1;
            let mut row = vec![
                printable(&r.path),
                presented_name(r.tensor, r.widen),
                r.tensor.shape_json(),
                size.to_string(),
                printable(&r.source.to_string_lossy()),
                // A gathered or computed tensor's bytes are not one stretch at an offset.
                match r.tensor.is_stretch() {
                    false => "-".into(),
                    true => r.offset.to_string(),
                },
            ];
            if widened {
                row.extend([
                    r.tensor.dtype_name().to_string(),
                    r.tensor.size().to_string(),
                ]);
            }
            row
        })
        .collect();
    let mut header = vec!["PATH", "DTYPE", "SHAPE", "BYTES", "SOURCE", "OFFSET"];
    if widened {
        header.extend(["STORED_DTYPE", "STORED_BYTES"]);
    }
    // The numbers (BYTES, OFFSET, STORED_BYTES) are right-aligned.
    aligned(&header, cells, &[3, 5, 7])
}

/// How many of the biggest tensors the summary names.
const BIGGEST: usize = 5;

/// What a person wants to know first: per source file and in total, the tensor count, parameter
/// count and bytes; bytes by dtype; the biggest tensors. A tensor shown in several directories
/// (a shard's and the merged one) counts once.
pub fn summary(rows: &[Listed<'_>]) -> String {
    let mut unique: BTreeMap<(&Path, u64), &Listed<'_>> = BTreeMap::new();
    for r in rows {
        unique.entry((r.source, r.offset)).or_insert(r);
    }
    let params = |r: &Listed<'_>| r.tensor.shape.iter().map(|&d| d as u128).product::<u128>();

    let mut files: BTreeMap<&Path, (u64, u128, u64)> = BTreeMap::new();
    let mut dtypes: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut total = (0u64, 0u128, 0u64);
    for r in unique.values() {
        for acc in [files.entry(r.source).or_default(), &mut total] {
            acc.0 += 1;
            acc.1 += params(r);
            acc.2 += r.tensor.size();
        }
        let d = dtypes.entry(r.tensor.dtype_name().to_string()).or_default();
        d.0 += 1;
        d.1 += r.tensor.size();
    }
    let count_row = |name: String, (n, p, b): (u64, u128, u64)| {
        vec![name, n.to_string(), p.to_string(), b.to_string()]
    };
    let mut per_file: Vec<Vec<String>> = files
        .iter()
        .map(|(f, acc)| count_row(printable(&f.to_string_lossy()), *acc))
        .collect();
    per_file.push(count_row("TOTAL".into(), total));
    let by_dtype = dtypes
        .into_iter()
        .map(|(d, (n, b))| vec![d, n.to_string(), b.to_string()])
        .collect();
    let mut biggest: Vec<&Listed<'_>> = unique.into_values().collect();
    biggest.sort_by(|a, b| {
        b.tensor
            .size()
            .cmp(&a.tensor.size())
            .then(a.path.cmp(&b.path))
    });
    let biggest = biggest
        .iter()
        .take(BIGGEST)
        .map(|r| {
            vec![
                r.tensor.size().to_string(),
                r.tensor.dtype_name().to_string(),
                r.tensor.shape_json(),
                printable(&r.tensor.name),
            ]
        })
        .collect();
    [
        aligned(
            &["FILE", "TENSORS", "PARAMETERS", "BYTES"],
            per_file,
            &[1, 2, 3],
        ),
        aligned(&["DTYPE", "TENSORS", "BYTES"], by_dtype, &[1, 2]),
        aligned(&["BIGGEST", "DTYPE", "SHAPE", "TENSOR"], biggest, &[0]),
    ]
    .join("\n")
}

/// Columns padded to their widest cell; the columns in `right` (numbers) right-aligned.
fn aligned(header: &[&str], rows: Vec<Vec<String>>, right: &[usize]) -> String {
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let mut widths = vec![0; header.len()];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, (c, &w)) in row.iter().zip(&widths).enumerate() {
            if right.contains(&i) {
                write!(line, "{c:>w$}  ").ok();
            } else {
                write!(line, "{c:<w$}  ").ok();
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A JSON object: `tensors`, an array of objects (path, name, dtype, shape, size as presented,
/// source, offset: null for a gathered tensor; for a tensor widened by `-o dtype=`, also
/// `stored_dtype` and `stored_size`); and `metadata`, each tensor directory's metadata by its
/// path (a value too long to keep, such as a vocabulary, as what is known of it: its type and
/// length).
pub fn json(rows: &[Listed<'_>], metadata: Vec<(String, serde_json::Value)>) -> String {
    let items: Vec<_> = rows
        .iter()
        .map(|r| {
            let size = presented(r.tensor, r.widen).1;
            let mut item = json!({
                "path": r.path,
                "name": &*r.tensor.name,
                "dtype": presented_name(r.tensor, r.widen),
                "shape": r.tensor.shape,
                "size": size,
                "source": r.source.to_string_lossy(),
                "offset": r.tensor.is_stretch().then_some(r.offset),
            });
            if r.widen.is_some() {
                item["stored_dtype"] = json!(r.tensor.dtype_name());
                item["stored_size"] = json!(r.tensor.size());
            }
            item
        })
        .collect();
    let metadata: serde_json::Map<_, _> = metadata.into_iter().collect();
    let out = json!({"tensors": items, "metadata": metadata});
    let mut s = serde_json::to_string_pretty(&out).unwrap_or_default();
    s.push('\n');
    s
}

/// Control characters (a newline in a tensor name) written as escapes, so each row is one line.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
