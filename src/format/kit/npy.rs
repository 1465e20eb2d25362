//! NPY headers, both ways: written for `-o npy` (the bytes numpy's `format.write_array` would put
//! before a C-order array of a tensor's dtype and shape, so that `numpy.load(path, mmap_mode='r')`
//! reads the tensor bytes that follow unchanged), and parsed as `numpy.load(allow_pickle=False)`
//! parses them ([`parse`]: versions 1.0 to 3.0, the header a Python dict literal read without
//! evaluating anything), with [`NpyError`]. Knows nothing of FUSE.

use crate::format::{Dtype, Tensor};

/// `\x93NUMPY`, then the format version 1.0.
const MAGIC: &[u8] = b"\x93NUMPY\x01\x00";

/// numpy pads the header so that the data starts on a multiple of this.
const ALIGN: usize = 64;

/// numpy leaves room for the first dimension to grow to this many digits.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;

/// The dtype as numpy's `descr` spells it, or `None` for dtypes numpy has no type for (BF16 and
/// the 8-, 6- and 4-bit floats).
fn descr(dtype: Dtype) -> Option<&'static str> {
    Some(match dtype {
        Dtype::BOOL => "|b1",
        Dtype::U8 => "|u1",
        Dtype::I8 => "|i1",
        Dtype::I16 => "<i2",
        Dtype::U16 => "<u2",
        Dtype::F16 => "<f2",
        Dtype::I32 => "<i4",
        Dtype::U32 => "<u4",
        Dtype::F32 => "<f4",
        Dtype::C64 => "<c8",
        Dtype::F64 => "<f8",
        Dtype::I64 => "<i8",
        Dtype::U64 => "<u8",
        _ => return None,
    })
}

/// The NPY header for a tensor's shape presented as `dtype` (its own, or a widened tensor's), or
/// `None` if numpy cannot describe that dtype or the header would not fit version 1.0 (a shape of
/// thousands of dimensions).
pub fn header_as(dtype: Dtype, tensor: &Tensor) -> Option<Vec<u8>> {
    let descr = descr(dtype)?;
    // Python's repr of a shape tuple: `()`, `(3,)`, `(3, 4)`.
    let dims: Vec<String> = tensor.shape.iter().map(usize::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    if let Some(first) = dims.first() {
        dict.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(first.len())));
    }
    // Then 1 to ALIGN spaces and a newline (numpy's padding, to the byte).
    let unpadded = MAGIC.len() + 2 + dict.len() + 1;
    let len = (unpadded / ALIGN + 1) * ALIGN;
    let header_len = u16::try_from(len - MAGIC.len() - 2).ok()?;
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(len - 1, b' ');
    out.push(b'\n');
    Some(out)
}

/// The longest header read: numpy's own bound (`max_header_size`) when it loads without pickles.
pub const MAX_HEADER: usize = 10_000;

/// The bytes before the header's text, by version: the magic, the version and the text's length.
const PREAMBLE_V1: usize = 10;
const PREAMBLE_V2: usize = 12;

/// What an NPY header says of the array after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub dtype: Dtype,
    /// Its elements are stored big-endian (`>`): to be byte-swapped to be shown.
    pub big_endian: bool,
    /// Its elements are stored in Fortran (column-major) order.
    pub fortran_order: bool,
    pub shape: Vec<usize>,
    /// Where the array's bytes start, from the start of the header.
    pub data_start: usize,
}

/// The rules an NPY header breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NpyRule {
    /// Not `\x93NUMPY`, or a version other than 1.0, 2.0 and 3.0.
    NotNpy,
    /// A header longer than [`MAX_HEADER`], or past the bytes given.
    HeaderLength,
    /// A header that is not the dict numpy writes.
    BadHeader,
    /// An element type with no tensor type: objects (a pickle), strings, records, dates.
    UnsupportedDtype,
}

/// Why a header is not read: its rule, and what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyError {
    pub rule: NpyRule,
    pub what: String,
}

