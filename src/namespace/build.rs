//! Building the tree from SOURCE, once, at mount.
//!
//! Every regular file is opened once (never blocking: a FIFO is never opened) and mapped read-only.
//! Headers and indexes are read with `pread` from that descriptor, never through the mapping. The
//! descriptor is then kept for change checks while the descriptor budget allows, and closed
//! otherwise (a mapping outlives its descriptor).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::fmt;
use std::fs::{self, File, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::SystemTime;

use log::{debug, warn};
use memmap2::Mmap;
use serde_json::Value;

use super::{
    Attr, BuildError, Content, Ino, Kind, Layout, METADATA_FILE, NPY_SUFFIX, Node, Options, Parsed,
    ROOT, Source, TENSOR_FILE, Tree, XATTR_LIST_MAX, XATTR_NAME_MAX, XATTR_PREFIX, XATTR_SIZE_MAX,
};
use crate::format::{self, Tensor};
use crate::index::{self, Index};
use crate::names::Shortener;
use crate::npy;

/// Directories nested deeper than this are left out (with a warning).
const MAX_DEPTH: usize = 256;

/// A tree larger than this is refused: symbolic links (to `/`, or several to one large directory)
/// can make a mirror grow without bound.
const MAX_NODES: usize = 1 << 24;

impl Tree {
    /// Builds the tree for SOURCE (a `.safetensors` file or a directory). Problems with single files
    /// inside a directory are warnings (errors with `strict`); anything else is an error.
    pub fn build(source: &Path, options: &Options) -> Result<Tree, BuildError> {
        let canonical = fs::canonicalize(source).map_err(|e| path_error(source, e))?;
        let meta = fs::metadata(&canonical).map_err(|e| path_error(source, e))?;
        let mut b = Builder {
            nodes: Vec::new(),
            sources: Vec::new(),
            by_inode: HashMap::new(),
            options: options.clone(),
            descriptors_left: descriptor_budget(),
        };
        if meta.is_dir() {
            let mut ancestors = Vec::new();
            if b.add_dir(&canonical, b"", ROOT, &meta, &mut ancestors)?
                .is_none()
            {
                return Err(path_error(source, "cannot read directory"));
            }
        } else if meta.is_file() {
            let file = open_regular(&canonical).map_err(|e| path_error(&canonical, e))?;
            let src = b.add_source(file, &canonical, &meta, true)?;
            match b.sources[src].header.clone() {
                Some(Ok(parsed)) => b.add_file_tensors(b"", ROOT, src, &parsed)?,
                Some(Err(e)) => return Err(BuildError(e.to_string())),
                None => return Err(path_error(&canonical, "not parsed")),
            };
        } else {
            return Err(path_error(source, "not a regular file or directory"));
        }
        let mut nodes = b.nodes;
        nodes.shrink_to_fit();
        // Headers are parsed into short-lived maps; hand that memory back to the system rather than
        // keep it in the allocator for the life of the mount.
        // SAFETY: malloc_trim only releases free heap memory; it has no preconditions.
        unsafe { libc::malloc_trim(0) };
        Ok(Tree {
            nodes,
            sources: b.sources,
        })
    }
}

fn path_error(path: &Path, e: impl fmt::Display) -> BuildError {
    BuildError(format!("{}: {e}", path.display()))
}

/// Opens a file for reading without ever blocking (a FIFO swapped in would hang `open`) and checks
/// that what was opened is a regular file.
fn open_regular(path: &Path) -> io::Result<File> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Attributes derived from the file or directory a node stands for: its owner, group and mtime,
/// its permission bits without any write bit.
fn attr(meta: &Metadata, kind: Kind, size: u64, perm: u32) -> Attr {
    Attr {
        kind,
        size,
        perm: perm as u16,
        uid: meta.uid(),
        gid: meta.gid(),
        mtime: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        nlink: if kind == Kind::Dir { 2 } else { 1 },
    }
}

/// A mirrored or tensor file: the source's permission bits without write or special bits.
fn file_attr(meta: &Metadata, size: u64) -> Attr {
    attr(meta, Kind::File, size, meta.mode() & 0o555)
}

/// A directory standing for a safetensors file or index: r-x for whoever may read that file.
fn tensor_dir_attr(meta: &Metadata) -> Attr {
    let read = meta.mode() & 0o444;
    attr(meta, Kind::Dir, 0, read | (read >> 2))
}

/// The `__metadata__` file: the object as JSON, keys sorted, ending in a newline.
fn metadata_json(map: &Value) -> Arc<[u8]> {
    let mut json = serde_json::to_vec_pretty(map).unwrap_or_default();
    json.push(b'\n');
    json.into()
}

/// `user.safetensors.metadata.KEY` for each entry the kernel can carry (name, value and list limits).
fn metadata_xattrs<'a>(
    entries: impl Iterator<Item = (&'a String, String)>,
) -> Arc<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut list_len = 0;
    for (key, value) in entries {
        let name = format!("{XATTR_PREFIX}metadata.{key}");
        if name.len() > XATTR_NAME_MAX
            || name.contains('\0')
            || value.len() > XATTR_SIZE_MAX
            || list_len + name.len() + 1 > XATTR_LIST_MAX
        {
            debug!("metadata key `{key}` does not fit in an extended attribute; left out");
            continue;
        }
        list_len += name.len() + 1;
        out.insert(name, value);
    }
    Arc::new(out)
}

