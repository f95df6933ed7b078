use super::*;

const ID: &str = "4f1c0a3e9b8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b";
const OUTER: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const UID: &str = "8f3a1b2c-4d5e-6f70-8192-a3b4c5d6e7f8";
const UID_: &str = "8f3a1b2c_4d5e_6f70_8192_a3b4c5d6e7f8";
const STATIC_UID: &str = "5b8e0e3e0c9a4e7f9d2a1b3c4d5e6f70";

type Found = Option<(String, Runtime, Option<String>)>;

fn expect(id: &str, runtime: Runtime, pod: Option<&str>) -> Found {
    Some((id.to_owned(), runtime, pod.map(str::to_owned)))
}

#[test]
fn container_paths() {
    use Runtime::*;
    let cases: Vec<(String, Found)> = vec![
        // docker: cgroupfs driver (v1 line and path), systemd driver (v2), systemd inside
        // the container, docker-in-docker.
        (format!("4:cpu,cpuacct:/docker/{ID}"), expect(ID, Docker, None)),
        (format!("/docker/{ID}"), expect(ID, Docker, None)),
        (format!("0::/system.slice/docker-{ID}.scope"), expect(ID, Docker, None)),
        (format!("/system.slice/docker-{ID}.scope/init.scope"), expect(ID, Docker, None)),
        (format!("/docker/{OUTER}/docker/{ID}"), expect(ID, Docker, None)),
        // containerd: under its own service (kind/k3s), systemd driver scopes.
        (
            format!("0::/system.slice/containerd.service/kubepods-burstable-pod{UID_}.slice:cri-containerd:{ID}"),
            expect(ID, Containerd, Some(UID)),
        ),
        (
            format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope"),
            expect(ID, Containerd, Some(UID)),
        ),
        (
            format!("3:cpu,cpuacct:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope"),
            expect(ID, Containerd, Some(UID)),
        ),
        // Guaranteed pods have no QoS slice.
        (
            format!("/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope"),
            expect(ID, Containerd, Some(UID)),
        ),
        // kind on cgroup v2 prefixes the kubelet slices.
        (
            format!("0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope"),
            expect(ID, Containerd, Some(UID)),
        ),
        // Seen from inside a cgroup namespace.
        (
            format!("0::/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope"),
            expect(ID, Containerd, Some(UID)),
        ),
        // cri-o: systemd scopes (with the nested `container` cgroup), cgroupfs driver.
        (
            format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/crio-{ID}.scope"),
            expect(ID, Crio, Some(UID)),
        ),
        (
            format!("0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-{ID}.scope/container"),
            expect(ID, Crio, Some(UID)),
        ),
        (format!("/kubepods/besteffort/pod{UID}/crio-{ID}"), expect(ID, Crio, Some(UID))),
        // docker as the kubelet's runtime (dockershim, systemd driver).
        (
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/docker-{ID}.scope"),
            expect(ID, Docker, Some(UID)),
        ),
        // kubelet's cgroupfs driver: the runtime is not in the path.
        (format!("/kubepods/burstable/pod{UID}/{ID}"), expect(ID, Kubernetes, Some(UID))),
        (format!("/kubepods/besteffort/pod{UID}/{ID}"), expect(ID, Kubernetes, Some(UID))),
        (format!("11:memory:/kubepods/pod{UID}/{ID}"), expect(ID, Kubernetes, Some(UID))),
        (format!("/kubepods/burstable/pod{STATIC_UID}/{ID}"), expect(ID, Kubernetes, Some(STATIC_UID))),
        // A kind node is itself a docker container.
        (
            format!("/docker/{OUTER}/kubepods/burstable/pod{UID}/{ID}"),
            expect(ID, Kubernetes, Some(UID)),
        ),
        // podman: root (systemd), the nested `container` cgroup, rootless, cgroupfs.
        (format!("0::/machine.slice/libpod-{ID}.scope"), expect(ID, Podman, None)),
        (format!("0::/machine.slice/libpod-{ID}.scope/container"), expect(ID, Podman, None)),
        (
            format!("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"),
            expect(ID, Podman, None),
        ),
        (format!("/libpod_parent/libpod-{ID}"), expect(ID, Podman, None)),
        (format!("/libpod_parent/{ID}"), expect(ID, Podman, None)),
        // A bare id elsewhere is a container of an unknown runtime.
        (format!("/actions_job/{ID}"), expect(ID, Unknown, None)),
    ];
    for (path, expected) in cases {
        assert_eq!(container_from_cgroup_path(&path), expected, "{path}");
    }
}

#[test]
fn not_containers() {
    let short = &ID[..12];
    let long = format!("{ID}0");
    let bad_hex = format!("{}g", &ID[..63]);
    let paths = [
        String::new(),
        "/".to_owned(),
        "0::/".to_owned(),
        "0::/init.scope".to_owned(),
        "/user.slice/user-1000.slice/session-3.scope".to_owned(),
        "/system.slice/docker.service".to_owned(),
        "/system.slice/containerd.service".to_owned(),
        "/kubepods.slice/kubepods-burstable.slice".to_owned(),
        format!("/kubepods/burstable/pod{UID}"),
        format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"),
        // The runtime's monitor beside a container.
        format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/crio-conmon-{ID}.scope"),
        format!("/machine.slice/libpod-conmon-{ID}.scope"),
        format!("/docker/{short}"),
        format!("/docker/{long}"),
        format!("/system.slice/docker-{bad_hex}.scope"),
        format!("/system.slice/docker-{short}.scope"),
        format!("/system.slice/somethingelse-{ID}.scope"),
        format!("/x.slice:cri-containerd:{short}"),
        // This machine's sandbox cgroup: 32 hex digits, not a container id.
        "4:memory:/process_api/eff0bfe789d82ae215d9115b74488b18".to_owned(),
    ];
    for path in paths {
        assert_eq!(container_from_cgroup_path(&path), None, "{path}");
    }
}

#[test]
fn pod_segments() {
    assert_eq!(pod_uid(&format!("pod{UID}")).as_deref(), Some(UID));
    assert_eq!(
        pod_uid(&format!("kubepods-pod{UID_}.slice")).as_deref(),
        Some(UID)
    );
    assert_eq!(
        pod_uid(&format!("kubepods-besteffort-pod{UID_}.slice")).as_deref(),
        Some(UID)
    );
    assert_eq!(pod_uid(&format!("system-pod{UID_}.slice")), None);
    assert_eq!(pod_uid("podman"), None);
    assert_eq!(pod_uid("pod"), None);
    assert_eq!(pod_uid("kubepods-burstable.slice"), None);
    assert_eq!(pod_uid(&format!("pod{UID}x")), None);
}

proptest::proptest! {
    #[test]
    fn never_panics_and_ids_are_64_hex(path in "[-/a-z0-9_.:@]{0,200}") {
        if let Some((id, _, pod)) = container_from_cgroup_path(&path) {
            proptest::prop_assert!(is_container_id(&id));
            proptest::prop_assert!(path.contains(&id));
            if let Some(pod) = pod {
                proptest::prop_assert!(!pod.contains('_'));
            }
        }
    }
}
