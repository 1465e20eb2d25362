//! The walk of an ONNX model: its fields (producer, opset, metadata), its main graph, every
//! subgraph (the `g` and `graphs` attributes of any node: `If`, `Loop`, `Scan` bodies) and every
//! local function, each yielding its tensors: initializers, and the values of `Constant` nodes
//! (`value`, `value_float(s)`, `value_int(s)`). A graph's own tensors are named before any of its
//! subgraphs', so a subgraph's reuse of a name is the one prefixed by its graph's path.

use std::collections::{BTreeMap, VecDeque};

use serde_json::Value as Json;

use super::error::OnnxError;
use super::wire::{At, Field, Spans, Window, Wire, wire_type};

/// Most graphs nested in one another (protobuf's own limit, 100 messages, is about 33).
pub(super) const MAX_DEPTH: usize = 32;
/// Longest name read (a tensor's, a node's, an attribute's).
pub(super) const MAX_NAME: u64 = 1 << 16;
/// Longest metadata value kept (a longer one is summarised by its length).
const MAX_VALUE: u64 = 1 << 16;

/// What a tensor of the model is made of.
#[derive(Debug)]
pub(super) enum Value {
    /// A `TensorProto`: an initializer, or a `Constant`'s `value`.
    Tensor(Spans),
    /// A `Constant`'s `value_float` (the last one's 4 bytes at `at`).
    Float { at: u64 },
    /// A `Constant`'s `value_floats` (field 7) or `value_ints` (field 8), in the attribute
    /// `spans`.
    List { spans: Spans, field: u32 },
    /// A `Constant`'s `value_int`: the last one's varint, `len` bytes at `at`.
    Int { at: u64, len: u64 },
}

/// A tensor found: the name its graph gives it, the path of that graph (`If_0.then_branch/`, ``
/// for the main graph), and its value.
#[derive(Debug)]
pub(super) struct Found {
    pub name: String,
    pub path: String,
    pub value: Value,
}

/// The model: its metadata (`producer_name`, `producer_version`, `ir_version`, `opset_import`
/// and every `metadata_props` key), its tensors in the order found, and what is not shown.
pub(super) struct Model {
    pub metadata: BTreeMap<String, Json>,
    pub found: Vec<Found>,
    pub notes: Vec<String>,
}

/// A graph to walk: its spans, its path, how deep it is.
struct Graph {
    spans: Spans,
    path: String,
    depth: usize,
    /// A function's nodes are its field 7 (a graph's are field 1), and it has no initializers.
    function: bool,
}

/// Walks the model that is the whole file (`len` bytes).
pub(super) fn model<A: At>(win: &mut Window<A>, len: u64) -> Result<Model, OnnxError> {
    let mut metadata = BTreeMap::new();
    let mut props = BTreeMap::new();
    let mut opsets = Vec::new();
    let mut graph = Vec::new();
    let mut functions = Vec::new();
    win.fields(&[(0, len)], "the model", |win, f| {
        match (f.number, f.wire) {
            (1, Wire::Varint(v)) => {
                metadata.insert("ir_version".into(), Json::from(v));
            }
            (2 | 3, w) => {
                let key = if f.number == 2 {
                    "producer_name"
                } else {
                    "producer_version"
                };
                metadata.insert(key.into(), Json::from(win.text(w, MAX_NAME, "the model")?));
            }
            (7, Wire::Len { at, len }) => graph.push((at, at + len)),
            (8, Wire::Len { at, len }) => opsets.push(opset(win, at, len)?),
            (14, Wire::Len { at, len }) => {
                let (k, v) = entry(win, at, len, "a metadata_props entry")?;
                props.insert(k, v);
            }
            (25, Wire::Len { at, len }) => functions.push((at, at + len)),
            (1 | 7 | 8 | 14 | 25, _) => return Err(wire_type("the model", "its declared type")),
            _ => {}
        }
        Ok(())
    })?;
    if !opsets.is_empty() {
        metadata.insert("opset_import".into(), Json::from(opsets.join(",")));
    }
    // The model's own fields first; a metadata_props key of the same name does not hide them.
    for (k, v) in props {
        metadata.entry(k).or_insert(v);
    }
    let mut queue = VecDeque::new();
    queue.push_back(Graph {
        spans: graph,
        path: String::new(),
        depth: 1,
        function: false,
    });
    for f in functions {
        let name = function_name(win, f)?;
        queue.push_back(Graph {
            spans: vec![f],
            path: format!("{name}/"),
            depth: 1,
            function: true,
        });
    }
    let mut found = Vec::new();
    let mut notes = Vec::new();
    while let Some(g) = queue.pop_front() {
        walk_graph(win, g, &mut found, &mut notes, &mut queue)?;
    }
    Ok(Model {
        metadata,
        found,
        notes,
    })
}

