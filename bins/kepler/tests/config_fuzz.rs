//! Fuzz target for the agent's config file: the complete effective YAML and upstream's own
//! files with values swapped for right, wrong and odd ones, then mutated byte by byte, and
//! random text. `KEPLER_FUZZ_CASES` sets the cases (docs/security.md records the long runs).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use kepler_agent::config::{Config, ConfigError, Overrides};
use kepler_testkit::fuzz::{edits, mutate_text};
use proptest::prelude::*;

/// The seeds: every key with its default, and upstream Kepler's published files.
fn seeds() -> &'static [String] {
    static SEEDS: OnceLock<Vec<String>> = OnceLock::new();
    SEEDS.get_or_init(read_seeds)
}

fn read_seeds() -> Vec<String> {
    let mut seeds = vec![Config::default().effective_yaml()];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/upstream");
    for name in [
        "hack-config.yaml",
        "helm-values-config.yaml",
        "k8s-configmap-config.yaml",
    ] {
        let path = dir.join(name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        seeds.push(text);
    }
    seeds
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "true",
            "false",
            "null",
            "~",
            "0",
            "-1",
            "1e400",
            ".nan",
            "-.inf",
            "[]",
            "{}",
            "''",
            "\"\"",
            "0s",
            "100ms",
            "5s",
            "-5s",
            "1h2m3.5s",
            "999999999999h",
            "9223372036854775807",
            "18446744073709551616",
            "debug",
            "json",
            "[package, dram]",
            "[node, process]",
            "[':28282', '[::1]:0']",
            "/proc",
            "none",
            "auto",
            "kubelet",
            "apiserver",
            "&a x",
            "*a",
            "!!binary aGk=",
            "|\n  text",
            "[[[[[[[[]]]]]]]]",
        ])
        .prop_map(str::to_owned),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|x| x.to_string()),
        "[ -~]{0,20}",
    ]
}

/// Replaces the value of some `key: value` lines.
fn swap_values(text: &str, swaps: &[(f64, String)]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let keyed: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains(": ") || lines[i].trim_end().ends_with(':'))
        .collect();
    for (at, value) in swaps {
        let Some(&i) = keyed.get((*at * keyed.len() as f64) as usize) else {
            continue;
        };
        if let Some((key, _)) = lines[i].split_once(':') {
            lines[i] = format!("{key}: {value}");
        }
    }
    lines.join("\n") + "\n"
}

fn check(text: &str, file: &Path) -> Result<(), TestCaseError> {
    let label = Path::new("/etc/kepler/config.yaml");
    // Parsing alone: a typed error that names the file and the key, or a config.
    if let Err(e) = Config::from_yaml(text, label) {
        prop_assert!(matches!(e, ConfigError::Invalid { .. }), "{e:?}");
        prop_assert!(e.to_string().contains("/etc/kepler/config.yaml"), "{e}");
    }
    // The whole load: the size-limited read, the file, then the checks relating values.
    std::fs::write(file, text).map_err(|e| TestCaseError::fail(e.to_string()))?;
    match Config::load(Some(file), &Overrides::default()) {
        Ok(loaded) => {
            // What the agent prints as its effective config reads back, as a file, to the
            // same effective config. (Compared as printed: an unset optional value and its
            // printed default are the same setting.)
            let printed = loaded.config.effective_yaml();
            std::fs::write(file, &printed).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let again = Config::load(Some(file), &Overrides::default())
                .map_err(|e| TestCaseError::fail(format!("{e}\n--- printed:\n{printed}")))?;
            prop_assert_eq!(again.config.effective_yaml(), printed);
        }
        Err(e) => prop_assert!(!matches!(e, ConfigError::Read { .. }), "{e}"),
    }
    Ok(())
}

thread_local! {
    /// One scratch file per test thread, rewritten by each case.
    static SCRATCH: (tempfile::TempDir, PathBuf) = {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let file = dir.path().join("config.yaml");
        (dir, file)
    };
}

fn with_scratch(text: &str) -> Result<(), TestCaseError> {
    SCRATCH.with(|(_, file)| check(text, file))
}

proptest! {
    #![proptest_config(kepler_testkit::fuzz::config(2048))]

    #[test]
    fn config_files(
        seed in 0usize..4,
        swaps in prop::collection::vec((0.0f64..1.0, value()), 0..4),
        edits in edits(),
        mutate_bytes in any::<bool>(),
    ) {
        let seed = seeds().get(seed).cloned().unwrap_or_default();
        let mut text = swap_values(&seed, &swaps);
        if mutate_bytes {
            text = mutate_text(&text, &edits);
        }
        with_scratch(&text)?;
    }

    #[test]
    fn random_text(text in "\\PC{0,300}") {
        with_scratch(&text)?;
    }
}