/// How many source descriptors may be kept open for change detection: the soft RLIMIT_NOFILE is
/// raised to the hard limit, and 256 descriptors stay free for everything else.
fn descriptor_budget() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the `rlimit` struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    (lim.rlim_cur as usize).saturating_sub(256)
}

/// Reads an index file through its descriptor (bounded in size) and parses it.
fn read_index(file: &File) -> Result<Index, String> {
    let len = file
        .metadata()
        .map_err(|e| format!("cannot read index: {e}"))?
        .len();
    if len > index::MAX_INDEX_BYTES {
        return Err(format!(
            "index is {len} bytes, over the limit of {} bytes",
            index::MAX_INDEX_BYTES
        ));
    }
    let mut bytes = vec![0; len as usize];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| format!("cannot read index: {e}"))?;
    index::parse(&bytes)
}

/// A regular file of the directory being mirrored.
struct DirFile {
    /// The mirrored file's node.
    ino: Ino,
    source: usize,
    meta: Metadata,
    /// For an index file: the merged directory it asks for, and the parsed index.
    index: Option<(String, Result<Index, String>)>,
}

struct Builder {
    nodes: Vec<Node>,
    sources: Vec<Source>,
    /// Sources by (device, inode), so a file reached twice is mapped once.
    by_inode: HashMap<(u64, u64), usize>,
    options: Options,
    /// Source descriptors that may still be kept open (see [`descriptor_budget`]).
    descriptors_left: usize,
}

impl Builder {
    fn push(&mut self, node: Node) -> Ino {
        self.nodes.push(node);
        self.nodes.len() as Ino
    }

    fn node(&self, ino: Ino) -> &Node {
        &self.nodes[(ino - 1) as usize]
    }

    /// Creates an empty directory node; its children are set by [`Builder::set_children`].
    fn push_dir(
        &mut self,
        name: &[u8],
        parent: Ino,
        attr: Attr,
        xattrs: Arc<BTreeMap<String, String>>,
    ) -> Ino {
        self.push(Node {
            name: name.into(),
            parent,
            attr,
            content: Content::Dir {
                children: Vec::new(),
                xattrs,
            },
        })
    }

    fn set_children(&mut self, dir: Ino, mut children: Vec<Ino>) {
        children.sort_by(|&a, &b| self.node(a).name.cmp(&self.node(b).name));
        let subdirs = children
            .iter()
            .filter(|&&c| self.node(c).attr.kind == Kind::Dir)
            .count();
        let node = &mut self.nodes[(dir - 1) as usize];
        node.attr.nlink = 2 + subdirs as u32;
        if let Content::Dir { children: c, .. } = &mut node.content {
            *c = children;
        }
    }

    /// Records why a mirrored file is not what it claims to be (its `user.safetensors.error`).
    fn set_error(&mut self, ino: Ino, reason: &str) {
        if let Content::Mirror { error, .. } = &mut self.nodes[(ino - 1) as usize].content {
            *error = Some(Arc::from(reason));
        }
    }

