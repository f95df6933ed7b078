//! A minimal, data-only reader for the joblib pickles inside model-DB archives.
//!
//! Model archives keep their MaxAbs scaler (`scaler.pkl`) and, for some trainers, the model
//! itself as scikit-learn objects pickled by joblib. We need a handful of float arrays out of
//! them (`scale_`, `coef_`, `intercept_`, `popt`), so instead of a Python runtime this module
//! interprets the subset of pickle protocol 2–5 opcodes those files use and builds plain data:
//! a class reference is only its module and name, never imported or called, so a hostile
//! pickle can do no more than fail to parse.
//!
//! joblib stores numpy arrays outside the pickle stream: after the `BUILD` of a
//! `joblib.numpy_pickle.NumpyArrayWrapper` (whose state gives shape, order and dtype) come an
//! optional padding (one length byte, then that many bytes, when the wrapper has
//! `numpy_array_alignment_bytes`) and the raw array bytes; the array then replaces the wrapper
//! on the stack. Only `float64` arrays are needed and supported.
//!
//! Everything lives in an arena (`Vec<Node>` indexed by `Id`) so shared references (the memo)
//! and in-place mutation (`SETITEMS`, `BUILD`) need no reference counting. Memory stays
//! proportional to the input: every opcode adds at most one node, and the only variable-size
//! data (strings, arrays) is copied from bytes the opcode itself consumes; nothing copies an
//! existing node's contents (a class reference points at its name strings by id, so a
//! memoised string reused by many `STACK_GLOBAL`s is stored once). Work stays near-linear
//! too: dicts, the arena and the number of arrays (each of which looks its attributes up in a
//! state dict) are capped, far above what any scikit-learn pickle uses.

use std::collections::HashMap;

use crate::ModelError;

pub(crate) type Id = usize;

/// Most nodes one pickle may create. The published pickles have a few hundred; this bounds
/// the arena (about 40 bytes a node) whatever the input size.
const MAX_NODES: usize = 1 << 20;
/// Most entries one dict may hold. scikit-learn state dicts have a few dozen; attribute
/// lookups scan a state dict, so this bounds each lookup.
const MAX_DICT_ENTRIES: usize = 1024;
/// Most numpy arrays one pickle may hold. Each array looks up a handful of attributes in its
/// wrapper's state dict and collects its shape tuple; a memoised wrapper re-`BUILD` over and
/// over would otherwise make that work quadratic in the input. Published pickles hold ≤ 4.
const MAX_ARRAYS: usize = 256;

/// A pickled value.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    None,
    /// A value no model needs (booleans): kept as a placeholder.
    Opaque,
    /// A byte string: the raw data of a pickled NumPy scalar (see [`Pickle::float`]).
    Bytes(Vec<u8>),
    Int(i64),
    Float(f64),
    Str(String),
    Tuple(Vec<Id>),
    List(Vec<Id>),
    Dict(Vec<(Id, Id)>),
    /// A class or function reference: the ids of its module and qualified-name strings
    /// (ids, not copies, so reusing one memoised string costs nothing; see the module docs).
    Global(Id, Id),
    /// `cls(*args)` (REDUCE/NEWOBJ) with the state given by BUILD.
    Object {
        class: Id,
        args: Id,
        state: Option<Id>,
    },
    /// A float64 numpy array, flattened in C order.
    Array(Vec<f64>),
}

/// A parsed pickle: the arena and the root value.
#[derive(Debug)]
pub(crate) struct Pickle {
    nodes: Vec<Node>,
    root: Id,
}

