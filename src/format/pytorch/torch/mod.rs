//! What torch means by a pickle's data: the tensors its rebuild functions make from storages
//! (persistent ids), named by their path in the nested dicts, lists and tuples; the state dict the
//! checkpoint converts to.
//!
//! Nothing here imports, looks up or calls anything: globals are recognised by their names, and
//! any other global is an opaque value. A tensor fed by an opaque value is left out (with a note);
//! the tensors beside it are still found.

use std::collections::HashSet;

use super::dtypes::{Elem, QUANTIZED, dtype_global, file_only, storage_class};
use crate::format::Dtype;
use crate::format::kit::notes::MAX_NOTES;
use crate::format::kit::pickle::{Id, Pickle, SeqKind, Value};

/// Deepest nesting of containers walked; deeper subtrees are ignored (with a note).
const MAX_DEPTH: usize = 256;
/// Values visited per byte of the pickle, at most: each reference to a value takes a byte, so only
/// memo sharing (a DAG of exponentially many paths) makes more, and such a pickle is refused.
const VISITS_PER_BYTE: u64 = 10;
/// Wrappers (parameters, subclasses) around one tensor, at most.
const MAX_WRAPPERS: u32 = 8;
/// Longest tensor name, in bytes: deeper or longer paths are ignored (with a note).
const MAX_NAME: usize = 4096;
/// Bytes of tensor names per byte of the pickle, at most (beyond a first MiB): memo sharing can
/// give many long names to few bytes, and such a pickle is refused.
const NAME_BYTES_PER_BYTE: u64 = 4;
/// The name of a tensor that is the whole pickle.
const TOP_NAME: &str = "tensor";

/// Where a tensor's elements are: a storage of the container, by its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StorageRef {
    pub key: String,
    /// Size of the storage's elements (1 for an untyped storage).
    pub elem_size: u64,
    /// Elements of the storage, as the persistent id says (or of the view).
    pub numel: u64,
    /// For a view of a legacy storage: its first element in the storage.
    pub view_start: u64,
}

/// A tensor found in the pickle, before the container places its storage.
#[derive(Debug)]
pub(super) struct Found {
    pub name: String,
    /// The value that makes the tensor (shared by the names of one tensor).
    pub value: Id,
    pub elem: Elem,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub strides: Vec<u64>,
    /// In elements of the tensor's dtype.
    pub offset: u64,
    pub storage: StorageRef,
}

/// What the walk found.
#[derive(Debug)]
pub(super) struct Walked {
    pub found: Vec<Found>,
    /// What was left out or odd (without the file's path), the first [`MAX_NOTES`] of them.
    pub notes: Vec<String>,
    /// How many more there were.
    pub more_notes: usize,
    /// The state dict: (key, the tensor's value, as [`Found::value`]), or why there is none.
    pub state_dict: Result<Vec<(String, Id)>, String>,
}

/// Finds every tensor of the pickle. Fails only where the value graph has more paths than the
/// visit budget allows (rule `TooManyPaths`).
pub(super) fn walk(pickle: &Pickle) -> Result<Walked, String> {
    let mut w = Walker {
        p: pickle,
        on_path: vec![false; pickle.values.len()],
        name_budget: (pickle.consumed as u64)
            .saturating_mul(NAME_BYTES_PER_BYTE)
            .saturating_add(1 << 20),
        budget: (pickle.consumed as u64)
            .saturating_add(pickle.values.len() as u64)
            .saturating_mul(VISITS_PER_BYTE),
        found: Vec::new(),
        notes: Vec::new(),
        more_notes: 0,
        names: HashSet::new(),
        too_deep: false,
        too_long: false,
    };
    let mut path = String::new();
    w.visit(pickle.top, &mut path, 0)?;
    let state_dict = w.state_dict();
    Ok(Walked {
        found: w.found,
        notes: w.notes,
        more_notes: w.more_notes,
        state_dict,
    })
}

/// The storage keys the pickle's persistent ids name, with the size of their elements, in order
/// of first appearance (what torch's loader registers as it unpickles, for the legacy format's
/// data).
pub(super) fn storages(pickle: &Pickle) -> Vec<(String, u64)> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for value in &pickle.values {
        if let Value::PersistentId(pid) = value
            && let Ok(s) = storage_ref(pickle, *pid)
            && seen.insert(s.key.clone())
        {
            out.push((s.key, s.elem_size));
        }
    }
    out
}

