//! `tensormount diff [--json] [--values] A B`: which tensors two checkpoints or model directories
//! do not share.
//!
//! A and B (each a weight file or a model directory) are read as a mount would show them, with
//! the default options: headers only, then the bytes of the tensors that need comparing.
//!
//! **Units.** Each side's tensors are grouped into models, one per tensor directory of its tree
//! (`X.tensors/`), or the root for a single file. A per-file directory whose tensors all appear in
//! a sharded set's merged directory is left out for the merged one. A unit's key is the
//! directory's path without `.tensors`, its last component named as the safetensors conversion
//! names it (`pytorch_model` is `model`, `unet/diffusion_pytorch_model` stays); where two units of
//! one side would share a key (`pytorch_model.bin` beside `model.safetensors`), the one renamed
//! keeps its own name (`pytorch_model`). A single file's unit key is `""`. When each side has
//! exactly one unit, those two are compared whatever their keys (and reported under the key when
//! both have it, else under `""`); otherwise units are paired by key (a single file against a
//! directory of several models by its own conversion name: `model.safetensors` and
//! `pytorch_model.bin` are paired with the unit `model`), and a unit found on one side only has
//! every tensor reported as only in that side.
//!
//! **Findings**, within a pair of units, by tensor name (never by file name): a tensor only in A,
//! only in B, renamed (a tensor only in A and one only in B with the same dtype, shape and bytes,
//! by SHA-256, paired in name order), changed (another dtype or shape), or differing (other bytes).
//! Tensors of the same name, dtype, shape and bytes are counted as the same. Common tensors are
//! compared byte for byte in parallel, largest first, A and B read together, stopping at the first
//! chunk that differs. With `--values`, a float tensor (F64, F32, F16, BF16, the F8 formats, F4)
//! whose bytes differ is read through, and its elements compared as float64: how many are not
//! equal (`+0` equals `-0`, a NaN equals any NaN) and the largest `|a - b|` (infinite when one side
//! is NaN, or an infinity the other is not).
//!
//! **Text output** (stdout): one line per finding, sorted by unit, then name, then the last line:
//!
//! ```text
//! only in A  UNIT:NAME  DTYPE [SHAPE]
//! only in B  UNIT:NAME  DTYPE [SHAPE]
//! renamed    UNIT:A_NAME -> B_NAME  DTYPE [SHAPE]
//! changed    UNIT:NAME  A: DTYPE [SHAPE]  B: DTYPE [SHAPE]
//! differ     UNIT:NAME  DTYPE [SHAPE]
//! differ     UNIT:NAME  DTYPE [SHAPE]  N of M elements differ, max |a-b| X
//! same: N tensors; only in A: N; only in B: N; renamed: N; changed: N; differ: N
//! ```
//!
//! `UNIT:` is left out for the unit `""`; `[SHAPE]` is written `[4096,11008]` (`[]` for a scalar);
//! the second form of `differ` is that of `--values` for a float tensor; X is the shortest decimal
//! that reads back as the float64 (`1e-7`, `0.5`, `0.0`), or `inf`. Control characters in names are
//! written as Rust escapes (`\n`, `\u{1b}`).
//!
//! **JSON output** (`--json`), one object: `{"same": N, "only_in_a": [{"unit", "name", "dtype",
//! "shape"}], "only_in_b": [...], "renamed": [{"unit", "a", "b", "dtype", "shape"}], "changed":
//! [{"unit", "name", "a": {"dtype", "shape"}, "b": {"dtype", "shape"}}], "differ": [{"unit",
//! "name", "dtype", "shape"}]}`, each list sorted by unit then name; a shape is an array of
//! integers; with `--values`, each float tensor of `differ` also has `"elements"`,
//! `"differing"` and `"max_abs_diff"` (a number, or the string `"inf"`).
//!
//! **Exit status**: 0 when A and B hold the same tensors, 1 when they do not (a rename is a
//! difference), 2 on an error (a side that cannot be read, a single file that is not valid, a
//! failed read), with one line on stderr, `tensormount: <file>: <what is wrong>`. A weight file of
//! a directory that is not valid is no error: a warning names it, and its tensors are missing
//! from that side, as from a mount.

mod compare;
mod units;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{Value, json};

use self::compare::{Done, Job, Values};
use self::units::{Item, Pair, Unit, file_key, pair, units};
use crate::base::digest::Sha256;
use crate::command::cli::DiffArgs;
use crate::command::model::Model;

