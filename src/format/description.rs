//! What a checkpoint reader says of a file: its tensors (name, dtype, shape, where its bytes are)
//! and its metadata. The one shape every format's reader produces, and all the namespace lays out.

use std::collections::BTreeMap;
use std::io::IoSliceMut;
use std::sync::Arc;

use serde_json::Value as Json;

use super::dtype::Dtype;

/// Opens a data file a reader names (a path relative to the file it reads, inside its directory,
/// as [`inside`] gives it) for reading, within the bounds the caller sets: the mount opens nothing
/// outside SOURCE.
pub type OpenData<'a> = dyn Fn(&str) -> std::io::Result<std::fs::File> + 'a;

/// A location a file gives for another (ONNX's external data, a DCP data file) as a path inside
/// the file's directory (components joined by `/`, `.` and empty ones dropped, `..` taking one
/// back), or why it is not one: an absolute path, a `..` that leaves the directory, a NUL byte,
/// nothing. Checked as a string, before anything is opened.
pub fn inside(location: &str) -> Result<String, &'static str> {
    if location.starts_with('/') {
        return Err("an absolute path");
    }
    if location.contains('\0') {
        return Err("a path with a NUL byte");
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in location.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts
                    .pop()
                    .ok_or("a path that leaves its file's directory")?;
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err("no file");
    }
    Ok(parts.join("/"))
}

/// A file's tensors and metadata, as its format's reader found them.
#[derive(Debug)]
pub struct Description {
    /// What the reader found the file to be: `safetensors`, `pytorch-zip` or `pytorch-legacy`
    /// (the `user.tensormount.format` xattr).
    pub kind: &'static str,
    /// Absolute offset in the file of the data the tensors' offsets are relative to (for
    /// safetensors, the data buffer after the header: 8 + header length).
    pub data_start: u64,
    /// Tensors in data order (ascending offsets).
    pub tensors: Vec<Arc<Tensor>>,
    /// The metadata map; `None` when absent (or `null`). Values are JSON: a string, number,
    /// boolean or array is the value itself; an object is what is known of a value too long to
    /// keep (GGUF's `{"type": "STRING", "length": 150000}` for a vocabulary), not the value.
    pub metadata: Option<BTreeMap<String, Json>>,
    /// What the reader left out or found odd, each a whole message naming the file (warned once
    /// per version of the file).
    pub notes: Vec<String>,
    /// For a file of another format: what the safetensors file it converts to holds, or why it
    /// is not offered as one. `None` for a safetensors file.
    pub conversion: Option<Result<Conversion, NotOffered>>,
    /// What the file says of the numbered set it is a shard of, if anything.
    pub split: Option<Split>,
    /// The other files its tensors lie in (see [`Tensor::file`]), as it names them: each a
    /// location its reader's rule let through, relative to the file's directory and inside it
    /// (`weights.bin`, `data/part1`; no `.` or `..` component), which the mount resolves.
    pub files: Vec<Box<str>>,
    /// For a reader that reads its data files too (DCP's, whose chunks' archives it reads): what
    /// `stat` said of each of [`Description::files`] as it read them. A data file found other
    /// than this since is not the one described (see [`Seen::same`]). Empty for other readers.
    pub seen: Vec<Seen>,
}

impl Description {
    /// The description of a file of this kind with nothing in it yet: no tensors, no metadata, no
    /// notes, no conversion, data from byte 0, no data files. A reader writes what it found over
    /// it (`Description { tensors, ..Description::new("onnx") }`).
    pub fn new(kind: &'static str) -> Description {
        Description {
            kind,
            data_start: 0,
            tensors: Vec::new(),
            metadata: None,
            notes: Vec::new(),
            conversion: None,
            split: None,
            files: Vec::new(),
            seen: Vec::new(),
        }
    }
}

/// A version of a file as `stat` gives it: which file, its size and its mtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
}

impl Seen {
    pub fn of(meta: &std::fs::Metadata) -> Seen {
        use std::os::unix::fs::MetadataExt;
        Seen {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        }
    }
}

/// What a shard of a numbered set (`NAME-00001-of-00003`, with no index) says of its set: GGUF's
/// `split.no`, `split.count` and `split.tensors.count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Its place in the set, from 0.
    pub no: u64,
    /// How many shards the set has.
    pub count: u64,
    /// How many tensors the whole set has.
    pub tensors: Option<u64>,
}