/// What a callable global makes.
enum Callee {
    /// A tensor this module reads.
    Tensor,
    /// A tensor whose bytes are not one strided stretch of a storage: why.
    NoFile(&'static str),
    /// A container made from its first argument.
    Container,
    /// Anything else: walked into for the tensors it holds.
    Opaque,
}

fn callee(module: &str, name: &str) -> Callee {
    match (module, name) {
        ("torch._utils", "_rebuild_tensor" | "_rebuild_tensor_v2" | "_rebuild_tensor_v3")
        | ("torch._utils", "_rebuild_parameter" | "_rebuild_parameter_with_state")
        | ("torch._tensor", "_rebuild_from_type" | "_rebuild_from_type_v2")
        | ("torch.nn.parameter", "Parameter") => Callee::Tensor,
        ("torch._utils", "_rebuild_qtensor") => Callee::NoFile("is quantized"),
        ("torch._utils", "_rebuild_sparse_tensor" | "_rebuild_sparse_csr_tensor") => {
            Callee::NoFile("is sparse: no file; safetensors has no sparse layout")
        }
        ("torch._utils", "_rebuild_nested_tensor") => {
            Callee::NoFile("is nested: no file; safetensors has no nested tensors")
        }
        ("torch._utils", "_rebuild_meta_tensor_no_storage") => {
            Callee::NoFile("is on the meta device: no file; it has no data")
        }
        ("torch._utils", "_rebuild_wrapper_subclass") => {
            Callee::NoFile("is a wrapper subclass: no file; its data is not in a storage")
        }
        ("torch._utils", n) if n.starts_with("_rebuild_") => {
            Callee::NoFile("is rebuilt by a torch function this reader does not follow: no file")
        }
        ("numpy.core.multiarray" | "numpy._core.multiarray", "_reconstruct") => {
            Callee::NoFile("is a numpy array: no file; its bytes are inside the pickle")
        }
        ("collections", "OrderedDict") | ("torch", "Size") => Callee::Container,
        ("builtins" | "__builtin__", "dict" | "list" | "tuple" | "set" | "frozenset") => {
            Callee::Container
        }
        _ => Callee::Opaque,
    }
}

struct Walker<'p> {
    p: &'p Pickle,
    on_path: Vec<bool>,
    budget: u64,
    found: Vec<Found>,
    notes: Vec<String>,
    more_notes: usize,
    names: HashSet<String>,
    /// Bytes of names left to give.
    name_budget: u64,
    too_deep: bool,
    too_long: bool,
}

