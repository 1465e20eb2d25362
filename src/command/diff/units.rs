//! The models of one side of a diff: its tensors grouped into units, one per tensor directory a
//! mount shows (or the root, for a single file), and the units of two sides paired.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::format::{Format, Tensor, conversion_key};
use crate::namespace::{Content, Snapshot};
use crate::source::Source;

/// The suffix of a generated tensor directory.
const TENSORS: &str = ".tensors";

/// One tensor of a unit, with the file that holds it.
#[derive(Clone, Debug)]
pub struct Item {
    /// The file that describes it, and the data files of that description.
    pub source: Arc<Source>,
    pub data: Arc<[Arc<Source>]>,
    pub tensor: Arc<Tensor>,
}

impl Item {
    /// Its dtype and shape, as they are compared.
    pub fn kind(&self) -> (String, &[usize]) {
        (self.tensor.dtype_name().to_string(), &self.tensor.shape)
    }
}

/// One model of a side: the tensors of one tensor directory, by name.
#[derive(Debug)]
pub struct Unit {
    /// What units are paired by: the directory's path without `.tensors`, its last component
    /// named as the safetensors conversion names it (`pytorch_model` is `model`); `""` for the
    /// root of a single-file SOURCE.
    pub key: String,
    pub tensors: BTreeMap<Arc<str>, Item>,
}

/// Two units compared: the name findings are reported under, and each side's tensors.
pub struct Pair {
    pub shown: String,
    pub a: BTreeMap<Arc<str>, Item>,
    pub b: BTreeMap<Arc<str>, Item>,
}

/// A tensor directory while units are gathered.
#[derive(Default)]
struct Dir {
    tensors: BTreeMap<Arc<str>, Item>,
    /// The files its tensors come from.
    sources: BTreeSet<PathBuf>,
}

/// The units of `tree`, by key. A directory of one file's own tensors (`NAME.tensors/` beside
/// `NAME.safetensors`) whose tensors all appear in another directory that is not one file's own (a
/// sharded set's merged directory) is left out: the merged directory is the model.
pub fn units(tree: &Snapshot) -> Vec<Unit> {
    let all = tree.entries();
    // Where each weight file's own tensor directory is, and the file (`None` for a link kept as
    // a link, a Hugging Face snapshot's to its blob).
    let mut own: BTreeMap<String, Option<PathBuf>> = BTreeMap::new();
    let mut dirs: BTreeMap<String, Dir> = BTreeMap::new();
    for (path, _, node) in &all {
        let file = match &node.content {
            Content::Mirror { source, .. } => Some(Some(source.path.clone())),
            Content::Link(_) => Some(None),
            _ => None,
        };
        if let (Some(file), Some((_, stem))) = (file, Format::of(&node.name)) {
            let (parent, _) = split_last(path);
            let stem = String::from_utf8_lossy(stem);
            own.insert(join(parent, &format!("{stem}{TENSORS}")), file);
        }
        if let Content::Tensor {
            source,
            tensor,
            data,
            ..
        } = &node.content
        {
            let dir = dirs.entry(tensor_dir(path)).or_default();
            dir.sources.insert(source.path.clone());
            dir.tensors.entry(tensor.name.clone()).or_insert(Item {
                source: source.clone(),
                data: data.clone(),
                tensor: tensor.clone(),
            });
        }
    }
    let is_own = |path: &str, dir: &Dir| match own.get(path) {
        Some(Some(file)) => dir.sources.iter().all(|s| s == file),
        Some(None) => dir.sources.len() <= 1,
        None => false,
    };
    let merged: Vec<HashSet<(&PathBuf, &str)>> = dirs
        .iter()
        .filter(|(path, dir)| !is_own(path, dir))
        .map(|(_, dir)| ids(dir).collect())
        .collect();
    let kept: Vec<(&String, &Dir)> = dirs
        .iter()
        .filter(|(path, dir)| {
            !is_own(path, dir)
                || dir.tensors.is_empty()
                || !merged.iter().any(|m| ids(dir).all(|id| m.contains(&id)))
        })
        .collect();
    keyed(kept)
}

/// The identities of a directory's tensors: file and name.
fn ids(dir: &Dir) -> impl Iterator<Item = (&PathBuf, &str)> {
    dir.tensors
        .iter()
        .map(|(name, item)| (&item.source.path, &**name))
}