    /// A problem with one file: a warning, or with `-o strict` the end of the mount.
    fn reject(&self, message: &str) -> Result<(), BuildError> {
        if self.options.strict {
            return Err(BuildError(message.to_string()));
        }
        warn!("{message}");
        Ok(())
    }

    /// Maps an opened regular file (once per inode) and, for a safetensors file, parses its header.
    /// The descriptor is kept for change detection while the budget allows, else closed.
    fn add_source(
        &mut self,
        file: File,
        path: &Path,
        meta: &Metadata,
        safetensors: bool,
    ) -> Result<usize, BuildError> {
        let key = (meta.dev(), meta.ino());
        let id = match self.by_inode.get(&key) {
            Some(&id) => id,
            None => {
                let opened = file.metadata().map_err(|e| path_error(path, e))?;
                let len = opened.len();
                let map = if len == 0 {
                    None
                } else {
                    // SAFETY: the mapping is read-only and private to this process. The daemon never
                    // dereferences it: slices of it are only passed to the kernel (`writev` of a FUSE
                    // reply), which reports a page that vanished (source truncated) as EFAULT instead
                    // of raising SIGBUS, so later changes to the file cannot cause undefined
                    // behaviour here.
                    Some(unsafe { Mmap::map(&file) }.map_err(|e| path_error(path, e))?)
                };
                self.sources.push(Source {
                    path: fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
                    len,
                    meta: opened,
                    map,
                    file: None,
                    changed: AtomicBool::new(false),
                    header: None,
                });
                self.by_inode.insert(key, self.sources.len() - 1);
                self.sources.len() - 1
            }
        };
        let source = &mut self.sources[id];
        if safetensors && source.header.is_none() {
            let parsed = format::read_header(&file, &source.path).map(|h| {
                Arc::new(Parsed {
                    data_start: h.data_start,
                    tensors: h.tensors.into_iter().map(Arc::new).collect(),
                    metadata: h.metadata,
                })
            });
            source.header = Some(parsed.map_err(|e| Arc::from(e.to_string())));
        }
        if source.file.is_none() && self.descriptors_left > 0 {
            self.descriptors_left -= 1;
            source.file = Some(file);
        }
        Ok(id)
    }

