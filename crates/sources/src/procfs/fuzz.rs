//! Fuzz targets for the procfs parsers: valid files built from random fields, then mutated byte
//! by byte, and plain random bytes. `KEPLER_FUZZ_CASES` sets the cases per target (CI runs the
//! default slice; docs/security.md records the long local runs).

use kepler_testkit::fuzz::{edits, mutate, mutate_text};
use proptest::prelude::*;

use super::parse::*;

fn stat_line(comm: &[u8], numbers: &[u64; 5]) -> Vec<u8> {
    let [flags, utime, stime, start, rest] = *numbers;
    let mut line = b"4242 (".to_vec();
    line.extend_from_slice(comm);
    line.extend_from_slice(
        format!(
            ") S 1 4242 4242 0 -1 {flags} 0 0 0 0 {utime} {stime} 0 0 20 0 1 0 {start} {rest} 7\n"
        )
        .as_bytes(),
    );
    line
}

proptest! {
    #![proptest_config(kepler_testkit::fuzz::config(4096))]

    #[test]
    fn pid_stat(
        comm in prop::collection::vec(any::<u8>(), 0..24),
        numbers in any::<[u64; 5]>(),
        edits in edits(),
    ) {
        let line = stat_line(&comm, &numbers);
        // A comm is any bytes the kernel allows: no NUL, no newline. It may hold ')' and
        // spaces, so only a comm free of both round-trips exactly in every position.
        if !comm.contains(&b'\n') {
            let stat = parse_pid_stat(&line);
            prop_assert!(stat.is_some(), "{:?}", String::from_utf8_lossy(&line));
            if let Some(stat) = stat {
                prop_assert_eq!(stat.comm, &comm[..]);
                prop_assert_eq!(
                    (stat.flags, stat.utime, stat.stime, stat.start_time),
                    (numbers[0], numbers[1], numbers[2], numbers[3])
                );
            }
        }
        let mutated = mutate(line, &edits);
        if let Some(stat) = parse_pid_stat(&mutated) {
            // The comm is what lies between the first '(' and the last ')'.
            let open = mutated.iter().position(|&b| b == b'(');
            let close = mutated.iter().rposition(|&b| b == b')');
            prop_assert_eq!(open.zip(close).and_then(|(o, c)| mutated.get(o + 1..c)), Some(stat.comm));
        }
    }

    #[test]
    fn proc_stat_cpu_line(
        values in prop::collection::vec(
            prop_oneof![0u64..1_000_000_000, any::<u64>()], 0..12),
        tab in any::<bool>(),
        edits in edits(),
        bytes in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let fields: Vec<String> = values.iter().map(u64::to_string).collect();
        let sep = if tab { "\t" } else { " " };
        let content = format!(
            "cpu{sep}{}\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1 2\n",
            fields.join(" ")
        );
        let parsed = parse_cpu_line(content.as_bytes());
        let summed: Vec<u64> = values.iter().copied().take(8).collect();
        let total = summed.iter().try_fold(0u64, |acc, v| acc.checked_add(*v));
        match (values.len() >= 4, total) {
            (true, Some(total)) => prop_assert_eq!(
                parsed,
                Some(CpuLine { total, idle: values[3], iowait: values.get(4).copied().unwrap_or(0) })
            ),
            // Too few fields or a sum that overflows u64: no number rather than a wrong one.
            _ => prop_assert_eq!(parsed, None),
        }
        if let Some(line) = parse_cpu_line(&mutate(content.into_bytes(), &edits)) {
            prop_assert!(line.idle <= line.total && line.iowait <= line.total);
        }
        if let Some(line) = parse_cpu_line(&bytes) {
            prop_assert!(line.idle <= line.total && line.iowait <= line.total);
        }
    }

    #[test]
    fn uptime(
        secs in any::<u64>(),
        frac in "[0-9]{0,9}",
        edits in edits(),
        bytes in prop::collection::vec(any::<u8>(), 0..40),
    ) {
        let text = if frac.is_empty() {
            format!("{secs} 123.45\n")
        } else {
            format!("{secs}.{frac} 123.45\n")
        };
        let nanos: u32 = format!("{frac:0<9}").parse().unwrap_or(0);
        prop_assert_eq!(parse_uptime(text.as_bytes()), Some(std::time::Duration::new(secs, nanos)));
        let _ = parse_uptime(&mutate(text.into_bytes(), &edits));
        let _ = parse_uptime(&bytes);
    }

    #[test]
    fn schedstat(
        numbers in any::<[u64; 3]>(),
        edits in edits(),
        bytes in prop::collection::vec(any::<u8>(), 0..60),
    ) {
        let [runtime, wait, slices] = numbers;
        let text = format!("{runtime} {wait} {slices}\n");
        prop_assert_eq!(parse_schedstat_runtime(text.as_bytes()), Some(runtime));
        // A mutated line gives a runtime only where it is still three numbers, and then the
        // first of them.
        let mutated = mutate(text.into_bytes(), &edits);
        if let Some(parsed) = parse_schedstat_runtime(&mutated) {
            let first = mutated.split(|&b| b == b' ').next().and_then(|f| std::str::from_utf8(f).ok());
            prop_assert_eq!(first.and_then(|f| f.parse::<u64>().ok()), Some(parsed));
        }
        let _ = parse_schedstat_runtime(&bytes);
    }

    #[test]
    fn cgroup_file(
        lines in prop::collection::vec(
            (0u8..14, prop::sample::select(vec!["", "cpu,cpuacct", "cpu", "memory", "name=systemd", "pids,cpuacct"]),
             "(/|/[a-z0-9:._-]{1,20}(/[a-z0-9:._-]{1,20}){0,3})"),
            0..8),
        edits in edits(),
    ) {
        let content: String = lines
            .iter()
            .map(|(id, controllers, path)| format!("{id}:{controllers}:{path}\n"))
            .collect();
        let chosen = select_cgroup_path(&content);
        let cpu = lines.iter().find(|(_, c, p)| c.split(',').any(|c| c == "cpu" || c == "cpuacct") && p != "/");
        match cpu {
            Some((_, _, path)) => prop_assert_eq!(chosen, path.as_str()),
            None => prop_assert!(
                chosen.is_empty() || lines.iter().any(|(_, _, p)| p == chosen),
                "{chosen:?} from {content:?}"
            ),
        }
        let mutated = mutate_text(&content, &edits);
        let chosen = select_cgroup_path(&mutated);
        prop_assert!(mutated.contains(chosen));
    }

    #[test]
    fn cmdline(
        args in prop::collection::vec("[^\u{0}]{0,12}", 0..6),
        bytes in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut content: Vec<u8> = Vec::new();
        for arg in &args {
            content.extend_from_slice(arg.as_bytes());
            content.push(0);
        }
        // A single empty argument reads as no arguments, like a kernel thread's empty file:
        // both mean "nothing to name the process by".
        if args != [String::new()] {
            prop_assert_eq!(parse_cmdline(&content), args);
        }
        let parsed = parse_cmdline(&bytes);
        prop_assert!(parsed.len() <= bytes.len() + 1);
    }

    #[test]
    fn pid_names(pid in any::<u32>(), bytes in prop::collection::vec(any::<u8>(), 0..24)) {
        prop_assert_eq!(parse_pid(pid.to_string().as_bytes()), Some(pid));
        if let Some(p) = parse_pid(&bytes) {
            // Leading zeros are the only other spelling the parser accepts.
            let digits = String::from_utf8_lossy(&bytes);
            prop_assert_eq!(digits.trim_start_matches('0'), if p == 0 { String::new() } else { p.to_string() });
        }
    }

    #[test]
    fn cpuinfo(
        family in any::<u32>(),
        model in any::<u32>(),
        vendor in "[A-Za-z]{0,12}",
        flags in prop::collection::vec("[a-z0-9_]{1,10}", 0..8),
        edits in edits(),
    ) {
        let text = format!(
            "processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n\
             flags\t\t: {}\n\nprocessor\t: 1\nvendor_id\t: other\n",
            flags.join(" ")
        );
        let parsed = crate::host::parse_cpu_model(&text);
        prop_assert_eq!(
            parsed,
            Some(crate::host::CpuModel { vendor_id: vendor, family: Some(family), model: Some(model), flags })
        );
        let mutated = mutate_text(&text, &edits);
        let _ = crate::host::parse_cpu_model(&mutated);
    }
}