/// Why a file of another format is not offered as safetensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOffered {
    /// Loading it with its format's own library would run code it names (what, in words): always
    /// said, with tensors or without.
    Trap(String),
    /// It has nothing to convert, or what it holds is not a state dict (why, in words): said of a
    /// file that has tensors.
    Unfit(String),
}

impl NotOffered {
    /// Whether it is said of a file with no tensors too.
    pub fn is_trap(&self) -> bool {
        matches!(self, NotOffered::Trap(_))
    }
}

impl std::fmt::Display for NotOffered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotOffered::Trap(why) | NotOffered::Unfit(why) => f.write_str(why),
        }
    }
}

/// What the safetensors file a checkpoint converts to holds.
#[derive(Debug)]
pub struct Conversion {
    pub state_dict: StateDict,
    /// Its `__metadata__` (`format: pt` for a PyTorch checkpoint).
    pub metadata: BTreeMap<String, String>,
}

/// The tensors of a state dict, by the names the dict gives them.
pub type StateDict = Vec<(Arc<str>, Arc<Tensor>)>;

/// One tensor of a file.
#[derive(Debug)]
pub struct Tensor {
    /// Shared with the tensor's file names where those are the name itself.
    pub name: Arc<str>,
    pub dtype: Dtype,
    pub shape: Box<[usize]>,
    /// `[begin, end)` relative to [`Description::data_start`] (for safetensors, as in the header).
    /// For a strided tensor, `begin` is where its first element is stored and `end - begin` its
    /// size once gathered.
    pub begin: u64,
    pub end: u64,
    /// For a tensor whose elements are not one contiguous stretch (a transposed or sliced view
    /// saved by `torch.save`): the distance in elements between neighbours along each dimension.
    /// Its elements are gathered on read. Every element lies within the file (checked by the
    /// reader).
    pub strides: Option<Box<[u64]>>,
    /// For a tensor whose file holds values to compute rather than its bytes (an ONNX model's
    /// varints), or whose bytes are gathered from several data files (a DCP tensor cut into
    /// chunks): how its bytes are computed on read. `begin` is then where its values start in
    /// the file (0 for one gathered from data files), and `end - begin` its size once computed.
    pub computed: Option<Arc<dyn Computed>>,
    /// For a tensor whose bytes lie in another file than the one described: its index in
    /// [`Description::files`]. `begin` and `end` are then offsets in that file, from its start.
    pub file: Option<u32>,
}

