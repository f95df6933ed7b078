//! A slim copy of the kernel's BTF for the loader. aya parses all of `/sys/kernel/btf/vmlinux`
//! (~5 MiB, ~130k types) into owned structures, which made the agent's start-up peak about
//! 20 MiB above its steady RSS. The loader looks up very little of it: the structs the program's
//! CO-RE relocations name, and the ids of the attach points (a tracepoint's `btf_trace_*`
//! typedef, an fentry target's function). The slim copy keeps those types and everything they
//! reach through members, pointers and typedefs, stopping at named structs, unions and enums
//! not asked for, which it keeps as empty shells of the same kind and size. Every other type
//! becomes a 12-byte anonymous `void *` so that ids do not move (the kernel resolves attach
//! points by id in its own BTF), and the copy ends at the last type kept.

use std::collections::HashMap;

const MAGIC: u16 = 0xeb9f;
const HEADER_LEN: usize = 24;
/// Bytes of a type's common header: name offset, info, size or type.
const TYPE_HEADER: usize = 12;

// BTF kinds (the `info` word's bits 24-28).
const INT: u32 = 1;
const PTR: u32 = 2;
const ARRAY: u32 = 3;
const STRUCT: u32 = 4;
const UNION: u32 = 5;
const ENUM: u32 = 6;
const FWD: u32 = 7;
const TYPEDEF: u32 = 8;
const VOLATILE: u32 = 9;
const CONST: u32 = 10;
const RESTRICT: u32 = 11;
const FUNC: u32 = 12;
const FUNC_PROTO: u32 = 13;
const VAR: u32 = 14;
const DATASEC: u32 = 15;
const FLOAT: u32 = 16;
const DECL_TAG: u32 = 17;
const TYPE_TAG: u32 = 18;
const ENUM64: u32 = 19;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum SlimError {
    #[error("not BTF in this machine's byte order")]
    Magic,
    #[error("BTF header or sections out of bounds")]
    Bounds,
    #[error("BTF type {id} runs past the type section")]
    Truncated { id: usize },
    #[error("BTF type {id} has unknown kind {kind}")]
    Kind { id: usize, kind: u32 },
    #[error("BTF type {id} refers to type {to}, which does not exist")]
    Reference { id: usize, to: u32 },
    #[error("BTF string at {0} out of bounds")]
    String(u32),
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let bytes = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

fn kind_of(info: u32) -> u32 {
    (info >> 24) & 0x1f
}

fn vlen_of(info: u32) -> usize {
    (info & 0xffff) as usize
}

/// Bytes after the common header, by kind.
fn trailing(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        INT | VAR | DECL_TAG => 4,
        PTR | FWD | TYPEDEF | VOLATILE | CONST | RESTRICT | FUNC | FLOAT | TYPE_TAG => 0,
        ARRAY => 12,
        STRUCT | UNION | DATASEC | ENUM64 => 12 * vlen,
        ENUM | FUNC_PROTO => 8 * vlen,
        _ => return None,
    })
}

/// The parsed parts of a BTF blob: each type's bytes by id (id 0, void, has none).
struct Parsed<'a> {
    types: Vec<&'a [u8]>,
    strings: &'a [u8],
    version: u8,
    flags: u8,
}

fn parse(raw: &[u8]) -> Result<Parsed<'_>, SlimError> {
    let magic = raw
        .get(..2)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .ok_or(SlimError::Bounds)?;
    if magic != MAGIC {
        return Err(SlimError::Magic);
    }
    let field = |i: usize| u32_at(raw, 4 + 4 * i).map(|v| v as usize);
    let (Some(hdr_len), Some(type_off), Some(type_len), Some(str_off), Some(str_len)) =
        (field(0), field(1), field(2), field(3), field(4))
    else {
        return Err(SlimError::Bounds);
    };
    let section = |off: usize, len: usize| {
        let start = hdr_len.checked_add(off)?;
        raw.get(start..start.checked_add(len)?)
    };
    let mut data = section(type_off, type_len).ok_or(SlimError::Bounds)?;
    let strings = section(str_off, str_len).ok_or(SlimError::Bounds)?;
    let mut types: Vec<&[u8]> = vec![&[]];
    while !data.is_empty() {
        let id = types.len();
        let info = u32_at(data, 4).ok_or(SlimError::Truncated { id })?;
        let kind = kind_of(info);
        let extra = trailing(kind, vlen_of(info)).ok_or(SlimError::Kind { id, kind })?;
        let len = TYPE_HEADER + extra;
        let this = data.get(..len).ok_or(SlimError::Truncated { id })?;
        types.push(this);
        data = data.get(len..).unwrap_or_default();
    }
    Ok(Parsed {
        types,
        strings,
        version: raw.get(2).copied().unwrap_or(1),
        flags: raw.get(3).copied().unwrap_or(0),
    })
}

/// The ids a type refers to.
fn references(t: &[u8]) -> Vec<u32> {
    let info = u32_at(t, 4).unwrap_or(0);
    let kind = kind_of(info);
    let vlen = vlen_of(info);
    let at = |off: usize| u32_at(t, TYPE_HEADER + off);
    let header_type = u32_at(t, 8);
    let each = |stride: usize, off: usize| (0..vlen).filter_map(move |i| at(i * stride + off));
    match kind {
        PTR | TYPEDEF | VOLATILE | CONST | RESTRICT | FUNC | VAR | DECL_TAG | TYPE_TAG => {
            header_type.into_iter().collect()
        }
        ARRAY => [at(0), at(4)].into_iter().flatten().collect(),
        STRUCT | UNION => each(12, 4).collect(),
        FUNC_PROTO => header_type.into_iter().chain(each(8, 4)).collect(),
        DATASEC => each(12, 0).collect(),
        _ => Vec::new(),
    }
}

