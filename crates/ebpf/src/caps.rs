//! Whether this process may load and attach the programs: root, or CAP_BPF + CAP_PERFMON
//! (CAP_SYS_ADMIN also suffices, and is what kernels before 5.8 require).

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability set, parsed from the `CapEff:` line of a `/proc/<pid>/status`.
pub(crate) fn effective_caps(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

/// `None` when the set allows loading; otherwise what is missing, for the probe message.
pub(crate) fn missing_caps(eff: u64) -> Option<String> {
    let has = |cap: u32| eff & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return None;
    }
    let mut missing = Vec::new();
    if !has(CAP_BPF) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) {
        missing.push("CAP_PERFMON");
    }
    Some(format!(
        "needs root or CAP_BPF and CAP_PERFMON (missing {}; effective set {eff:#x})",
        missing.join(", ")
    ))
}

/// Checks the current process; reads `/proc/self/status` directly because this is about the
/// agent itself, not the host tree it monitors.
pub(crate) fn check_self() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status to check capabilities: {e}"))?;
    let eff =
        effective_caps(&status).ok_or_else(|| "no CapEff line in /proc/self/status".to_string())?;
    match missing_caps(eff) {
        None => Ok(()),
        Some(reason) => Err(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_judges_capability_sets() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_caps(status), Some(0x1ff_ffff_ffff));
        assert_eq!(missing_caps(0x1ff_ffff_ffff), None);
        assert_eq!(missing_caps(1 << CAP_SYS_ADMIN), None);
        assert_eq!(missing_caps((1 << CAP_BPF) | (1 << CAP_PERFMON)), None);
        let only_bpf = missing_caps(1 << CAP_BPF).unwrap();
        assert!(only_bpf.contains("missing CAP_PERFMON"), "{only_bpf}");
        let none = missing_caps(0).unwrap();
        assert!(none.contains("CAP_BPF, CAP_PERFMON"), "{none}");
        assert_eq!(effective_caps("Name: x\n"), None);
    }
}