impl Walker<'_> {
    fn note(&mut self, note: String) {
        if self.notes.len() < MAX_NOTES {
            self.notes.push(note);
        } else {
            self.more_notes += 1;
        }
    }

    fn callee_of(&self, id: Id) -> Option<(Callee, Id)> {
        match self.p.get(id) {
            Value::Call { callable, args } => {
                let (module, name) = self.p.global(*callable)?;
                Some((callee(module, name), *args))
            }
            _ => None,
        }
    }

    fn visit(&mut self, id: Id, path: &mut String, depth: usize) -> Result<(), String> {
        self.budget = self.budget.checked_sub(1).ok_or_else(|| {
            "the pickle's shared values make more paths than its size allows".to_string()
        })?;
        if depth > MAX_DEPTH {
            if !self.too_deep {
                self.too_deep = true;
                self.note(format!(
                    "values nested deeper than {MAX_DEPTH} levels (at `{path}`) are ignored"
                ));
            }
            return Ok(());
        }
        let Some(on) = self.on_path.get_mut(id as usize) else {
            return Ok(());
        };
        if *on {
            return Ok(()); // A cycle: the value is being walked already.
        }
        *on = true;
        let result = self.visit_value(id, path, depth);
        if let Some(on) = self.on_path.get_mut(id as usize) {
            *on = false;
        }
        result
    }

    fn visit_value(&mut self, id: Id, path: &mut String, depth: usize) -> Result<(), String> {
        let p = self.p;
        match p.get(id) {
            Value::Seq(_, items) => self.visit_items(items, path, depth)?,
            Value::Dict(pairs) => self.visit_pairs(pairs, path, depth)?,
            Value::Call { callable, args } => {
                let (module, name) = p.global(*callable).unwrap_or(("", ""));
                match callee(module, name) {
                    Callee::Tensor => self.tensor(id, path)?,
                    Callee::NoFile(why) => self.no_file(id, path, why),
                    Callee::Container => {
                        if let Some(&first) = p.items(*args).and_then(|a| a.first()) {
                            self.visit_container(name, first, path, depth)?;
                        }
                    }
                    Callee::Opaque => match p.items(*args) {
                        Some(items) => self.visit_items(items, path, depth)?,
                        None => self.visit(*args, path, depth + 1)?,
                    },
                }
            }
            _ => {}
        }
        if let Some(added) = p.added.get(&id) {
            for &state in &added.states {
                self.visit(state, path, depth + 1)?;
            }
            self.visit_pairs(&added.items, path, depth)?;
            self.visit_items(&added.elements, path, depth)?;
        }
        Ok(())
    }

    /// The argument of a container's constructor: `OrderedDict([(key, value), ...])` is a dict.
    fn visit_container(
        &mut self,
        class: &str,
        arg: Id,
        path: &mut String,
        depth: usize,
    ) -> Result<(), String> {
        let p = self.p;
        let dict_like = matches!(class, "OrderedDict" | "dict");
        match p.items(arg) {
            Some(items) if dict_like && items.iter().all(|&i| pair(p, i).is_some()) => {
                let pairs: Vec<(Id, Id)> = items.iter().filter_map(|&i| pair(p, i)).collect();
                self.visit_pairs(&pairs, path, depth)
            }
            _ => self.visit(arg, path, depth + 1),
        }
    }

    /// Appends `.part` (or `part` at the start) to `path`, returning its length before; `None`
    /// (with a note) where that makes too long a name.
    fn push_part(&mut self, path: &mut String, part: &str) -> Option<usize> {
        let len = path.len();
        if len.saturating_add(part.len()) >= MAX_NAME {
            if !self.too_long {
                self.too_long = true;
                self.note(format!("names longer than {MAX_NAME} bytes are ignored"));
            }
            return None;
        }
        if len > 0 {
            path.push('.');
        }
        path.push_str(part);
        Some(len)
    }

    fn visit_items(&mut self, items: &[Id], path: &mut String, depth: usize) -> Result<(), String> {
        for (i, &item) in items.iter().enumerate() {
            if let Some(len) = self.push_part(path, &i.to_string()) {
                self.visit(item, path, depth + 1)?;
                path.truncate(len);
            }
        }
        Ok(())
    }

    fn visit_pairs(
        &mut self,
        pairs: &[(Id, Id)],
        path: &mut String,
        depth: usize,
    ) -> Result<(), String> {
        for &(key, value) in pairs {
            let Some(part) = key_name(self.p, key) else {
                self.note(format!(
                    "a key of `{path}` is neither a string nor a number: its value is ignored"
                ));
                continue;
            };
            if let Some(len) = self.push_part(path, &part) {
                self.visit(value, path, depth + 1)?;
                path.truncate(len);
            }
        }
        Ok(())
    }

    fn no_file(&mut self, id: Id, path: &str, why: &str) {
        let name = tensor_name(path);
        let detail = match self.callee_of(id) {
            Some((Callee::NoFile("is quantized"), args)) => {
                let dtype = self
                    .p
                    .items(args)
                    .and_then(|a| a.first())
                    .and_then(|&s| storage_ref_elem(self.p, s))
                    .map_or("a quantized dtype".to_string(), |e| {
                        format!("torch.{}", e.name)
                    });
                format!("is quantized ({dtype}): no file; {QUANTIZED}")
            }
            _ => why.to_string(),
        };
        self.note(format!("tensor `{name}` {detail}"));
    }

    fn tensor(&mut self, id: Id, path: &str) -> Result<(), String> {
        let name = tensor_name(path);
        let Value::Call { callable, args } = self.p.get(id) else {
            return Ok(());
        };
        match self.rebuild(*callable, *args, 0) {
            Ok(_) if self.names.contains(&name) => {
                self.note(format!(
                    "two values are named `{name}`: the second is left out"
                ));
            }
            Ok(mut t) => {
                self.name_budget = self
                    .name_budget
                    .checked_sub(name.len() as u64)
                    .ok_or("the pickle's shared values make longer names than its size allows")?;
                self.names.insert(name.clone());
                t.name = name;
                t.value = id;
                self.found.push(t);
            }
            Err(why) => self.note(format!("tensor `{name}` {why}")),
        }
        Ok(())
    }

    /// The tensor `callable(*args)` makes, or why it is left out.
    fn rebuild(&self, callable: Id, args: Id, wrappers: u32) -> Result<Found, String> {
        let p = self.p;
        let (module, name) = p
            .global(callable)
            .ok_or("is made by a call of something other than a global: left out")?;
        let items = p
            .items(args)
            .ok_or("has arguments that are not a tuple: left out")?;
        let arg = |i: usize| items.get(i).copied();
        let inner = |data: Option<Id>| -> Result<Found, String> {
            if wrappers >= MAX_WRAPPERS {
                return Err("is wrapped too many times: left out".into());
            }
            match data.map(|d| p.get(d)) {
                Some(Value::Call { callable, args }) => {
                    self.rebuild(*callable, *args, wrappers + 1)
                }
                _ => Err("wraps something that is not a tensor: left out".into()),
            }
        };
        match (module, name) {
            ("torch._utils", "_rebuild_tensor" | "_rebuild_tensor_v2") => self.strided(items, None),
            ("torch._utils", "_rebuild_tensor_v3") => self.strided(items, arg(6)),
            ("torch._tensor", "_rebuild_from_type" | "_rebuild_from_type_v2") => {
                match (arg(0), arg(2)) {
                    (Some(func), Some(args)) => {
                        if wrappers >= MAX_WRAPPERS {
                            return Err("is wrapped too many times: left out".into());
                        }
                        self.rebuild(func, args, wrappers + 1)
                    }
                    _ => Err("is rebuilt from a type without its arguments: left out".into()),
                }
            }
            _ => match callee(module, name) {
                Callee::Tensor => inner(arg(0)),
                Callee::NoFile(why) => Err(why.into()),
                _ => Err(format!(
                    "is made by `{module}.{name}`, which is not torch's: left out"
                )),
            },
        }
    }

    /// `_rebuild_tensor_v2(storage, storage_offset, size, stride, ...)`, with the dtype argument
    /// of `_rebuild_tensor_v3`.
    fn strided(&self, items: &[Id], dtype: Option<Id>) -> Result<Found, String> {
        let p = self.p;
        let [storage, offset, size, stride, ..] = items else {
            return Err("has too few arguments: left out".into());
        };
        let storage_elem = storage_ref_elem(p, *storage);
        let storage = match p.get(*storage) {
            Value::PersistentId(pid) => storage_ref(p, *pid)?,
            other => {
                return Err(format!(
                    "has a storage that is not torch's ({}): left out",
                    describe(p, other)
                ));
            }
        };
        let elem = match dtype {
            Some(d) => {
                let (module, name) = p.global(d).ok_or("has a dtype that is not a global")?;
                dtype_global(module, name)
                    .ok_or_else(|| format!("has an unknown dtype `{module}.{name}`: left out"))?
            }
            None => storage_elem.ok_or("has a storage of unknown type: left out")?,
        };
        // A type safetensors has no name for is a file of its bytes, if they are plain numbers.
        let dtype = match (elem.dtype, file_only(&elem)) {
            (Ok(dtype), _) => dtype,
            (Err(_), Some(ours)) => ours,
            (Err(why), None) => {
                return Err(format!(
                    "is {} (torch.{}): no file; {why}",
                    elem.name, elem.name
                ));
            }
        };
        let offset = p
            .int(*offset)
            .and_then(|o| u64::try_from(o).ok())
            .ok_or("has a storage offset that is not a natural number: left out")?;
        let shape =
            naturals(p, *size).ok_or("has a size that is not a tuple of naturals: left out")?;
        let strides =
            naturals(p, *stride).ok_or("has strides that are not a tuple of naturals: left out")?;
        if shape.len() != strides.len() {
            return Err("has not as many strides as dimensions: left out".into());
        }
        Ok(Found {
            name: String::new(),
            value: 0,
            elem,
            dtype,
            shape,
            strides,
            offset,
            storage,
        })
    }

    fn state_dict(&self) -> Result<Vec<(String, Id)>, String> {
        let p = self.p;
        let top = p.top;
        let state_dict = self.tensor_dict(top).or_else(|| match p.get(top) {
            Value::Dict(pairs) => pairs
                .iter()
                .find(|&&(k, _)| p.str(k) == Some("state_dict"))
                .and_then(|&(_, sd)| self.tensor_dict(sd)),
            _ => None,
        });
        match state_dict {
            Some(entries) if entries.is_empty() => Err("no tensors".into()),
            Some(entries) => Ok(entries),
            None => Err(
                "no state dict: the top level is not a dict of tensors and has no \
                         `state_dict` entry that is"
                    .into(),
            ),
        }
    }

    /// The keys and tensor values of a dict whose every value is a tensor (the first of repeated
    /// keys).
    fn tensor_dict(&self, id: Id) -> Option<Vec<(String, Id)>> {
        let Value::Dict(pairs) = self.p.get(id) else {
            return None;
        };
        let mut seen = HashSet::new();
        let mut entries = Vec::with_capacity(pairs.len());
        for &(k, v) in pairs {
            let Some((Callee::Tensor | Callee::NoFile(_), _)) = self.callee_of(v) else {
                return None;
            };
            let key = key_name(self.p, k)?;
            if seen.insert(key.clone()) {
                entries.push((key, v));
            }
        }
        Some(entries)
    }
}