enum Item {
    Mark,
    Val(Id),
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).ok_or("length overflow")?;
        let s = self
            .data
            .get(self.pos..end)
            .ok_or_else(|| format!("truncated at byte {} (wanted {n} more)", self.pos))?;
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?.first().copied().unwrap_or(0))
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn len_u32(&mut self) -> Result<usize, String> {
        Ok(u32::from_le_bytes(self.arr()?) as usize)
    }
    fn len_u64(&mut self) -> Result<usize, String> {
        usize::try_from(u64::from_le_bytes(self.arr()?)).map_err(|_| "length too large".into())
    }
    fn line(&mut self) -> Result<&'a str, String> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("unterminated line")?;
        let s = std::str::from_utf8(self.take(n)?).map_err(|_| "non-UTF-8 text")?;
        self.take(1)?;
        Ok(s)
    }
}

/// Parses a pickle. `file` names it in errors.
pub(crate) fn parse(data: &[u8], file: &str) -> Result<Pickle, ModelError> {
    Machine::default()
        .run(data)
        .map_err(|reason| ModelError::Pickle {
            file: file.to_string(),
            reason,
        })
}

#[derive(Default)]
struct Machine {
    nodes: Vec<Node>,
    stack: Vec<Item>,
    memo: HashMap<u64, Id>,
    arrays: usize,
}

impl Machine {
    /// Adds a node to the arena and returns its id, within [`MAX_NODES`].
    fn add(&mut self, n: Node) -> Result<Id, String> {
        if self.nodes.len() >= MAX_NODES {
            return Err(format!("more than {MAX_NODES} values"));
        }
        self.nodes.push(n);
        Ok(self.nodes.len() - 1)
    }
    fn push(&mut self, n: Node) -> Result<(), String> {
        let id = self.add(n)?;
        self.stack.push(Item::Val(id));
        Ok(())
    }
    fn pop(&mut self) -> Result<Id, String> {
        match self.stack.pop() {
            Some(Item::Val(id)) => Ok(id),
            Some(Item::Mark) => Err("unexpected mark".into()),
            None => Err("stack underflow".into()),
        }
    }
    fn top(&self) -> Result<Id, String> {
        match self.stack.last() {
            Some(Item::Val(id)) => Ok(*id),
            _ => Err("no value on the stack".into()),
        }
    }
    /// Pops everything down to the topmost mark, in push order.
    fn pop_mark(&mut self) -> Result<Vec<Id>, String> {
        let mark = self
            .stack
            .iter()
            .rposition(|i| matches!(i, Item::Mark))
            .ok_or("no mark on the stack")?;
        let items = self.stack.split_off(mark);
        Ok(items
            .into_iter()
            .filter_map(|i| match i {
                Item::Val(id) => Some(id),
                Item::Mark => None,
            })
            .collect())
    }
    fn node(&self, id: Id) -> Result<&Node, String> {
        self.nodes
            .get(id)
            .ok_or_else(|| "dangling reference".into())
    }
    fn memo_get(&mut self, key: u64) -> Result<(), String> {
        let id = *self
            .memo
            .get(&key)
            .ok_or_else(|| format!("memo {key} not set"))?;
        self.stack.push(Item::Val(id));
        Ok(())
    }
    fn tuple(&mut self, n: usize) -> Result<(), String> {
        let at = self.stack.len().checked_sub(n).ok_or("stack underflow")?;
        let items = self.stack.split_off(at);
        let mut ids = Vec::with_capacity(n);
        for i in items {
            match i {
                Item::Val(id) => ids.push(id),
                Item::Mark => return Err("unexpected mark".into()),
            }
        }
        self.push(Node::Tuple(ids))
    }
    fn set_items(&mut self, dict: Id, pairs: &[Id]) -> Result<(), String> {
        if !pairs.chunks_exact(2).remainder().is_empty() {
            return Err("odd number of dict items".into());
        }
        let Some(Node::Dict(entries)) = self.nodes.get_mut(dict) else {
            return Err("SETITEMS on a non-dict".into());
        };
        if entries.len() + pairs.len() / 2 > MAX_DICT_ENTRIES {
            return Err(format!("a dict with more than {MAX_DICT_ENTRIES} entries"));
        }
        entries.extend(pairs.chunks_exact(2).filter_map(|kv| match kv {
            [k, v] => Some((*k, *v)),
            _ => None,
        }));
        Ok(())
    }

