use super::*;

const REAL_STAT: &[u8] = b"1 (process_api) S 0 0 0 0 -1 4194560 13127 1118555 0 655 26 60 2471 \
1091 10 -10 11 0 14 37588992 2578 18446744073709551615 1 1 0 0 0 0 0 4096 1256 0 0 0 17 0 0 0 0 0 \
0 0 0 0 0 0 0 0\n";

#[test]
fn stat_fields_by_number() {
    let stat = parse_pid_stat(REAL_STAT).unwrap();
    assert_eq!(
        stat,
        PidStat {
            comm: b"process_api",
            ended: false,
            asleep: true,
            flags: 4194560,
            utime: 26,
            stime: 60,
            threads: 11,
            start_time: 14,
        }
    );
    assert_eq!(stat.flags & PF_KTHREAD, 0);
}

#[test]
fn kernel_thread_flag() {
    let line = b"2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 14 0 0 \
18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0";
    let stat = parse_pid_stat(line).unwrap();
    assert_ne!(stat.flags & PF_KTHREAD, 0);
}

#[test]
fn comm_with_spaces_and_parentheses() {
    let line = b"42 (my (odd) ) 1 2 prog) R 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 500 0 0";
    let stat = parse_pid_stat(line).unwrap();
    assert_eq!(stat.comm, b"my (odd) ) 1 2 prog");
    assert_eq!((stat.utime, stat.stime, stat.start_time), (7, 3, 500));
    assert!(!stat.ended && !stat.asleep, "running");
    let zombie = b"42 (a) b) Z 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 500 0 0";
    let zombie = parse_pid_stat(zombie).unwrap();
    assert!(zombie.ended && !zombie.asleep);
    for (state, asleep) in [
        ("S", true),
        ("D", false),
        ("I", true),
        ("t", true),
        ("R", false),
        ("X", false),
    ] {
        let line = format!("42 (a) {state} 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 500 0 0");
        assert_eq!(
            parse_pid_stat(line.as_bytes()).unwrap().asleep,
            asleep,
            "{state}"
        );
    }
}

#[test]
fn odd_stat_lines_are_rejected() {
    let cases: &[&[u8]] = &[
        b"",
        b"42",
        b"42 (truncated",
        b"42 (x) R 1 42 42 0 -1 0 0 0 0 0 7",
        b"42 (x) R 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0",
        b"42 (x) R 1 42 42 0 -1 0 0 0 0 0 -7 3 0 0 20 0 1 0 500",
        b"42 (x) R 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 99999999999999999999999",
        b"42 )x( R 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 500",
    ];
    for case in cases {
        assert_eq!(
            parse_pid_stat(case),
            None,
            "{}",
            String::from_utf8_lossy(case)
        );
    }
}

#[test]
fn cpu_line_excludes_guest_time() {
    let content =
        b"cpu  2947 5 1844 67160 387 1 69 11 100 7\ncpu0 1050 0 686 34416 21 0 18 5 0 0\n";
    let cpu = parse_cpu_line(content).unwrap();
    assert_eq!(cpu.total, 2947 + 5 + 1844 + 67160 + 387 + 1 + 69 + 11);
    assert_eq!((cpu.idle, cpu.iowait), (67160, 387));
}

#[test]
fn cpu_line_from_old_kernels_and_garbage() {
    let old = parse_cpu_line(b"cpu 10 0 5 100\n").unwrap();
    assert_eq!((old.total, old.idle, old.iowait), (115, 100, 0));
    assert_eq!(parse_cpu_line(b"cpu 10 0 5\n"), None);
    assert_eq!(parse_cpu_line(b"cpu 10 0 x 100\n"), None);
    assert_eq!(parse_cpu_line(b"cpu0 10 0 5 100\n"), None);
    assert_eq!(parse_cpu_line(b""), None);
    let max = format!("cpu {} {} 0 0\n", u64::MAX, u64::MAX);
    assert_eq!(parse_cpu_line(max.as_bytes()), None);
}