impl std::fmt::Display for NpyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [{:?}]", self.what, self.rule)
    }
}

fn npy_error(rule: NpyRule, what: impl Into<String>) -> NpyError {
    NpyError {
        rule,
        what: what.into(),
    }
}

/// How many bytes the header that `start` begins (at least its first 12 bytes, or all there are)
/// takes, its preamble included: where the array's bytes start.
pub fn header_len(start: &[u8]) -> Result<usize, NpyError> {
    if start.len() < PREAMBLE_V1 || !start.starts_with(&MAGIC[..6]) {
        return Err(npy_error(NpyRule::NotNpy, "no NPY magic (\\x93NUMPY)"));
    }
    let (preamble, text) = match (start[6], start[7]) {
        (1, 0) => (
            PREAMBLE_V1,
            usize::from(u16::from_le_bytes([start[8], start[9]])),
        ),
        (2 | 3, 0) if start.len() >= PREAMBLE_V2 => (
            PREAMBLE_V2,
            u32::from_le_bytes([start[8], start[9], start[10], start[11]]) as usize,
        ),
        (major, minor) => {
            return Err(npy_error(
                NpyRule::NotNpy,
                format!("NPY version {major}.{minor}, not 1.0, 2.0 or 3.0"),
            ));
        }
    };
    if text > MAX_HEADER {
        return Err(npy_error(
            NpyRule::HeaderLength,
            format!("a header of {text} bytes, more than numpy reads ({MAX_HEADER})"),
        ));
    }
    Ok(preamble + text)
}

/// Parses the header at the start of `bytes` (all of it: see [`header_len`]).
pub fn parse(bytes: &[u8]) -> Result<Header, NpyError> {
    let len = header_len(bytes)?;
    let preamble = if bytes[6] == 1 {
        PREAMBLE_V1
    } else {
        PREAMBLE_V2
    };
    let Some(text) = bytes.get(preamble..len) else {
        return Err(npy_error(
            NpyRule::HeaderLength,
            format!("a header of {len} bytes in {} bytes", bytes.len()),
        ));
    };
    let text = std::str::from_utf8(text)
        .map_err(|_| npy_error(NpyRule::BadHeader, "a header that is not text"))?;
    let mut lit = Literal { rest: text };
    let fields = lit.dict()?;
    if !lit.rest.trim().is_empty() {
        return Err(npy_error(
            NpyRule::BadHeader,
            "bytes after the header's dict",
        ));
    }
    let mut descr = None;
    let mut fortran = None;
    let mut shape = None;
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("descr", Item::Str(d)) => descr = Some(d),
            ("descr", _) => {
                return Err(npy_error(
                    NpyRule::UnsupportedDtype,
                    "a structured dtype (a list of fields), not one element type",
                ));
            }
            ("fortran_order", Item::Bool(b)) => fortran = Some(b),
            ("shape", Item::Tuple(dims)) => shape = Some(dims),
            (key, _) => {
                return Err(npy_error(
                    NpyRule::BadHeader,
                    format!("the header's key {key:?} with a value numpy does not write there"),
                ));
            }
        }
    }
    let (Some(descr), Some(fortran_order), Some(shape)) = (descr, fortran, shape) else {
        return Err(npy_error(
            NpyRule::BadHeader,
            "a header without descr, fortran_order and shape",
        ));
    };
    let (dtype, big_endian) = dtype_of(&descr)?;
    Ok(Header {
        dtype,
        big_endian,
        fortran_order,
        shape,
        data_start: len,
    })
}

