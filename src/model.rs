//! A SOURCE as the commands that read all of it (`verify`, `diff`) see it: the tree a mount would
//! show, its weight files, and every file of the tree with its path.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use crate::clock::Clock;
use crate::format::Format;
use crate::namespace::{Content, Ino, Node, Options, ROOT, Snapshot, Writer, single_file_format};
use crate::source::{Registry, Source, Sources};
use crate::sys;

/// A SOURCE read as a mount reads it, with the default options.
pub struct Model {
    /// The tree, or why a single-file SOURCE has none (it is not a valid file of its format).
    tree: Result<Snapshot, String>,
    /// For a single-file SOURCE: its name and the file.
    single: Option<(String, Arc<Source>)>,
    /// Keeps the sources' shared state alive as long as the tree.
    _sources: Sources,
}

/// A file of SOURCE whose name says it holds weights: a safetensors file or a PyTorch checkpoint.
pub struct WeightFile {
    /// Its path in the tree (its name, for a single-file SOURCE).
    pub path: String,
    pub source: Arc<Source>,
    pub format: Format,
}

impl Model {
    /// Reads SOURCE (a file or a directory): every header and index, none of the tensors' bytes.
    pub fn open(path: &Path) -> Result<Model, String> {
        let sources = Sources::new(Clock::system(), sys::raise_descriptor_limit());
        let meta = fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let single = if meta.is_file() {
            let canonical =
                fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let source = Registry::new(sources.clone())
                .get(&canonical, &meta)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let name = path.file_name().unwrap_or(path.as_os_str());
            Some((
                String::from_utf8_lossy(name.as_bytes()).into_owned(),
                source,
            ))
        } else {
            None
        };
        let tree = Writer::build(&sources, path, &Options::default())
            .map(|(_, tree)| tree)
            .map_err(|e| e.to_string());
        if single.is_none() {
            tree.as_ref().map_err(Clone::clone)?;
        }
        Ok(Model {
            tree,
            single,
            _sources: sources,
        })
    }

    /// The tree a mount of SOURCE would show, or why there is none.
    pub fn tree(&self) -> Result<&Snapshot, &str> {
        self.tree.as_ref().map_err(String::as_str)
    }

    /// Whether SOURCE is one file (whose tensors are then at the root of the tree).
    pub fn is_single(&self) -> bool {
        self.single.is_some()
    }

    /// The weight files: SOURCE itself if it is a file, else each mirrored file whose name says
    /// a weight format, in path order.
    pub fn weight_files(&self) -> Vec<WeightFile> {
        if let Some((name, source)) = &self.single {
            return vec![WeightFile {
                path: name.clone(),
                source: source.clone(),
                format: single_file_format(source),
            }];
        }
        let Ok(tree) = &self.tree else {
            return Vec::new();
        };
        let mut out: Vec<WeightFile> = entries(tree)
            .into_iter()
            .filter_map(|(path, _, node)| match &node.content {
                Content::Mirror { source, .. } => Some(WeightFile {
                    format: Format::of(&node.name)?.0,
                    path,
                    source: source.clone(),
                }),
                _ => None,
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }
}

/// Every node of `tree` below the root, with its path (`/`-separated, lossy UTF-8) and inode, in
/// depth-first order.
pub fn entries(tree: &Snapshot) -> Vec<(String, Ino, &Node)> {
    let mut out = Vec::new();
    let mut stack = vec![(ROOT, String::new())];
    while let Some((ino, path)) = stack.pop() {
        let Some(node) = tree.node(ino) else {
            continue;
        };
        if ino != ROOT {
            out.push((path.clone(), ino, node));
        }
        if let Some(children) = tree.children(ino) {
            for &c in children.iter().rev() {
                let Some(child) = tree.node(c) else {
                    continue;
                };
                let name = String::from_utf8_lossy(&child.name);
                let p = if path.is_empty() {
                    name.into_owned()
                } else {
                    format!("{path}/{name}")
                };
                stack.push((c, p));
            }
        }
    }
    out
}
