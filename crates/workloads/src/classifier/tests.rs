use super::*;

const ID_A: &str = "4f1c0a3e9b8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b";
const ID_B: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const UID_: &str = "8f3a1b2c_4d5e_6f70_8192_a3b4c5d6e7f8";
const UUID: &str = "3f2504e0-4f89-11d3-9a0c-0305e82c3301";

fn info(cgroup_path: &str, cmdline: &[&str]) -> ProcessInfo {
    ProcessInfo {
        comm: "x".into(),
        cgroup_path: cgroup_path.into(),
        cmdline: cmdline.iter().map(|a| (*a).to_owned()).collect(),
        ..ProcessInfo::default()
    }
}

fn pod_path(id: &str) -> String {
    format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{id}.scope")
}

#[test]
fn regular_container_and_kernel_thread() {
    let c = CgroupClassifier::new();
    assert_eq!(
        c.classify(&info("/user.slice/session-1.scope", &["bash"])),
        WorkloadIdentity::default()
    );

    let identity = c.classify(&info(&pod_path(ID_A), &["nginx"]));
    assert_eq!(identity.process_type, ProcessType::Container);
    let container = identity.container.unwrap();
    assert_eq!(container.id, ID_A);
    assert_eq!(container.runtime, kepler_core::Runtime::Containerd);
    assert_eq!(
        container.pod_id.as_deref(),
        Some(UID_.replace('_', "-").as_str())
    );
    assert!(identity.vm.is_none());

    let mut kthread = info(&format!("/docker/{ID_A}"), &[]);
    kthread.kernel_thread = true;
    assert_eq!(c.classify(&kthread), WorkloadIdentity::default());
}

#[test]
fn processes_share_container_allocations() {
    let c = CgroupClassifier::new();
    let a1 = c
        .classify(&info(&pod_path(ID_A), &["a"]))
        .container
        .unwrap();
    let a2 = c
        .classify(&info(&pod_path(ID_A), &["b"]))
        .container
        .unwrap();
    let b = c
        .classify(&info(&pod_path(ID_B), &["c"]))
        .container
        .unwrap();
    assert!(Arc::ptr_eq(&a1, &a2));
    assert!(!Arc::ptr_eq(&a1, &b));
    assert_eq!(a1.pod_id, b.pod_id);
}

#[test]
fn hypervisor_is_a_vm_even_inside_a_container() {
    let catalogue = Arc::new(Catalogue::new());
    let c = CgroupClassifier::with_catalogue(catalogue.clone());
    let qemu = [
        "/usr/bin/qemu-system-x86_64",
        "-name",
        "guest=vm1,debug-threads=on",
        "-uuid",
        UUID,
    ];
    let host = c.classify(&info(
        "/machine.slice/machine-qemu\\x2d1\\x2dvm1.scope/libvirt/emulator",
        &qemu,
    ));
    assert_eq!(host.process_type, ProcessType::Vm);
    assert!(host.container.is_none());
    let vm = host.vm.unwrap();
    assert_eq!((vm.id.as_str(), vm.hypervisor.as_str()), (UUID, "kvm"));
    // The name goes to the catalogue, where attribution joins it.
    assert_eq!(catalogue.view().vm_name(UUID), Some("vm1"));
    let again = c.classify(&info("/", &qemu)).vm.unwrap();
    assert!(Arc::ptr_eq(&vm, &again));

    // KubeVirt: qemu runs in the virt-launcher pod's compute container.
    let kubevirt = c.classify(&info(&pod_path(ID_A), &qemu));
    assert_eq!(kubevirt.process_type, ProcessType::Vm);
    assert_eq!(kubevirt.container.unwrap().id, ID_A);
    assert!(Arc::ptr_eq(&kubevirt.vm.unwrap(), &vm));
}

#[test]
fn unused_identities_are_swept() {
    let c = CgroupClassifier::new();
    let keep = c
        .classify(&info(&format!("/docker/{ID_A}"), &[]))
        .container
        .unwrap();
    for i in 0..1000u32 {
        let id = format!("{i:064x}");
        drop(c.classify(&info(&format!("/docker/{id}"), &[])));
    }
    let tables = c.tables.lock().unwrap();
    assert!(
        tables.containers.map.len() <= 2 * MIN_SWEEP,
        "{}",
        tables.containers.map.len()
    );
    assert!(Arc::ptr_eq(tables.containers.map.get(ID_A).unwrap(), &keep));
}

#[test]
fn reused_id_with_other_details_is_replaced() {
    let c = CgroupClassifier::new();
    let docker = c
        .classify(&info(&format!("/docker/{ID_A}"), &[]))
        .container
        .unwrap();
    let podman = c
        .classify(&info(&format!("/machine.slice/libpod-{ID_A}.scope"), &[]))
        .container
        .unwrap();
    assert_eq!(docker.runtime, kepler_core::Runtime::Docker);
    assert_eq!(podman.runtime, kepler_core::Runtime::Podman);
}

#[test]
fn usable_as_a_shared_trait_object() {
    let c: Arc<dyn Classifier> = Arc::new(CgroupClassifier::new());
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let c = c.clone();
            std::thread::spawn(move || c.classify(&info(&pod_path(ID_A), &[])).container.unwrap())
        })
        .collect();
    let refs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(refs.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1])));
}

