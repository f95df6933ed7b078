//! Fuzz targets for workload identity: cgroup paths as runtimes and kubelets write them, then
//! mutated; environments and command lines as random bytes and strings. `KEPLER_FUZZ_CASES`
//! sets the cases per target (docs/security.md records the long local runs).

use kepler_core::Runtime;
use kepler_testkit::fuzz::{edits, mutate_text};
use kepler_workloads::{
    container_from_cgroup_path, container_name_from_cmdline, container_name_from_environ,
    vm_from_cmdline,
};
use proptest::prelude::*;

/// What a generated segment is, for the oracle.
#[derive(Clone, Debug)]
enum Kind {
    Container(Option<Runtime>),
    Monitor,
    Pod(String),
    Other,
}

fn hex(n: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(b"0123456789abcdefABCDEF".to_vec()), n)
        .prop_map(|b| String::from_utf8(b).unwrap_or_default())
}

fn uuid() -> impl Strategy<Value = String> {
    hex(32).prop_map(|h| {
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    })
}

fn segment() -> impl Strategy<Value = (String, Kind)> {
    prop_oneof![
        "[a-z0-9._-]{1,16}".prop_map(|s| (s, Kind::Other)),
        // Ids one digit short or long are not containers.
        prop_oneof![hex(63), hex(65)].prop_map(|s| (format!("docker-{s}.scope"), Kind::Other)),
        hex(64).prop_map(|id| (id, Kind::Container(None))),
        (hex(64), 0usize..4).prop_map(|(id, p)| {
            let (prefix, rt) = [
                ("docker-", Runtime::Docker),
                ("cri-containerd-", Runtime::Containerd),
                ("crio-", Runtime::Crio),
                ("libpod-", Runtime::Podman),
            ][p];
            (format!("{prefix}{id}.scope"), Kind::Container(Some(rt)))
        }),
        (hex(64), any::<bool>()).prop_map(|(id, crio)| {
            let prefix = if crio {
                "crio-conmon-"
            } else {
                "libpod-conmon-"
            };
            (format!("{prefix}{id}"), Kind::Monitor)
        }),
        uuid().prop_map(|u| (format!("pod{u}"), Kind::Pod(u))),
        uuid().prop_map(|u| (
            format!("kubepods-burstable-pod{}.slice", u.replace('-', "_")),
            Kind::Pod(u)
        )),
        (uuid(), hex(64)).prop_map(|(u, id)| (
            format!(
                "kubepods-pod{}.slice:cri-containerd:{id}",
                u.replace('-', "_")
            ),
            Kind::Container(Some(Runtime::Containerd))
        )),
    ]
}

fn check_invariants(path: &str) -> Result<(), TestCaseError> {
    if let Some((id, _, pod)) = container_from_cgroup_path(path) {
        prop_assert!(id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()));
        prop_assert!(path.contains(&id));
        if let Some(pod) = pod {
            prop_assert!(
                (32..=36).contains(&pod.len()) && !pod.contains('_'),
                "{pod}"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(kepler_testkit::fuzz::config(4096))]

    #[test]
    fn cgroup_paths(
        segments in prop::collection::vec(segment(), 0..7),
        line_prefix in prop::sample::select(vec!["", "0::", "4:cpu,cpuacct:", "/.."]),
        edits in edits(),
    ) {
        let path = format!(
            "{line_prefix}/{}",
            segments.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>().join("/")
        );
        let found = container_from_cgroup_path(&path);
        // The deepest container or monitor decides; a pod above the container names its pod.
        let deepest = segments
            .iter()
            .rposition(|(_, k)| matches!(k, Kind::Container(_) | Kind::Monitor));
        match deepest.and_then(|i| Some((i, segments.get(i)?))) {
            None | Some((_, (_, Kind::Monitor))) => prop_assert_eq!(found, None, "{}", path),
            Some((i, (segment, Kind::Container(runtime)))) => {
                let Some((id, got_runtime, pod)) = found else {
                    return Err(TestCaseError::fail(format!("no container in {path}")));
                };
                prop_assert!(segment.contains(&id), "{id} not from {segment}");
                if let Some(runtime) = runtime {
                    prop_assert_eq!(got_runtime, *runtime);
                }
                let pod_above = segments[..i].iter().rev().find_map(|(_, k)| match k {
                    Kind::Pod(u) => Some(u.to_ascii_lowercase()),
                    _ => None,
                });
                if !segment.contains(':') {
                    prop_assert_eq!(pod.map(|p| p.to_ascii_lowercase()), pod_above);
                }
            }
            Some(_) => prop_assert!(false, "rposition matched only containers and monitors"),
        }
        check_invariants(&mutate_text(&path, &edits))?;
    }

    #[test]
    fn arbitrary_cgroup_text(text in "\\PC{0,160}") {
        check_invariants(&text)?;
    }

    #[test]
    fn environ(
        vars in prop::collection::vec(
            (prop::sample::select(vec!["HOSTNAME", "CONTAINER_NAME", "PATH", "HOME", "HOSTNAMEX"]),
             "[^\u{0}]{0,16}"),
            0..6),
        bytes in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut environ = Vec::new();
        for (k, v) in &vars {
            environ.extend_from_slice(format!("{k}={v}").as_bytes());
            environ.push(0);
        }
        let expected = vars
            .iter()
            .find(|(k, _)| *k == "HOSTNAME" || *k == "CONTAINER_NAME")
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty());
        prop_assert_eq!(container_name_from_environ(&environ), expected);
        if let Some(name) = container_name_from_environ(&bytes) {
            prop_assert!(!name.is_empty() && !name.contains('\0'));
        }
    }

    #[test]
    fn command_lines(
        program in prop::sample::select(vec![
            "qemu-system-x86_64", "/usr/bin/qemu-kvm", "qemu", "qemu-img", "docker",
            "containerd-shim", "/usr/bin/podman", "",
        ]),
        args in prop::collection::vec(
            prop_oneof![
                prop::sample::select(vec!["-name", "--name", "-uuid", "--uuid", ",,", "guest=", "--name="])
                    .prop_map(str::to_owned),
                "\\PC{0,20}",
            ],
            0..10),
    ) {
        let mut cmdline = vec![program.to_owned()];
        cmdline.extend(args);
        if let Some(vm) = vm_from_cmdline(&cmdline) {
            prop_assert!(!vm.id.is_empty());
            prop_assert!(cmdline.iter().any(|a| a.contains(&vm.id)) || vm.id == vm.name);
        }
        if let Some(name) = container_name_from_cmdline(&cmdline) {
            prop_assert!(!name.is_empty());
            prop_assert!(cmdline.iter().any(|a| a.contains(&name)));
        }
    }
}
