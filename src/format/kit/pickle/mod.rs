//! A pickle machine that never executes anything: every opcode of protocols 0 to 5 (as Python's
//! `pickletools` lists them) builds plain data in an arena. A global (`GLOBAL`, `STACK_GLOBAL`,
//! `INST`, `OBJ`, `EXT*`) is only its name; calling one (`REDUCE`, `NEWOBJ`, `INST`, `OBJ`) only
//! records the callable and its arguments; `BUILD`, `SETITEMS` and `APPENDS` on such an object
//! record what they would have given it. What a format meant by it is that format's reader's;
//! the globals it may name are the allow-list that format passes in ([`globals`]).
//!
//! Values live in an arena addressed by index, so memo sharing costs nothing, containers can grow
//! after being memoized, and cycles are only indexes. Everything is bounded by the input: each
//! opcode takes at least one byte and makes at most a few values, lengths read from the input are
//! checked against what remains of it before anything is allocated, memo indexes key a map (never
//! a vector sized by the file), and the stack has a limit of its own.

use std::collections::HashMap;

mod globals;
mod rebinding;
mod text;
mod value;

pub(crate) use globals::{Allowed, globals_outside, merge};
use rebinding::{Rebinding, Setter, state_pairs};
use text::{TextInt, int_line, long_line, long_value, raw_unicode_escape, unquote};
pub(crate) use value::{
    Added, FALSE, Id, NONE, Pickle, PickleError, PickleRule, SeqKind, TRUE, Value,
};

/// Most values one pickle may make (beyond that the input is not a checkpoint's pickle).
const MAX_VALUES: usize = 1 << 25;
/// Most items on the stack, all marks' frames together.
const MAX_STACK: usize = 1 << 24;
/// Highest pickle protocol.
const MAX_PROTOCOL: u8 = 5;

/// Runs the pickle at the start of `input` up to its `STOP`. Where it breaks a rule, the error
/// names the globals it named before that which `allowed` does not allow.
pub fn load(input: &[u8], allowed: Allowed) -> Result<Pickle, PickleError> {
    let mut m = Machine {
        input,
        pos: 0,
        op_at: 0,
        values: vec![Value::None, Value::Bool(true), Value::Bool(false)],
        added: HashMap::new(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        max_values: input.len().saturating_add(16).min(MAX_VALUES),
        rebinding: Rebinding::default(),
    };
    m.run().map_err(|mut e| {
        // What it named before it failed is what Python would have imported.
        globals_outside(&m.values, allowed, &mut e.unsafe_globals);
        e
    })
}

struct Machine<'a> {
    input: &'a [u8],
    pos: usize,
    /// Where the current opcode starts (for errors).
    op_at: usize,
    values: Vec<Value>,
    added: HashMap<Id, Added>,
    stack: Vec<Id>,
    /// Stack lengths at each `MARK`.
    marks: Vec<usize>,
    memo: HashMap<u64, Id>,
    max_values: usize,
    /// What the pickle wrote into modules and other globals' objects.
    rebinding: Rebinding,
}

impl<'a> Machine<'a> {
    /// Every opcode up to `STOP`.
    fn run(&mut self) -> Result<Pickle, PickleError> {
        loop {
            self.op_at = self.pos;
            let op = self.byte()?;
            if op == b'.' {
                let top = self.pop()?;
                return Ok(Pickle {
                    values: std::mem::take(&mut self.values),
                    added: std::mem::take(&mut self.added),
                    top,
                    consumed: self.pos,
                });
            }
            self.step(op)?;
        }
    }

    fn error(&self, rule: PickleRule, what: impl Into<String>) -> PickleError {
        PickleError {
            rule,
            at: self.op_at,
            what: what.into(),
            unsafe_globals: Vec::new(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let input: &'a [u8] = self.input;
        let end = self.pos.checked_add(n).filter(|&end| end <= input.len());
        match end.and_then(|end| input.get(self.pos..end)) {
            Some(bytes) => {
                self.pos += n;
                Ok(bytes)
            }
            None => Err(self.error(
                PickleRule::Truncated,
                format!("the pickle ends inside the opcode (wants {n} more bytes)"),
            )),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], PickleError> {
        let bytes = self.take(N)?;
        <[u8; N]>::try_from(bytes).map_err(|_| self.error(PickleRule::Truncated, "short read"))
    }

    fn byte(&mut self) -> Result<u8, PickleError> {
        Ok(self.array::<1>()?[0])
    }

    /// A length read from the input, checked against what remains of it.
    fn length(&mut self, len: u64) -> Result<usize, PickleError> {
        let left = self.input.len().saturating_sub(self.pos);
        match usize::try_from(len) {
            Ok(len) if len <= left => Ok(len),
            _ => Err(self.error(
                PickleRule::Truncated,
                format!("a length of {len} bytes where {left} remain"),
            )),
        }
    }

    /// A text line (protocol 0), without its `\n`.
    fn line(&mut self) -> Result<&'a [u8], PickleError> {
        let rest = self.input.get(self.pos..).unwrap_or_default();
        match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                let line = self.take(n)?;
                self.pos += 1;
                Ok(line)
            }
            None => Err(self.error(PickleRule::Truncated, "the pickle ends inside a text line")),
        }
    }