    fn run(mut self, data: &[u8]) -> Result<Pickle, String> {
        let mut r = Reader { data, pos: 0 };
        loop {
            let op = r.u8()?;
            match op {
                0x80 => {
                    r.u8()?; // PROTO n
                }
                0x95 => {
                    r.take(8)?; // FRAME: framing is transparent for a sequential reader
                }
                b'.' => {
                    let root = self.pop()?;
                    return Ok(Pickle {
                        nodes: self.nodes,
                        root,
                    });
                }
                b'(' => self.stack.push(Item::Mark),
                b'N' => self.push(Node::None)?,
                0x88 | 0x89 => self.push(Node::Opaque)?,
                b'K' => {
                    let v = r.u8()?;
                    self.push(Node::Int(i64::from(v)))?
                }
                b'M' => {
                    let v = u16::from_le_bytes(r.arr()?);
                    self.push(Node::Int(i64::from(v)))?
                }
                b'J' => {
                    let v = i32::from_le_bytes(r.arr()?);
                    self.push(Node::Int(i64::from(v)))?
                }
                0x8a => {
                    // LONG1: little-endian two's complement of n bytes; we only need small ints.
                    let n = r.u8()? as usize;
                    let bytes = r.take(n)?;
                    if n > 8 {
                        return Err("integer too large".into());
                    }
                    let mut buf = if bytes.last().is_some_and(|b| b & 0x80 != 0) {
                        [0xffu8; 8]
                    } else {
                        [0u8; 8]
                    };
                    buf.get_mut(..n)
                        .ok_or("integer too large")?
                        .copy_from_slice(bytes);
                    self.push(Node::Int(i64::from_le_bytes(buf)))?
                }
                b'G' => {
                    let v = f64::from_be_bytes(r.arr()?);
                    self.push(Node::Float(v))?
                }
                0x8c | b'X' | 0x8d => {
                    let n = match op {
                        0x8c => r.u8()? as usize,
                        b'X' => r.len_u32()?,
                        _ => r.len_u64()?,
                    };
                    let s = std::str::from_utf8(r.take(n)?).map_err(|_| "non-UTF-8 string")?;
                    self.push(Node::Str(s.to_string()))?
                }
                b'C' | b'B' | 0x8e => {
                    let n = match op {
                        b'C' => r.u8()? as usize,
                        b'B' => r.len_u32()?,
                        _ => r.len_u64()?,
                    };
                    // Copied: bounded by the bytes this opcode consumes (see the module docs).
                    let bytes = r.take(n)?.to_vec();
                    self.push(Node::Bytes(bytes))?
                }
                b')' => self.push(Node::Tuple(Vec::new()))?,
                b']' => self.push(Node::List(Vec::new()))?,
                b'}' => self.push(Node::Dict(Vec::new()))?,
                0x85 => self.tuple(1)?,
                0x86 => self.tuple(2)?,
                0x87 => self.tuple(3)?,
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Node::Tuple(items))?
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Node::List(items))?
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    self.push(Node::Dict(Vec::new()))?;
                    let dict = self.top()?;
                    self.set_items(dict, &items)?
                }
                b'a' => {
                    let v = self.pop()?;
                    let list = self.top()?;
                    match self.nodes.get_mut(list) {
                        Some(Node::List(items)) => items.push(v),
                        _ => return Err("APPEND to a non-list".into()),
                    }
                }
                b'e' => {
                    let vs = self.pop_mark()?;
                    let list = self.top()?;
                    match self.nodes.get_mut(list) {
                        Some(Node::List(items)) => items.extend(vs),
                        _ => return Err("APPENDS to a non-list".into()),
                    }
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let dict = self.top()?;
                    self.set_items(dict, &[k, v])?
                }
                b'u' => {
                    let pairs = self.pop_mark()?;
                    let dict = self.top()?;
                    self.set_items(dict, &pairs)?
                }
                0x94 => {
                    let top = self.top()?;
                    let key = self.memo.len() as u64;
                    self.memo.insert(key, top);
                }
                b'q' | b'r' => {
                    let key = if op == b'q' {
                        u64::from(r.u8()?)
                    } else {
                        u64::from(u32::from_le_bytes(r.arr()?))
                    };
                    let top = self.top()?;
                    self.memo.insert(key, top);
                }
                b'h' => {
                    let k = u64::from(r.u8()?);
                    self.memo_get(k)?
                }
                b'j' => {
                    let k = u64::from(u32::from_le_bytes(r.arr()?));
                    self.memo_get(k)?
                }
                b'0' => {
                    self.stack.pop().ok_or("stack underflow")?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let top = self.top()?;
                    self.stack.push(Item::Val(top));
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    match (self.node(module)?, self.node(name)?) {
                        // By id: copying the strings would let a small input that reuses one
                        // large memoised string allocate without bound.
                        (Node::Str(_), Node::Str(_)) => self.push(Node::Global(module, name))?,
                        _ => return Err("STACK_GLOBAL needs two strings".into()),
                    }
                }
                b'c' => {
                    let module = r.line()?.to_string();
                    let name = r.line()?.to_string();
                    let module = self.add(Node::Str(module))?;
                    let name = self.add(Node::Str(name))?;
                    self.push(Node::Global(module, name))?
                }
                b'R' | 0x81 => {
                    // REDUCE cls(*args) / NEWOBJ cls.__new__(cls, *args): recorded, not run.
                    let args = self.pop()?;
                    let class = self.pop()?;
                    self.push(Node::Object {
                        class,
                        args,
                        state: None,
                    })?
                }
                b'b' => {
                    let state = self.pop()?;
                    let obj = self.top()?;
                    match self.nodes.get_mut(obj) {
                        Some(Node::Object { state: s, .. }) => *s = Some(state),
                        _ => return Err("BUILD on a non-object".into()),
                    }
                    if self.is_class(obj, "joblib.numpy_pickle", "NumpyArrayWrapper") {
                        self.arrays += 1;
                        if self.arrays > MAX_ARRAYS {
                            return Err(format!("more than {MAX_ARRAYS} arrays"));
                        }
                        let array = self.read_array(obj, &mut r)?;
                        self.pop()?;
                        self.push(array)?;
                    }
                }
                other => {
                    return Err(format!(
                        "unsupported opcode 0x{other:02x} at byte {}",
                        r.pos - 1
                    ))
                }
            }
        }
    }

    fn is_class(&self, obj: Id, module: &str, name: &str) -> bool {
        let view = View { nodes: &self.nodes };
        match self.nodes.get(obj) {
            Some(Node::Object { class, .. }) => view.global(*class) == Some((module, name)),
            _ => false,
        }
    }

    /// Reads the raw array that follows a NumpyArrayWrapper (see the module docs).
    fn read_array(&self, wrapper: Id, r: &mut Reader<'_>) -> Result<Node, String> {
        let view = View { nodes: &self.nodes };
        let shape = view.attr(wrapper, "shape").ok_or("array without shape")?;
        let dims: Vec<usize> = match view.get(shape) {
            Some(Node::Tuple(d)) => d
                .iter()
                .map(|&i| match view.get(i) {
                    Some(Node::Int(n)) => usize::try_from(*n).map_err(|_| "negative dimension"),
                    _ => Err("non-integer dimension"),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err("array shape is not a tuple".into()),
        };
        let count = dims
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or("array too large")?;
        let dtype = view.attr(wrapper, "dtype").ok_or("array without dtype")?;
        let (code, little_endian) = view.dtype(dtype).ok_or("unreadable dtype")?;
        if code != "f8" {
            return Err(format!("unsupported array dtype {code} (only f8)"));
        }
        if let Some(order) = view.attr(wrapper, "order").and_then(|o| view.str(o)) {
            // Fortran order only matters for 2-D+ arrays; all arrays we read are 1-D.
            if order == "F" && dims.iter().filter(|&&d| d > 1).count() > 1 {
                return Err("Fortran-ordered matrices are not supported".into());
            }
        }
        if view.attr(wrapper, "numpy_array_alignment_bytes").is_some() {
            let pad = r.u8()? as usize;
            r.take(pad)?;
        }
        let bytes = r.take(count.checked_mul(8).ok_or("array too large")?)?;
        let values = bytes
            .chunks_exact(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                if little_endian {
                    f64::from_le_bytes(b)
                } else {
                    f64::from_be_bytes(b)
                }
            })
            .collect();
        Ok(Node::Array(values))
    }
}