/// The units of the kept directories, each keyed by its path's conversion name, or by its path as
/// it is where two would share a key (`pytorch_model.bin` beside `model.safetensors`: `model` is
/// the safetensors file's, `pytorch_model` the checkpoint's).
fn keyed(kept: Vec<(&String, &Dir)>) -> Vec<Unit> {
    let converted = |path: &str| {
        let base = path.strip_suffix(TENSORS).unwrap_or(path);
        let (parent, last) = split_last(base);
        let last = String::from_utf8_lossy(&conversion_key(last.as_bytes())).into_owned();
        join(parent, &last)
    };
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for (path, _) in &kept {
        *count.entry(converted(path)).or_default() += 1;
    }
    let mut out: BTreeMap<String, Unit> = BTreeMap::new();
    for (path, dir) in kept {
        let plain = path.strip_suffix(TENSORS).unwrap_or(path).to_string();
        let mut key = converted(path);
        if count.get(&key).is_some_and(|&n| n > 1) {
            key = plain;
        }
        if out.contains_key(&key) {
            // Only a directory named like another's key with `.tensors` kept can get here.
            key = path.clone();
        }
        out.insert(
            key.clone(),
            Unit {
                key,
                tensors: dir.tensors.clone(),
            },
        );
    }
    out.into_values().collect()
}

/// The tensor directory a tensor file at `path` is in: its nearest ancestor named `*.tensors`,
/// else the root (`""`).
fn tensor_dir(path: &str) -> String {
    let (parent, _) = split_last(path);
    let mut end = None;
    let mut at = 0;
    for part in parent.split('/') {
        at += part.len();
        if part.ends_with(TENSORS) && part.len() > TENSORS.len() {
            end = Some(at);
        }
        at += 1;
    }
    end.map_or_else(String::new, |e| parent[..e].to_string())
}

/// `path` split at its last `/`: (parent, last component); the parent of a top-level name is `""`.
fn split_last(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// `parent/name`, or `name` at the top.
fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

/// The key a single file's unit is paired by against a side of several units: its name's stem,
/// as the safetensors conversion names it (`model.safetensors` and `pytorch_model.bin` are
/// `model`).
pub fn file_key(path: &Path) -> Option<String> {
    let name = path.file_name()?;
    let (_, stem) = Format::of(name.as_bytes())?;
    Some(String::from_utf8_lossy(&conversion_key(stem)).into_owned())
}

/// The units of A and B paired: when each side has exactly one, those two whatever their keys
/// (shown under the key if both have it, else under `""`); otherwise by key, a single file's unit
/// (key `""`) by its `file_keys` entry instead. Returns the pairs and the units of each side that
/// have no partner, in key order.
pub fn pair(
    a: Vec<Unit>,
    b: Vec<Unit>,
    file_keys: [Option<String>; 2],
) -> (Vec<Pair>, Vec<Unit>, Vec<Unit>) {
    if let ([one_a], [one_b]) = (&a[..], &b[..]) {
        let shown = if one_a.key == one_b.key {
            one_a.key.clone()
        } else {
            String::new()
        };
        let (mut a, mut b) = (a, b);
        let (Some(ua), Some(ub)) = (a.pop(), b.pop()) else {
            return (Vec::new(), Vec::new(), Vec::new());
        };
        let pair = Pair {
            shown,
            a: ua.tensors,
            b: ub.tensors,
        };
        return (vec![pair], Vec::new(), Vec::new());
    }
    let [key_a, key_b] = file_keys;
    let rekey = |mut units: Vec<Unit>, key: Option<String>| {
        if let ([one], Some(key)) = (&mut units[..], key)
            && one.key.is_empty()
        {
            one.key = key;
        }
        units
    };
    let (a, b) = (rekey(a, key_a), rekey(b, key_b));
    let mut b: BTreeMap<String, Unit> = b.into_iter().map(|u| (u.key.clone(), u)).collect();
    let mut pairs = Vec::new();
    let mut only_a = Vec::new();
    for ua in a {
        match b.remove(&ua.key) {
            Some(ub) => pairs.push(Pair {
                shown: ua.key,
                a: ua.tensors,
                b: ub.tensors,
            }),
            None => only_a.push(ua),
        }
    }
    (pairs, only_a, b.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_dir_is_the_nearest_tensors_ancestor() {
        assert_eq!(tensor_dir("a.weight"), "");
        assert_eq!(tensor_dir("model.tensors/a.weight"), "model.tensors");
        assert_eq!(
            tensor_dir("unet/diffusion_pytorch_model.tensors/x"),
            "unet/diffusion_pytorch_model.tensors"
        );
        assert_eq!(
            tensor_dir("m.tensors/layers/0/w"),
            "m.tensors",
            "a tree layout's subdirectories belong to their tensor directory"
        );
        assert_eq!(tensor_dir(".tensors/x"), "", "a bare .tensors is no stem");
    }

    #[test]
    fn split_and_join() {
        assert_eq!(split_last("a/b/c"), ("a/b", "c"));
        assert_eq!(split_last("c"), ("", "c"));
        assert_eq!(join("", "x"), "x");
        assert_eq!(join("a", "x"), "a/x");
    }
}