    fn text_line(&mut self) -> Result<String, PickleError> {
        Ok(String::from_utf8_lossy(self.line()?).into_owned())
    }

    fn make(&mut self, value: Value) -> Result<Id, PickleError> {
        if self.values.len() >= self.max_values {
            return Err(self.error(
                PickleRule::TooManyValues,
                "more values than the pickle's size allows",
            ));
        }
        let id = self.values.len() as Id;
        self.values.push(value);
        Ok(id)
    }

    fn push(&mut self, id: Id) -> Result<(), PickleError> {
        if self.stack.len() >= MAX_STACK {
            return Err(self.error(PickleRule::StackTooDeep, "the stack outgrows its limit"));
        }
        self.stack.push(id);
        Ok(())
    }

    fn push_new(&mut self, value: Value) -> Result<(), PickleError> {
        let id = self.make(value)?;
        self.push(id)
    }

    /// The bottom of the current mark's frame.
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn pop(&mut self) -> Result<Id, PickleError> {
        if self.stack.len() <= self.floor() {
            return Err(self.error(
                PickleRule::StackUnderflow,
                "an opcode pops from an empty stack",
            ));
        }
        self.stack.pop().ok_or_else(|| {
            self.error(
                PickleRule::StackUnderflow,
                "an opcode pops from an empty stack",
            )
        })
    }

    fn top(&self) -> Result<Id, PickleError> {
        match self.stack.last() {
            Some(&id) if self.stack.len() > self.floor() => Ok(id),
            _ => Err(self.error(
                PickleRule::StackUnderflow,
                "an opcode needs a value on the stack",
            )),
        }
    }

