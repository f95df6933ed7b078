//! What every fuzz target shares: the case count from `KEPLER_FUZZ_CASES` and byte edits of a
//! valid input (replace, insert, delete, cut the rest). The strategies are the ones the targets
//! had each on their own, so a CI slice draws the same inputs as before.

use proptest::prelude::*;
use proptest::test_runner::Config;

/// One edit: (where, as a fraction of the length; the byte; how: 0 = replace, 1 = insert,
/// 2 = delete, 3 = cut the rest, others nothing).
pub type Edit = (f64, u8, u8);

/// The proptest config of a fuzz target: `KEPLER_FUZZ_CASES` cases when set (long local runs),
/// else `default_cases` (the target's CI slice); no failure files written into the tree.
pub fn config(default_cases: u32) -> Config {
    let cases = std::env::var("KEPLER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Up to five edits at fractional positions, so that they land inside inputs of any length.
pub fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec((0.0f64..1.0, any::<u8>(), 0u8..4), 0..6)
}

/// `data` with `edits` applied in order; an edit past the end appends or does nothing.
pub fn mutate(mut data: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for &(at, byte, how) in edits {
        let i = ((at * data.len() as f64) as usize).min(data.len());
        match how {
            0 if i < data.len() => data[i] = byte,
            1 => data.insert(i, byte),
            2 if i < data.len() => {
                data.remove(i);
            }
            3 => data.truncate(i),
            _ => {}
        }
    }
    data
}

/// [`mutate`] on text, kept a `String` for parsers that take `&str`: bytes that stop being
/// UTF-8 become U+FFFD.
pub fn mutate_text(text: &str, edits: &[Edit]) -> String {
    String::from_utf8_lossy(&mutate(text.as_bytes().to_vec(), edits)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_edit() {
        let data = b"abcd".to_vec();
        assert_eq!(mutate(data.clone(), &[(0.5, b'X', 0)]), b"abXd");
        assert_eq!(mutate(data.clone(), &[(0.5, b'X', 1)]), b"abXcd");
        assert_eq!(mutate(data.clone(), &[(0.5, b'X', 2)]), b"abd");
        assert_eq!(mutate(data.clone(), &[(0.5, b'X', 3)]), b"ab");
        assert_eq!(mutate(data.clone(), &[(0.5, b'X', 7)]), b"abcd");
        // In order: the second edit sees the first one's result.
        assert_eq!(mutate(data, &[(0.0, b'X', 1), (0.99, b'Y', 0)]), b"XabcY");
    }

    #[test]
    fn edits_on_empty_input_only_insert() {
        for how in 0..4 {
            let expected: &[u8] = if how == 1 { b"Z" } else { b"" };
            assert_eq!(
                mutate(Vec::new(), &[(0.3, b'Z', how)]),
                expected,
                "how {how}"
            );
        }
    }

    #[test]
    fn text_stays_a_string() {
        assert_eq!(mutate_text("héllo", &[(0.2, b'!', 0)]), "h!\u{fffd}llo");
        assert_eq!(mutate_text("hello", &[(0.2, b'a', 0)]), "hallo");
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn edits_are_bounded(data in prop::collection::vec(any::<u8>(), 0..64), edits in edits()) {
            prop_assert!(edits.len() < 6);
            let inserts = edits.iter().filter(|e| e.2 == 1).count();
            prop_assert!(mutate(data.clone(), &edits).len() <= data.len() + inserts);
        }
    }
}
