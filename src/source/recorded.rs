//! Where the SHA-256 a weight file should have is already written down, found without reading the
//! file: the name of its blob in a Hugging Face cache (`blobs/<64 hex>`, reached through a
//! `snapshots/` link), the etag line of `.cache/huggingface/download/NAME.metadata` in a
//! `local_dir` download, or a `NAME.sha256` / `SHA256SUMS` file in `sha256sum` format.
//!
//! The nearest record wins: the blob name first, then, from the file's directory up, each
//! directory's download metadata, `NAME.sha256` (beside the file only) and `SHA256SUMS`.

use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::base::digest::{Sha256, parse_hex};

/// The most of a metadata or checksum file that is read.
const MAX_RECORD: u64 = 16 << 20;

/// A digest the source records for a file, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub sha256: Sha256,
    pub how: How,
    /// The blob, metadata file or checksum file that records it.
    pub at: PathBuf,
}

/// How a digest is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// The file is a Hugging Face cache blob named by its SHA-256.
    BlobName,
    /// The second line (the etag) of `huggingface_hub`'s download metadata.
    DownloadMetadata,
    /// A line of a `SHA256SUMS` or `NAME.sha256` file.
    Sha256Sum,
}

impl How {
    /// Its name in `verify`'s output.
    pub fn name(self) -> &'static str {
        match self {
            How::BlobName => "blob-name",
            How::DownloadMetadata => "download-metadata",
            How::Sha256Sum => "sha256sum",
        }
    }
}

/// What hashing a version of a file found, against its recorded digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Mismatch,
}

impl Verdict {
    /// Its `user.tensormount.verified` value.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Mismatch => "mismatch",
        }
    }
}

/// The digest recorded for the file found at `entry` (through links), which is `canonical` once
/// they are resolved.
pub fn recorded(entry: &Path, canonical: &Path) -> Option<Recorded> {
    if let Some(r) = blob_name(canonical) {
        return Some(r);
    }
    // Beside the path it was found at, then (found through a link) beside the file itself.
    beside(entry).or_else(|| (canonical != entry).then(|| beside(canonical)).flatten())
}

/// A record in the directory of `entry` or above it, the nearest first.
fn beside(entry: &Path) -> Option<Recorded> {
    let name = entry.file_name()?;
    let mut dir = entry.parent()?;
    loop {
        let rel = entry.strip_prefix(dir).ok()?;
        let metadata = dir
            .join(".cache/huggingface/download")
            .join(format!("{}.metadata", rel.display()));
        if let Some(sha256) = read_small(&metadata).and_then(|t| download_etag(&t)) {
            return Some(Recorded {
                sha256,
                how: How::DownloadMetadata,
                at: metadata,
            });
        }
        let mut sums = Vec::new();
        if Some(dir) == entry.parent() {
            let mut own = name.to_os_string();
            own.push(".sha256");
            sums.push((dir.join(own), true));
        }
        sums.push((dir.join("SHA256SUMS"), false));
        for (at, alone) in sums {
            let Some(text) = read_small(&at) else {
                continue;
            };
            if let Some(sha256) = sums_entry(&text, rel.as_os_str().as_bytes(), alone) {
                return Some(Recorded {
                    sha256,
                    how: How::Sha256Sum,
                    at,
                });
            }
        }
        dir = dir.parent()?;
    }
}

/// Whether the file found at `entry`, which is `canonical` once links are resolved, may have a
/// recorded digest worth looking up: a weight file (either name says a weight format, or a
/// format's data file), or a cache blob.
pub(super) fn worth_looking_up(entry: &Path, canonical: &Path) -> bool {
    use crate::format::Format;
    let weight = |p: &Path| {
        p.file_name()
            .is_some_and(|n| Format::claim(n.as_bytes()).is_some())
    };
    weight(entry) || weight(canonical) || blob_name(canonical).is_some()
}

