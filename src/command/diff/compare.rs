//! The reads of a diff: tensors of A and B compared byte for byte (read together, chunk by chunk,
//! stopping at the first chunk that differs), float tensors compared element by element
//! (`--values`), and the SHA-256 of tensors found on one side only, all spread over one thread per
//! CPU, largest tensors first.

use std::cmp::Reverse;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;

use super::units::Item;
use crate::base::digest::{Hasher, Sha256};
use crate::base::parallel;
use crate::format::Dtype;
use crate::format::widen::{Target, Widening};
use crate::namespace::tensor_bytes;
use crate::source::ReadError;

/// Tensors up to this size are compared by reading A's whole, then B's against it; larger ones
/// with B read on a thread of its own, a chunk ahead.
const SMALL: u64 = 4 << 20;

/// Bytes compared element by element at a time once they differ (a multiple of every element
/// size).
const BLOCK: usize = 4096;

/// One read to make.
pub enum Job<'a> {
    /// Compare a tensor of A with the tensor of B of the same name, dtype and shape; `values`:
    /// element by element if it is a float tensor.
    Compare {
        a: &'a Item,
        b: &'a Item,
        values: bool,
    },
    /// The SHA-256 of a tensor's bytes.
    Hash(&'a Item),
}

impl Job<'_> {
    /// How many bytes of one side it reads at most.
    fn size(&self) -> u64 {
        match self {
            Job::Compare { a, .. } => a.tensor.size(),
            Job::Hash(item) => item.tensor.size(),
        }
    }
}

/// What a job found.
#[derive(Debug, Clone, PartialEq)]
pub enum Done {
    Same,
    /// The bytes differ; with how the values differ where they were compared.
    Differ(Option<Values>),
    Digest(Sha256),
}

/// How the values of two float tensors differ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Values {
    /// Elements in the tensor.
    pub elements: u64,
    /// Elements whose values are not equal (`+0` equals `-0`, a NaN equals any NaN).
    pub differing: u64,
    /// The largest `|a - b|` over them, computed in float64; infinite where one side is NaN (or
    /// infinite, the other not the same infinity). 0 when no element differs.
    pub max_abs_diff: f64,
}

