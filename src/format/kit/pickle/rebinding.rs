//! What a pickle writes into modules and other globals' objects, which Python's unpickler lets it
//! do with `BUILD` (a global's attributes), `SETITEM(S)` (into `sys.modules`, a module's
//! `__dict__`, or what `vars` or `getattr` returns) and calls such as `setattr`. After such a
//! write a global's name may no longer be what it was: every global read after it is unsafe, and
//! where the write bound the name (or the module it is in) to a value the pickle holds, the read
//! is that value (picklescan's `sys_module_override` binds `torch._utils._rebuild_tensor` to
//! `'builtins'` and `'eval'`, then reads it twice to make `builtins.eval`).

use std::collections::HashMap;

use super::value::{Id, SeqKind, Value};

/// The writes of one pickle so far.
#[derive(Debug, Default)]
pub(super) struct Rebinding {
    /// The first write (`torch._utils (by BUILD)`), after which every global read is unsafe.
    wrote: Option<String>,
    /// The values bound to dotted names (`torch._utils._rebuild_tensor` by a `BUILD` of
    /// `torch._utils`, `torch._utils` by a `SETITEM` of `sys.modules`).
    rebound: HashMap<String, Id>,
}

impl Rebinding {
    /// Why a read of `module.name` is unsafe, if it is (it comes after a write), and the value
    /// the read gives where the pickle rebound the name.
    pub fn read(&self, values: &[Value], module: &str, name: &str) -> Option<(String, Option<Id>)> {
        let wrote = self.wrote.as_ref()?;
        let full = format!("{module}.{name}");
        let rebound = self.rebound.get(&full).copied();
        let replaced = full
            .match_indices('.')
            .find_map(|(i, _)| self.rebound.get(&full[..i]).map(|&to| (&full[..i], to)));
        let why = match (rebound, replaced) {
            (Some(to), _) => format!("rebound by the pickle to {}", shown(values, to)),
            (None, Some((m, to))) => format!(
                "read from `{m}`, which the pickle replaced with {}",
                shown(values, to)
            ),
            (None, None) => format!("read after the pickle wrote into {wrote}"),
        };
        Some((why, rebound))
    }

    /// Keeps `how`'s write into `target` of the pairs `pairs` gives (`attributes`: attribute
    /// names, not items) if `target` is a module or another global's object: `sys.modules` (its
    /// items are modules), a module's `__dict__` (its items are the module's names), any other
    /// global (its attributes), or what `vars`, `getattr` or `globals` returns. Returns the
    /// object written into, as a module and a name, to be named; `None` for any other target (a
    /// value the pickle built).
    pub fn write(
        &mut self,
        values: &[Value],
        target: Id,
        how: &str,
        pairs: impl FnOnce(&[Value]) -> Vec<(Id, Id)>,
        attributes: bool,
    ) -> Option<(String, String)> {
        let (object, prefix) = match values.get(target as usize)? {
            Value::Global { module, name, .. } => match (&**module, &**name) {
                ("sys", "modules") if !attributes => {
                    ("sys.modules".to_string(), Some(String::new()))
                }
                (module, "__dict__") if !attributes => {
                    (format!("{module}.__dict__"), Some(format!("{module}.")))
                }
                (module, name) => {
                    let object = format!("{module}.{name}");
                    let prefix = attributes.then(|| format!("{object}."));
                    (object, prefix)
                }
            },
            Value::Call { callable, .. } => match values.get(*callable as usize)? {
                Value::Global { module, name, .. }
                    if matches!(
                        (&**module, &**name),
                        ("builtins" | "__builtin__", "vars" | "getattr" | "globals")
                    ) =>
                {
                    (format!("what `{module}.{name}` returns"), None)
                }
                _ => return None,
            },
            _ => return None,
        };
        self.wrote.get_or_insert(format!("{object} (by {how})"));
        if let Some(prefix) = prefix {
            for (key, value) in pairs(values) {
                if let Some(Value::Str(key)) = values.get(key as usize) {
                    self.rebound.insert(format!("{prefix}{key}"), value);
                }
            }
        }
        let (module, name) = object.rsplit_once('.').unwrap_or(("", &object));
        Some((module.to_string(), name.to_string()))
    }
}

/// A call that writes into its first argument, as `setattr`, `operator.setitem` or `dict.update`
/// do (known by the last part of the callable's name).
pub(super) struct Setter {
    pub target: Id,
    pub how: String,
    pub pairs: Pairs,
    pub attributes: bool,
}

/// What a setter writes.
pub(super) enum Pairs {
    /// One name and its value (`setattr(target, name, value)`).
    One(Id, Id),
    /// A dict's items (`dict.update(target, items)`).
    Dict(Id),
    /// Nothing known (`delattr`, `clear`).
    None,
}

impl Pairs {
    pub fn pairs(&self, values: &[Value]) -> Vec<(Id, Id)> {
        match *self {
            Pairs::One(key, value) => vec![(key, value)],
            Pairs::Dict(dict) => state_pairs(values, dict),
            Pairs::None => Vec::new(),
        }
    }
}

/// The write `callable(*args)` makes, if `callable` is a setter.
pub(super) fn setter(values: &[Value], callable: Id, args: Id) -> Option<Setter> {
    let Value::Global { name, .. } = values.get(callable as usize)? else {
        return None;
    };
    let setter = name.rsplit('.').next().unwrap_or_default();
    let Value::Seq(_, items) = values.get(args as usize)? else {
        return None;
    };
    let (&target, rest) = items.split_first()?;
    let (pairs, attributes) = match (setter, rest) {
        ("setattr" | "__setattr__", [key, value, ..]) => (Pairs::One(*key, *value), true),
        ("setitem" | "__setitem__" | "setdefault", [key, value, ..]) => {
            (Pairs::One(*key, *value), false)
        }
        ("update", [dict, ..]) => (Pairs::Dict(*dict), false),
        (
            "setattr" | "__setattr__" | "setitem" | "__setitem__" | "setdefault" | "update"
            | "delattr" | "__delattr__" | "delitem" | "__delitem__" | "pop" | "clear",
            _,
        ) => (Pairs::None, false),
        _ => return None,
    };
    Some(Setter {
        target,
        how: format!("a call of `{setter}`"),
        pairs,
        attributes,
    })
}

/// The pairs of a `BUILD`'s state: a dict, or a `(dict, slots dict)` tuple.
pub(super) fn state_pairs(values: &[Value], state: Id) -> Vec<(Id, Id)> {
    let dict = |id: Id| match values.get(id as usize) {
        Some(Value::Dict(items)) => items.clone(),
        _ => Vec::new(),
    };
    match values.get(state as usize) {
        Some(Value::Seq(SeqKind::Tuple, items)) if items.len() == 2 => {
            [dict(items[0]), dict(items[1])].concat()
        }
        _ => dict(state),
    }
}

/// A value in a few words, for the names of rebound globals.
fn shown(values: &[Value], id: Id) -> String {
    const LONGEST: usize = 60;
    match values.get(id as usize) {
        Some(Value::Str(s)) if s.chars().count() > LONGEST => {
            format!("{:?}...", s.chars().take(LONGEST).collect::<String>())
        }
        Some(Value::Str(s)) => format!("{s:?}"),
        Some(Value::Global { module, name, .. }) => format!("`{module}.{name}`"),
        Some(Value::Call { callable, .. }) => match values.get(*callable as usize) {
            Some(Value::Global { module, name, .. }) => format!("what `{module}.{name}` returns"),
            _ => "what a call returns".into(),
        },
        Some(Value::Int(i)) => i.to_string(),
        _ => "a value it builds".into(),
    }
}