#[test]
fn forks_from_the_processes_line() {
    let stat = b"cpu  1 2 3 4\ncpu0 1 2 3 4\nintr 5 0 1\nctxt 77\nbtime 9\nprocesses 12345\nprocs_running 1\n";
    assert_eq!(parse_forks(stat), Some(12345));
    // The line alone at the end, without its newline.
    assert_eq!(parse_forks(b"ctxt 1\nprocesses 7"), Some(7));
    assert_eq!(parse_forks(b"cpu  1 2 3 4\nctxt 77\n"), None);
    assert_eq!(parse_forks(b"processes x\n"), None);
    assert_eq!(parse_forks(b"processes\n"), None);
    // Not a prefix of another field's name.
    assert_eq!(parse_forks(b"processes_total 3\n"), None);
}

#[test]
fn last_pid_from_loadavg() {
    assert_eq!(parse_last_pid(b"0.00 0.01 0.05 1/123 4567\n"), Some(4567));
    assert_eq!(parse_last_pid(b"0.00 0.01 0.05 1/123 4567"), Some(4567));
    assert_eq!(parse_last_pid(b"0.00 0.01 0.05 1/123 x\n"), None);
    assert_eq!(parse_last_pid(b""), None);
    assert_eq!(
        parse_last_pid(b"\n4567\n"),
        None,
        "only the first line counts"
    );
}

#[test]
fn uptime_is_exact() {
    assert_eq!(
        parse_uptime(b"363.17 671.60\n"),
        Some(Duration::new(363, 170_000_000))
    );
    assert_eq!(parse_uptime(b"5 1\n"), Some(Duration::from_secs(5)));
    assert_eq!(
        parse_uptime(b"5.123456789 1\n"),
        Some(Duration::new(5, 123_456_789))
    );
    assert_eq!(parse_uptime(b"5.1234567891 1\n"), None);
    assert_eq!(parse_uptime(b"-5.1 1\n"), None);
    assert_eq!(parse_uptime(b"5.x 1\n"), None);
    assert_eq!(parse_uptime(b"\n"), None);
}

#[test]
fn cgroup_path_selection() {
    let cases: &[(&str, &str)] = &[
        // Pure v2.
        ("0::/system.slice/docker-abc.scope\n", "/system.slice/docker-abc.scope"),
        ("0::/\n", "/"),
        // Hybrid host like this one: the only non-root line wins.
        (
            "9:name=systemd:/\n4:memory:/process_api/eff0\n2:cpuacct:/\n1:cpu:/\n0::/\n",
            "/process_api/eff0",
        ),
        // Hybrid with the cgroupfs driver: the unified line still shows the runtime's service.
        (
            "12:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/system.slice/containerd.service\n",
            "/docker/abc",
        ),
        // Hybrid with the cpu controllers at the root: the unified line is next.
        (
            "3:cpu,cpuacct:/\n2:memory:/other\n0::/system.slice/foo.service\n",
            "/system.slice/foo.service",
        ),
        // Pure v1, cpu first even when listed after others.
        (
            "11:memory:/kubepods/pod1/mem\n4:cpu,cpuacct:/kubepods/pod1/cpu\n",
            "/kubepods/pod1/cpu",
        ),
        ("2:cpu,cpuacct:/\n1:name=systemd:/\n", "/"),
        // Only a non-cpu v1 controller is placed: it beats a root unified line.
        ("4:memory:/m\n0::/\n", "/m"),
        ("4:memory:/m\n0::/u\n", "/u"),
        // Nothing placed: the unified root, else the first path.
        ("2:pids:/\n0::/\n", "/"),
        ("1:name=systemd:/\n", "/"),
        // Odd lines are ignored; a path may contain ':'.
        ("garbage\n\n0::/a:b:c\n", "/a:b:c"),
        ("", ""),
    ];
    for (content, expected) in cases {
        assert_eq!(select_cgroup_path(content), *expected, "{content:?}");
    }
}

#[test]
fn cmdline_splitting() {
    assert_eq!(parse_cmdline(b""), Vec::<String>::new());
    assert_eq!(parse_cmdline(b"sleep\x0030\x00"), vec!["sleep", "30"]);
    assert_eq!(parse_cmdline(b"a\x00\x00b\x00"), vec!["a", "", "b"]);
    // setproctitle-style rewrites leave no NUL at the end.
    assert_eq!(
        parse_cmdline(b"nginx: worker process"),
        vec!["nginx: worker process"]
    );
}