/// Every job done, in the order given; the first error (a message naming the file) stops the
/// rest.
pub fn run(jobs: &[Job<'_>]) -> Result<Vec<Done>, String> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| Reverse(jobs[i].size()));
    let failed = AtomicBool::new(false);
    // `None`: not done, as an earlier job failed.
    let done = parallel::on_cpus(&order, |&i| {
        if failed.load(Ordering::Relaxed) {
            return None;
        }
        let done = one(&jobs[i]);
        if done.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        Some(done)
    });
    let mut out: Vec<Option<Done>> = jobs.iter().map(|_| None).collect();
    for (&i, done) in order.iter().zip(done) {
        match done {
            Some(Ok(d)) => out[i] = Some(d),
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    out.into_iter()
        .map(|d| d.ok_or_else(|| "diff: a comparison was left undone".to_string()))
        .collect()
}

/// Does one job.
fn one(job: &Job<'_>) -> Result<Done, String> {
    match *job {
        Job::Hash(item) => {
            let mut hasher = Hasher::default();
            read(item, |chunk| {
                hasher.update(chunk);
                true
            })?;
            Ok(Done::Digest(hasher.finish()))
        }
        Job::Compare { a, b, values } => {
            if same_bytes(a, b) {
                return Ok(Done::Same);
            }
            let mut counter = values.then(|| Counter::new(a)).flatten();
            let mut differ = false;
            zip(a, b, |x, y| {
                differ |= x != y;
                match &mut counter {
                    Some(c) => {
                        c.feed(x, y);
                        true
                    }
                    None => !differ,
                }
            })?;
            Ok(match differ {
                false => Done::Same,
                true => Done::Differ(counter.map(|c| c.values(a))),
            })
        }
    }
}

/// Whether `a` and `b` are the same stored bytes of the same version of one file (a model compared
/// with itself): equal without reading them.
fn same_bytes(a: &Item, b: &Item) -> bool {
    a.source.path == b.source.path
        && a.source.version == b.source.version
        && a.tensor.start(a.source.data_start()) == b.tensor.start(b.source.data_start())
        && a.tensor.size() == b.tensor.size()
        && a.tensor.strides == b.tensor.strides
        && a.tensor.computed.is_none()
        && b.tensor.computed.is_none()
        && a.tensor.shape == b.tensor.shape
}

/// The bytes of `item` as its tensor file serves them, to `each` (false: stop); a failed read is
/// a message naming the file.
fn read(item: &Item, each: impl FnMut(&[u8]) -> bool) -> Result<(), String> {
    tensor_bytes(&item.source, &item.tensor, &item.data, each).map_err(|e| {
        let what = match e {
            ReadError::Changed(_) => "changed in place while it was read".to_string(),
            ReadError::Io(m) => format!("read error: {m}"),
        };
        format!(
            "{}: tensor {:?}: {what}",
            item.source.path.display(),
            item.tensor.name
        )
    })
}

/// The bytes of `a` and `b` (of one size), read together and handed to `each` as slices of equal
/// length, in order, until `each` returns false.
fn zip(a: &Item, b: &Item, mut each: impl FnMut(&[u8], &[u8]) -> bool) -> Result<(), String> {
    let size = a.tensor.size();
    let short = || {
        format!(
            "{}: tensor {:?}: fewer bytes than its size",
            b.source.path.display(),
            b.tensor.name
        )
    };
    if size <= SMALL {
        return zip_small(a, b, each, short);
    }
    thread::scope(|s| {
        // Chunks of B, read ahead by one; the reader stops once this side hangs up.
        let (send, chunks) = mpsc::sync_channel::<Vec<u8>>(1);
        let reader = thread::Builder::new().spawn_scoped(s, move || {
            read(b, |chunk| send.send(chunk.to_vec()).is_ok())
        });
        let Ok(reader) = reader else {
            drop(chunks);
            return zip_small(a, b, each, short);
        };
        let mut pending: Vec<u8> = Vec::new();
        let mut at = 0;
        let mut ended = false;
        let of_a = read(a, |mut chunk| {
            while !chunk.is_empty() {
                if at == pending.len() {
                    let Ok(next) = chunks.recv() else {
                        ended = true;
                        return false;
                    };
                    (pending, at) = (next, 0);
                    continue;
                }
                let n = chunk.len().min(pending.len() - at);
                if !each(&chunk[..n], &pending[at..at + n]) {
                    return false;
                }
                chunk = &chunk[n..];
                at += n;
            }
            true
        });
        drop(chunks);
        let of_b = reader
            .join()
            .unwrap_or_else(|_| Err(format!("{}: reader failed", b.source.path.display())));
        of_a?;
        of_b?;
        match ended {
            true => Err(short()),
            false => Ok(()),
        }
    })
}

/// [`zip`] for a tensor read whole: A into memory, then B compared against it.
fn zip_small(
    a: &Item,
    b: &Item,
    mut each: impl FnMut(&[u8], &[u8]) -> bool,
    short: impl Fn() -> String,
) -> Result<(), String> {
    let mut whole = Vec::new();
    read(a, |chunk| {
        whole.extend_from_slice(chunk);
        true
    })?;
    let mut at = 0;
    let mut stopped = false;
    let mut over = false;
    read(b, |chunk| {
        let Some(mine) = whole.get(at..at + chunk.len()) else {
            over = true;
            return false;
        };
        at += chunk.len();
        stopped = !each(mine, chunk);
        !stopped
    })?;
    if over || (!stopped && at != whole.len()) {
        return Err(short());
    }
    Ok(())
}

/// Counts differing elements of a float tensor fed in order, in slices of any length.
struct Counter {
    /// How its elements become float64 (`None`: they are).
    widen: Option<Widening>,
    /// Stored bytes that hold whole elements (one, or for F4 a byte of two).
    group: usize,
    /// A group split between two slices: its bytes so far, of A and of B.
    carry: (Vec<u8>, Vec<u8>),
    /// Float64 bytes of one block of each side.
    wide: (Vec<u8>, Vec<u8>),
    differing: u64,
    max: f64,
}

impl Counter {
    /// For a float tensor (F64, F32, F16, BF16, the F8 formats and F4: those [`Widening`] takes
    /// to float64); `None` for any other.
    fn new(item: &Item) -> Option<Counter> {
        let tensor = &item.tensor;
        if tensor.file_only() {
            return None;
        }
        let widen = match tensor.dtype {
            Dtype::F64 => None,
            dtype => Some(Widening::new(dtype, Target::F64)?),
        };
        Some(Counter {
            widen,
            group: tensor.element_size() as usize,
            carry: (Vec::new(), Vec::new()),
            wide: (Vec::new(), Vec::new()),
            differing: 0,
            max: 0.0,
        })
    }

    /// The next bytes of A and of B (of equal length).
    fn feed(&mut self, mut a: &[u8], mut b: &[u8]) {
        if !self.carry.0.is_empty() {
            let n = (self.group - self.carry.0.len()).min(a.len());
            self.carry.0.extend_from_slice(&a[..n]);
            self.carry.1.extend_from_slice(&b[..n]);
            (a, b) = (&a[n..], &b[n..]);
            if self.carry.0.len() < self.group {
                return;
            }
            let (x, y) = std::mem::take(&mut self.carry);
            self.groups(&x, &y);
        }
        let whole = a.len() / self.group * self.group;
        for (x, y) in a[..whole].chunks(BLOCK).zip(b[..whole].chunks(BLOCK)) {
            self.groups(x, y);
        }
        self.carry.0.extend_from_slice(&a[whole..]);
        self.carry.1.extend_from_slice(&b[whole..]);
    }

    /// Compares whole groups of A and B.
    fn groups(&mut self, a: &[u8], b: &[u8]) {
        if a == b {
            return;
        }
        let (mut wa, mut wb) = std::mem::take(&mut self.wide);
        let (a, b) = match self.widen {
            None => (a, b),
            Some(w) => {
                let n = w.presented_len(a.len() as u64) as usize;
                wa.resize(n, 0);
                wb.resize(n, 0);
                if !w.convert(a, 0, &mut wa) || !w.convert(b, 0, &mut wb) {
                    return;
                }
                (&wa[..], &wb[..])
            }
        };
        for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
            self.element(f64_of(x), f64_of(y));
        }
        self.wide = (wa, wb);
    }

    /// Compares one element.
    fn element(&mut self, x: f64, y: f64) {
        if x == y || (x.is_nan() && y.is_nan()) {
            return;
        }
        self.differing += 1;
        let d = match x.is_nan() || y.is_nan() {
            true => f64::INFINITY,
            false => (x - y).abs(),
        };
        if d > self.max {
            self.max = d;
        }
    }

    fn values(&self, item: &Item) -> Values {
        Values {
            elements: item
                .tensor
                .shape
                .iter()
                .fold(1u64, |n, &d| n.saturating_mul(d as u64)),
            differing: self.differing,
            max_abs_diff: self.max,
        }
    }
}

/// The float64 that 8 little-endian bytes are.
fn f64_of(bytes: &[u8]) -> f64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    f64::from_le_bytes(b)
}