#[test]
fn swept_vms_leave_the_catalogue() {
    let catalogue = Arc::new(Catalogue::new());
    let c = CgroupClassifier::with_catalogue(catalogue.clone());
    for i in 0..(2 * MIN_SWEEP as u32) {
        let uuid = format!("00000000-0000-0000-0000-{i:012}");
        let args = ["qemu-system-x86_64", "-uuid", &uuid, "-name", "guest=g"];
        let args: Vec<&str> = args.to_vec();
        drop(c.classify(&info("/", &args)));
    }
    let first = "00000000-0000-0000-0000-000000000000";
    assert_eq!(catalogue.view().vm_name(first), None, "swept with its id");
    let last = format!("00000000-0000-0000-0000-{:012}", 2 * MIN_SWEEP - 1);
    assert_eq!(catalogue.view().vm_name(&last), Some("g"));
}

#[test]
fn container_names_come_from_the_environment_then_the_command_line() {
    let procfs = tempfile::tempdir().unwrap();
    for (pid, environ) in [
        (10u32, &b"PATH=/bin\0HOSTNAME=web-0\0"[..]),
        (11, b"PATH=/bin\0"),
    ] {
        std::fs::create_dir(procfs.path().join(pid.to_string())).unwrap();
        std::fs::write(procfs.path().join(format!("{pid}/environ")), environ).unwrap();
    }
    let catalogue = Arc::new(Catalogue::new());
    let c = CgroupClassifier::with_catalogue(catalogue.clone()).with_procfs(procfs.path());
    c.classify_process(10, &info(&format!("/docker/{ID_A}"), &["nginx"]));
    c.classify_process(
        11,
        &info(&format!("/docker/{ID_B}"), &["podman", "--name", "db"]),
    );
    let view = catalogue.view();
    assert_eq!(view.container(ID_A).unwrap().name, "web-0");
    assert_eq!(view.container(ID_B).unwrap().name, "db");
    drop(view);

    // A name known already (say from Kubernetes) is not read again nor replaced.
    catalogue.set_container(
        ID_A,
        kepler_core::ContainerNames {
            name: "from-kube".into(),
            pod_id: None,
        },
        kepler_core::NameSource::Kubernetes,
    );
    c.classify_process(10, &info(&format!("/docker/{ID_A}"), &["nginx"]));
    assert_eq!(catalogue.view().container(ID_A).unwrap().name, "from-kube");

    // Without a procfs (the default), or outside a container, nothing is read or written.
    let quiet = Arc::new(Catalogue::new());
    let plain = CgroupClassifier::with_catalogue(quiet.clone());
    plain.classify_process(10, &info(&format!("/docker/{ID_A}"), &["nginx"]));
    assert!(quiet.view().container(ID_A).is_none());
    let c = CgroupClassifier::with_catalogue(quiet.clone()).with_procfs(procfs.path());
    c.classify_process(10, &info("/user.slice/session-1.scope", &["bash"]));
    assert_eq!(quiet.generation(), 0);
}

/// A worker that rewrote its process title has a blank environment; the name comes from the
/// nearest ancestor in the same container, never from one outside it.
#[test]
fn a_worker_with_a_blank_environment_is_named_from_its_parent_in_the_container() {
    let procfs = tempfile::tempdir().unwrap();
    let write = |pid: u32, ppid: u32, environ: &[u8], cgroup: &str| {
        let dir = procfs.path().join(pid.to_string());
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("environ"), environ).unwrap();
        std::fs::write(
            dir.join("stat"),
            format!("{pid} (w (x) y) S {ppid} {pid} {pid} 0 -1 4194560 0 0 0 0 1 2 0 0 20 0 1 0 100 0 0\n"),
        )
        .unwrap();
        std::fs::write(dir.join("cgroup"), format!("0::{cgroup}\n")).unwrap();
    };
    let in_a = format!("/docker/{ID_A}");
    let in_b = format!("/docker/{ID_B}");
    write(20, 1, b"CONTAINER_NAME=box\0", &in_a);
    write(21, 20, &[0; 32], &in_a);
    // B's worker has a parent outside B (the runtime) whose environment must not name B.
    write(
        30,
        1,
        b"HOSTNAME=the-host\0",
        "/system.slice/docker.service",
    );
    write(31, 30, &[0; 32], &in_b);
    let catalogue = Arc::new(Catalogue::new());
    let c = CgroupClassifier::with_catalogue(catalogue.clone()).with_procfs(procfs.path());
    c.classify_process(21, &info(&in_a, &["stress-ng-cpu"]));
    c.classify_process(31, &info(&in_b, &["stress-ng-cpu"]));
    let view = catalogue.view();
    assert_eq!(view.container(ID_A).unwrap().name, "box");
    assert!(view.container(ID_B).is_none());
}

#[test]
fn without_pod_ids_containers_have_no_pod() {
    let c = CgroupClassifier::new().without_pod_ids();
    let container = c
        .classify(&info(&pod_path(ID_A), &["nginx"]))
        .container
        .unwrap();
    assert_eq!(container.id, ID_A);
    assert_eq!(container.pod_id, None);
}
