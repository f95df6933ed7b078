use aya::{Btf, Endianness};

use super::*;

/// Builds a BTF blob from (name, info, size or type, trailing words) per type, names given as
/// strings and placed in the string table here.
struct Blob {
    types: Vec<u8>,
    strings: Vec<u8>,
}

impl Blob {
    fn new() -> Self {
        Blob {
            types: Vec::new(),
            strings: vec![0],
        }
    }

    fn name(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let off = self.strings.len() as u32;
        self.strings.extend_from_slice(s.as_bytes());
        self.strings.push(0);
        off
    }

    fn push(&mut self, name: &str, kind: u32, vlen: u32, size_or_type: u32, rest: &[u32]) {
        let n = self.name(name);
        for w in [n, kind << 24 | vlen, size_or_type].iter().chain(rest) {
            self.types.extend_from_slice(&w.to_ne_bytes());
        }
    }

    /// A member or parameter list entry: (name, type[, offset]).
    fn member(&mut self, name: &str, ty: u32, offset: u32) -> [u32; 3] {
        [self.name(name), ty, offset]
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC.to_ne_bytes());
        out.extend_from_slice(&[1, 0]);
        for w in [24u32, 0, self.types.len() as u32, self.types.len() as u32] {
            out.extend_from_slice(&w.to_ne_bytes());
        }
        out.extend_from_slice(&(self.strings.len() as u32).to_ne_bytes());
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strings);
        out
    }
}

/// ids 1..=9: int; struct wanted { a: *other, b: td }; *other; struct other { x: int };
/// typedef td = struct { c: int }; the anonymous struct; struct unrelated { y: int };
/// typedef btf_trace_x = *other; long (after the last kept type).
fn sample() -> Vec<u8> {
    let mut b = Blob::new();
    b.push("int", INT, 0, 4, &[32]);
    let a = b.member("a", 3, 0);
    let m_b = b.member("b", 5, 64);
    b.push("wanted", STRUCT, 2, 16, &[a, m_b].concat());
    b.push("", PTR, 0, 4, &[]);
    let x = b.member("x", 1, 0);
    b.push("other", STRUCT, 1, 8, &x);
    b.push("td", TYPEDEF, 0, 6, &[]);
    let c = b.member("c", 1, 0);
    b.push("", STRUCT, 1, 4, &c);
    let y = b.member("y", 1, 0);
    b.push("unrelated", STRUCT, 1, 4, &y);
    b.push("btf_trace_x", TYPEDEF, 0, 3, &[]);
    b.push("long", INT, 0, 8, &[64]);
    b.bytes()
}

fn kind_and_name(p: &Parsed<'_>, id: usize) -> (u32, String) {
    let t = p.types[id];
    let name = string_at(p.strings, u32_at(t, 0).unwrap()).unwrap();
    (
        kind_of(u32_at(t, 4).unwrap()),
        String::from_utf8_lossy(name).into(),
    )
}

#[test]
fn keeps_what_is_named_and_reached_at_the_same_ids() {
    let raw = sample();
    let out = slim(&raw, &["wanted", "btf_trace_x"]).unwrap();
    let p = parse(&out).unwrap();
    // Ends at the last kept type (8): `long` is gone.
    assert_eq!(p.types.len(), 9);
    assert_eq!(kind_and_name(&p, 1), (INT, "int".into()));
    assert_eq!(kind_and_name(&p, 2), (STRUCT, "wanted".into()));
    assert_eq!(kind_and_name(&p, 5), (TYPEDEF, "td".into()));
    assert_eq!(kind_and_name(&p, 6), (STRUCT, String::new()));
    assert_eq!(kind_and_name(&p, 8), (TYPEDEF, "btf_trace_x".into()));
    // Members keep their names, types and offsets.
    let wanted = p.types[2];
    let member = |i: usize, f: usize| u32_at(wanted, TYPE_HEADER + 12 * i + 4 * f).unwrap();
    assert_eq!(string_at(p.strings, member(0, 0)).unwrap(), b"a");
    assert_eq!((member(0, 1), member(0, 2)), (3, 0));
    assert_eq!(string_at(p.strings, member(1, 0)).unwrap(), b"b");
    assert_eq!((member(1, 1), member(1, 2)), (5, 64));
    // `other` is reached through a pointer but not asked for: an empty, nameless struct of the
    // same size. `unrelated` is not reached: a filler.
    let other = p.types[4];
    assert_eq!(other.len(), TYPE_HEADER);
    assert_eq!(kind_and_name(&p, 4), (STRUCT, String::new()));
    assert_eq!(vlen_of(u32_at(other, 4).unwrap()), 0);
    assert_eq!(u32_at(other, 8), Some(8));
    assert_eq!(kind_and_name(&p, 7), (PTR, String::new()));
    assert_eq!(u32_at(p.types[7], 8), Some(0));
    // Unused names are not carried.
    let strings = String::from_utf8_lossy(p.strings);
    assert!(!strings.contains("unrelated") && !strings.contains("long") && !strings.contains('y'));

    assert_eq!(ids_named(&out, "wanted"), [(2, STRUCT)]);
    assert_eq!(ids_named(&out, "btf_trace_x"), [(8, TYPEDEF)]);
    assert!(ids_named(&out, "unrelated").is_empty());
    // aya reads it.
    assert!(Btf::parse(&out, Endianness::default()).is_ok());
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    let raw = sample();
    assert_eq!(slim(&raw[..10], &["wanted"]), Err(SlimError::Bounds));
    let mut swapped = raw.clone();
    swapped.swap(0, 1);
    assert_eq!(slim(&swapped, &["wanted"]), Err(SlimError::Magic));
    // Types section cut inside the last type (the header's lengths say it is shorter).
    let mut short = raw.clone();
    let type_len = u32_at(&raw, 12).unwrap() - 2;
    short[12..16].copy_from_slice(&type_len.to_ne_bytes());
    assert!(matches!(
        slim(&short, &["wanted"]),
        Err(SlimError::Truncated { id: 9 })
    ));
    // A member referring past the last type.
    let mut dangling = raw.clone();
    let member_type = 24 + 16 + TYPE_HEADER + 4;
    dangling[member_type..member_type + 4].copy_from_slice(&99u32.to_ne_bytes());
    assert_eq!(
        slim(&dangling, &["wanted"]),
        Err(SlimError::Reference { id: 2, to: 99 })
    );
    // An unknown kind.
    let mut odd = raw;
    let info = 24 + 4;
    odd[info..info + 4].copy_from_slice(&(31u32 << 24).to_ne_bytes());
    assert_eq!(
        slim(&odd, &["wanted"]),
        Err(SlimError::Kind { id: 1, kind: 31 })
    );
}
