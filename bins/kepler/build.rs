//! Records the git revision, branch and compiler version for `kepler_build_info`.

use std::process::Command;

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    if let Some(rev) = output("git", &["rev-parse", "--short=12", "HEAD"]) {
        println!("cargo:rustc-env=KEPLER_GIT_REVISION={rev}");
    }
    if let Some(branch) = output("git", &["rev-parse", "--abbrev-ref", "HEAD"]) {
        println!("cargo:rustc-env=KEPLER_GIT_BRANCH={branch}");
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if let Some(version) = output(&rustc, &["--version"]) {
        let version = version
            .split_whitespace()
            .nth(1)
            .unwrap_or("unknown")
            .to_string();
        println!("cargo:rustc-env=KEPLER_RUSTC_VERSION={version}");
    }
    // HEAD changes on checkout; logs/HEAD on every commit, which moves the revision.
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/logs/HEAD");
}
