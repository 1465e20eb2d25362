//! SHA-256, the one digest tensormount checks: of a whole file read once, front to back, with (if
//! asked) each tensor stored in it as one stretch hashed on the way; written as lowercase hex.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use sha2::Digest;

/// A SHA-256 digest.
pub type Sha256 = [u8; 32];

/// How much of a file is read at a time.
const CHUNK: usize = 8 << 20;

/// `digest` as 64 lowercase hex digits.
pub fn hex(digest: &Sha256) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The digest that `text` spells: exactly 64 hex digits, of either case.
pub fn parse_hex(text: &str) -> Option<Sha256> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// A running SHA-256 (of a tensor file's bytes, of a file).
#[derive(Clone, Default)]
pub struct Hasher(sha2::Sha256);

impl Hasher {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(self) -> Sha256 {
        self.0.finalize().into()
    }
}

/// The digest of the first `len` bytes of `file` and of each `(start, len)` span of them, from
/// one pass over the file; `progress` is told the length of each chunk read. A file shorter than
/// `len` is an error (`UnexpectedEof`).
pub fn file(
    file: &File,
    len: u64,
    spans: &[(u64, u64)],
    progress: &mut dyn FnMut(u64),
) -> io::Result<(Sha256, Vec<Sha256>)> {
    crate::base::sys::sequential(file);
    let mut whole = Hasher::default();
    let mut hashers = vec![Hasher::default(); spans.len()];
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| spans[i].0);
    let (mut next, mut active) = (0, Vec::new());
    let mut buf = vec![0; CHUNK.min(len as usize)];
    let mut at = 0;
    while at < len {
        let n = CHUNK.min((len - at) as usize);
        let chunk = &mut buf[..n];
        file.read_exact_at(chunk, at)?;
        whole.update(chunk);
        let end = at + n as u64;
        while next < order.len() && spans[order[next]].0 < end {
            active.push(order[next]);
            next += 1;
        }
        for &i in &active {
            let (start, span_len) = spans[i];
            let from = start.max(at);
            let to = (start + span_len).min(end);
            if from < to {
                hashers[i].update(&chunk[(from - at) as usize..(to - at) as usize]);
            }
        }
        active.retain(|&i| spans[i].0 + spans[i].1 > end);
        progress(n as u64);
        at = end;
    }
    Ok((
        whole.finish(),
        hashers.into_iter().map(Hasher::finish).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::testing::sha256sum;

    #[test]
    fn a_file_and_its_spans_hash_as_sha256sum_does_across_chunks() {
        let bytes: Vec<u8> = (0..CHUNK * 2 + 12345)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let path = std::env::temp_dir().join(format!("tm-digest-{}", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        // Overlapping, empty, within one chunk and across two.
        let spans = [
            (CHUNK as u64 - 10, 20),
            (5, 0),
            (0, CHUNK as u64 * 2 + 100),
            (100, 50),
            (CHUNK as u64 * 2, 12345),
        ];
        let mut read = 0;
        let (whole, each) =
            super::file(&file, bytes.len() as u64, &spans, &mut |n| read += n).unwrap();
        assert_eq!(read, bytes.len() as u64);
        assert_eq!(hex(&whole), sha256sum(&bytes));
        for ((start, len), got) in spans.iter().zip(&each) {
            let (s, l) = (*start as usize, *len as usize);
            assert_eq!(hex(got), sha256sum(&bytes[s..s + l]), "span {start}+{len}");
        }
        // Asked for more than the file holds: an error, not a digest.
        let err = super::file(&file, bytes.len() as u64 + 1, &[], &mut |_| {}).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_64_hex_digits() {
        let d: Sha256 = std::array::from_fn(|i| (i as u8).wrapping_mul(9));
        assert_eq!(parse_hex(&hex(&d)), Some(d));
        assert_eq!(parse_hex(&hex(&d).to_uppercase()), Some(d));
        assert_eq!(parse_hex(&hex(&d)[1..]), None);
        assert_eq!(parse_hex(&format!("{}g", &hex(&d)[1..])), None);
        assert_eq!(parse_hex(&"é".repeat(32)), None);
    }
}