/// What a computed tensor reads what it needs through (see [`Computed::read`]).
pub trait Reads {
    /// Fills `bufs`, one after the other, with the bytes from byte `at` of the described file
    /// (`file` `None`; `at` relative to the description's data start, as a tensor's `begin` is)
    /// or of its data file [`Description::files`]`[file]` (`at` from that file's start). A
    /// reader asks for at most [`MAX_SLICES`] buffers a call.
    fn read_at(
        &mut self,
        file: Option<u32>,
        bufs: &mut [IoSliceMut<'_>],
        at: u64,
    ) -> std::io::Result<()>;

    /// The decoded bytes of the chunk stored at `chunk`, from the read path's cache of decoded
    /// chunks, which keeps them by the version of the file that stores them and where; `decode`
    /// (given this reader, to read what is stored) makes them only where the cache does not hold
    /// them. A reader without a cache decodes every time.
    fn decoded(&mut self, chunk: ChunkAt, decode: &mut Decode<'_>) -> std::io::Result<Arc<[u8]>>;
}

/// Decodes one chunk, reading what it stores through the reader it is given (see
/// [`Reads::decoded`]).
pub type Decode<'a> = dyn FnMut(&mut dyn Reads) -> std::io::Result<Vec<u8>> + 'a;

/// Where a chunk that is decoded is stored: in the described file (`file` `None`, `at` relative
/// to its data start) or its data file `file`, from byte `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkAt {
    pub file: Option<u32>,
    pub at: u64,
}

/// A reader of a computed tensor's bytes: see [`Reads`].
pub type ReadAt<'a> = dyn Reads + 'a;

/// A function that reads as [`Reads::read_at`] is a reader without a cache (the unit tests').
impl<F> Reads for F
where
    F: FnMut(Option<u32>, &mut [IoSliceMut<'_>], u64) -> std::io::Result<()>,
{
    fn read_at(
        &mut self,
        file: Option<u32>,
        bufs: &mut [IoSliceMut<'_>],
        at: u64,
    ) -> std::io::Result<()> {
        self(file, bufs, at)
    }

    fn decoded(&mut self, _: ChunkAt, decode: &mut Decode<'_>) -> std::io::Result<Arc<[u8]>> {
        decode(self).map(Arc::from)
    }
}

/// Most buffers a [`ReadAt`] call is given (Linux's `IOV_MAX`: what one `preadv` takes).
pub const MAX_SLICES: usize = crate::base::sys::IOV_MAX;

/// How the bytes of a tensor are computed from what its file holds, on read (see
/// [`Tensor::computed`]).
pub trait Computed: Send + Sync + std::fmt::Debug {
    /// Fills `out` with the tensor's bytes from byte `offset` of it, reading what it needs
    /// through `read` (see [`Reads`]).
    fn read(&self, read: &mut ReadAt<'_>, offset: u64, out: &mut [u8]) -> std::io::Result<()>;

    /// Whether its bytes are decoded from what is stored (inflated, byte-swapped, transposed)
    /// rather than copied from where they lie: such a tensor is read on the read pool, never on a
    /// FUSE thread, and gets the chunks it decodes through [`Reads::decoded`], so that each is
    /// decoded once while the cache keeps it.
    fn decodes(&self) -> bool {
        false
    }

    /// Where bytes `[offset, offset + len)` of the tensor lie as they are, as stretches of the
    /// description's data files, in order: `run(file, at, len)` for each. False (and `run` not
    /// called) where they are not stored as they are.
    fn runs(&self, _offset: u64, _len: u64, _run: &mut dyn FnMut(u32, u64, u64)) -> bool {
        false
    }

    /// Where bytes `[offset, offset + len)` of the tensor lie as they are, as one stretch of one
    /// of the description's data files (its index there, and where the stretch starts), if they
    /// do: a read of them is then a plain read of that file.
    fn stretch(&self, offset: u64, len: u64) -> Option<(u32, u64)> {
        let (mut first, mut count) = (None, 0);
        let stored = self.runs(offset, len, &mut |f, at, _| {
            first.get_or_insert((f, at));
            count += 1;
        });
        first.filter(|_| stored && count == 1)
    }
}

impl Tensor {
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.end - self.begin
    }

    /// The dtype as its format spells it (`BF16`, `F8_E4M3`, `C128`, `Q4_K`, ...).
    pub fn dtype_name(&self) -> &'static str {
        self.dtype.name()
    }

    /// The size of one element in bytes (1 for the sub-byte dtypes, whose elements are packed;
    /// a block's size for a block type).
    pub fn element_size(&self) -> u64 {
        match self.dtype.group() {
            (1, bytes) => bytes,
            (_, bytes) if matches!(self.dtype, Dtype::Block(_)) => bytes,
            _ => 1,
        }
    }

    /// Whether its bytes are one stretch of its file (neither gathered nor computed): what a
    /// loader can read itself at its offset.
    pub fn is_stretch(&self) -> bool {
        self.strides.is_none() && self.computed.is_none()
    }

    /// Where its bytes start in the file that holds them, that file's description starting its
    /// data at `data_start` (a tensor in another file is placed from that file's start).
    pub fn start(&self, data_start: u64) -> u64 {
        match self.file {
            Some(_) => self.begin,
            None => data_start + self.begin,
        }
    }

    /// Whether the tensor is a file only: its type has no safetensors name, so it has no NPY
    /// view, no widening unless its format decodes it, and no place in a conversion as stored.
    pub fn file_only(&self) -> bool {
        self.dtype.safetensors().is_none()
    }

    /// The shape as a JSON array without spaces, e.g. `[4096,11008]`.
    pub fn shape_json(&self) -> String {
        let dims: Vec<String> = self.shape.iter().map(usize::to_string).collect();
        format!("[{}]", dims.join(","))
    }
}