/// Offsets of the names a type holds (its own, its members', values' and parameters').
fn name_offsets(kind: u32, vlen: usize) -> Vec<usize> {
    let each = |stride: usize| (0..vlen).map(move |i| TYPE_HEADER + i * stride);
    let mut out = vec![0];
    match kind {
        STRUCT | UNION | ENUM64 => out.extend(each(12)),
        ENUM | FUNC_PROTO => out.extend(each(8)),
        _ => {}
    }
    out
}

fn string_at(strings: &[u8], off: u32) -> Result<&[u8], SlimError> {
    let rest = strings.get(off as usize..).ok_or(SlimError::String(off))?;
    let end = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or(SlimError::String(off))?;
    Ok(&rest[..end])
}

/// What becomes of one type in the copy.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Not reached: an anonymous `void *`.
    Filler,
    /// A named aggregate reached but not asked for: same kind and size, no name, no members.
    Shell,
    Kept,
}

/// The slim copy of the BTF blob `raw`, keeping the types named in `names` (of any kind) and
/// what they reach. Ids are those of `raw`.
pub(crate) fn slim(raw: &[u8], names: &[&str]) -> Result<Vec<u8>, SlimError> {
    let p = parse(raw)?;
    let mut fate = vec![Fate::Filler; p.types.len()];
    let mut work: Vec<usize> = Vec::new();
    for (id, t) in p.types.iter().enumerate().skip(1) {
        let name = string_at(p.strings, u32_at(t, 0).unwrap_or(0))?;
        if !name.is_empty() && names.iter().any(|n| n.as_bytes() == name) {
            fate[id] = Fate::Kept;
            work.push(id);
        }
    }
    while let Some(id) = work.pop() {
        for to in references(p.types.get(id).copied().unwrap_or_default()) {
            let to_id = to as usize;
            let Some(&target) = p.types.get(to_id) else {
                return Err(SlimError::Reference { id, to });
            };
            if to_id == 0 || fate[to_id] != Fate::Filler {
                continue;
            }
            let info = u32_at(target, 4).unwrap_or(0);
            let named = u32_at(target, 0).unwrap_or(0) != 0;
            let aggregate = matches!(kind_of(info), STRUCT | UNION | ENUM | ENUM64 | FWD);
            if named && aggregate {
                fate[to_id] = Fate::Shell;
            } else {
                fate[to_id] = Fate::Kept;
                work.push(to_id);
            }
        }
    }
    let last = fate.iter().rposition(|&f| f != Fate::Filler).unwrap_or(0);

    let mut types = Vec::with_capacity(last * TYPE_HEADER);
    let mut strings = vec![0u8];
    let mut renamed: HashMap<u32, u32> = HashMap::new();
    for (id, t) in p.types.iter().enumerate().take(last + 1).skip(1) {
        let info = u32_at(t, 4).unwrap_or(0);
        let kind = kind_of(info);
        match fate[id] {
            Fate::Filler => {
                types.extend_from_slice(&0u32.to_ne_bytes());
                types.extend_from_slice(&(PTR << 24).to_ne_bytes());
                types.extend_from_slice(&0u32.to_ne_bytes());
            }
            Fate::Shell => {
                // Keeps kind, the kind flag (union vs struct for a FWD) and the size.
                let shell_info = info & !0xffff;
                types.extend_from_slice(&0u32.to_ne_bytes());
                types.extend_from_slice(&shell_info.to_ne_bytes());
                types.extend_from_slice(t.get(8..12).unwrap_or(&[0; 4]));
            }
            Fate::Kept => {
                let start = types.len();
                types.extend_from_slice(t);
                for off in name_offsets(kind, vlen_of(info)) {
                    let old = u32_at(t, off).unwrap_or(0);
                    let new = match renamed.get(&old) {
                        Some(&n) => n,
                        None if old == 0 => 0,
                        None => {
                            let n = u32::try_from(strings.len()).map_err(|_| SlimError::Bounds)?;
                            strings.extend_from_slice(string_at(p.strings, old)?);
                            strings.push(0);
                            renamed.insert(old, n);
                            n
                        }
                    };
                    // Within the type: its length was checked against its kind and vlen.
                    if let Some(slot) = types.get_mut(start + off..start + off + 4) {
                        slot.copy_from_slice(&new.to_ne_bytes());
                    }
                }
            }
        }
    }

    let len32 = |n: usize| u32::try_from(n).map_err(|_| SlimError::Bounds);
    let mut out = Vec::with_capacity(HEADER_LEN + types.len() + strings.len());
    out.extend_from_slice(&MAGIC.to_ne_bytes());
    out.extend_from_slice(&[p.version, p.flags]);
    out.extend_from_slice(&len32(HEADER_LEN)?.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&len32(types.len())?.to_ne_bytes());
    out.extend_from_slice(&len32(types.len())?.to_ne_bytes());
    out.extend_from_slice(&len32(strings.len())?.to_ne_bytes());
    out.extend_from_slice(&types);
    out.extend_from_slice(&strings);
    Ok(out)
}

/// The (id, kind) of every type called `name` in a BTF blob.
#[cfg(test)]
pub(crate) fn ids_named(raw: &[u8], name: &str) -> Vec<(usize, u32)> {
    let Ok(p) = parse(raw) else {
        return Vec::new();
    };
    let named = |t: &[u8]| string_at(p.strings, u32_at(t, 0).unwrap_or(0)).ok();
    p.types
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, t)| named(t) == Some(name.as_bytes()))
        .map(|(id, t)| (id, kind_of(u32_at(t, 4).unwrap_or(0))))
        .collect()
}

#[cfg(test)]
mod tests;
