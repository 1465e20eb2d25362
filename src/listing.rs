//! `tensormount --list`: one row per tensor, as a table or as JSON.

use std::fmt::Write;

use serde_json::json;

use crate::namespace::Listed;

/// An aligned table: path, dtype, shape, bytes, source, offset.
pub fn table(rows: &[Listed<'_>]) -> String {
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                printable(&r.path),
                r.tensor.dtype_name(),
                r.tensor.shape_json(),
                r.tensor.size().to_string(),
                printable(&r.source.to_string_lossy()),
                r.offset.to_string(),
            ]
        })
        .collect();
    let header = ["PATH", "DTYPE", "SHAPE", "BYTES", "SOURCE", "OFFSET"].map(String::from);
    let mut widths = [0; 6];
    for row in std::iter::once(&header).chain(&cells) {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&cells) {
        let mut line = String::new();
        for (i, (c, w)) in row.iter().zip(widths).enumerate() {
            // Numbers right-aligned, text left-aligned, no padding after the last column.
            match i {
                3 => write!(line, "{c:>w$}  "),
                5 => write!(line, "{c:>w$}"),
                _ => write!(line, "{c:<w$}  "),
            }
            .ok();
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A JSON array of objects: path, name, dtype, shape, size, source, offset.
pub fn json(rows: &[Listed<'_>]) -> String {
    let items: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({
                "path": r.path,
                "name": &*r.tensor.name,
                "dtype": r.tensor.dtype_name(),
                "shape": r.tensor.shape,
                "size": r.tensor.size(),
                "source": r.source.to_string_lossy(),
                "offset": r.offset,
            })
        })
        .collect();
    let mut s = serde_json::to_string_pretty(&items).unwrap_or_default();
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