fn tensor_name(path: &str) -> String {
    if path.is_empty() { TOP_NAME } else { path }.to_string()
}

/// A dict key as a name part: strings as they are, integers in decimal.
fn key_name(p: &Pickle, key: Id) -> Option<String> {
    match p.get(key) {
        Value::Str(s) => Some(s.to_string()),
        Value::Int(i) => Some(i.to_string()),
        Value::Bool(b) => Some(if *b { "True" } else { "False" }.into()),
        Value::None => Some("None".into()),
        _ => None,
    }
}

fn pair(p: &Pickle, id: Id) -> Option<(Id, Id)> {
    match p.items(id)? {
        &[k, v] => Some((k, v)),
        _ => None,
    }
}

/// A tuple (or `torch.Size`) of non-negative integers.
fn naturals(p: &Pickle, id: Id) -> Option<Vec<u64>> {
    let items = match p.get(id) {
        Value::Call { callable, args } if p.global(*callable) == Some(("torch", "Size")) => {
            p.items(*p.items(*args)?.first()?)?
        }
        _ => p.items(id)?,
    };
    items
        .iter()
        .map(|&i| p.int(i).and_then(|v| u64::try_from(v).ok()))
        .collect()
}

/// The element type of the storage a persistent id names.
fn storage_ref_elem(p: &Pickle, storage: Id) -> Option<Elem> {
    let Value::PersistentId(pid) = p.get(storage) else {
        return None;
    };
    let class = *p.items(*pid)?.get(1)?;
    let (module, name) = p.global(class)?;
    storage_class(module, name)
}

