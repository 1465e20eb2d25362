//! NPY 1.0 headers for `-o npy`: the bytes numpy's `format.write_array` would put before a C-order
//! array of a tensor's dtype and shape, so that `numpy.load(path, mmap_mode='r')` reads the tensor
//! bytes that follow unchanged. Knows nothing of FUSE.

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
}