/// Runs the command: the report on stdout, and an exit status that says whether A and B differ.
pub fn main(args: DiffArgs) -> ExitCode {
    match diff(&args.a, &args.b, args.values) {
        Err(e) => {
            eprintln!("tensormount: {e}");
            ExitCode::from(2)
        }
        Ok(report) => {
            let out = match args.json {
                true => format!("{}\n", report.json()),
                false => report.text(),
            };
            let mut stdout = std::io::stdout().lock();
            if let Err(e) = stdout
                .write_all(out.as_bytes())
                .and_then(|()| stdout.flush())
            {
                eprintln!("tensormount: stdout: {e}");
                return ExitCode::from(2);
            }
            ExitCode::from(if report.is_same() { 0 } else { 1 })
        }
    }
}

/// A tensor as reported: its unit, name, dtype and shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub unit: String,
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
}

/// One difference between A and B.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    OnlyA(Found),
    OnlyB(Found),
    /// `found` is A's tensor; `to` the name B has it under.
    Renamed {
        found: Found,
        to: String,
    },
    /// `found` is A's tensor; B's has this dtype and shape.
    Changed {
        found: Found,
        b: (String, Vec<usize>),
    },
    Differ {
        found: Found,
        values: Option<Values>,
    },
}

impl Finding {
    /// The tensor it is about (A's, except for a tensor only in B).
    fn found(&self) -> &Found {
        match self {
            Finding::OnlyA(f) | Finding::OnlyB(f) => f,
            Finding::Renamed { found, .. }
            | Finding::Changed { found, .. }
            | Finding::Differ { found, .. } => found,
        }
    }
}

/// What `diff` found.
#[derive(Debug, Default)]
pub struct Report {
    /// Tensors of the same name, dtype, shape and bytes.
    pub same: u64,
    /// Sorted by unit, then name.
    pub findings: Vec<Finding>,
}

/// Compares A and B (see the module's documentation); an error is a message naming the file.
pub fn diff(a: &Path, b: &Path, values: bool) -> Result<Report, String> {
    let (model_a, model_b) = (Model::open(a)?, Model::open(b)?);
    let tree_a = model_a.tree().map_err(str::to_string)?;
    let tree_b = model_b.tree().map_err(str::to_string)?;
    warn_invalid(a, &model_a);
    warn_invalid(b, &model_b);
    let file_keys = [a, b].map(file_key);
    let (pairs, only_a, only_b) = pair(units(tree_a), units(tree_b), file_keys);
    let mut report = Report::default();
    for (unit, side) in [(&only_a, Side::A), (&only_b, Side::B)] {
        for u in unit.iter() {
            lone(u, side, &mut report.findings);
        }
    }
    let mut tasks: Vec<Task<'_>> = Vec::new();
    let mut jobs: Vec<Job<'_>> = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        plan(i, p, values, &mut tasks, &mut jobs, &mut report.findings);
    }
    let done = compare::run(&jobs)?;
    let mut digests: BTreeMap<(usize, Side, &str), Sha256> = BTreeMap::new();
    for (task, done) in tasks.iter().zip(done) {
        match (task, done) {
            (Task::Compare { .. }, Done::Same) => report.same += 1,
            (Task::Compare { unit, item }, Done::Differ(values)) => {
                report.findings.push(Finding::Differ {
                    found: found(unit, item),
                    values,
                });
            }
            (&Task::Hash { pair, side, name }, Done::Digest(d)) => {
                digests.insert((pair, side, name), d);
            }
            _ => return Err("diff: a comparison gave an unexpected answer".to_string()),
        }
    }
    for (i, p) in pairs.iter().enumerate() {
        renames(i, p, &digests, &mut report.findings);
    }
    report.findings.sort_by(|x, y| order(x).cmp(&order(y)));
    Ok(report)
}

/// Which side a tensor is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    A,
    B,
}

/// What a job was made for.
enum Task<'a> {
    /// A tensor of both sides of this unit, with A's item.
    Compare { unit: &'a str, item: &'a Item },
    /// The digest of a tensor found on one side of pair `pair` only.
    Hash {
        pair: usize,
        side: Side,
        name: &'a str,
    },
}

/// Every tensor of a unit found on one side only.
fn lone(unit: &Unit, side: Side, out: &mut Vec<Finding>) {
    for item in unit.tensors.values() {
        let f = found(&unit.key, item);
        out.push(match side {
            Side::A => Finding::OnlyA(f),
            Side::B => Finding::OnlyB(f),
        });
    }
}