/// Read-only queries over the arena, shared by the machine and [`Pickle`].
struct View<'a> {
    nodes: &'a [Node],
}

impl<'a> View<'a> {
    fn get(&self, id: Id) -> Option<&'a Node> {
        self.nodes.get(id)
    }
    fn str(&self, id: Id) -> Option<&'a str> {
        match self.get(id)? {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }
    /// A class reference's (module, name).
    fn global(&self, id: Id) -> Option<(&'a str, &'a str)> {
        match self.get(id)? {
            Node::Global(m, n) => Some((self.str(*m)?, self.str(*n)?)),
            _ => None,
        }
    }
    /// `obj.name`: a key of the object's state dict (how sklearn and plain classes pickle).
    fn attr(&self, obj: Id, name: &str) -> Option<Id> {
        let Node::Object {
            state: Some(state), ..
        } = self.get(obj)?
        else {
            return None;
        };
        let Node::Dict(entries) = self.get(*state)? else {
            return None;
        };
        // Last assignment wins, as in Python.
        entries
            .iter()
            .rev()
            .find(|(k, _)| self.str(*k) == Some(name))
            .map(|(_, v)| *v)
    }
    /// A `numpy.dtype` object: its type code and whether it is little-endian.
    fn dtype(&self, id: Id) -> Option<(&'a str, bool)> {
        let Node::Object { class, args, state } = self.get(id)? else {
            return None;
        };
        if self.global(*class)? != ("numpy", "dtype") {
            return None;
        }
        let Node::Tuple(a) = self.get(*args)? else {
            return None;
        };
        let code = self.str(*a.first()?)?;
        // State tuple (version, byteorder, ...); '<' little, '>' big, '=' / '|' native.
        let order = state
            .and_then(|s| match self.get(s) {
                Some(Node::Tuple(t)) => t.get(1).and_then(|b| self.str(*b)),
                _ => None,
            })
            .unwrap_or("=");
        let little = match order {
            "<" => true,
            ">" => false,
            _ => cfg!(target_endian = "little"),
        };
        Some((code, little))
    }
}

