//! A tensor consolidated from its chunks: the chunks checked to cover it exactly once, and its
//! bytes gathered from them on read ([`Grid`], a [`Computed`] tensor whose chunks lie in the
//! checkpoint's data files).
//!
//! The chunks' boundaries along each dimension cut the tensor into cells, each inside exactly one
//! chunk when the chunks cover the tensor once (a grid of `r × c` chunks has `r × c` cells). The
//! cells are what the check marks, and what a read looks its chunk up in.

use std::io::{self, IoSliceMut};

use crate::format::description::{Computed, MAX_SLICES, ReadAt};

/// Most cells a tensor's chunks may cut it into, per chunk (a grid has one a chunk; chunks that
/// are not a grid have more).
const CELLS_PER_CHUNK: usize = 16;
/// Most cells whatever the chunks.
const MIN_CELLS: usize = 1 << 16;
/// Gathered runs of one data file that lie within this many bytes of each other (or within twice
/// their length) are read in one call.
const GATHER_SPAN: u64 = 1 << 20;
/// The longest spare buffer a thread keeps between reads.
const KEEP_SPARE: u64 = 2 << 20;

thread_local! {
    /// What a read gathers runs through: the bytes between them, or the stretch they lie in;
    /// kept between reads.
    static SPARE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A chunk whose archive was read: where it lies in the tensor and where its elements are.
#[derive(Debug)]
pub(super) struct Placed {
    pub offsets: Box<[u64]>,
    pub sizes: Box<[u64]>,
    /// Its data file (an index into the description's files).
    pub file: u32,
    /// Where its element 0 is in that file.
    pub begin: u64,
    /// The distance in elements between neighbours along each dimension, as its archive says.
    pub strides: Box<[u64]>,
}

impl Placed {
    fn numel(&self) -> u64 {
        self.sizes.iter().product()
    }
}

/// A tensor's bytes gathered from its chunks on read.
#[derive(Debug)]
pub(super) struct Grid {
    shape: Box<[u64]>,
    elem: u64,
    chunks: Box<[Placed]>,
    /// Each dimension's cut points: 0, the tensor's size, and every chunk's start and end.
    cuts: Box<[Box<[u64]>]>,
    /// The chunk of each cell, cells in C order.
    cells: Box<[u32]>,
}

/// The strides of a C-order tensor of `shape`.
pub(super) fn row_major(shape: &[u64]) -> Box<[u64]> {
    let mut strides = vec![1u64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1].saturating_mul(shape[d + 1]);
    }
    strides.into()
}

/// The cell index along one dimension of the cut at `at` (a cut point).
fn cut_index(cuts: &[u64], at: u64) -> usize {
    cuts.partition_point(|&c| c < at)
}