/// The findings of pair `i` that need no read (changed tensors), and the reads the rest need:
/// a comparison of each tensor on both sides, and the digest of each tensor found on one side
/// only that a tensor on the other side only could be a rename of (same dtype and shape).
fn plan<'a>(
    i: usize,
    p: &'a Pair,
    values: bool,
    tasks: &mut Vec<Task<'a>>,
    jobs: &mut Vec<Job<'a>>,
    findings: &mut Vec<Finding>,
) {
    for (name, a) in &p.a {
        let Some(b) = p.b.get(name) else {
            continue;
        };
        if a.kind() != b.kind() {
            let (dtype, shape) = b.kind();
            findings.push(Finding::Changed {
                found: found(&p.shown, a),
                b: (dtype, shape.to_vec()),
            });
            continue;
        }
        tasks.push(Task::Compare {
            unit: &p.shown,
            item: a,
        });
        jobs.push(Job::Compare { a, b, values });
    }
    let lone_a: Vec<(&Arc<str>, &Item)> =
        p.a.iter().filter(|(n, _)| !p.b.contains_key(*n)).collect();
    let lone_b: Vec<(&Arc<str>, &Item)> =
        p.b.iter().filter(|(n, _)| !p.a.contains_key(*n)).collect();
    let kinds = |side: &[(&Arc<str>, &'a Item)]| -> BTreeSet<(String, Vec<usize>)> {
        side.iter()
            .map(|(_, item)| {
                let (d, s) = item.kind();
                (d, s.to_vec())
            })
            .collect()
    };
    let (kinds_a, kinds_b) = (kinds(&lone_a), kinds(&lone_b));
    for (side, lone, other) in [(Side::A, &lone_a, &kinds_b), (Side::B, &lone_b, &kinds_a)] {
        for &(name, item) in lone {
            let (d, s) = item.kind();
            if other.contains(&(d, s.to_vec())) {
                tasks.push(Task::Hash {
                    pair: i,
                    side,
                    name,
                });
                jobs.push(Job::Hash(item));
            }
        }
    }
}

/// The tensors of pair `i` found on one side only: renames where a tensor only in A and one only
/// in B have the same dtype, shape and digest (paired in name order), else only in A or B.
fn renames(
    i: usize,
    p: &Pair,
    digests: &BTreeMap<(usize, Side, &str), Sha256>,
    out: &mut Vec<Finding>,
) {
    type Key = (String, Vec<usize>, Sha256);
    let key = |side: Side, name: &str, item: &Item| -> Option<Key> {
        let d = digests.get(&(i, side, name))?;
        let (dtype, shape) = item.kind();
        Some((dtype, shape.to_vec(), *d))
    };
    let mut by_key: BTreeMap<Key, Vec<&str>> = BTreeMap::new();
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    for (name, item) in p.b.iter().rev() {
        if p.a.contains_key(name) {
            continue;
        }
        if let Some(k) = key(Side::B, name, item) {
            by_key.entry(k).or_default().push(name);
        }
    }
    for (name, item) in &p.a {
        if p.b.contains_key(name) {
            continue;
        }
        let to = key(Side::A, name, item).and_then(|k| by_key.get_mut(&k)?.pop());
        match to {
            Some(to) => {
                taken.insert(to);
                out.push(Finding::Renamed {
                    found: found(&p.shown, item),
                    to: to.to_string(),
                });
            }
            None => out.push(Finding::OnlyA(found(&p.shown, item))),
        }
    }
    for (name, item) in &p.b {
        if !p.a.contains_key(name) && !taken.contains(&**name) {
            out.push(Finding::OnlyB(found(&p.shown, item)));
        }
    }
}

/// `item` as reported under `unit`.
fn found(unit: &str, item: &Item) -> Found {
    let (dtype, shape) = item.kind();
    Found {
        unit: unit.to_string(),
        name: item.tensor.name.to_string(),
        dtype,
        shape: shape.to_vec(),
    }
}

/// Where a finding is listed: by unit, then name, then kind.
fn order(f: &Finding) -> (&str, &str, u8) {
    let rank = match f {
        Finding::OnlyA(_) => 0,
        Finding::OnlyB(_) => 1,
        Finding::Renamed { .. } => 2,
        Finding::Changed { .. } => 3,
        Finding::Differ { .. } => 4,
    };
    (&f.found().unit, &f.found().name, rank)
}

/// Warns about each weight file of the directory `root` that cannot be opened or is not valid
/// (its tensors are not shown).
fn warn_invalid(root: &Path, model: &Model) {
    if model.is_single() {
        return;
    }
    let (files, unopened) = model.weight_files();
    for (path, why) in unopened {
        let path = root.join(path);
        eprintln!(
            "tensormount: {}: {why} (left out of the comparison)",
            path.display()
        );
    }
    for file in files {
        let Some(format) = file.format else { continue };
        if let Err(e) = file.source.describe(format)
            && !e.is_foreign()
        {
            eprintln!("tensormount: {e} (left out of the comparison)");
        }
    }
}

impl Report {
    /// Whether A and B hold the same tensors.
    pub fn is_same(&self) -> bool {
        self.findings.is_empty()
    }

    /// How many findings of each kind: only in A, only in B, renamed, changed, differ.
    fn counts(&self) -> [usize; 5] {
        let mut n = [0; 5];
        for f in &self.findings {
            n[order(f).2 as usize] += 1;
        }
        n
    }

    /// The text output: one line per finding, then the counts.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            let line = match f {
                Finding::OnlyA(x) => format!("only in A  {}  {}", at(x), kind(x)),
                Finding::OnlyB(x) => format!("only in B  {}  {}", at(x), kind(x)),
                Finding::Renamed { found, to } => {
                    format!("renamed    {} -> {}  {}", at(found), shown(to), kind(found))
                }
                Finding::Changed { found, b } => format!(
                    "changed    {}  A: {}  B: {} {}",
                    at(found),
                    kind(found),
                    b.0,
                    shape(&b.1)
                ),
                Finding::Differ { found, values } => {
                    let mut line = format!("differ     {}  {}", at(found), kind(found));
                    if let Some(v) = values {
                        line += &format!(
                            "  {} of {} elements differ, max |a-b| {}",
                            v.differing,
                            v.elements,
                            number(v.max_abs_diff)
                        );
                    }
                    line
                }
            };
            out += &line;
            out.push('\n');
        }
        let [a, b, renamed, changed, differ] = self.counts();
        out += &format!(
            "same: {} tensors; only in A: {a}; only in B: {b}; renamed: {renamed}; \
             changed: {changed}; differ: {differ}\n",
            self.same
        );
        out
    }

    /// The JSON output (see the module's documentation).
    pub fn json(&self) -> Value {
        let base =
            |f: &Found| json!({"unit": f.unit, "name": f.name, "dtype": f.dtype, "shape": f.shape});
        let (mut only_a, mut only_b, mut renamed, mut changed, mut differ) =
            (vec![], vec![], vec![], vec![], vec![]);
        for f in &self.findings {
            match f {
                Finding::OnlyA(x) => only_a.push(base(x)),
                Finding::OnlyB(x) => only_b.push(base(x)),
                Finding::Renamed { found, to } => renamed.push(json!({
                    "unit": found.unit, "a": found.name, "b": to,
                    "dtype": found.dtype, "shape": found.shape,
                })),
                Finding::Changed { found, b } => changed.push(json!({
                    "unit": found.unit, "name": found.name,
                    "a": {"dtype": found.dtype, "shape": found.shape},
                    "b": {"dtype": b.0, "shape": b.1},
                })),
                Finding::Differ { found, values } => {
                    let mut d = base(found);
                    if let (Some(v), Value::Object(map)) = (values, &mut d) {
                        map.insert("elements".into(), v.elements.into());
                        map.insert("differing".into(), v.differing.into());
                        let max = match v.max_abs_diff.is_finite() {
                            true => json!(v.max_abs_diff),
                            false => json!("inf"),
                        };
                        map.insert("max_abs_diff".into(), max);
                    }
                    differ.push(d);
                }
            }
        }
        json!({
            "same": self.same, "only_in_a": only_a, "only_in_b": only_b,
            "renamed": renamed, "changed": changed, "differ": differ,
        })
    }
}

/// `UNIT:NAME`, or `NAME` in the unit `""`.
fn at(f: &Found) -> String {
    match f.unit.is_empty() {
        true => shown(&f.name),
        false => format!("{}:{}", shown(&f.unit), shown(&f.name)),
    }
}

/// `DTYPE [SHAPE]`.
fn kind(f: &Found) -> String {
    format!("{} {}", f.dtype, shape(&f.shape))
}

/// A shape as `[4096,11008]`.
fn shape(dims: &[usize]) -> String {
    let dims: Vec<String> = dims.iter().map(usize::to_string).collect();
    format!("[{}]", dims.join(","))
}

/// A name with its control characters escaped, so that a finding stays on one line.
fn shown(name: &str) -> String {
    name.chars()
        .map(|c| match c.is_control() {
            true => c.escape_debug().to_string(),
            false => c.to_string(),
        })
        .collect()
}

/// A float64 as the shortest decimal that reads back as it, or `inf`.
fn number(x: f64) -> String {
    match x.is_finite() {
        true => json!(x).to_string(),
        false => "inf".to_string(),
    }
}

#[cfg(test)]
mod tests;