impl Pickle {
    fn view(&self) -> View<'_> {
        View { nodes: &self.nodes }
    }

    /// The root object's class as (module, name), if the root is an object.
    pub(crate) fn root_class(&self) -> Option<(&str, &str)> {
        self.class_of(self.root)
    }

    /// An object's class as (module, name).
    pub(crate) fn class_of(&self, id: Id) -> Option<(&str, &str)> {
        let v = self.view();
        match v.get(id)? {
            Node::Object { class, .. } => v.global(*class),
            _ => None,
        }
    }

    /// A class or function reference as (module, name).
    pub(crate) fn global(&self, id: Id) -> Option<(&str, &str)> {
        self.view().global(id)
    }

    /// The root object's attribute `name`.
    pub(crate) fn root_attr(&self, name: &str) -> Option<Id> {
        self.view().attr(self.root, name)
    }

    pub(crate) fn node(&self, id: Id) -> Option<&Node> {
        self.nodes.get(id)
    }

    /// The root attribute `name` as a float64 array.
    pub(crate) fn float_array(&self, name: &str) -> Option<&[f64]> {
        match self.node(self.root_attr(name)?)? {
            Node::Array(v) => Some(v),
            _ => None,
        }
    }

    /// The root attribute `name` as one float64: a Python float, a one-element array, or a
    /// NumPy scalar. scikit-learn leaves some attributes as NumPy scalars (`LinearRegression`'s
    /// `intercept_` when fitted on a 1-D target), which pickle as
    /// `numpy.core.multiarray.scalar(dtype('float64'), <8 raw bytes>)`: a call we record but
    /// never run, so the value is decoded here from the dtype and the bytes.
    pub(crate) fn float(&self, name: &str) -> Option<f64> {
        let id = self.root_attr(name)?;
        match self.node(id)? {
            Node::Float(v) => Some(*v),
            Node::Array(v) => match v.as_slice() {
                [one] => Some(*one),
                _ => None,
            },
            Node::Object { class, args, .. } => {
                let v = self.view();
                match v.global(*class)? {
                    // numpy 2 renamed numpy.core to numpy._core; pickles name either.
                    ("numpy.core.multiarray" | "numpy._core.multiarray", "scalar") => {}
                    _ => return None,
                }
                let Node::Tuple(a) = v.get(*args)? else {
                    return None;
                };
                let [dtype, data] = a.as_slice() else {
                    return None;
                };
                let (code, little_endian) = v.dtype(*dtype)?;
                if code != "f8" {
                    return None;
                }
                let raw: [u8; 8] = match v.get(*data)? {
                    Node::Bytes(b) => b.as_slice().try_into().ok()?,
                    // Protocol 2 has no bytes opcode: Python writes
                    // `_codecs.encode(<text>, 'latin1')`, one char per byte.
                    Node::Object { class, args, .. }
                        if v.global(*class) == Some(("_codecs", "encode")) =>
                    {
                        let Node::Tuple(enc) = v.get(*args)? else {
                            return None;
                        };
                        let [text, codec] = enc.as_slice() else {
                            return None;
                        };
                        if v.str(*codec)? != "latin1" {
                            return None;
                        }
                        let bytes = v
                            .str(*text)?
                            .chars()
                            .map(|c| u8::try_from(u32::from(c)).ok())
                            .collect::<Option<Vec<u8>>>()?;
                        bytes.as_slice().try_into().ok()?
                    }
                    _ => return None,
                };
                Some(if little_endian {
                    f64::from_le_bytes(raw)
                } else {
                    f64::from_be_bytes(raw)
                })
            }
            _ => None,
        }
    }

    /// The root attribute `name` as an integer.
    pub(crate) fn int(&self, name: &str) -> Option<i64> {
        match self.node(self.root_attr(name)?)? {
            Node::Int(v) => Some(*v),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Read;

    fn member(archive: &str, name: &str) -> Vec<u8> {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
            "../../data/kepler-model-db/models/v0.7/ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/{archive}"
        ));
        let file = std::fs::File::open(&path).expect("archive");
        let mut zip = zip::ZipArchive::new(file).expect("zip");
        let mut out = Vec::new();
        zip.by_name(name)
            .expect("member")
            .read_to_end(&mut out)
            .expect("read");
        out
    }

    #[test]
    fn reads_the_published_max_abs_scaler() {
        let p = parse(
            &member("XgboostFitTrainer_0.zip", "scaler.pkl"),
            "scaler.pkl",
        )
        .expect("parse");
        assert_eq!(
            p.root_class(),
            Some(("sklearn.preprocessing._data", "MaxAbsScaler"))
        );
        // The same numbers as the weight JSON `scale`s (and joblib.load(...).scale_).
        assert_eq!(p.float_array("scale_"), Some(&[95877.00000000001, 1.0][..]));
        assert_eq!(
            p.float_array("max_abs_"),
            Some(&[95877.00000000001, 0.0][..])
        );
        assert_eq!(p.int("n_features_in_"), Some(2));
    }

    #[test]
    fn reads_a_pickled_curve_fit() {
        let p = parse(
            &member("LogarithmicRegressionTrainer_0.zip", "dram.pkl"),
            "dram.pkl",
        )
        .expect("parse");
        assert_eq!(p.root_class(), Some(("trainer.curvefit", "CurveFitModel")));
        // Same values as the weight JSON's dram CurveFit_Weights.
        assert_eq!(
            p.float_array("popt"),
            Some(&[11.673666666666273, 1.0, 21.01685283257353][..])
        );
        assert_eq!(p.int("feature_index"), Some(1));
        // pcov (3×3, with infinities) is read past correctly.
        assert_eq!(p.float_array("pcov").map(<[f64]>::len), Some(9));
    }

    #[test]
    fn protocol_2_text_globals_dicts_and_long1() {
        // c__main__\nThing\n ) R } ( X key ... d b .  — hand-assembled.
        let mut b = vec![0x80, 2];
        b.extend_from_slice(b"c__main__\nThing\n)R(");
        b.extend_from_slice(b"X\x01\x00\x00\x00a\x8a\x01\xff"); // "a": LONG1 -1
        b.extend_from_slice(b"X\x01\x00\x00\x00bG\x40\x09\x21\xfb\x54\x44\x2d\x18"); // "b": pi
        b.extend_from_slice(b"db.");
        let p = parse(&b, "t").expect("parse");
        assert_eq!(p.root_class(), Some(("__main__", "Thing")));
        assert_eq!(p.int("a"), Some(-1));
        assert!(
            matches!(p.node(p.root_attr("b").unwrap_or(usize::MAX)), Some(Node::Float(x)) if *x == std::f64::consts::PI)
        );
    }

    /// `obj.x = numpy.float64(v)` at protocol 2, where bytes are written as
    /// `_codecs.encode(<latin-1 text>, 'latin1')`; `code` is the dtype's type code.
    fn protocol_2_numpy_scalar(v: f64, code: &str) -> Vec<u8> {
        let mut b = vec![0x80, 2];
        b.extend_from_slice(b"c__main__\nThing\n)R(X\x01\x00\x00\x00x");
        b.extend_from_slice(b"cnumpy.core.multiarray\nscalar\n");
        b.extend_from_slice(b"cnumpy\ndtype\nX\x02\x00\x00\x00");
        b.extend_from_slice(code.as_bytes());
        b.extend_from_slice(
            b"\x89\x88\x87R(K\x03X\x01\x00\x00\x00<NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb",
        );
        // The 8 bytes as text, one char per byte, UTF-8 encoded for BINUNICODE.
        let text: String = v.to_le_bytes().iter().map(|&c| char::from(c)).collect();
        b.extend_from_slice(b"c_codecs\nencode\nX");
        b.extend_from_slice(&u32::try_from(text.len()).unwrap_or(0).to_le_bytes());
        b.extend_from_slice(text.as_bytes());
        b.extend_from_slice(b"X\x06\x00\x00\x00latin1\x86R\x86R");
        b.extend_from_slice(b"db.");
        b
    }

    #[test]
    fn numpy_scalars_read_as_floats() {
        let v = -1_234.567_891_234_5;
        let p = parse(&protocol_2_numpy_scalar(v, "f8"), "t").expect("parse");
        assert_eq!(p.float("x"), Some(v));
        // Only float64 scalars are read: another dtype's bytes mean something else.
        let p = parse(&protocol_2_numpy_scalar(v, "i8"), "t").expect("parse");
        assert_eq!(p.float("x"), None);
    }

    #[test]
    fn errors_instead_of_panics() {
        for bad in [
            &b""[..],
            b"\x80",
            b"N",
            b"0.",
            b"b.",
            b"(t",
            b"h\x05.",
            b"\xff",
            b"u.",
        ] {
            assert!(parse(bad, "t").is_err(), "{bad:?}");
        }
    }

    // The memory bound of STACK_GLOBAL over a reused memoised string is measured with a
    // counting allocator in tests/memory_bound.rs.

    #[test]
    fn the_c_opcode_and_stack_global_name_the_same_class() {
        let mut b = vec![0x80, 4];
        b.extend_from_slice(b"\x8c\x08__main__\x8c\x05Thing\x93)\x81.");
        let p = parse(&b, "t").expect("parse");
        assert_eq!(p.root_class(), Some(("__main__", "Thing")));
    }

    /// `}` `(` then `n` key/value pairs `u` `.`.
    fn dict_of(n: usize) -> Vec<u8> {
        let mut b = vec![0x80, 4, b'}', b'('];
        for i in 0..n {
            b.push(b'M');
            b.extend_from_slice(&(i as u16).to_le_bytes());
            b.extend_from_slice(b"N");
        }
        b.extend_from_slice(b"u.");
        b
    }

    #[test]
    fn dicts_are_capped() {
        assert!(parse(&dict_of(MAX_DICT_ENTRIES), "t").is_ok());
        let err = parse(&dict_of(MAX_DICT_ENTRIES + 1), "t").expect_err("too many entries");
        assert!(err.to_string().contains("entries"), "{err}");
        // SETITEM one at a time reaches the same cap.
        let mut b = vec![0x80, 4, b'}'];
        for i in 0..=MAX_DICT_ENTRIES {
            b.push(b'M');
            b.extend_from_slice(&(i as u16).to_le_bytes());
            b.extend_from_slice(b"Ns");
        }
        b.push(b'.');
        assert!(parse(&b, "t").is_err());
    }

    /// A memoised NumpyArrayWrapper (memo 0) and its state (memo 1: shape (), dtype f8), then
    /// `n` BUILDs of it, each followed by its one float64.
    fn rebuilt_wrapper(n: usize) -> Vec<u8> {
        let mut b = vec![0x80, 4];
        b.extend_from_slice(b"\x8c\x13joblib.numpy_pickle\x8c\x11NumpyArrayWrapper\x93)\x81\x94");
        b.extend_from_slice(b"}(\x8c\x05shape)\x8c\x05dtype");
        b.extend_from_slice(b"\x8c\x05numpy\x8c\x05dtype\x93\x8c\x02f8\x85R");
        b.extend_from_slice(b"u\x940");
        for i in 0..n {
            b.extend_from_slice(b"h\x00h\x01b");
            b.extend_from_slice(&(i as f64).to_le_bytes());
            b.push(b'0');
        }
        b.extend_from_slice(b"N.");
        b
    }

    #[test]
    fn arrays_are_capped() {
        // Each BUILD scans the state dict; a memoised wrapper rebuilt without limit would make
        // loading quadratic in the input.
        assert!(parse(&rebuilt_wrapper(MAX_ARRAYS), "t").is_ok());
        let err = parse(&rebuilt_wrapper(MAX_ARRAYS + 1), "t").expect_err("too many arrays");
        assert!(err.to_string().contains("arrays"), "{err}");
    }

    #[test]
    fn nodes_are_capped() {
        let mut b = vec![0x80, 4];
        b.extend(std::iter::repeat_n(b'N', MAX_NODES + 1));
        b.push(b'.');
        let err = parse(&b, "t").expect_err("too many values");
        assert!(err.to_string().contains("values"), "{err}");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse(&data, "t");
        }

        #[test]
        fn mutated_scaler_never_panics(at in 0usize..471, byte in any::<u8>(), cut in 0usize..480) {
            let mut data = member("XgboostFitTrainer_0.zip", "scaler.pkl");
            if let Some(slot) = data.get_mut(at) {
                *slot = byte;
            }
            data.truncate(cut);
            let _ = parse(&data, "scaler.pkl");
        }
    }
}
