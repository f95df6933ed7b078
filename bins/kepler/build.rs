//! Records the release version, git revision, branch and compiler version for
//! `kepler_build_info`. `KEPLER_VERSION`, `KEPLER_GIT_REVISION` and `KEPLER_GIT_BRANCH` in the
//! build's environment win, for builds from a source tree without `.git` (container builds);
//! otherwise git answers, in a clone or a worktree alike.

use std::process::Command;

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// The value from the build's environment, else from `fallback`.
fn set(name: &str, fallback: impl FnOnce() -> Option<String>) {
    println!("cargo:rerun-if-env-changed={name}");
    let value = std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(fallback);
    if let Some(value) = value {
        println!("cargo:rustc-env={name}={value}");
    }
}

fn main() {
    set("KEPLER_VERSION", || std::env::var("CARGO_PKG_VERSION").ok());
    set("KEPLER_GIT_REVISION", || {
        output("git", &["rev-parse", "--short=12", "HEAD"])
    });
    set("KEPLER_GIT_BRANCH", || {
        output("git", &["rev-parse", "--abbrev-ref", "HEAD"])
    });
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if let Some(version) = output(&rustc, &["--version"]) {
        let version = version
            .split_whitespace()
            .nth(1)
            .unwrap_or("unknown")
            .to_string();
        println!("cargo:rustc-env=KEPLER_RUSTC_VERSION={version}");
    }
    // HEAD changes on checkout, logs/HEAD on every commit. Ask git where they are: in a worktree
    // `.git` is a file and they live in the main repository's worktree directory. A missing
    // path would make cargo rerun this script on every build, so only existing ones are named.
    for file in ["HEAD", "logs/HEAD"] {
        if let Some(path) = output("git", &["rev-parse", "--git-path", file]) {
            let path = std::path::Path::new(&path);
            let path = if path.is_absolute() {
                path.to_path_buf()
            } else {
                std::env::current_dir()
                    .map(|d| d.join(path))
                    .unwrap_or_default()
            };
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
