//! Bytes that are not one stretch of their source: where the stored bytes of a strided tensor
//! (a transposed or sliced view saved by `torch.save`) lie in the source, as runs of contiguous
//! bytes in the order they are presented.

use std::sync::Arc;

use super::file::Source;
use crate::format::Tensor;

/// Where the stored bytes of a piece of a read lie in its source.
#[derive(Debug, Clone)]
pub enum Stored {
    /// One stretch, from the piece's start.
    Contiguous,
    /// The elements of a strided tensor, gathered in C order.
    Strided(Arc<Tensor>),
    /// The bytes of a tensor computed from its stored values (see
    /// [`Tensor::computed`](crate::format::Tensor)), the piece's start being its `begin`, with
    /// the data files of its description (which a tensor gathered from chunks reads).
    Computed(Arc<Tensor>, Arc<[Arc<Source>]>),
}

impl Stored {
    pub fn is_computed(&self) -> bool {
        matches!(self, Stored::Computed(..))
    }
}

/// Calls `run(at, len)` for each stretch of the source, in presented order, that holds stored
/// bytes `[offset, offset + len)` of `tensor` (contiguous or strided), whose element 0 is at byte
/// `start` of the source. Neighbouring stretches that touch are given as one.
pub fn tensor_runs(
    tensor: &Tensor,
    start: u64,
    offset: u64,
    len: u64,
    run: &mut impl FnMut(u64, u64),
) {
    let len = len.min(tensor.size().saturating_sub(offset));
    if len == 0 {
        return;
    }
    let Some(strides) = &tensor.strides else {
        run(start + offset, len);
        return;
    };
    if strides.len() != tensor.shape.len() {
        // Never made by a reader; nothing to gather.
        return;
    }
    let elem = tensor.element_size();
    let shape = &tensor.shape;
    let end = offset + len;
    let mut i = offset / elem;
    // The multi-index of element `i`, last dimension fastest.
    let mut index = vec![0u64; shape.len()];
    let mut rest = i;
    for (d, n) in shape.iter().enumerate().rev() {
        let n = *n as u64;
        index[d] = rest % n.max(1);
        rest /= n.max(1);
    }
    let inner = shape.len().checked_sub(1);
    let mut pending: Option<(u64, u64)> = None;
    while i * elem < end {
        let at_elem: u64 = index.iter().zip(strides.iter()).map(|(x, s)| x * s).sum();
        // How many elements from here are contiguous in the source: the rest of the row when the
        // last dimension's stride is 1, else one.
        let count = match inner {
            Some(d) if strides[d] == 1 => shape[d] as u64 - index[d],
            _ => 1,
        };
        let from = (i * elem).max(offset);
        let to = ((i + count) * elem).min(end);
        let at = start + at_elem * elem + (from - i * elem);
        pending = match pending {
            Some((a, n)) if a + n == at => Some((a, n + to - from)),
            Some((a, n)) => {
                run(a, n);
                Some((at, to - from))
            }
            None => Some((at, to - from)),
        };
        i += count;
        // Advance the index by `count` (a whole row, or one element).
        let mut carry = count;
        for d in (0..shape.len()).rev() {
            let n = shape[d] as u64;
            let sum = index[d] + carry;
            index[d] = sum % n.max(1);
            carry = sum / n.max(1);
            if carry == 0 {
                break;
            }
        }
    }
    if let Some((a, n)) = pending {
        run(a, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Dtype;

    fn strided(shape: &[usize], strides: Option<&[u64]>, begin: u64) -> Tensor {
        let numel: usize = shape.iter().product();
        Tensor {
            name: "t".into(),
            dtype: Dtype::I16,
            shape: shape.into(),
            begin,
            end: begin + 2 * numel as u64,
            strides: strides.map(Into::into),
            computed: None,
            file: None,
        }
    }

    /// The bytes the runs name, from a source whose byte `i` is `i as u8`.
    fn gathered(t: &Tensor, offset: u64, len: u64) -> Vec<u8> {
        let mut out = Vec::new();
        tensor_runs(t, t.begin, offset, len, &mut |at, n| {
            out.extend((at..at + n).map(|b| b as u8))
        });
        out
    }

    /// The same by the definition: element (r, c) of a 2-D view is stored at
    /// `begin + 2 * (r * s0 + c * s1)`.
    fn by_definition(rows: u64, cols: u64, s: [u64; 2], begin: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for r in 0..rows {
            for c in 0..cols {
                let at = begin + 2 * (r * s[0] + c * s[1]);
                out.extend([at as u8, (at + 1) as u8]);
            }
        }
        out
    }

    #[test]
    fn strided_views_gather_their_elements_in_c_order() {
        // A transposed 3x4 (stored 4x3), a column slice with an offset, a broadcast row.
        for (shape, s, begin) in [
            ([3usize, 4usize], [1u64, 3u64], 10u64),
            ([4, 2], [5, 1], 2),
            ([3, 5], [0, 1], 0),
        ] {
            let t = strided(&shape, Some(&s), begin);
            let whole = by_definition(shape[0] as u64, shape[1] as u64, s, begin);
            assert_eq!(gathered(&t, 0, t.size()), whole, "{shape:?} {s:?}");
            // Every window, odd offsets and lengths included.
            for off in 0..t.size() {
                for len in [1, 3, 7, 100] {
                    let want: Vec<u8> =
                        whole.iter().copied().skip(off as usize).take(len).collect();
                    assert_eq!(
                        gathered(&t, off, len as u64),
                        want,
                        "{shape:?} at {off}+{len}"
                    );
                }
            }
        }
    }

    #[test]
    fn contiguous_rows_are_one_run_each_and_touching_runs_merge() {
        let t = strided(&[4, 2], Some(&[5, 1]), 0);
        let mut runs = Vec::new();
        tensor_runs(&t, t.begin, 0, t.size(), &mut |a, n| runs.push((a, n)));
        assert_eq!(runs, [(0, 4), (10, 4), (20, 4), (30, 4)]);
        let t = strided(&[4, 2], Some(&[2, 1]), 6);
        runs.clear();
        tensor_runs(&t, t.begin, 0, t.size(), &mut |a, n| runs.push((a, n)));
        assert_eq!(runs, [(6, 16)]);
    }
}