/// A Hugging Face cache blob (`.../blobs/<64 hex>`), or a model store's blob, named by its
/// digest as its format names blobs (ollama's `.../blobs/sha256-<64 hex>`).
fn blob_name(canonical: &Path) -> Option<Recorded> {
    let hugging_face = || {
        let parent = canonical.parent()?;
        if parent.file_name()? != "blobs" {
            return None;
        }
        parse_hex(canonical.file_name()?.to_str()?)
    };
    let sha256 = hugging_face().or_else(|| crate::format::Format::blob_digest(canonical))?;
    Some(Recorded {
        sha256,
        how: How::BlobName,
        at: canonical.to_path_buf(),
    })
}

/// The text of a small regular file, if there is one at `path`.
fn read_small(path: &Path) -> Option<Vec<u8>> {
    let file = File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = Vec::new();
    file.take(MAX_RECORD).read_to_end(&mut text).ok()?;
    Some(text)
}

/// The etag of `huggingface_hub`'s download metadata (commit hash, etag, timestamp, one a line),
/// when it is a SHA-256 (an LFS file's; a small file's is a git blob id).
fn download_etag(text: &[u8]) -> Option<Sha256> {
    let line = text.split(|&b| b == b'\n').nth(1)?;
    parse_hex(std::str::from_utf8(line).ok()?.trim())
}

/// The digest a `sha256sum`-format text gives `name` (a path relative to the text's directory):
/// `HEX  NAME` or `HEX *NAME` (a leading `\` marks an escaped name), or BSD's
/// `SHA256 (NAME) = HEX`. `alone`: a `NAME.sha256` file, whose only line may be the bare digest.
fn sums_entry(text: &[u8], name: &[u8], alone: bool) -> Option<Sha256> {
    let lines: Vec<&[u8]> = text
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty())
        .collect();
    for line in &lines {
        let (escaped, line) = match line.strip_prefix(b"\\") {
            Some(rest) => (true, rest),
            None => (false, *line),
        };
        let (hex, file) = if let Some(rest) = line.strip_prefix(b"SHA256 (") {
            let Some(split) = rest.windows(4).rposition(|w| w == b") = ") else {
                continue;
            };
            (&rest[split + 4..], rest[..split].to_vec())
        } else {
            match (line.get(..64), line.get(64..66)) {
                (Some(hex), Some(b"  " | b" *")) => (hex, line[66..].to_vec()),
                _ => continue,
            }
        };
        let file = if escaped { unescape(&file) } else { file };
        let file = file.strip_prefix(b"./").unwrap_or(&file);
        if file == name {
            return parse_hex(std::str::from_utf8(hex).ok()?.trim());
        }
    }
    match lines.as_slice() {
        [only] if alone => parse_hex(std::str::from_utf8(only).ok()?.trim()),
        _ => None,
    }
}

