//! The text encodings of protocol 0's opcodes, decoded as Python decodes them: `STRING`'s quoted
//! literal (`codecs.escape_decode`) and `UNICODE`'s `raw-unicode-escape`; and integers as the
//! machine keeps them.

use super::value::Value;

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

/// What a protocol 0 `INT` line holds.
#[derive(Debug, PartialEq)]
pub(super) enum TextInt {
    Bool(bool),
    /// Little-endian two's complement bytes, fewest that hold it.
    Int(Vec<u8>),
}

/// An `INT` line (without its newline) as CPython's C unpickler reads it: `strtol(s, &end, 0)`
/// (leading space, a sign, then decimal, `0x` hex or, after a leading `0`, octal; a NUL ends the
/// text), which a two-byte line of value 0 or 1 makes a boolean; when that overflows or leaves
/// text, `int(s, 0)`.
pub(super) fn int_line(line: &[u8]) -> Option<TextInt> {
    let text = line.split(|&b| b == 0).next().unwrap_or_default();
    match strtol(text) {
        Some(x @ (0 | 1)) if line.len() == 2 => Some(TextInt::Bool(x == 1)),
        Some(x) => Some(TextInt::Int(minimal(x.to_le_bytes().to_vec()))),
        None => py_int(text).map(TextInt::Int),
    }
}

/// A `LONG` line (without its newline) as CPython reads it: one trailing `L` dropped, then
/// `int(s, 0)` of the text up to a NUL. Little-endian two's complement bytes, fewest that hold it.
pub(super) fn long_line(line: &[u8]) -> Option<Vec<u8>> {
    let line = line.strip_suffix(b"L").unwrap_or(line);
    py_int(line.split(|&b| b == 0).next().unwrap_or_default())
}

/// C's `strtol(text, &end, 0)` where `end` must reach the end of `text`: `None` on overflow, on no
/// digits, or on text left after them.
fn strtol(text: &[u8]) -> Option<i64> {
    let s = &text[text.iter().take_while(|&&b| is_space(b)).count()..];
    let (negative, s) = sign(s);
    let (radix, digits) = match s {
        [b'0', b'x' | b'X', d, ..] if d.is_ascii_hexdigit() => (16, &s[2..]),
        [b'0', ..] => (8, s),
        _ => (10, s),
    };
    if digits.is_empty() {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        let d = char::from(d).to_digit(radix)?;
        value = value.checked_mul(radix.into())?;
        value = if negative {
            value.checked_sub(d.into())?
        } else {
            value.checked_add(d.into())?
        };
    }
    Some(value)
}

/// Python's `int(text, 0)` (`PyLong_FromString` with base 0): space around, a sign, `0x`, `0o` or
/// `0b` (and one `_` after it) or decimal without leading zeros (but for zero), single `_`
/// between digits; decimal of more than 4300 digits is refused, as Python refuses it.
fn py_int(text: &[u8]) -> Option<Vec<u8>> {
    let start = text.iter().take_while(|&&b| is_space(b)).count();
    let end = text.len() - text.iter().rev().take_while(|&&b| is_space(b)).count();
    let s = text.get(start..end).unwrap_or_default();
    let (negative, s) = sign(s);
    let (radix, s, zero_only) = match s {
        [b'0', b'x' | b'X', rest @ ..] => (16, rest.strip_prefix(b"_").unwrap_or(rest), false),
        [b'0', b'o' | b'O', rest @ ..] => (8, rest.strip_prefix(b"_").unwrap_or(rest), false),
        [b'0', b'b' | b'B', rest @ ..] => (2, rest.strip_prefix(b"_").unwrap_or(rest), false),
        [b'0', ..] => (10, s, true),
        _ => (10, s, false),
    };
    if s.first() == Some(&b'_') || s.last() == Some(&b'_') || s.windows(2).any(|w| w == b"__") {
        return None;
    }
    let digits: Vec<u32> = s
        .iter()
        .filter(|&&b| b != b'_')
        .map(|&b| char::from(b).to_digit(radix))
        .collect::<Option<_>>()?;
    if digits.is_empty() || (radix == 10 && digits.len() > 4300) {
        return None;
    }
    let mut magnitude = magnitude(&digits, radix);
    if zero_only && magnitude.iter().any(|&b| b != 0) {
        return None;
    }
    magnitude.push(0);
    if negative {
        // Two's complement: invert, add one.
        let mut carry = true;
        for byte in magnitude.iter_mut() {
            let (v, c) = (!*byte).overflowing_add(u8::from(carry));
            *byte = v;
            carry = c;
        }
    }
    Some(minimal(magnitude))
}