/// `domain:version` of an `OperatorSetIdProto` (the default domain is `ai.onnx`).
fn opset<A: At>(win: &mut Window<A>, at: u64, len: u64) -> Result<String, OnnxError> {
    let (mut domain, mut version) = (String::new(), 0);
    win.fields(&[(at, at + len)], "an opset_import", |win, f| {
        match (f.number, f.wire) {
            (1, w) => domain = win.text(w, MAX_NAME, "an opset_import")?,
            (2, Wire::Varint(v)) => version = v,
            _ => {}
        }
        Ok(())
    })?;
    if domain.is_empty() {
        domain = "ai.onnx".into();
    }
    Ok(format!("{domain}:{version}"))
}

/// The key and value of a `StringStringEntryProto` (a value too long to keep as its length).
fn entry<A: At>(
    win: &mut Window<A>,
    at: u64,
    len: u64,
    inside: &str,
) -> Result<(String, Json), OnnxError> {
    let (mut key, mut value) = (String::new(), Json::from(""));
    win.fields(&[(at, at + len)], inside, |win, f| {
        match (f.number, f.wire) {
            (1, w) => key = win.text(w, MAX_NAME, inside)?,
            (2, Wire::Len { len, .. }) if len > MAX_VALUE => {
                value = serde_json::json!({"type": "STRING", "length": len});
            }
            (2, w) => value = Json::from(win.text(w, MAX_VALUE, inside)?),
            _ => {}
        }
        Ok(())
    })?;
    Ok((key, value))
}