    /// Mirrors a directory. Returns `None` (after a warning) if it cannot be read.
    fn add_dir(
        &mut self,
        path: &Path,
        name: &[u8],
        parent: Ino,
        meta: &Metadata,
        ancestors: &mut Vec<(u64, u64)>,
    ) -> Result<Option<Ino>, BuildError> {
        if self.nodes.len() > MAX_NODES {
            return Err(path_error(
                path,
                format!(
                    "the tree has over {MAX_NODES} entries; do symbolic links pull in a large tree?"
                ),
            ));
        }
        if ancestors.len() >= MAX_DEPTH {
            warn!(
                "{}: nested over {MAX_DEPTH} levels deep, left out",
                path.display()
            );
            return Ok(None);
        }
        let mut entries: Vec<(Vec<u8>, PathBuf)> = match fs::read_dir(path) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| (e.file_name().as_bytes().to_vec(), e.path()))
                .collect(),
            Err(e) => {
                warn!("{}: cannot read directory, skipped: {e}", path.display());
                return Ok(None);
            }
        };
        entries.sort();
        let ino = self.push_dir(
            name,
            parent,
            attr(meta, Kind::Dir, 0, meta.mode() & 0o555),
            Arc::default(),
        );
        ancestors.push((meta.dev(), meta.ino()));

        let mut children = Vec::new();
        let mut files: BTreeMap<Vec<u8>, DirFile> = BTreeMap::new();
        for (entry_name, entry_path) in entries {
            let target = match fs::metadata(&entry_path) {
                Ok(m) => m,
                Err(e) => {
                    let link = fs::symlink_metadata(&entry_path).is_ok_and(|m| m.is_symlink());
                    let what = if link {
                        "dangling symbolic link"
                    } else {
                        "cannot stat"
                    };
                    warn!("{}: {what}, skipped: {e}", entry_path.display());
                    continue;
                }
            };
            if target.is_dir() {
                if ancestors.contains(&(target.dev(), target.ino())) {
                    warn!(
                        "{}: symbolic link closes a directory cycle, left out",
                        entry_path.display()
                    );
                    continue;
                }
                if let Some(child) =
                    self.add_dir(&entry_path, &entry_name, ino, &target, ancestors)?
                {
                    children.push(child);
                }
            } else if target.is_file() {
                let file = match open_regular(&entry_path) {
                    Ok(f) => f,
                    Err(e) => {
                        warn!("{}: cannot open, skipped: {e}", entry_path.display());
                        continue;
                    }
                };
                let index = std::str::from_utf8(&entry_name)
                    .ok()
                    .and_then(index::merged_dir_name)
                    .map(|dir_name| (dir_name, read_index(&file)));
                let is_safetensors = entry_name.ends_with(b".safetensors");
                let src = self.add_source(file, &entry_path, &target, is_safetensors)?;
                let error = match (&self.sources[src].header, &index) {
                    (Some(Err(e)), _) => {
                        self.reject(&format!("{e} (no .tensors directory)"))?;
                        Some(strip_path(e, &self.sources[src].path))
                    }
                    (_, Some((_, Err(e)))) => Some(Arc::from(e.as_str())),
                    _ => None,
                };
                let child = self.push(Node {
                    name: entry_name.as_slice().into(),
                    parent: ino,
                    attr: file_attr(&target, self.sources[src].len),
                    content: Content::Mirror { source: src, error },
                });
                children.push(child);
                files.insert(
                    entry_name,
                    DirFile {
                        ino: child,
                        source: src,
                        meta: target,
                        index,
                    },
                );
            } else {
                debug!(
                    "{}: not a regular file or directory, skipped",
                    entry_path.display()
                );
            }
        }
        ancestors.pop();

        // Generated directories never hide a real entry; an unsharded file's wins over an index's.
        let mut taken: HashMap<Vec<u8>, Option<PathBuf>> = children
            .iter()
            .map(|&c| (self.node(c).name.to_vec(), None))
            .collect();
        self.add_file_dirs(path, ino, &files, &mut taken, &mut children)?;
        self.add_merged_dirs(path, ino, &files, &mut taken, &mut children)?;
        self.set_children(ino, children);
        Ok(Some(ino))
    }

    /// `NAME.tensors/` for every valid `NAME.safetensors` of a directory.
    fn add_file_dirs(
        &mut self,
        dir: &Path,
        ino: Ino,
        files: &BTreeMap<Vec<u8>, DirFile>,
        taken: &mut HashMap<Vec<u8>, Option<PathBuf>>,
        children: &mut Vec<Ino>,
    ) -> Result<(), BuildError> {
        for (name, f) in files {
            let Some(stem) = name.strip_suffix(b".safetensors") else {
                continue;
            };
            let Some(Ok(parsed)) = self.sources[f.source].header.clone() else {
                continue;
            };
            let dir_name = [stem, b".tensors"].concat();
            let file_path = dir.join(OsStr::from_bytes(name));
            if taken.contains_key(&dir_name) {
                warn!(
                    "{}: a real entry is named {}; it is shown instead of the tensors",
                    file_path.display(),
                    String::from_utf8_lossy(&dir_name)
                );
                continue;
            }
            children.push(self.add_file_tensors(&dir_name, ino, f.source, &parsed)?);
            taken.insert(dir_name, Some(file_path));
        }
        Ok(())
    }

    /// The tensor directory of one safetensors file (the root, for a single-file SOURCE).
    fn add_file_tensors(
        &mut self,
        name: &[u8],
        parent: Ino,
        src: usize,
        parsed: &Parsed,
    ) -> Result<Ino, BuildError> {
        let owner = self.sources[src].meta.clone();
        let origin = self.sources[src].path.clone();
        let entries = parsed.tensors.iter().map(|t| (t.clone(), src)).collect();
        let json = parsed
            .metadata
            .as_ref()
            .map(|m| metadata_json(&serde_json::json!(m)));
        let xattrs = metadata_xattrs(
            parsed
                .metadata
                .iter()
                .flatten()
                .map(|(k, v)| (k, v.clone())),
        );
        self.add_tensor_dir(name, parent, (&origin, &owner), entries, json, xattrs)
    }

    /// `NAME.tensors/` for every valid sharded set (index file) of a directory.
    fn add_merged_dirs(
        &mut self,
        dir: &Path,
        ino: Ino,
        files: &BTreeMap<Vec<u8>, DirFile>,
        taken: &mut HashMap<Vec<u8>, Option<PathBuf>>,
        children: &mut Vec<Ino>,
    ) -> Result<(), BuildError> {
        for (name, f) in files {
            let Some((dir_name, index)) = &f.index else {
                continue;
            };
            let index_path = dir.join(OsStr::from_bytes(name));
            match taken.get(dir_name.as_bytes()) {
                Some(None) => {
                    warn!(
                        "{}: a real entry is named {dir_name}; it is shown instead of the merged tensors",
                        index_path.display()
                    );
                    continue;
                }
                Some(Some(file)) => {
                    warn!(
                        "{}: {} also wants {dir_name}; the unsharded file's tensors are shown",
                        index_path.display(),
                        file.display()
                    );
                    continue;
                }
                None => {}
            }
            let entries = match index
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|i| self.check_index(i, files))
            {
                Ok(entries) => entries,
                Err(reason) => {
                    self.reject(&format!(
                        "{}: {reason} (no {dir_name} directory)",
                        index_path.display()
                    ))?;
                    self.set_error(f.ino, &reason);
                    continue;
                }
            };
            let metadata = index.as_ref().ok().and_then(|i| i.metadata.clone());
            let json = metadata.clone().map(|m| metadata_json(&Value::Object(m)));
            let xattrs = metadata_xattrs(
                metadata
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k, index::metadata_value_text(v))),
            );
            children.push(self.add_tensor_dir(
                dir_name.as_bytes(),
                ino,
                (&index_path, &f.meta),
                entries,
                json,
                xattrs,
            )?);
            taken.insert(dir_name.clone().into_bytes(), Some(index_path));
        }
        Ok(())
    }

    /// Checks an index against its shards: every shard is a valid safetensors file of this
    /// directory, every listed tensor is in its shard, every tensor of a shard is listed for it.
    /// Returns the merged directory's tensors with their sources.
    fn check_index(
        &self,
        idx: &Index,
        files: &BTreeMap<Vec<u8>, DirFile>,
    ) -> Result<Vec<(Arc<Tensor>, usize)>, String> {
        // Every shard named is a valid safetensors file of this directory.
        let mut shards: HashMap<&str, (usize, &Parsed)> = HashMap::new();
        for shard in idx.weight_map.values() {
            if shards.contains_key(shard.as_str()) {
                continue;
            }
            let Some(f) = files.get(shard.as_bytes()) else {
                return Err(format!("shard `{shard}` named in weight_map is missing"));
            };
            let parsed = match &self.sources[f.source].header {
                Some(Ok(p)) => p,
                Some(Err(_)) => {
                    return Err(format!("shard `{shard}` is not a valid safetensors file"));
                }
                None => return Err(format!("shard `{shard}` is not a .safetensors file")),
            };
            shards.insert(shard.as_str(), (f.source, parsed));
        }
        // Every tensor of a shard is listed for that shard...
        let mut entries = Vec::with_capacity(idx.weight_map.len());
        for (shard, (src, parsed)) in &shards {
            for t in &parsed.tensors {
                if idx.weight_map.get(&*t.name).map(String::as_str) != Some(*shard) {
                    return Err(format!(
                        "tensor `{}` of shard `{shard}` is missing from the weight_map",
                        t.name
                    ));
                }
                entries.push((t.clone(), *src));
            }
        }
        // ... and, names being unique on both sides, every listed tensor was found iff the counts
        // agree. Otherwise name one that was not.
        if entries.len() != idx.weight_map.len() {
            let found: std::collections::HashSet<&str> =
                entries.iter().map(|(t, _)| &*t.name).collect();
            if let Some((tensor, shard)) = idx
                .weight_map
                .iter()
                .find(|(t, _)| !found.contains(t.as_str()))
            {
                return Err(format!("tensor `{tensor}` is not in its shard `{shard}`"));
            }
        }
        Ok(entries)
    }

    /// A directory of tensor files (plus `__metadata__`), each tensor served from its source and
    /// carrying that source's attributes. `origin` and `owner` are the path and the attributes of
    /// the file (or index) the directory stands for.
    fn add_tensor_dir(
        &mut self,
        name: &[u8],
        parent: Ino,
        (origin, owner): (&Path, &Metadata),
        mut entries: Vec<(Arc<Tensor>, usize)>,
        metadata_json: Option<Arc<[u8]>>,
        xattrs: Arc<BTreeMap<String, String>>,
    ) -> Result<Ino, BuildError> {
        let dir = self.push_dir(name, parent, tensor_dir_attr(owner), xattrs);
        self.nodes.reserve(entries.len() + 1);
        entries.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        let mut children = match self.options.layout {
            Layout::Flat => {
                let leaves = entries
                    .iter()
                    .map(|e| (LeafName::Escaped(&e.0.name), e))
                    .collect();
                self.add_leaves(dir, &mut Shortener::default(), leaves, Vec::new())
            }
            Layout::Tree => {
                let budget = MAX_NODES.saturating_sub(self.nodes.len());
                let Some((root, mut stray)) = Branch::plant(&entries, budget) else {
                    return Err(path_error(
                        origin,
                        format!("layout=tree would make over {MAX_NODES} entries"),
                    ));
                };
                self.add_branch(dir, owner, root, &mut stray, true)
            }
        };
        if let Some(json) = metadata_json {
            let node = Node {
                name: METADATA_FILE.as_bytes().into(),
                parent: dir,
                attr: attr(owner, Kind::File, json.len() as u64, owner.mode() & 0o444),
                content: Content::Generated(json),
            };
            children.push(self.push(node));
        }
        self.set_children(dir, children);
        Ok(dir)
    }

    /// Fills a directory of the tree layout from its branch; returns its children. Tensors that
    /// found no place in the tree (`stray`) go to the `top` directory under their full names: those
    /// names hold a `.` or a `/` (`%2F`), which no part does, so they never clash with a part.
    fn add_branch<'a>(
        &mut self,
        dir: Ino,
        owner: &Metadata,
        branch: Branch<'a>,
        stray: &mut Vec<Leaf<'a>>,
        top: bool,
    ) -> Vec<Ino> {
        let mut names = Shortener::default();
        let mut children = Vec::new();
        let mut leaves = Vec::new();
        if let Some(entry) = branch.tensor {
            leaves.push((LeafName::Exact(TENSOR_FILE), entry));
        }
        for (part, child) in branch.children {
            let leaf_name = if part == TENSOR_FILE {
                LeafName::Exact(ESCAPED_TENSOR_FILE)
            } else {
                LeafName::Escaped(part)
            };
            match child.tensor {
                Some(entry) if child.children.is_empty() => leaves.push((leaf_name, entry)),
                _ => {
                    let name = leaf_name.file_name(&mut names);
                    let sub =
                        self.push_dir(name.as_bytes(), dir, tensor_dir_attr(owner), Arc::default());
                    let grandchildren = self.add_branch(sub, owner, child, stray, false);
                    self.set_children(sub, grandchildren);
                    children.push(sub);
                }
            }
        }
        if top {
            leaves.append(stray);
        }
        self.add_leaves(dir, &mut names, leaves, children)
    }

    /// Adds a tensor file for each leaf (its name in the directory, before escaping, and its
    /// tensor) to `children`, the directory's other entries, then the NPY views if asked for.
    fn add_leaves(
        &mut self,
        dir: Ino,
        names: &mut Shortener,
        leaves: Vec<Leaf<'_>>,
        mut children: Vec<Ino>,
    ) -> Vec<Ino> {
        for &(leaf_name, (tensor, src)) in &leaves {
            let name: Arc<[u8]> = match leaf_name.file_name(names) {
                Cow::Borrowed(same) if same == &*tensor.name => {
                    Arc::<str>::clone(&tensor.name).into()
                }
                other => other.as_bytes().into(),
            };
            let node = Node {
                name,
                parent: dir,
                attr: file_attr(&self.sources[*src].meta, tensor.size()),
                content: Content::Tensor {
                    source: *src,
                    tensor: tensor.clone(),
                },
            };
            children.push(self.push(node));
        }
        if self.options.npy {
            self.add_npy_views(dir, names, &leaves, &mut children);
        }
        children
    }

    /// `NAME.npy` beside each tensor file numpy can describe, unless an entry of the directory
    /// already has that name (a tensor named `NAME.npy`).
    fn add_npy_views(
        &mut self,
        dir: Ino,
        names: &mut Shortener,
        leaves: &[Leaf<'_>],
        children: &mut Vec<Ino>,
    ) {
        let taken: HashSet<Arc<[u8]>> = children
            .iter()
            .map(|&c| self.node(c).name.clone())
            .collect();
        for &(leaf_name, (tensor, src)) in leaves {
            let Some(header) = npy::header(tensor) else {
                continue;
            };
            let name = match leaf_name {
                LeafName::Escaped(part) => names.file_name_with(part, NPY_SUFFIX),
                LeafName::Exact(name) => format!("{name}{NPY_SUFFIX}"),
            };
            if taken.contains(name.as_bytes()) {
                warn!(
                    "{}: tensor `{}`: no {name} view, a tensor file has that name",
                    self.sources[*src].path.display(),
                    tensor.name
                );
                continue;
            }
            let size = header.len() as u64 + tensor.size();
            let node = Node {
                name: name.into_bytes().into(),
                parent: dir,
                attr: file_attr(&self.sources[*src].meta, size),
                content: Content::Npy {
                    source: *src,
                    tensor: tensor.clone(),
                },
            };
            children.push(self.push(node));
        }
    }
}