/// A storage's persistent id: `('storage', class, key, location, numel)` (zip) or with a sixth
/// item, the view metadata `(view_key, offset, size)` or `None` (legacy).
fn storage_ref(p: &Pickle, pid: Id) -> Result<StorageRef, String> {
    let items = p
        .items(pid)
        .ok_or("has a persistent id that is not a tuple: left out")?;
    let [tag, class, key, _location, numel, rest @ ..] = items else {
        return Err("has a persistent id of too few items: left out".into());
    };
    if p.str(*tag) != Some("storage") {
        return Err("has a persistent id that is not a storage's: left out".into());
    }
    let (module, name) = p
        .global(*class)
        .ok_or("has a storage class that is not a global")?;
    let elem = storage_class(module, name)
        .ok_or_else(|| format!("has an unknown storage class `{module}.{name}`: left out"))?;
    let key = key_name(p, *key).ok_or("has a storage key that is not a string: left out")?;
    let numel = p
        .int(*numel)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or("has a storage size that is not a natural number: left out")?;
    let mut storage = StorageRef {
        key,
        elem_size: elem.size,
        numel,
        view_start: 0,
    };
    if let Some(&view) = rest.first()
        && !matches!(p.get(view), Value::None)
    {
        let view = naturals_or_key(p, view).ok_or("has view metadata torch never writes")?;
        storage.view_start = view.0;
        storage.numel = view.1;
    }
    Ok(storage)
}

/// Legacy view metadata `(view_key, offset, size)`: the offset and size.
fn naturals_or_key(p: &Pickle, id: Id) -> Option<(u64, u64)> {
    let &[_, offset, size] = p.items(id)? else {
        return None;
    };
    let natural = |i| p.int(i).and_then(|v| u64::try_from(v).ok());
    Some((natural(offset)?, natural(size)?))
}

/// A value in a few words, for notes.
fn describe(p: &Pickle, value: &Value) -> String {
    match value {
        Value::Global { module, name, .. } => format!("the global `{module}.{name}`"),
        Value::Call { callable, .. } => match p.global(*callable) {
            Some((module, name)) => format!("a call of `{module}.{name}`"),
            None => "a call".into(),
        },
        Value::Seq(SeqKind::Tuple, _) => "a tuple".into(),
        Value::Seq(..) => "a container".into(),
        Value::Dict(_) => "a dict".into(),
        _ => "a plain value".into(),
    }
}

#[cfg(test)]
mod tests;
