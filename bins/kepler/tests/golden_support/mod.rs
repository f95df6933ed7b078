//! Comparing an exposition with a committed golden file: canonical sample order, a readable
//! diff on mismatch, and regeneration with `UPDATE_GOLDEN=1`.

use std::fmt::Write as _;
use std::path::Path;

/// Sorts the sample lines of each family, leaving every `#` line (HELP, TYPE, EOF) where it is.
///
/// Why: the encoder writes samples in the order of the snapshot's vectors, which the attributor
/// fills from hash maps keyed by pid and id, fed in the order the procfs directory lists its
/// entries (which differs between file systems). That order is no part of the exposition
/// contract; names, labels, values and family order are, and sorting keeps all of them.
pub fn canonical(exposition: &str) -> String {
    let mut out = String::with_capacity(exposition.len());
    let mut samples: Vec<&str> = Vec::new();
    let flush = |samples: &mut Vec<&str>, out: &mut String| {
        samples.sort_unstable();
        for line in samples.drain(..) {
            out.push_str(line);
            out.push('\n');
        }
    };
    for line in exposition.lines() {
        if line.starts_with('#') {
            flush(&mut samples, &mut out);
            out.push_str(line);
            out.push('\n');
        } else {
            samples.push(line);
        }
    }
    flush(&mut samples, &mut out);
    out
}

/// Lines around the first difference, then what each side has that the other lacks.
pub fn describe_difference(expected: &str, actual: &str) -> String {
    const CONTEXT: usize = 3;
    const SHOWN: usize = 12;
    let exp: Vec<&str> = expected.lines().collect();
    let act: Vec<&str> = actual.lines().collect();
    let first = exp
        .iter()
        .zip(&act)
        .position(|(e, a)| e != a)
        .unwrap_or(exp.len().min(act.len()));
    let mut report = format!(
        "first difference at line {} (expected {} lines, got {}):\n",
        first + 1,
        exp.len(),
        act.len()
    );
    for line in &exp[first.saturating_sub(CONTEXT)..first] {
        let _ = writeln!(report, "  {line}");
    }
    // The differing run, as long as the two sides stay out of step (lines compared by
    // position: after an insertion or a removal everything differs, and the summary below
    // says what really changed).
    let run = (first..exp.len().max(act.len()))
        .take_while(|&i| exp.get(i) != act.get(i))
        .take(SHOWN)
        .count();
    for line in exp.iter().skip(first).take(run) {
        let _ = writeln!(report, "- {line}");
    }
    for line in act.iter().skip(first).take(run) {
        let _ = writeln!(report, "+ {line}");
    }
    let only_in = |a: &[&str], b: &[&str]| -> Vec<String> {
        let mut b: Vec<&str> = b.to_vec();
        b.sort_unstable();
        a.iter()
            .filter(|l| b.binary_search(l).is_err())
            .map(|l| l.to_string())
            .collect()
    };
    let missing = only_in(&exp, &act);
    let extra = only_in(&act, &exp);
    let _ = writeln!(
        report,
        "{} expected lines are missing, {} lines are new:",
        missing.len(),
        extra.len()
    );
    for line in missing.iter().take(SHOWN) {
        let _ = writeln!(report, "- {line}");
    }
    for line in extra.iter().take(SHOWN) {
        let _ = writeln!(report, "+ {line}");
    }
    report
}

/// Compares `actual` with the file at `path`, or rewrites the file when `UPDATE_GOLDEN=1`.
pub fn check(path: &Path, actual: &str) {
    if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().expect("golden files live in a directory"))
            .expect("creating the golden directory");
        std::fs::write(path, actual).expect("writing the golden file");
        eprintln!("wrote {}", path.display());
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e}; create it with UPDATE_GOLDEN=1 cargo test -p kepler --test golden_metrics",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "{} differs from the agent's output; if the change is intended, regenerate with \
         UPDATE_GOLDEN=1 cargo test -p kepler --test golden_metrics\n{}",
        path.display(),
        describe_difference(&expected, actual)
    );
}

#[test]
fn canonical_sorts_samples_within_families_only() {
    let text = "# HELP b x\n# TYPE b gauge\nb{p=\"2\"} 1\nb{p=\"1\"} 2\n\
                # HELP a x\n# TYPE a gauge\na 3\n# EOF\n";
    assert_eq!(
        canonical(text),
        "# HELP b x\n# TYPE b gauge\nb{p=\"1\"} 2\nb{p=\"2\"} 1\n\
         # HELP a x\n# TYPE a gauge\na 3\n# EOF\n"
    );
}

#[test]
fn difference_names_the_changed_lines() {
    let report = describe_difference("a 1\nb 2\nc 3\n", "a 1\nb 5\nc 3\n");
    assert!(report.starts_with("first difference at line 2"), "{report}");
    assert!(
        report.contains("- b 2\n") && report.contains("+ b 5\n"),
        "{report}"
    );
    assert!(report.contains("1 expected lines are missing, 1 lines are new"));
}
