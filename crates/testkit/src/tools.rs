//! External tools (prometheus, promtool, stress-ng, curl, setpriv) and privileges that some
//! tests need. Locally a test without them is skipped with a reason; CI sets
//! `KEPLER_REQUIRE_TOOLS=1`, which turns the skip into a failure, so that a green CI run means
//! every such test ran.

use std::process::{Command, Stdio};

/// Whether a missing tool or privilege fails the test (`KEPLER_REQUIRE_TOOLS=1`).
pub fn required() -> bool {
    std::env::var("KEPLER_REQUIRE_TOOLS").as_deref() == Ok("1")
}

/// Whether `tool` is on the PATH and runs: `tool --version` exits 0. Of the checks the tests
/// had, this is the strictest (merely present on the PATH is not enough): a test that goes on
/// past it does not fail later on a tool that cannot start.
pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Skips the calling test with `reason` on stderr; fails it instead when [`required`]. The
/// caller returns right after.
pub fn skip(reason: &str) {
    assert!(!required(), "{reason} (KEPLER_REQUIRE_TOOLS=1)");
    eprintln!("{reason}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_that_is_not_there_is_missing() {
        assert!(!have("kepler-testkit-no-such-tool"));
    }

    #[test]
    fn a_tool_that_fails_its_version_is_missing() {
        // `false` exists everywhere and exits 1 whatever its arguments.
        assert!(!have("false"));
    }

    #[test]
    fn a_tool_that_runs_is_there() {
        // GNU coreutils' `true` answers `--version` with 0.
        assert!(have("true"));
    }

    #[test]
    fn skip_fails_only_when_tools_are_required() {
        let outcome = std::panic::catch_unwind(|| skip("SKIP testkit: nothing missing"));
        assert_eq!(outcome.is_err(), required());
    }
}