/// A name as `sha256sum` escapes it: `\\` for a backslash, `\n` for a newline, `\r` for a
/// carriage return.
fn unescape(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len());
    let mut bytes = name.iter();
    while let Some(&b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match bytes.next() {
            Some(b'n') => out.push(b'\n'),
            Some(b'r') => out.push(b'\r'),
            Some(&other) => out.push(other),
            None => out.push(b'\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::digest::hex;
    use std::fs;

    const A: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    const B: &str = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tm-recorded-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn found(entry: &Path) -> Option<(String, How, PathBuf)> {
        let canonical = fs::canonicalize(entry).unwrap();
        recorded(entry, &canonical).map(|r| (hex(&r.sha256), r.how, r.at))
    }

    #[test]
    fn a_cache_blob_is_named_by_its_digest_and_a_git_blob_id_is_not_one() {
        let root = tmp("blob");
        let repo = root.join("models--org--m");
        fs::create_dir_all(repo.join("blobs")).unwrap();
        fs::create_dir_all(repo.join("snapshots/abc")).unwrap();
        fs::write(repo.join("blobs").join(A.to_uppercase()), b"x").unwrap();
        let sha1 = "a".repeat(40);
        fs::write(repo.join("blobs").join(&sha1), b"{}").unwrap();
        let link = repo.join("snapshots/abc/model.safetensors");
        std::os::unix::fs::symlink(format!("../../blobs/{}", A.to_uppercase()), &link).unwrap();
        let config = repo.join("snapshots/abc/config.json");
        std::os::unix::fs::symlink(format!("../../blobs/{sha1}"), &config).unwrap();
        let (sha, how, at) = found(&link).unwrap();
        assert_eq!((sha.as_str(), how), (A, How::BlobName));
        assert_eq!(at, fs::canonicalize(&link).unwrap());
        assert_eq!(found(&config), None);
    }

    #[test]
    fn a_download_records_the_etag_of_each_file_by_its_path() {
        let root = tmp("local-dir");
        let meta = root.join(".cache/huggingface/download/unet");
        fs::create_dir_all(&meta).unwrap();
        fs::create_dir_all(root.join("unet")).unwrap();
        let file = root.join("unet/model.safetensors");
        fs::write(&file, b"x").unwrap();
        fs::write(
            meta.join("model.safetensors.metadata"),
            format!("0123abc\n{A}\n1760000000.5\n"),
        )
        .unwrap();
        let (sha, how, _) = found(&file).unwrap();
        assert_eq!((sha.as_str(), how), (A, How::DownloadMetadata));
        // A small file's etag is a git blob id: no SHA-256 recorded.
        let small = root.join("config.json");
        fs::write(&small, b"{}").unwrap();
        fs::write(
            root.join(".cache/huggingface/download/config.json.metadata"),
            format!("0123abc\n{}\n1760000000.5\n", "b".repeat(40)),
        )
        .unwrap();
        assert_eq!(found(&small), None);
    }

    #[test]
    fn sha256sum_files_beside_or_above_are_read_in_both_formats() {
        let root = tmp("sums");
        fs::create_dir_all(root.join("unet")).unwrap();
        let a = root.join("unet/a.safetensors");
        let b = root.join("b.safetensors");
        let odd = root.join("we\\ird\nname.safetensors");
        for f in [&a, &b, &odd] {
            fs::write(f, b"x").unwrap();
        }
        fs::write(
            root.join("SHA256SUMS"),
            format!(
                "{B}  ./b.safetensors\r\n{A} *unet/a.safetensors\n\\{B}  we\\\\ird\\nname.safetensors\n"
            ),
        )
        .unwrap();
        assert_eq!(found(&a).unwrap().0, A);
        assert_eq!(found(&b).unwrap().0, B);
        assert_eq!(found(&odd).unwrap().0, B);
        // NAME.sha256 beside the file wins over SHA256SUMS, bare or in BSD format.
        fs::write(root.join("b.safetensors.sha256"), format!("{A}\n")).unwrap();
        assert_eq!(found(&b).unwrap().0, A);
        fs::write(
            root.join("unet/a.safetensors.sha256"),
            format!("SHA256 (a.safetensors) = {B}\n"),
        )
        .unwrap();
        let (sha, how, at) = found(&a).unwrap();
        assert_eq!((sha.as_str(), how), (B, How::Sha256Sum));
        assert_eq!(at, root.join("unet/a.safetensors.sha256"));
        // Found through a link of another name: recorded for the file it leads to.
        let link = root.join("link");
        std::os::unix::fs::symlink("b.safetensors", &link).unwrap();
        assert!(worth_looking_up(&link, &fs::canonicalize(&link).unwrap()));
        assert_eq!(found(&link).unwrap().0, A);
        // A line for another file, or a malformed one, records nothing.
        let c = root.join("c.safetensors");
        fs::write(&c, b"x").unwrap();
        fs::write(root.join("c.safetensors.sha256"), "not a digest\n").unwrap();
        assert_eq!(found(&c), None);
    }
}
