//! A SOURCE as the commands that read all of it (`verify`, `diff`) see it: the tree a mount would
//! show, its weight files, and every file of the tree with its path.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::base::clock::Clock;
use crate::base::sys;
use crate::format::{Format, Tensor};
use crate::namespace::{
    Content, FileError, Ino, Node, Options, Origin, ROOT, Snapshot, Writer, lies_in,
    single_file_format, unreferenced_blobs,
};
use crate::source::{How, Registry, Source, Sources};

/// A SOURCE read as a mount reads it, with the default options.
pub struct Model {
    /// SOURCE, as given.
    root: PathBuf,
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
    /// The format it is a file of; `None` for a data file another file's tensors lie in.
    pub format: Option<Format>,
    /// For a data file: the tensors whose bytes it holds (placed from its start), by name.
    pub holds: Vec<Arc<Tensor>>,
    /// The tensors it describes that are computed on read from its data files (a DCP
    /// checkpoint's sharded tensors, gathered from several), by name, with those data files.
    pub gathered: Vec<Gathered>,
}

/// A tensor computed on read from the data files of its description, with those data files.
pub type Gathered = (Arc<Tensor>, Arc<[Arc<Source>]>);

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
            root: path.to_path_buf(),
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
    /// a weight format or whose bytes another's tensors use (a model's data file, a DCP
    /// checkpoint's `.distcp`), and each link kept as a link (a Hugging Face snapshot's, to its
    /// blob) whose name does, in path order; and those that could not be opened, with why.
    pub fn weight_files(&self) -> (Vec<WeightFile>, Vec<(String, String)>) {
        if let Some((name, source)) = &self.single {
            let file = WeightFile {
                path: name.clone(),
                source: source.clone(),
                format: Some(single_file_format(source)),
                holds: Vec::new(),
                gathered: Vec::new(),
            };
            return (vec![file], Vec::new());
        }
        let Ok(tree) = &self.tree else {
            return (Vec::new(), Vec::new());
        };
        let all = tree.entries();
        let by_path: HashMap<&Path, &Arc<Source>> = all
            .iter()
            .filter_map(|(_, _, node)| match &node.content {
                Content::Mirror { source, .. } => Some((source.path.as_path(), source)),
                _ => None,
            })
            .collect();
        // The data files tensors are served from, with those tensors; and the files whose
        // tensors are gathered from their data files, with those.
        let mut held: HashMap<&Path, BTreeMap<&str, Arc<Tensor>>> = HashMap::new();
        let mut gathered: HashMap<&Path, BTreeMap<&str, Gathered>> = HashMap::new();
        for (_, _, node) in &all {
            let Content::Tensor {
                source,
                tensor,
                data,
                ..
            } = &node.content
            else {
                continue;
            };
            if tensor.file.is_some() {
                let d = lies_in(tensor, source, data);
                let holds = held.entry(d.path.as_path()).or_default();
                holds.insert(&tensor.name, tensor.clone());
            } else if tensor.computed.is_some() && !data.is_empty() {
                let from = gathered.entry(source.path.as_path()).or_default();
                from.insert(&tensor.name, (tensor.clone(), data.clone()));
                // Its data files hold weights, whether or not a whole tensor of them.
                for d in data.iter() {
                    held.entry(d.path.as_path()).or_default();
                }
            }
        }
        // A store's blobs, shown again by name in a generated directory, are verified once, at
        // their own path, as files of the format their name there says.
        let generated = |node: &Node| {
            tree.node(node.parent)
                .and_then(Node::dir)
                .is_some_and(|d| d.origin == Origin::Generated)
        };
        let mut named: HashMap<&Path, Format> = HashMap::new();
        for (_, _, node) in &all {
            if let (Content::Mirror { source, .. }, true) = (&node.content, generated(node))
                && let Some((f, _)) = Format::of(&node.name)
            {
                named.insert(source.path.as_path(), f);
            }
        }
        let (mut files, mut unopened) = (Vec::new(), Vec::new());
        // The sources reached through a link kept as a link (a snapshot's file, to its blob).
        let mut linked: HashSet<&Path> = HashSet::new();
        for (path, ino, node) in &all {
            if generated(node) {
                continue;
            }
            let source = match &node.content {
                Content::Mirror { source, .. } => source,
                // A link kept as a link leads to a mirrored file of the tree.
                Content::Link(_) => match fs::canonicalize(self.root.join(path)) {
                    Ok(target) => match by_path.get(target.as_path()) {
                        Some(source) => *source,
                        None => continue,
                    },
                    Err(e) => {
                        if Format::of(&node.name).is_some() {
                            unopened.push((path.clone(), e.to_string()));
                        }
                        continue;
                    }
                },
                Content::Dir(d) if matches!(d.origin, Origin::Real(_)) => {
                    unopened.extend(self.left_out(tree, path, *ino));
                    continue;
                }
                _ => continue,
            };
            let format = Format::of(&node.name)
                .map(|(f, _)| f)
                .or_else(|| named.get(source.path.as_path()).copied());
            let holds = held.get(source.path.as_path());
            let blob = source.recorded().is_some_and(|r| r.how == How::BlobName);
            if format.is_some() || holds.is_some() || blob {
                let link = matches!(node.content, Content::Link(_));
                if link {
                    linked.insert(source.path.as_path());
                }
                files.push((
                    WeightFile {
                        path: path.clone(),
                        source: source.clone(),
                        format,
                        holds: holds
                            .into_iter()
                            .flat_map(|h| h.values().cloned())
                            .collect(),
                        gathered: gathered
                            .remove(source.path.as_path())
                            .into_iter()
                            .flat_map(BTreeMap::into_values)
                            .collect(),
                    },
                    link,
                ));
            }
        }
        unopened.extend(self.left_out(tree, "", ROOT));
        // A file reached through links is verified under the names that reach it (a Hugging Face
        // cache's snapshot paths, as `huggingface-cli scan-cache` lists them), not again at its
        // own path (the blob); a blob no link reaches keeps its own.
        let mut files: Vec<WeightFile> = files
            .into_iter()
            .filter(|(f, link)| *link || !linked.contains(f.source.path.as_path()))
            .map(|(f, _)| f)
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        unopened.sort();
        (files, unopened)
    }

    /// The files whose tensors lie in data files that are not all there or not the size they say
    /// (an ONNX model's, a store's manifest), with why: SOURCE does not hold what they name.
    pub fn short_of_data(&self) -> Vec<(String, String)> {
        let Ok(tree) = &self.tree else {
            return Vec::new();
        };
        tree.entries()
            .into_iter()
            .filter_map(|(path, _, node)| match &node.content {
                Content::Mirror { error: Some(e), .. } if matches!(e.why, FileError::Data(_)) => {
                    Some((path, e.to_string()))
                }
                _ => None,
            })
            .collect()
    }

    /// The blobs of the stores in SOURCE that no descriptor names, by path in the tree.
    pub fn unreferenced(&self) -> Vec<String> {
        let Ok(tree) = &self.tree else {
            return Vec::new();
        };
        let dirs = tree.entries().into_iter().filter_map(|(path, _, node)| {
            let real = node.dir()?.origin != Origin::Generated;
            real.then(|| self.root.join(path))
        });
        let mut out: Vec<String> = std::iter::once(self.root.clone())
            .chain(dirs)
            .flat_map(|dir| unreferenced_blobs(&dir))
            .filter_map(|b| {
                Some(
                    b.strip_prefix(&self.root)
                        .ok()?
                        .to_string_lossy()
                        .into_owned(),
                )
            })
            .collect();
        out.sort();
        out
    }

    /// The weight files of the directory of SOURCE at `path` that the tree left out because they
    /// could not be opened, with why.
    fn left_out(&self, tree: &Snapshot, path: &str, ino: Ino) -> Vec<(String, String)> {
        let Ok(read) = fs::read_dir(self.root.join(path)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for entry in read.flatten() {
            let name = entry.file_name();
            if Format::of(name.as_bytes()).is_none() || tree.lookup(ino, name.as_bytes()).is_some()
            {
                continue;
            }
            let at = entry.path();
            if !fs::metadata(&at).is_ok_and(|m| m.is_file()) {
                continue;
            }
            if let Err(e) = fs::File::open(&at) {
                let rel = match path {
                    "" => name.to_string_lossy().into_owned(),
                    _ => format!("{path}/{}", name.to_string_lossy()),
                };
                out.push((rel, format!("cannot open: {e}")));
            }
        }
        out
    }
}