    /// The items pushed since the last `MARK`, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Id>, PickleError> {
        let mark = self.marks.pop().ok_or_else(|| {
            self.error(
                PickleRule::NoMark,
                "an opcode needs a MARK and there is none",
            )
        })?;
        Ok(self.stack.split_off(mark.min(self.stack.len())))
    }

    /// The value a global read pushes: the global, as a name, marked unsafe if it is read after
    /// a write into a module; where that write rebound the name, the value it bound (the read is
    /// kept in the arena, marked with what it was rebound to).
    fn global(&mut self, module: String, name: String) -> Result<Id, PickleError> {
        let (after_write, rebound) = match self.rebinding.read(&self.values, &module, &name) {
            Some((why, rebound)) => (Some(why.into()), rebound),
            None => (None, None),
        };
        let read = self.make(Value::Global {
            module: module.into(),
            name: name.into(),
            after_write,
        })?;
        Ok(rebound.unwrap_or(read))
    }

    /// `how` (`BUILD`, `SETITEM`, a call of `setattr`) writes into `target` the pairs `pairs`
    /// gives (`attributes`: attribute names, not items): a write into a module or another
    /// global's object is kept (see [`Rebinding`]), and the object written into named.
    fn write(
        &mut self,
        target: Id,
        how: &str,
        pairs: impl FnOnce(&[Value]) -> Vec<(Id, Id)>,
        attributes: bool,
    ) -> Result<(), PickleError> {
        if let Some((module, name)) =
            self.rebinding
                .write(&self.values, target, how, pairs, attributes)
        {
            self.make(Value::Global {
                module: module.into(),
                name: name.into(),
                after_write: Some(format!("written into by {how}").into()),
            })?;
        }
        Ok(())
    }

    /// A call that writes into its first argument (see [`rebinding::setter`]).
    fn call_writes(&mut self, callable: Id, args: Id) -> Result<(), PickleError> {
        match rebinding::setter(&self.values, callable, args) {
            Some(Setter {
                target,
                how,
                pairs,
                attributes,
            }) => self.write(target, &how, |values| pairs.pairs(values), attributes),
            None => Ok(()),
        }
    }

    /// `callable(*args)`, as data. `collections.OrderedDict()` is a dict outright: its items and
    /// attributes come by `SETITEMS` and `BUILD`.
    fn call(&mut self, callable: Id, args: Id) -> Result<Id, PickleError> {
        self.call_writes(callable, args)?;
        let ordered_dict = matches!(self.values.get(callable as usize),
            Some(Value::Global { module, name, .. }) if &**module == "collections" && &**name == "OrderedDict");
        let no_args = matches!(self.values.get(args as usize), Some(Value::Seq(_, items)) if items.is_empty());
        if ordered_dict && no_args {
            self.make(Value::Dict(Vec::new()))
        } else {
            self.make(Value::Call { callable, args })
        }
    }

    fn memo_get(&mut self, key: u64) -> Result<(), PickleError> {
        let id = *self.memo.get(&key).ok_or_else(|| {
            self.error(PickleRule::MemoMissing, format!("memo {key} was never set"))
        })?;
        self.push(id)
    }

    fn memo_put(&mut self, key: u64) -> Result<(), PickleError> {
        let id = self.top()?;
        self.memo.insert(key, id);
        Ok(())
    }

    fn added(&mut self, id: Id) -> &mut Added {
        self.added.entry(id).or_default()
    }

    fn append(&mut self, target: Id, items: Vec<Id>) {
        match self.values.get_mut(target as usize) {
            Some(Value::Seq(SeqKind::List | SeqKind::Set, list)) => list.extend(items),
            _ => self.added(target).elements.extend(items),
        }
    }

    fn set_items(&mut self, target: Id, items: Vec<(Id, Id)>) {
        match self.values.get_mut(target as usize) {
            Some(Value::Dict(dict)) => dict.extend(items),
            _ => self.added(target).items.extend(items),
        }
    }

    fn pairs(&self, items: Vec<Id>) -> Result<Vec<(Id, Id)>, PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(self.error(PickleRule::OddItems, "an odd number of items for a dict"));
        }
        Ok(items.chunks_exact(2).map(|p| (p[0], p[1])).collect())
    }

    fn int_line(&mut self, what: &str) -> Result<u64, PickleError> {
        let line = self.text_line()?;
        line.trim().parse().map_err(|_| {
            self.error(
                PickleRule::BadText,
                format!("{what} {line:?} is not an index"),
            )
        })
    }

    fn step(&mut self, op: u8) -> Result<(), PickleError> {
        match op {
            b'(' => {
                if self.marks.len() >= MAX_STACK {
                    return Err(self.error(PickleRule::StackTooDeep, "too many MARKs"));
                }
                self.marks.push(self.stack.len());
            }
            b'0' => {
                if self.stack.len() > self.floor() {
                    self.pop()?;
                } else {
                    self.pop_mark()?;
                }
            }
            b'1' => {
                self.pop_mark()?;
            }
            b'2' => {
                let id = self.top()?;
                self.push(id)?;
            }
            // Numbers.
            b'I' => self.text_int()?,
            b'L' => self.text_long()?,
            b'J' => {
                let v = i32::from_le_bytes(self.array()?);
                self.push_new(Value::Int(v.into()))?;
            }
            b'K' => {
                let v = self.byte()?;
                self.push_new(Value::Int(v.into()))?;
            }
            b'M' => {
                let v = u16::from_le_bytes(self.array()?);
                self.push_new(Value::Int(v.into()))?;
            }
            0x8a => {
                let n = self.byte()?;
                self.long(n.into())?;
            }
            0x8b => {
                let n = i32::from_le_bytes(self.array()?);
                let n = u64::try_from(n)
                    .map_err(|_| self.error(PickleRule::NegativeLength, "LONG4"))?;
                self.long(n)?;
            }
            b'F' => {
                let line = self.text_line()?;
                let v: f64 = line
                    .trim()
                    .parse()
                    .map_err(|_| self.error(PickleRule::BadText, format!("FLOAT {line:?}")))?;
                self.push_new(Value::Float(v))?;
            }
            b'G' => {
                let v = f64::from_be_bytes(self.array()?);
                self.push_new(Value::Float(v))?;
            }
            // Strings and bytes.
            b'S' => {
                let line = self.line()?;
                let text =
                    unquote(line).ok_or_else(|| self.error(PickleRule::BadText, "STRING"))?;
                self.push_new(Value::Str(text.into()))?;
            }
            b'T' => {
                let n = i32::from_le_bytes(self.array()?);
                let n = u64::try_from(n)
                    .map_err(|_| self.error(PickleRule::NegativeLength, "BINSTRING"))?;
                self.string(n)?;
            }
            b'U' => {
                let n = self.byte()?;
                self.string(n.into())?;
            }
            b'V' => {
                let line = self.line()?;
                self.push_new(Value::Str(raw_unicode_escape(line).into()))?;
            }
            b'X' => {
                let n = u32::from_le_bytes(self.array()?);
                self.string(n.into())?;
            }
            0x8c => {
                let n = self.byte()?;
                self.string(n.into())?;
            }
            0x8d => {
                let n = u64::from_le_bytes(self.array()?);
                self.string(n)?;
            }
            b'B' => {
                let n = u32::from_le_bytes(self.array()?);
                self.bytes(n.into())?;
            }
            b'C' => {
                let n = self.byte()?;
                self.bytes(n.into())?;
            }
            0x8e | 0x96 => {
                let n = u64::from_le_bytes(self.array()?);
                self.bytes(n)?;
            }
            b'N' => self.push(NONE)?,
            0x88 => self.push(TRUE)?,
            0x89 => self.push(FALSE)?,
            // Containers.
            b')' => self.push_new(Value::Seq(SeqKind::Tuple, Vec::new()))?,
            b']' => self.push_new(Value::Seq(SeqKind::List, Vec::new()))?,
            b'}' => self.push_new(Value::Dict(Vec::new()))?,
            0x8f => self.push_new(Value::Seq(SeqKind::Set, Vec::new()))?,
            b't' | b'l' | 0x91 => {
                let items = self.pop_mark()?;
                let kind = match op {
                    b't' => SeqKind::Tuple,
                    b'l' => SeqKind::List,
                    _ => SeqKind::FrozenSet,
                };
                self.push_new(Value::Seq(kind, items))?;
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                let mut items = vec![0; n];
                for slot in items.iter_mut().rev() {
                    *slot = self.pop()?;
                }
                self.push_new(Value::Seq(SeqKind::Tuple, items))?;
            }
            b'd' => {
                let items = self.pop_mark()?;
                let pairs = self.pairs(items)?;
                self.push_new(Value::Dict(pairs))?;
            }
            b'a' => {
                let item = self.pop()?;
                let target = self.top()?;
                self.append(target, vec![item]);
            }
            b'e' | 0x90 => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.append(target, items);
            }
            b's' => {
                let value = self.pop()?;
                let key = self.pop()?;
                let target = self.top()?;
                self.write(target, "SETITEM", |_| vec![(key, value)], false)?;
                self.set_items(target, vec![(key, value)]);
            }
            b'u' => {
                let items = self.pop_mark()?;
                let pairs = self.pairs(items)?;
                let target = self.top()?;
                self.write(target, "SETITEMS", |_| pairs.clone(), false)?;
                self.set_items(target, pairs);
            }
            // The memo.
            b'g' => {
                let key = self.int_line("GET")?;
                self.memo_get(key)?;
            }
            b'h' => {
                let key = self.byte()?;
                self.memo_get(key.into())?;
            }
            b'j' => {
                let key = u32::from_le_bytes(self.array()?);
                self.memo_get(key.into())?;
            }
            b'p' => {
                let key = self.int_line("PUT")?;
                self.memo_put(key)?;
            }
            b'q' => {
                let key = self.byte()?;
                self.memo_put(key.into())?;
            }
            b'r' => {
                let key = u32::from_le_bytes(self.array()?);
                self.memo_put(key.into())?;
            }
            0x94 => {
                let key = self.memo.len() as u64;
                self.memo_put(key)?;
            }
            // Globals and calls.
            b'c' => {
                let module = self.text_line()?;
                let name = self.text_line()?;
                let id = self.global(module, name)?;
                self.push(id)?;
            }
            0x93 => {
                let name = self.pop()?;
                let module = self.pop()?;
                let id = match (
                    self.values.get(module as usize),
                    self.values.get(name as usize),
                ) {
                    (Some(Value::Str(module)), Some(Value::Str(name))) => {
                        let (module, name) = (module.to_string(), name.to_string());
                        self.global(module, name)?
                    }
                    _ => self.make(Value::ComputedGlobal)?,
                };
                self.push(id)?;
            }
            0x82 => {
                let code = self.byte()?;
                self.extension(code.into())?;
            }
            0x83 => {
                let code = u16::from_le_bytes(self.array()?);
                self.extension(code.into())?;
            }
            0x84 => {
                let code = i32::from_le_bytes(self.array()?);
                self.extension(code.into())?;
            }
            b'R' | 0x81 => {
                let args = self.pop()?;
                let callable = self.pop()?;
                let id = self.call(callable, args)?;
                self.push(id)?;
            }
            0x92 => {
                let _kwargs = self.pop()?;
                let args = self.pop()?;
                let callable = self.pop()?;
                let id = self.call(callable, args)?;
                self.push(id)?;
            }
            b'i' => {
                let module = self.text_line()?;
                let name = self.text_line()?;
                let items = self.pop_mark()?;
                let callable = self.global(module, name)?;
                let args = self.make(Value::Seq(SeqKind::Tuple, items))?;
                let id = self.call(callable, args)?;
                self.push(id)?;
            }
            b'o' => {
                let mut items = self.pop_mark()?.into_iter();
                let callable = items
                    .next()
                    .ok_or_else(|| self.error(PickleRule::StackUnderflow, "OBJ without a class"))?;
                let args = self.make(Value::Seq(SeqKind::Tuple, items.collect()))?;
                let id = self.call(callable, args)?;
                self.push(id)?;
            }
            b'b' => {
                let state = self.pop()?;
                let target = self.top()?;
                self.write(target, "BUILD", |values| state_pairs(values, state), true)?;
                // A dict's state (an OrderedDict's attributes) holds nothing of its items.
                if !matches!(self.values.get(target as usize), Some(Value::Dict(_))) {
                    self.added(target).states.push(state);
                }
            }
            b'P' => {
                let line = self.text_line()?;
                let id = self.make(Value::Str(line.into()))?;
                self.push_new(Value::PersistentId(id))?;
            }
            b'Q' => {
                let pid = self.pop()?;
                self.push_new(Value::PersistentId(pid))?;
            }
            // Framing.
            0x80 => {
                let version = self.byte()?;
                if version > MAX_PROTOCOL {
                    return Err(self.error(
                        PickleRule::UnsupportedProtocol,
                        format!("pickle protocol {version}"),
                    ));
                }
            }
            0x95 => {
                self.array::<8>()?;
            }
            0x97 | 0x98 => {
                return Err(self.error(PickleRule::OutOfBandBuffer,
                    "an out-of-band buffer (NEXT_BUFFER/READONLY_BUFFER), which only the caller of a load \
                     supplies, never a file",
                ));
            }
            _ => {
                return Err(self.error(PickleRule::UnknownOpcode, format!("opcode 0x{op:02x}")));
            }
        }
        Ok(())
    }

    /// `INT`: a text line as CPython reads it (C's `strtol`, then `int(s, 0)`; `01` is `True`).
    fn text_int(&mut self) -> Result<(), PickleError> {
        let line = self.line()?;
        match int_line(line) {
            Some(TextInt::Bool(b)) => self.push(if b { TRUE } else { FALSE }),
            Some(TextInt::Int(bytes)) => self.push_new(long_value(&bytes)),
            None => Err(self.not_an_integer(line)),
        }
    }

    /// `LONG`: a text line with an optional `L`, as `int(s, 0)` reads it.
    fn text_long(&mut self) -> Result<(), PickleError> {
        let line = self.line()?;
        match long_line(line) {
            Some(bytes) => self.push_new(long_value(&bytes)),
            None => Err(self.not_an_integer(line)),
        }
    }

    fn not_an_integer(&self, line: &[u8]) -> PickleError {
        let text = String::from_utf8_lossy(line);
        self.error(PickleRule::BadText, format!("{text:?} is not an integer"))
    }

    /// `LONG1`/`LONG4`: `n` bytes of little-endian two's complement.
    fn long(&mut self, n: u64) -> Result<(), PickleError> {
        let n = self.length(n)?;
        let bytes = self.take(n)?;
        self.push_new(long_value(bytes))
    }

    fn string(&mut self, n: u64) -> Result<(), PickleError> {
        let n = self.length(n)?;
        let bytes = self.take(n)?;
        self.push_new(Value::Str(String::from_utf8_lossy(bytes).into()))
    }

    fn bytes(&mut self, n: u64) -> Result<(), PickleError> {
        let len = self.length(n)?;
        let at = self.pos;
        self.take(len)?;
        self.push_new(Value::Bytes { at, len })
    }

    /// An extension code: a global found in the loader's registry (`copyreg`), which Python's is
    /// empty unless a program fills it. Only its code is known here.
    fn extension(&mut self, code: i64) -> Result<(), PickleError> {
        let id = self.global("copyreg._extension_registry".into(), code.to_string())?;
        self.push(id)
    }
}

#[cfg(test)]
mod tests;