/// A tensor placed in a directory: its name there and the tensor with its source.
type Leaf<'a> = (LeafName<'a>, &'a (Arc<Tensor>, usize));

#[derive(Clone, Copy)]
enum LeafName<'a> {
    /// A tensor name, or a part of one, to escape (and shorten) into a file name.
    Escaped(&'a str),
    /// A file name as it is.
    Exact(&'static str),
}

impl<'a> LeafName<'a> {
    fn file_name(self, names: &mut Shortener) -> Cow<'a, str> {
        match self {
            LeafName::Escaped(name) => names.file_name(name),
            LeafName::Exact(name) => Cow::Borrowed(name),
        }
    }
}

/// With `layout=tree`: how a part that is itself `__tensor__` is written, so that it never clashes
/// with the tensor of a directory (escaping never writes `%5F`, so this is unambiguous).
const ESCAPED_TENSOR_FILE: &str = "%5F_tensor__";

/// With `layout=tree`: names with more parts than this are shown under their full name at the top.
const MAX_TREE_DEPTH: usize = 64;

/// A directory of the tree layout while it is being built.
#[derive(Default)]
struct Branch<'a> {
    /// The tensor whose name ends here.
    tensor: Option<&'a (Arc<Tensor>, usize)>,
    children: BTreeMap<&'a str, Branch<'a>>,
}