/// The little-endian bytes of the number whose digits (most significant first) are `digits` in
/// `radix`: bit by bit for the powers of two (linear, as Python's), else nine decimal digits at a
/// time into 32-bit limbs (at most 4300 digits).
fn magnitude(digits: &[u32], radix: u32) -> Vec<u8> {
    if radix.is_power_of_two() {
        let bits = radix.trailing_zeros();
        let (mut out, mut acc, mut n) = (Vec::with_capacity(digits.len()), 0u32, 0);
        for &d in digits.iter().rev() {
            acc |= d << n;
            n += bits;
            while n >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                n -= 8;
            }
        }
        out.push(acc as u8);
        return out;
    }
    let mut limbs: Vec<u32> = Vec::new();
    for chunk in digits.chunks(9) {
        let (mul, add) = chunk.iter().fold((1u64, 0u64), |(m, a), &d| {
            (m * u64::from(radix), a * u64::from(radix) + u64::from(d))
        });
        let mut carry = add;
        for limb in limbs.iter_mut() {
            let v = u64::from(*limb) * mul + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            limbs.push(carry as u32);
        }
    }
    limbs.iter().flat_map(|l| l.to_le_bytes()).collect()
}

/// C's `isspace` (and CPython's `Py_ISSPACE`) in ASCII.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn sign(s: &[u8]) -> (bool, &[u8]) {
    match s {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, s),
    }
}

/// Little-endian two's complement `bytes` without the sign bytes that repeat (at least one byte).
pub(super) fn minimal(mut bytes: Vec<u8>) -> Vec<u8> {
    while let [.., prev, last] = bytes[..] {
        if (last == 0 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0) {
            bytes.pop();
        } else {
            break;
        }
    }
    if bytes.is_empty() {
        bytes.push(0);
    }
    bytes
}

/// Longest integer (in bytes) kept as a number; longer ones are kept as their bytes.
const SMALL_LONG: usize = 8;

/// The integer of little-endian two's complement `bytes` (as `LONG1` holds it): an `Int` if it
/// fits, else a `BigInt` of the fewest bytes that hold it (so that equal numbers are equal
/// values).
pub(super) fn long_value(bytes: &[u8]) -> Value {
    let bytes = minimal(bytes.to_vec());
    if bytes.len() > SMALL_LONG {
        return Value::BigInt(bytes.into());
    }
    let fill = if bytes.last().is_some_and(|&b| b & 0x80 != 0) {
        0xff
    } else {
        0
    };
    let mut word = [fill; 8];
    for (slot, &b) in word.iter_mut().zip(&bytes) {
        *slot = b;
    }
    Value::Int(i64::from_le_bytes(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: i128) -> TextInt {
        TextInt::Int(minimal(v.to_le_bytes().to_vec()))
    }

    /// What `pickle.loads` of Python 3.11 gives for each line (`I…\n.` and `L…\n.`).
    #[test]
    fn integer_lines_read_as_cpython_reads_them() {
        let ints: &[(&[u8], Option<TextInt>)] = &[
            (b"0x10", Some(int(16))),
            (b"010", Some(int(8))),
            (b" 1", Some(TextInt::Bool(true))),
            (b"+1", Some(TextInt::Bool(true))),
            (b"-0", Some(TextInt::Bool(false))),
            (b"00", Some(TextInt::Bool(false))),
            (b"01", Some(TextInt::Bool(true))),
            (b"1\0zz", Some(int(1))),
            (b"99999999999999999999", Some(int(99999999999999999999))),
            (b"0x1_0", Some(int(16))),
            (b"1_0", Some(int(10))),
            (b"08", None),
            (b"\x0b7", Some(int(7))),
            (b"-9223372036854775809", Some(int(-9223372036854775809))),
            (b"", None),
            (b"x", None),
        ];
        for (line, want) in ints {
            assert_eq!(&int_line(line), want, "{}", String::from_utf8_lossy(line));
        }
        let longs: &[(&[u8], Option<i128>)] = &[
            (b"0x1950a86a20f9469cfc6cL", Some(0x1950a86a20f9469cfc6c)),
            (b" 0b1_01 L", Some(5)),
            (b"1_000", Some(1000)),
            (b"-0o17L", Some(-15)),
            (b"007L", None),
            (b"000L", Some(0)),
            (b"1__0L", None),
            (b"-128", Some(-128)),
            (b"128", Some(128)),
            (b"0", Some(0)),
            (b"-0x8000000000000000", Some(-0x8000000000000000)),
            (b"0xffffffffffffffffff", Some(0xffffffffffffffffff)),
            (b"0b1111111", Some(127)),
            (b"0o777_777", Some(0o777777)),
            (b"1000000000000000000000000000", Some(10i128.pow(27))),
            (
                b"-123456789012345678901234567890",
                Some(-123456789012345678901234567890),
            ),
        ];
        for (line, want) in longs {
            let want = want.map(|v| minimal(v.to_le_bytes().to_vec()));
            assert_eq!(long_line(line), want, "{}", String::from_utf8_lossy(line));
        }
        assert_eq!(long_line(&[b'1'; 4301]), None);
        assert_eq!(long_line(&[b'1'; 4300]).map(|b| b.len()), Some(1786));
    }
}