/// The element type numpy's `descr` names, and whether it is stored big-endian.
fn dtype_of(descr: &str) -> Result<(Dtype, bool), NpyError> {
    let unsupported = || {
        npy_error(
            NpyRule::UnsupportedDtype,
            format!("the element type {descr:?}, which no tensor has"),
        )
    };
    let (order, code) = match descr.as_bytes().first() {
        Some(b'<' | b'|' | b'=') => ('<', &descr[1..]),
        Some(b'>') => ('>', &descr[1..]),
        _ => ('<', descr),
    };
    let dtype = match code {
        "b1" => Dtype::BOOL,
        "u1" => Dtype::U8,
        "i1" => Dtype::I8,
        "u2" => Dtype::U16,
        "i2" => Dtype::I16,
        "f2" => Dtype::F16,
        "u4" => Dtype::U32,
        "i4" => Dtype::I32,
        "f4" => Dtype::F32,
        "c8" => Dtype::C64,
        "u8" => Dtype::U64,
        "i8" => Dtype::I64,
        "f8" => Dtype::F64,
        "c16" => Dtype::C128,
        _ => return Err(unsupported()),
    };
    let one_byte = matches!(code, "b1" | "u1" | "i1");
    Ok((dtype, order == '>' && !one_byte))
}

/// A value of the header's dict.
#[derive(Debug, PartialEq)]
enum Item {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
    /// A list (a structured dtype's fields), not looked into further.
    List,
}

/// The header's text, read as the Python literal numpy writes: a dict of strings, booleans,
/// tuples of integers and (for a structured dtype) lists. Nothing is evaluated.
struct Literal<'a> {
    rest: &'a str,
}

