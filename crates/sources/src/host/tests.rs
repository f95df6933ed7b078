use super::*;

const CPUINFO_GUEST: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\n\
    model name\t: Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz\nphysical id\t: 0\n\
    core id\t\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n\n\
    processor\t: 1\nvendor_id\t: GenuineIntel\n\
    model name\t: Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz\nphysical id\t: 0\n\
    core id\t\t: 1\nflags\t\t: fpu vme hypervisor lahf_lm\n\n";
const MEMINFO: &str = "MemTotal:       16318412 kB\nMemFree:         1234567 kB\n";

/// A procfs and a sysfs tree with the given files (relative path → contents).
fn trees(proc_files: &[(&str, &str)], sys_files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (root, files) in [("proc", proc_files), ("sys", sys_files)] {
        std::fs::create_dir_all(dir.path().join(root)).unwrap();
        for (rel, text) in files {
            let path = dir.path().join(root).join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }
    dir
}

fn read(dir: &tempfile::TempDir) -> HostFacts {
    HostFacts::read(&dir.path().join("proc"), &dir.path().join("sys"))
}

#[test]
fn every_fact_comes_from_the_configured_roots() {
    let dir = trees(
        &[
            ("cpuinfo", CPUINFO_GUEST),
            ("meminfo", MEMINFO),
            ("sys/kernel/hostname", "node-7\n"),
        ],
        &[],
    );
    let host = read(&dir);
    assert_eq!(host.cpuinfo(), Ok(CPUINFO_GUEST));
    assert_eq!(host.meminfo(), Ok(MEMINFO));
    assert_eq!(host.hostname(), Ok("node-7"));
    let cpus = host.cpus().unwrap();
    assert_eq!(cpus.len(), 2);
    assert_eq!(cpus[1].core_id, "1");
    assert_eq!(
        cpus[0].model_name,
        "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"
    );
    assert_eq!(
        host.virtualization(),
        &Virtualization::Guest { hypervisor: None }
    );
    assert!(host.is_virtual_machine());
}

#[test]
fn bare_metal_and_a_named_hypervisor() {
    let bare = CPUINFO_GUEST.replace(" hypervisor", "");
    let dir = trees(&[("cpuinfo", &bare)], &[]);
    assert_eq!(read(&dir).virtualization(), &Virtualization::BareMetal);
    assert_eq!(read(&dir).virtualization().to_string(), "bare metal");
    // arm64 and Xen PV guests have no CPU flag; sysfs names the hypervisor.
    let dir = trees(&[("cpuinfo", &bare)], &[("hypervisor/type", "xen\n")]);
    let host = read(&dir);
    assert_eq!(
        host.virtualization(),
        &Virtualization::Guest {
            hypervisor: Some("xen".into())
        }
    );
    assert_eq!(host.virtualization().to_string(), "virtual machine (xen)");
    // An empty type file says nothing.
    let dir = trees(&[("cpuinfo", &bare)], &[("hypervisor/type", "\n")]);
    assert!(!read(&dir).is_virtual_machine());
}

#[test]
fn missing_and_empty_facts_are_errors_naming_the_file() {
    let dir = trees(&[("sys/kernel/hostname", " \n")], &[]);
    let host = read(&dir);
    let proc = dir.path().join("proc");
    assert!(
        matches!(host.cpuinfo(), Err(HostFactError::Read { path, .. }) if *path == proc.join("cpuinfo"))
    );
    assert!(matches!(host.cpus(), Err(HostFactError::Read { .. })));
    assert!(
        matches!(host.meminfo(), Err(HostFactError::Read { path, .. }) if *path == proc.join("meminfo"))
    );
    let err = host.hostname().unwrap_err().to_string();
    assert!(
        err.contains("sys/kernel/hostname") && err.contains("empty"),
        "{err}"
    );
    // Without cpuinfo nothing says the host is virtual.
    assert!(!host.is_virtual_machine());

    let dir = trees(&[("cpuinfo", "garbage\n")], &[]);
    let err = read(&dir).cpus().unwrap_err().to_string();
    assert!(err.contains("no `processor` entries"), "{err}");
}

#[test]
fn reads_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    std::fs::write(&path, "x".repeat(100)).unwrap();
    assert_eq!(read_bounded(&path, 100).map(|t| t.len()), Ok(100));
    assert_eq!(
        read_bounded(&path, 99),
        Err(HostFactError::TooLarge {
            path: path.clone(),
            limit: 99
        })
    );
    // Endless files are cut at the limit, whatever their size claims.
    assert!(matches!(
        read_bounded(Path::new("/dev/zero"), 10),
        Err(HostFactError::TooLarge { limit: 10, .. })
    ));
}

#[test]
fn a_fifo_without_a_writer_does_not_hang_the_read() {
    let dir = trees(&[], &[]);
    let fifo = dir.path().join("proc/cpuinfo");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads a valid NUL-terminated path and touches no other memory.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let host = read(&dir);
    assert_eq!(host.cpuinfo(), Ok(""));
    assert!(matches!(host.cpus(), Err(HostFactError::Parse { .. })));
}

#[test]
fn the_real_host_has_one_cpu_entry_per_online_cpu() {
    let host = HostFacts::read(Path::new("/proc"), Path::new("/sys"));
    let cpus = host.cpus().unwrap();
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(cpus.len() >= online, "{} < {online}", cpus.len());
    assert!(cpus.iter().all(|c| !c.processor.is_empty()));
    assert!(host.meminfo().unwrap().contains("MemTotal:"));
    assert!(!host.hostname().unwrap().is_empty());
}