#[test]
fn pids_and_ticks() {
    assert_eq!(parse_pid(b"123"), Some(123));
    assert_eq!(parse_pid(b"self"), None);
    assert_eq!(parse_pid(b"4294967296"), None);
    assert_eq!(ticks_to_duration(250, 100), Duration::from_millis(2500));
    assert_eq!(ticks_to_duration(1, 300), Duration::from_nanos(3_333_333));
    assert_eq!(ticks_to_duration(u64::MAX, 100).as_secs(), u64::MAX / 100);
    assert_eq!(ticks_to_duration(5, 0), Duration::ZERO);
}

#[test]
fn durations_floor_to_ticks() {
    assert_eq!(
        duration_to_ticks(Duration::from_nanos(1_239_999_999), 100),
        123
    );
    assert_eq!(duration_to_ticks(Duration::from_millis(1230), 100), 123);
    assert_eq!(duration_to_ticks(Duration::from_nanos(9_999_999), 100), 0);
    // A USER_HZ that does not divide 1e9 floors as the kernel's nsec_to_clock_t does.
    assert_eq!(duration_to_ticks(Duration::from_nanos(3_333_333), 300), 0);
    assert_eq!(duration_to_ticks(Duration::from_nanos(3_333_334), 300), 1);
    assert_eq!(duration_to_ticks(Duration::MAX, 100), u64::MAX);
    assert_eq!(duration_to_ticks(Duration::from_secs(5), 0), 0);
}

proptest::proptest! {
    #[test]
    fn parsers_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
        let _ = parse_pid_stat(&bytes);
        let _ = parse_cpu_line(&bytes);
        let _ = parse_forks(&bytes);
        let _ = parse_uptime(&bytes);
        let _ = parse_last_pid(&bytes);
        let _ = parse_cmdline(&bytes);
        let _ = select_cgroup_path(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn stat_round_trips_any_comm(
        comm in "[ -~]{0,15}",
        utime in proptest::num::u64::ANY,
        stime in proptest::num::u64::ANY,
        start in proptest::num::u64::ANY,
    ) {
        let line = format!("9 ({comm}) R 1 9 9 0 -1 64 0 0 0 0 {utime} {stime} 0 0 20 0 1 0 {start} 0 0\n");
        let stat = parse_pid_stat(line.as_bytes()).unwrap();
        proptest::prop_assert_eq!(stat.comm, comm.as_bytes());
        proptest::prop_assert_eq!((stat.utime, stat.stime, stat.start_time), (utime, stime, start));
    }

    /// With a USER_HZ that divides 1e9 (100 on every common architecture) a tick is a whole
    /// number of ns, so a start time procfs shows floors back to its own tick count.
    #[test]
    fn floored_durations_round_trip(
        ticks in 0u64..1 << 40,
        extra in 0u64..1_000_000_000,
        user_hz in proptest::sample::select(vec![100u64, 250, 1000]),
    ) {
        let shown = ticks_to_duration(ticks, user_hz);
        proptest::prop_assert_eq!(duration_to_ticks(shown, user_hz), ticks);
        // Anything less than one tick later still floors to the same tick.
        let later = shown + Duration::from_nanos(extra / user_hz);
        proptest::prop_assert_eq!(duration_to_ticks(later, user_hz), ticks);
    }
}

#[test]
fn schedstat_runtime_and_odd_lines() {
    assert_eq!(
        parse_schedstat_runtime(b"190945321 7675719 344\n"),
        Some(190_945_321)
    );
    assert_eq!(parse_schedstat_runtime(b"0 120349 1"), Some(0));
    for odd in [
        &b""[..],
        b"\n",
        b"12 34\n",
        b"12 34 56 78\n",
        b"12  34 56\n",
        b"-1 2 3\n",
        b"18446744073709551616 1 1\n",
    ] {
        assert_eq!(parse_schedstat_runtime(odd), None, "{odd:?}");
    }
}