impl<'a> Branch<'a> {
    /// The tree of `entries` (sorted by name), with the tensors that find no place in it: names
    /// of over MAX_TREE_DEPTH parts, and a name whose parts an earlier name already has (`a/b`
    /// after `a.b`). `None` if it would take more than `budget` directories (hostile names can ask
    /// for MAX_TREE_DEPTH each).
    fn plant(
        entries: &'a [(Arc<Tensor>, usize)],
        budget: usize,
    ) -> Option<(Branch<'a>, Vec<Leaf<'a>>)> {
        let mut root = Branch::default();
        let mut stray = Vec::new();
        let mut branches = 0;
        for entry in entries {
            let name = &*entry.0.name;
            let parts = name.split(['.', '/']);
            if parts.clone().count() > MAX_TREE_DEPTH {
                stray.push((LeafName::Escaped(name), entry));
                continue;
            }
            let branch = parts.fold(&mut root, |b, part| {
                b.children.entry(part).or_insert_with(|| {
                    branches += 1;
                    Branch::default()
                })
            });
            if branches > budget {
                return None;
            }
            match branch.tensor {
                Some(_) => stray.push((LeafName::Escaped(name), entry)),
                None => branch.tensor = Some(entry),
            }
        }
        Some((root, stray))
    }
}

/// The reason part of a `path: reason` message.
fn strip_path(message: &str, path: &Path) -> Arc<str> {
    let prefix = format!("{}: ", path.display());
    Arc::from(message.strip_prefix(&prefix).unwrap_or(message))
}
