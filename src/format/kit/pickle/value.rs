//! The values a pickle builds ([`Value`], in the arena of a [`Pickle`]) and why a pickle is refused
//! ([`PickleError`]). The machine that builds them is [`super`].

use std::collections::HashMap;
use std::fmt;

/// Index of a value in [`Pickle::values`].
pub(crate) type Id = u32;

/// The ids of the values made once for all (`None`, `True`, `False`).
pub(crate) const NONE: Id = 0;
pub(crate) const TRUE: Id = 1;
pub(crate) const FALSE: Id = 2;

/// A value the pickle builds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer that does not fit in `i64`: its little-endian two's-complement bytes (`LONG1`,
    /// `LONG4`) or its decimal text (`INT`, `LONG`).
    BigInt(Box<[u8]>),
    Float(f64),
    Str(Box<str>),
    /// `bytes` or `bytearray`: where they lie in the input.
    Bytes {
        at: usize,
        len: usize,
    },
    Seq(SeqKind, Vec<Id>),
    /// Items in the order they were set (a key set twice appears twice).
    Dict(Vec<(Id, Id)>),
    Global {
        module: Box<str>,
        name: Box<str>,
        /// Why this read of the global is unsafe whatever its name: it was read after the pickle
        /// wrote into a module or another global's object (see [`super`]), or it
        /// is the object written into.
        after_write: Option<Box<str>>,
    },
    /// A global whose module or name is not a string the pickle holds (`STACK_GLOBAL` of values
    /// it computes): which one Python would import is not known here.
    ComputedGlobal,
    /// A callable applied to arguments (a tuple, normally): what `REDUCE`, `NEWOBJ`, `NEWOBJ_EX`
    /// (keyword arguments dropped), `INST` and `OBJ` would have called.
    Call {
        callable: Id,
        args: Id,
    },
    PersistentId(Id),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeqKind {
    Tuple,
    List,
    Set,
    FrozenSet,
}

/// What `BUILD`, `SETITEM(S)`, `APPEND(S)` and `ADDITEMS` gave a value that is not a container of
/// that kind (an object made by a call, whose class was never looked up).
#[derive(Debug, Default)]
pub(crate) struct Added {
    pub states: Vec<Id>,
    pub items: Vec<(Id, Id)>,
    pub elements: Vec<Id>,
}

/// One pickle, interpreted.
#[derive(Debug)]
pub(crate) struct Pickle {
    pub values: Vec<Value>,
    pub added: HashMap<Id, Added>,
    /// The value at `STOP`.
    pub top: Id,
    /// Bytes of the input the pickle took, `STOP` included.
    pub consumed: usize,
}

impl Pickle {
    pub(crate) fn get(&self, id: Id) -> &Value {
        self.values.get(id as usize).unwrap_or(&Value::None)
    }

    /// The `(module, name)` of a global.
    pub(crate) fn global(&self, id: Id) -> Option<(&str, &str)> {
        match self.get(id) {
            Value::Global { module, name, .. } => Some((module, name)),
            _ => None,
        }
    }

    /// The items of a tuple or list.
    pub(crate) fn items(&self, id: Id) -> Option<&[Id]> {
        match self.get(id) {
            Value::Seq(SeqKind::Tuple | SeqKind::List, items) => Some(items),
            _ => None,
        }
    }

    pub(crate) fn int(&self, id: Id) -> Option<i64> {
        match self.get(id) {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    pub(crate) fn str(&self, id: Id) -> Option<&str> {
        match self.get(id) {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// The rules a pickle breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickleRule {
    /// The input ends before `STOP`, or inside an opcode.
    Truncated,
    /// More values than the pickle's size allows.
    TooManyValues,
    /// The stack (or its marks) outgrows its limit.
    StackTooDeep,
    /// An opcode pops from an empty stack.
    StackUnderflow,
    /// An opcode needs a `MARK` and there is none.
    NoMark,
    /// A memo index that was never set.
    MemoMissing,
    /// An odd number of items for a dict.
    OddItems,
    /// A text opcode's line that does not read as its value.
    BadText,
    /// A negative length.
    NegativeLength,
    /// A protocol over 5.
    UnsupportedProtocol,
    /// An out-of-band buffer, which only the caller of a load supplies, never a file.
    OutOfBandBuffer,
    /// An opcode that does not exist.
    UnknownOpcode,
}

impl PickleRule {
    /// Its name, as a refusal shows it.
    pub fn name(self) -> &'static str {
        match self {
            PickleRule::Truncated => "Truncated",
            PickleRule::TooManyValues => "TooManyValues",
            PickleRule::StackTooDeep => "StackTooDeep",
            PickleRule::StackUnderflow => "StackUnderflow",
            PickleRule::NoMark => "NoMark",
            PickleRule::MemoMissing => "MemoMissing",
            PickleRule::OddItems => "OddItems",
            PickleRule::BadText => "BadText",
            PickleRule::NegativeLength => "NegativeLength",
            PickleRule::UnsupportedProtocol => "UnsupportedProtocol",
            PickleRule::OutOfBandBuffer => "OutOfBandBuffer",
            PickleRule::UnknownOpcode => "UnknownOpcode",
        }
    }
}

/// Why the bytes are not a pickle this machine accepts: the rule broken, at which offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PickleError {
    pub rule: PickleRule,
    pub at: usize,
    pub what: String,
    /// The unsafe globals the pickle named before the rule was broken (see [`super::globals_outside`]):
    /// Python would have imported them before it failed.
    pub unsafe_globals: Vec<String>,
}

impl PickleError {
    /// Whether the input ended before `STOP`.
    pub fn cut_short(&self) -> bool {
        self.rule == PickleRule::Truncated
    }
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {} of the pickle", self.what, self.at)
    }
}