impl Grid {
    /// The tensor of `shape` and elements of `elem` bytes made of `chunks` (the empty ones
    /// dropped), or why they do not cover it exactly once (in words, naming chunks by their
    /// offsets).
    pub fn of(shape: &[u64], elem: u64, chunks: Vec<Placed>) -> Result<Grid, String> {
        let chunks: Vec<Placed> = chunks.into_iter().filter(|c| c.numel() > 0).collect();
        let mut cuts: Vec<Vec<u64>> = shape.iter().map(|&n| vec![0, n]).collect();
        for c in &chunks {
            for (d, cut) in cuts.iter_mut().enumerate() {
                cut.push(c.offsets[d]);
                cut.push(c.offsets[d] + c.sizes[d]);
            }
        }
        for cut in &mut cuts {
            cut.sort_unstable();
            cut.dedup();
        }
        let limit = chunks.len().saturating_mul(CELLS_PER_CHUNK).max(MIN_CELLS);
        let counts: Vec<usize> = cuts.iter().map(|c| c.len() - 1).collect();
        let cells = counts
            .iter()
            .try_fold(1usize, |n, &c| n.checked_mul(c))
            .filter(|&n| n <= limit)
            .ok_or_else(|| {
                format!(
                    "{} chunks cut it into more pieces than a grid of chunks does",
                    chunks.len()
                )
            })?;
        let mut owner = vec![u32::MAX; cells];
        for (i, c) in chunks.iter().enumerate() {
            let ranges: Vec<(usize, usize)> = (0..shape.len())
                .map(|d| {
                    let from = cut_index(&cuts[d], c.offsets[d]);
                    (from, cut_index(&cuts[d], c.offsets[d] + c.sizes[d]))
                })
                .collect();
            let lens: Vec<usize> = ranges.iter().map(|r| r.1 - r.0).collect();
            for k in 0..lens.iter().product::<usize>() {
                // The chunk's `k`th cell, last dimension fastest.
                let (mut rest, mut cell, mut scale) = (k, 0, 1);
                for d in (0..shape.len()).rev() {
                    cell += (ranges[d].0 + rest % lens[d]) * scale;
                    rest /= lens[d];
                    scale *= counts[d];
                }
                if owner[cell] != u32::MAX {
                    let other = &chunks[owner[cell] as usize];
                    return Err(format!(
                        "its chunks at {:?} and {:?} overlap",
                        other.offsets, c.offsets
                    ));
                }
                owner[cell] = i as u32;
            }
        }
        if let Some(hole) = owner.iter().position(|&o| o == u32::MAX) {
            let mut rest = hole;
            let mut at = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                at[d] = cuts[d][rest % counts[d]];
                rest /= counts[d];
            }
            return Err(format!("no chunk holds its elements at {at:?}"));
        }
        Ok(Grid {
            shape: shape.into(),
            elem,
            chunks: chunks.into(),
            cuts: cuts.into_iter().map(Vec::into_boxed_slice).collect(),
            cells: owner.into(),
        })
    }

    /// The one chunk that holds the whole tensor, if one does.
    pub fn whole(&self) -> Option<&Placed> {
        match &self.chunks[..] {
            [one] => Some(one),
            _ => None,
        }
    }

    /// Calls `run(file, at, len)` for each stretch of a data file that holds bytes
    /// `[offset, offset + len)` of the tensor, in order; touching stretches are given as one.
    fn runs(&self, offset: u64, len: u64, run: &mut impl FnMut(u32, u64, u64)) {
        let dims = self.shape.len();
        let elem = self.elem;
        let end = offset + len;
        let mut pending: Option<(u32, u64, u64)> = None;
        let mut emit = |file: u32, at: u64, n: u64| {
            pending = match pending {
                Some((f, a, m)) if f == file && a + m == at => Some((f, a, m + n)),
                Some((f, a, m)) => {
                    run(f, a, m);
                    Some((file, at, n))
                }
                None => Some((file, at, n)),
            };
        };
        if dims == 0 {
            let c = &self.chunks[0];
            emit(c.file, c.begin + offset, len);
        } else {
            let row = self.shape[dims - 1] * elem;
            let last = &self.cuts[dims - 1];
            let counts: Vec<usize> = self.cuts.iter().map(|c| c.len() - 1).collect();
            let mut r = offset / row;
            let mut index = vec![0u64; dims];
            while r * row < end {
                // The row's index along the leading dimensions, and their cells.
                let mut rest = r;
                for d in (0..dims - 1).rev() {
                    index[d] = rest % self.shape[d];
                    rest /= self.shape[d];
                }
                let lead = (0..dims - 1).fold(0usize, |acc, d| {
                    acc * counts[d] + self.cuts[d].partition_point(|&c| c <= index[d]) - 1
                });
                let (lo, hi) = (offset.max(r * row), end.min((r + 1) * row));
                for j in 0..counts[dims - 1] {
                    let (from, to) = (last[j] * elem + r * row, last[j + 1] * elem + r * row);
                    let (from, to) = (from.max(lo), to.min(hi));
                    if from >= to {
                        continue;
                    }
                    let c = &self.chunks[self.cells[lead * counts[dims - 1] + j] as usize];
                    // The chunk's element holding byte `from` of the row.
                    let x = (from - r * row) / elem;
                    index[dims - 1] = x;
                    let at_elem: u64 = (0..dims)
                        .map(|d| (index[d] - c.offsets[d]) * c.strides[d])
                        .sum();
                    let skew = (from - r * row) % elem;
                    if c.strides[dims - 1] == 1 {
                        emit(c.file, c.begin + at_elem * elem + skew, to - from);
                    } else {
                        // Elements of the row apart in the chunk: one at a time.
                        let mut b = from;
                        let mut at = at_elem;
                        while b < to {
                            let in_elem = (b - r * row) % elem;
                            let n = (elem - in_elem).min(to - b);
                            emit(c.file, c.begin + at * elem + in_elem, n);
                            b += n;
                            at += c.strides[dims - 1];
                        }
                    }
                }
                r += 1;
            }
        }
        if let Some((f, a, m)) = pending {
            run(f, a, m);
        }
    }
}