impl Literal<'_> {
    fn bad(&self, what: &str) -> NpyError {
        npy_error(NpyRule::BadHeader, format!("a header dict with {what}"))
    }

    fn skip_space(&mut self) {
        self.rest = self.rest.trim_start();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        match self.rest.strip_prefix(token) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn dict(&mut self) -> Result<Vec<(String, Item)>, NpyError> {
        if !self.eat("{") {
            return Err(self.bad("no opening brace"));
        }
        let mut out: Vec<(String, Item)> = Vec::new();
        while !self.eat("}") {
            let key = self.string()?;
            if !self.eat(":") {
                return Err(self.bad("a key without a value"));
            }
            let value = self.item(0)?;
            if out.iter().any(|(k, _)| *k == key) {
                return Err(self.bad(&format!("the key {key:?} twice")));
            }
            out.push((key, value));
            if out.len() > 3 {
                return Err(self.bad("more keys than descr, fortran_order and shape"));
            }
            if self.eat(",") {
                continue;
            }
            if self.eat("}") {
                break;
            }
            return Err(self.bad("items not separated by commas, or no closing brace"));
        }
        Ok(out)
    }

    fn string(&mut self) -> Result<String, NpyError> {
        self.skip_space();
        let quote = match self.rest.chars().next() {
            Some(q @ ('\'' | '"')) => q,
            _ => return Err(self.bad("a key or value that is not a string")),
        };
        let body = &self.rest[1..];
        let Some(end) = body.find(quote) else {
            return Err(self.bad("an unterminated string"));
        };
        if body[..end].contains('\\') {
            return Err(self.bad("an escape in a string"));
        }
        let s = body[..end].to_string();
        self.rest = &body[end + 1..];
        Ok(s)
    }

    fn item(&mut self, depth: usize) -> Result<Item, NpyError> {
        self.skip_space();
        if depth > 8 {
            return Err(self.bad("lists nested too deep"));
        }
        if self.eat("True") {
            return Ok(Item::Bool(true));
        }
        if self.eat("False") {
            return Ok(Item::Bool(false));
        }
        if self.eat("(") {
            let mut dims = Vec::new();
            while !self.eat(")") {
                self.skip_space();
                let digits = self.rest.len()
                    - self
                        .rest
                        .trim_start_matches(|c: char| c.is_ascii_digit())
                        .len();
                if digits == 0 {
                    return Err(self.bad("a shape that is not a tuple of integers"));
                }
                let dim = self.rest[..digits]
                    .parse::<usize>()
                    .map_err(|_| self.bad("a dimension too large"))?;
                self.rest = &self.rest[digits..];
                dims.push(dim);
                if dims.len() > 64 {
                    return Err(self.bad("more than 64 dimensions"));
                }
                if !self.eat(",") && !self.rest.trim_start().starts_with(')') {
                    return Err(self.bad("a shape whose dimensions are not separated by commas"));
                }
            }
            return Ok(Item::Tuple(dims));
        }
        if self.eat("[") {
            while !self.eat("]") {
                if self.rest.trim().is_empty() {
                    return Err(self.bad("an unterminated list"));
                }
                if self.eat("(") {
                    while !self.eat(")") {
                        self.item(depth + 1)?;
                        self.eat(",");
                        if self.rest.trim().is_empty() {
                            return Err(self.bad("an unterminated tuple"));
                        }
                    }
                } else {
                    self.item(depth + 1)?;
                }
                self.eat(",");
            }
            return Ok(Item::List);
        }
        self.string().map(Item::Str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn header(tensor: &Tensor) -> Option<Vec<u8>> {
        header_as(tensor.dtype, tensor)
    }

    pub(super) fn tensor(dtype: Dtype, shape: &[usize]) -> Tensor {
        Tensor {
            name: "t".into(),
            dtype,
            shape: shape.into(),
            begin: 0,
            end: 0,
            strides: None,
            computed: None,
            file: None,
        }
    }

    #[test]
    fn layout_of_the_header() {
        let h = header(&tensor(Dtype::F32, &[3, 4])).unwrap();
        assert_eq!(h.len() % ALIGN, 0);
        assert_eq!(&h[..8], MAGIC);
        assert_eq!(u16::from_le_bytes([h[8], h[9]]) as usize, h.len() - 10);
        assert_eq!(*h.last().unwrap(), b'\n');
        let text = std::str::from_utf8(&h[10..]).unwrap();
        assert!(text.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"));
    }

    #[test]
    fn shapes_as_python_tuples() {
        let text = |shape: &[usize]| {
            String::from_utf8(header(&tensor(Dtype::U8, shape)).unwrap()[10..].to_vec())
        };
        assert!(text(&[]).unwrap().contains("'shape': (), "));
        assert!(text(&[7]).unwrap().contains("'shape': (7,), "));
        assert!(text(&[0, 2, 1]).unwrap().contains("'shape': (0, 2, 1), "));
    }

    #[test]
    fn dtypes_numpy_lacks_get_no_header() {
        for d in [
            Dtype::BF16,
            Dtype::F8_E4M3,
            Dtype::F8_E5M2,
            Dtype::F6_E2M3,
            Dtype::F4,
        ] {
            assert!(header(&tensor(d, &[2])).is_none(), "{d:?}");
        }
        assert!(header(&tensor(Dtype::U8, &vec![1; 30_000])).is_none());
    }
}

/// Whole headers, byte for byte, against what numpy 2.4's `format.write_array_header_1_0` writes
/// for the same dtype and shape (recorded from numpy, not from this code): the dict, then spaces,
/// then a newline, the total a multiple of 64.
#[cfg(test)]
mod numpy_tables {
    use super::tests::{header, tensor};
    use super::*;

    /// The header numpy writes: magic, version 1.0, the length of the rest (little-endian), the
    /// dict, spaces, `\n`, `total` bytes in all.
    fn numpy_header(dict: &str, total: usize) -> Vec<u8> {
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&u16::try_from(total - 10).unwrap().to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        assert!(out.len() < total);
        out.resize(total - 1, b' ');
        out.push(b'\n');
        out
    }

    #[test]
    fn every_dtype_numpy_has_gets_numpy_s_header() {
        // (dtype, shape, descr and shape as numpy writes them, total header length, why)
        type Row<'a> = (Dtype, &'a [usize], &'a str, &'a str, usize, &'a str);
        let table: &[Row] = &[
            (
                Dtype::BOOL,
                &[],
                "|b1",
                "()",
                128,
                "0-d: `()`, no growth padding",
            ),
            (Dtype::U8, &[7], "|u1", "(7,)", 128, "1-d: Python's `(7,)`"),
            (Dtype::I8, &[2, 3], "|i1", "(2, 3)", 128, ""),
            (Dtype::I16, &[0], "<i2", "(0,)", 128, "empty"),
            (Dtype::U16, &[1], "<u2", "(1,)", 128, ""),
            (Dtype::F16, &[4, 4], "<f2", "(4, 4)", 128, ""),
            (
                Dtype::I32,
                &[0, 2, 1],
                "<i4",
                "(0, 2, 1)",
                128,
                "empty, 3-d",
            ),
            (Dtype::U32, &[], "<u4", "()", 128, "0-d"),
            (Dtype::F32, &[3, 100_000], "<f4", "(3, 100000)", 128, ""),
            (Dtype::C64, &[5], "<c8", "(5,)", 128, "complex64"),
            (Dtype::F64, &[1, 1, 1, 1], "<f8", "(1, 1, 1, 1)", 128, ""),
            (
                Dtype::I64,
                &[1_000_000_000_000],
                "<i8",
                "(1000000000000,)",
                128,
                "13 digits",
            ),
            (Dtype::U64, &[2], "<u8", "(2,)", 128, ""),
        ];
        for &(dtype, shape, descr, tuple, total, why) in table {
            let dict =
                format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}");
            assert_eq!(
                header(&tensor(dtype, shape)),
                Some(numpy_header(&dict, total)),
                "{dtype:?} {shape:?} {why}"
            );
        }
    }

    #[test]
    fn padding_to_64_bytes_at_numpy_s_boundaries() {
        // (dimensions of size 1, total header length, why). The unpadded length is
        // 10 + dict + 21 - digits of the first dimension (room for it to grow) + 1 (`\n`).
        let table: &[(usize, usize, &str)] = &[
            (14, 128, "126 bytes unpadded: the next multiple of 64"),
            (
                15,
                192,
                "129 unpadded: over 128 only because of the growth room",
            ),
            (35, 192, "189 unpadded"),
            (
                36,
                256,
                "exactly 192 unpadded: numpy still pads, 1 to 64 spaces",
            ),
            (21_817, 65_536, "the longest header NPY 1.0 holds"),
        ];
        for &(n, total, why) in table {
            let shape = vec![1; n];
            let tuple = format!("({})", vec!["1"; n].join(", "));
            let dict = format!("{{'descr': '|u1', 'fortran_order': False, 'shape': {tuple}, }}");
            let got = header(&tensor(Dtype::U8, &shape));
            assert_eq!(got.as_ref().map(Vec::len), Some(total), "{n} dims: {why}");
            assert_eq!(got, Some(numpy_header(&dict, total)), "{n} dims: {why}");
        }
        // numpy refuses 21,818 dimensions in version 1.0 ("Header length 65528 too big").
        assert_eq!(header(&tensor(Dtype::U8, &vec![1; 21_818])), None);
    }

    #[test]
    fn dtypes_numpy_lacks_get_no_view() {
        for dtype in [
            Dtype::BF16,
            Dtype::F8_E4M3,
            Dtype::F8_E5M2,
            Dtype::F8_E8M0,
            Dtype::F6_E2M3,
            Dtype::F6_E3M2,
            Dtype::F4,
        ] {
            assert_eq!(header(&tensor(dtype, &[2])), None, "{dtype:?}");
            assert_eq!(header(&tensor(dtype, &[])), None, "{dtype:?} 0-d");
        }
    }

    /// Headers as numpy 2 writes them (`np.save`, `write_array(version=(2, 0))`), copied from its
    /// output: the oracle of [`parse`].
    #[test]
    fn headers_numpy_writes_are_parsed() {
        let pad = |dict: &str, to: usize| format!("{dict}{}\n", " ".repeat(to - dict.len() - 1));
        let v1 = |dict: &str| {
            let text = pad(dict, 118);
            [&b"\x93NUMPY\x01\x00v\x00"[..], text.as_bytes()].concat()
        };
        let h = parse(&v1(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        ))
        .unwrap();
        assert_eq!(
            h,
            Header {
                dtype: Dtype::F32,
                big_endian: false,
                fortran_order: false,
                shape: vec![2, 3],
                data_start: 128
            }
        );
        let h = parse(&v1(
            "{'descr': '>i8', 'fortran_order': False, 'shape': (), }",
        ))
        .unwrap();
        assert_eq!(
            (h.dtype, h.big_endian, &h.shape[..]),
            (Dtype::I64, true, &[][..])
        );
        let h = parse(&v1(
            "{'descr': '<u2', 'fortran_order': True, 'shape': (2, 3), }",
        ))
        .unwrap();
        assert!(h.fortran_order && h.dtype == Dtype::U16);
        let h = parse(&v1(
            "{'descr': '|b1', 'fortran_order': False, 'shape': (5,), }",
        ))
        .unwrap();
        assert_eq!(
            (h.dtype, h.big_endian, &h.shape[..]),
            (Dtype::BOOL, false, &[5][..])
        );
        let h = parse(&v1(
            "{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }",
        ))
        .unwrap();
        assert_eq!(h.dtype, Dtype::C128);
        let text = pad(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
            116,
        );
        let v2 = [&b"\x93NUMPY\x02\x00t\x00\x00\x00"[..], text.as_bytes()].concat();
        assert_eq!(parse(&v2).unwrap().data_start, 128);
        // What numpy loads only with pickles, or as records: refused by rule.
        let object = parse(&v1(
            "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }",
        ));
        assert_eq!(object.unwrap_err().rule, NpyRule::UnsupportedDtype);
        let record =
            v1("{'descr': [('r', '<f4'), ('i', '<f4')], 'fortran_order': False, 'shape': (2,), }");
        assert_eq!(parse(&record).unwrap_err().rule, NpyRule::UnsupportedDtype);
        // What this crate writes reads back.
        let t = tensor(Dtype::F64, &[7, 1, 3]);
        let h = parse(&header(&t).unwrap()).unwrap();
        assert_eq!(
            (h.dtype, &h.shape[..], h.data_start % 64),
            (Dtype::F64, &[7, 1, 3][..], 0)
        );
    }

    #[test]
    fn hostile_headers_are_refused_by_rule() {
        let rule = |b: &[u8]| parse(b).unwrap_err().rule;
        assert_eq!(rule(b"\x93NUMPX\x01\x00\x02\x00{}"), NpyRule::NotNpy);
        assert_eq!(rule(b"\x93NUMPY\x04\x00\x02\x00{}"), NpyRule::NotNpy);
        assert_eq!(rule(b"\x93NUMPY"), NpyRule::NotNpy);
        assert_eq!(
            rule(b"\x93NUMPY\x02\x00\xff\xff\xff\xff{}"),
            NpyRule::HeaderLength
        );
        assert_eq!(rule(b"\x93NUMPY\x01\x00\x40\x00{}"), NpyRule::HeaderLength);
        let v1 = |text: &str| {
            let mut b = b"\x93NUMPY\x01\x00".to_vec();
            b.extend_from_slice(&(text.len() as u16).to_le_bytes());
            b.extend_from_slice(text.as_bytes());
            b
        };
        for bad in [
            "{'descr': '<f4', 'fortran_order': False}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}",
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}",
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
            "{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} trailing",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,",
            "{'descr': '\\x41', 'fortran_order': False, 'shape': (2,)}",
            "__import__('os').system('true')",
            "{'descr': [[[[[[[[[[[[]]]]]]]]]]]], 'fortran_order': False, 'shape': (2,)}",
        ] {
            assert!(parse(&v1(bad)).is_err(), "{bad}");
        }
        assert_eq!(
            rule(&v1(
                "{'descr': '<U5', 'fortran_order': False, 'shape': (2,)}"
            )),
            NpyRule::UnsupportedDtype
        );
    }
}