/// The key and value of a `StringStringEntryProto`, both as text.
pub(super) fn entry_text<A: At>(
    win: &mut Window<A>,
    at: u64,
    len: u64,
    inside: &str,
) -> Result<(String, String), OnnxError> {
    let (mut key, mut value) = (String::new(), String::new());
    win.fields(&[(at, at + len)], inside, |win, f| {
        match f.number {
            1 => key = win.text(f.wire, MAX_NAME, inside)?,
            2 => value = win.text(f.wire, MAX_NAME, inside)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok((key, value))
}

fn function_name<A: At>(win: &mut Window<A>, span: (u64, u64)) -> Result<String, OnnxError> {
    let mut name = String::new();
    win.fields(&[span], "a function", |win, f| {
        if f.number == 1 {
            name = win.text(f.wire, MAX_NAME, "a function")?;
        }
        Ok(())
    })?;
    Ok(name)
}

/// One node, as far as its tensors and subgraphs go.
#[derive(Default)]
struct Node {
    name: String,
    first_output: Option<String>,
    op_type: String,
    domain: String,
    attributes: Vec<(u64, u64)>,
}

/// Walks graph `g`: its initializers and `Constant` nodes are found, its subgraphs queued.
fn walk_graph<A: At>(
    win: &mut Window<A>,
    g: Graph,
    found: &mut Vec<Found>,
    notes: &mut Vec<String>,
    queue: &mut VecDeque<Graph>,
) -> Result<(), OnnxError> {
    let inside = if g.path.is_empty() {
        "the graph".to_string()
    } else {
        format!("graph `{}`", g.path.trim_end_matches('/'))
    };
    if g.depth > MAX_DEPTH {
        return Err(OnnxError::TooDeep {
            inside,
            depth: g.depth,
        });
    }
    let node_field = if g.function { 7 } else { 1 };
    let mut nodes = Vec::new();
    win.fields(&g.spans, &inside, |win, f: Field| {
        match (f.number, f.wire) {
            (n, Wire::Len { at, len }) if n == node_field => nodes.push((at, at + len)),
            (5, Wire::Len { at, len }) if !g.function => found.push(Found {
                name: String::new(),
                path: g.path.clone(),
                value: Value::Tensor(vec![(at, at + len)]),
            }),
            (15, Wire::Len { at, len }) if !g.function => {
                let name = sparse_name(win, at, len, &inside)?;
                notes.push(format!(
                    "sparse initializer `{}{name}` is not shown (sparse tensors are listed, not \
                     densified)",
                    g.path
                ));
            }
            (1 | 5 | 7 | 15, Wire::Len { .. }) | (2, _) => {}
            (1 | 5 | 7 | 15, _) => return Err(wire_type(&inside, "a message")),
            _ => {}
        }
        Ok(())
    })?;
    for span in nodes {
        let node = node(win, span, &inside)?;
        // A node is known by its name, or else its first output.
        let label = match node.name.is_empty() {
            false => node.name.clone(),
            true => node.first_output.clone().unwrap_or_default(),
        };
        let constant = node.op_type == "Constant" && matches!(&*node.domain, "" | "ai.onnx");
        for &attr in &node.attributes {
            attribute(win, attr, &node, &label, constant, &g, found, notes, queue)?;
        }
    }
    Ok(())
}

fn node<A: At>(win: &mut Window<A>, span: (u64, u64), inside: &str) -> Result<Node, OnnxError> {
    let mut n = Node::default();
    win.fields(&[span], inside, |win, f| {
        match (f.number, f.wire) {
            (2, w) if n.first_output.is_none() => {
                n.first_output = Some(win.text(w, MAX_NAME, inside)?);
            }
            (3, w) => n.name = win.text(w, MAX_NAME, inside)?,
            (4, w) => n.op_type = win.text(w, MAX_NAME, inside)?,
            (7, w) => n.domain = win.text(w, MAX_NAME, inside)?,
            (5, Wire::Len { at, len }) => n.attributes.push((at, at + len)),
            (5, _) => return Err(wire_type(inside, "a message")),
            _ => {}
        }
        Ok(())
    })?;
    Ok(n)
}

/// The name of a sparse initializer: its `values` tensor's.
fn sparse_name<A: At>(
    win: &mut Window<A>,
    at: u64,
    len: u64,
    inside: &str,
) -> Result<String, OnnxError> {
    let mut values = Vec::new();
    win.fields(&[(at, at + len)], inside, |_, f| {
        if let (1, Wire::Len { at, len }) = (f.number, f.wire) {
            values.push((at, at + len));
        }
        Ok(())
    })?;
    let mut name = String::new();
    win.fields(&values, inside, |win, f| {
        if f.number == 8 {
            name = win.text(f.wire, MAX_NAME, inside)?;
        }
        Ok(())
    })?;
    Ok(name)
}

/// One attribute of `node`: the value of a `Constant` (`constant`), and any subgraph, queued.
#[allow(clippy::too_many_arguments)]
fn attribute<A: At>(
    win: &mut Window<A>,
    span: (u64, u64),
    node: &Node,
    label: &str,
    constant: bool,
    g: &Graph,
    found: &mut Vec<Found>,
    notes: &mut Vec<String>,
    queue: &mut VecDeque<Graph>,
) -> Result<(), OnnxError> {
    let inside = format!("attribute of node `{label}`");
    let (mut name, mut t, mut graph, mut graphs) =
        (String::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut float, mut int, mut lists) = (None, None, (false, false));
    let mut sparse = false;
    win.fields(&[span], &inside, |win, f| {
        match (f.number, f.wire) {
            (1, w) => name = win.text(w, MAX_NAME, &inside)?,
            (5, Wire::Len { at, len }) => t.push((at, at + len)),
            (6, Wire::Len { at, len }) => graph.push((at, at + len)),
            (11, Wire::Len { at, len }) => graphs.push((at, at + len)),
            (2, Wire::Fixed32(_)) => float = Some(f.at),
            (3, Wire::Varint(_)) => int = Some(f.at),
            (7, _) => lists.0 = true,
            (8, _) => lists.1 = true,
            (22, _) => sparse = true,
            (5 | 6 | 11, _) | (2, _) | (3, _) => {
                return Err(wire_type(&inside, "its declared type"));
            }
            _ => {}
        }
        Ok(())
    })?;
    let output = node.first_output.clone().unwrap_or_default();
    if constant {
        let value = match &*name {
            "value" if !t.is_empty() => Some(Value::Tensor(t.clone())),
            "value_float" => float.map(|at| Value::Float { at }),
            "value_int" => match int {
                Some(at) => {
                    let mut end = at;
                    win.varint(&mut end, span.1, &inside)?;
                    Some(Value::Int { at, len: end - at })
                }
                None => None,
            },
            "value_floats" if lists.0 => Some(Value::List {
                spans: vec![span],
                field: 7,
            }),
            "value_ints" if lists.1 => Some(Value::List {
                spans: vec![span],
                field: 8,
            }),
            // Without values: an empty list of its type.
            "value_floats" | "value_ints" => Some(Value::List {
                spans: Vec::new(),
                field: if &*name == "value_ints" { 8 } else { 7 },
            }),
            "sparse_value" if sparse => {
                notes.push(format!(
                    "constant `{}{output}` is a sparse tensor: not shown (sparse tensors are \
                     listed, not densified)",
                    g.path
                ));
                None
            }
            "value_string" | "value_strings" => {
                notes.push(format!(
                    "constant `{}{output}` is strings: not shown",
                    g.path
                ));
                None
            }
            _ => None,
        };
        if let Some(value) = value {
            found.push(Found {
                name: output,
                path: g.path.clone(),
                value,
            });
        }
    }
    // Subgraphs: one (`g`, its occurrences merged) or a list (`graphs`).
    let mut sub = |spans: Spans, path: String| {
        queue.push_back(Graph {
            spans,
            path,
            depth: g.depth + 1,
            function: false,
        });
    };
    if !graph.is_empty() {
        sub(graph, format!("{}{label}.{name}/", g.path));
    }
    for (k, s) in graphs.into_iter().enumerate() {
        sub(vec![s], format!("{}{label}.{name}.{k}/", g.path));
    }
    Ok(())
}
