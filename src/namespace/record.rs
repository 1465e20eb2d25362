//! [`Record`]: what the writer remembers of one directory of SOURCE between scans (for a
//! single-file mount, of the file), to tell what changed since.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::node::Ino;
use super::scan::{Flux, Scan};
use crate::source::Source;

#[derive(Debug)]
pub struct Record {
    /// As walked (through links).
    pub path: PathBuf,
    pub parent: Option<Ino>,
    pub scan: Scan,
    /// When the scan was read, to tell whether the directory's mtime could hide a later change.
    pub scanned_at: SystemTime,
    /// For a single-file mount: the file was missing at the last look (so a file appearing at
    /// that path is new, whatever inode number it reuses).
    pub gone: bool,
    pub flux: Flux,
    /// The generated directories shown, each with the sources it was built from.
    pub generated: Vec<Generated>,
    /// The directories below this one where its files' descriptions look for data files (an
    /// ONNX model's `weights/`, a DCP `relative_path` into a subdirectory), found or not, and
    /// this one's own path where a description failed on a data file it names (which may lie
    /// anywhere below): a change there rebuilds this directory.
    pub reads_below: Vec<PathBuf>,
}

/// A generated directory shown, and the sources it was built from: while they are the same, it
/// is kept whole.
#[derive(Debug)]
pub struct Generated {
    pub name: Arc<[u8]>,
    pub inputs: Vec<Arc<Source>>,
}

impl Record {
    pub fn new(path: PathBuf, parent: Option<Ino>, scan: Scan) -> Record {
        Record {
            path,
            parent,
            scan,
            scanned_at: SystemTime::now(),
            gone: false,
            flux: Flux::default(),
            generated: Vec::new(),
            reads_below: Vec::new(),
        }
    }
}