impl Computed for Grid {
    fn runs(&self, offset: u64, len: u64, run: &mut dyn FnMut(u32, u64, u64)) -> bool {
        Grid::runs(self, offset, len, &mut |f, at, n| run(f, at, n));
        true
    }

    fn read(&self, read: &mut ReadAt<'_>, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let mut runs: Vec<(u32, u64, u64)> = Vec::new();
        self.runs(offset, out.len() as u64, &mut |f, at, n| {
            runs.push((f, at, n))
        });
        SPARE.with_borrow_mut(|spare| {
            let done = gather(read, &runs, out, spare);
            if spare.capacity() as u64 > KEEP_SPARE {
                *spare = Vec::new();
            }
            done
        })
    }
}

/// Reads `runs` (each a data file, where in it and how long; their bytes one after the other in
/// `out`) into `out`, file by file. A file's runs close together are read in one call: straight
/// where they go (the bytes between them into `spare`) where they are at most [`MAX_SLICES`]
/// buffers and none overlaps another, else as one stretch into `spare`, then copied. Runs far
/// apart are read one by one.
fn gather(
    read: &mut ReadAt<'_>,
    runs: &[(u32, u64, u64)],
    out: &mut [u8],
    spare: &mut Vec<u8>,
) -> io::Result<()> {
    // Where each run's bytes go.
    let mut places: Vec<Option<&mut [u8]>> = Vec::with_capacity(runs.len());
    let mut rest = out;
    for r in runs {
        let (here, after) = std::mem::take(&mut rest).split_at_mut(r.2 as usize);
        places.push(Some(here));
        rest = after;
    }
    let mut place = |i: usize| {
        places[i]
            .take()
            .ok_or_else(|| io::Error::other("a run read twice"))
    };
    let mut files: Vec<u32> = runs.iter().map(|r| r.0).collect();
    files.sort_unstable();
    files.dedup();
    for file in files {
        let mut mine: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].0 == file).collect();
        mine.sort_by_key(|&i| runs[i].1);
        let low = mine.first().map_or(0, |&i| runs[i].1);
        let high = mine
            .iter()
            .map(|&i| runs[i].1 + runs[i].2)
            .max()
            .unwrap_or(0);
        let total: u64 = mine.iter().map(|&i| runs[i].2).sum();
        let overlap = mine
            .windows(2)
            .any(|w| runs[w[1]].1 < runs[w[0]].1 + runs[w[0]].2);
        if mine.len() == 1 || high - low > GATHER_SPAN.max(2 * total) {
            for &i in &mine {
                read.read_at(Some(file), &mut [IoSliceMut::new(place(i)?)], runs[i].1)?;
            }
        } else if !overlap && 2 * mine.len() <= MAX_SLICES {
            spare.resize((high - low - total) as usize, 0);
            let mut gaps = &mut spare[..];
            let mut slices = Vec::with_capacity(2 * mine.len());
            let mut end = low;
            for &i in &mine {
                let (_, at, n) = runs[i];
                if at > end {
                    let (gap, after) = std::mem::take(&mut gaps).split_at_mut((at - end) as usize);
                    slices.push(IoSliceMut::new(gap));
                    gaps = after;
                }
                slices.push(IoSliceMut::new(place(i)?));
                end = at + n;
            }
            read.read_at(Some(file), &mut slices, low)?;
        } else {
            spare.resize((high - low) as usize, 0);
            read.read_at(Some(file), &mut [IoSliceMut::new(spare)], low)?;
            for &i in &mine {
                let (_, at, n) = runs[i];
                let from = (at - low) as usize;
                place(i)?.copy_from_slice(&spare[from..from + n as usize]);
            }
        }
    }
    Ok(())
}
