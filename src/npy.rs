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

/// The NPY header for a tensor, or `None` if numpy cannot describe its dtype or the header would
/// not fit version 1.0 (a shape of thousands of dimensions).
pub fn header(tensor: &Tensor) -> Option<Vec<u8>> {
    let descr = descr(tensor.dtype)?;
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

    fn tensor(dtype: Dtype, shape: &[usize]) -> Tensor {
        Tensor {
            name: "t".into(),
            dtype,
            shape: shape.into(),
            begin: 0,
            end: 0,
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
