//! The text encodings of protocol 0's opcodes, decoded as Python decodes them: `STRING`'s quoted
//! literal (`codecs.escape_decode`) and `UNICODE`'s `raw-unicode-escape`.

/// The text of a protocol 0 `STRING` line: a Python literal in quotes, with backslash escapes.
pub(super) fn unquote(line: &[u8]) -> Option<String> {
    let quote = *line.first()?;
    if !(quote == b'\'' || quote == b'"') || line.len() < 2 || line.last() != Some(&quote) {
        return None;
    }
    let inner = line.get(1..line.len() - 1)?;
    Some(String::from_utf8_lossy(&escape_decode(inner)?).into_owned())
}

/// Python's `codecs.escape_decode`, which protocol 0's `STRING` applies: `\\`, `\'`, `\"`, `\a`,
/// `\b`, `\f`, `\n`, `\r`, `\t`, `\v`, one to three octal digits, `\x` and two hex digits (fewer
/// is an error); any other backslash stays.
fn escape_decode(inner: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(inner.len());
    let mut i = 0;
    while let Some(&b) = inner.get(i) {
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let c = *inner.get(i)?;
        i += 1;
        match c {
            b'\\' | b'\'' | b'"' => out.push(c),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut v = u32::from(c - b'0');
                for _ in 0..2 {
                    match inner.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(v as u8);
            }
            b'x' => {
                let hex = std::str::from_utf8(inner.get(i..i + 2)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.extend_from_slice(&[b'\\', c]),
        }
    }
    Some(out)
}

/// Python's `raw-unicode-escape`: bytes are Latin-1 code points, except `\uXXXX` and
/// `\UXXXXXXXX`.
pub(super) fn raw_unicode_escape(line: &[u8]) -> String {
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while let Some(&b) = line.get(i) {
        let digits = match (b, line.get(i + 1)) {
            (b'\\', Some(b'u')) => 4,
            (b'\\', Some(b'U')) => 8,
            _ => 0,
        };
        let code = line
            .get(i + 2..i + 2 + digits)
            .filter(|_| digits > 0)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u32::from_str_radix(hex, 16).ok());
        match code {
            Some(code) => {
                out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                i += 2 + digits;
            }
            None => {
                out.push(char::from(b));
                i += 1;
            }
        }
    }
    out
}
