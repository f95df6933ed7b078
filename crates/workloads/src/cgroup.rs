//! Container and pod identity from a cgroup path.
//!
//! Runtimes name a container's cgroup after its id, in a few shapes:
//!
//! | shape | runtime |
//! |---|---|
//! | `docker-<id>.scope`, or `<id>` under a `docker` cgroup | docker |
//! | `cri-containerd-<id>.scope`, `<slice>:cri-containerd:<id>` | containerd |
//! | `crio-<id>.scope`, `crio-<id>` | crio |
//! | `libpod-<id>.scope`, `libpod-<id>` | podman |
//! | `<id>` under a `pod<uid>` cgroup (kubelet's cgroupfs driver) | kubernetes |
//! | `<id>` anywhere else | unknown |
//!
//! `<id>` is 64 hex digits. The deepest match wins, so a process in a sub-cgroup of a container
//! (`libpod-<id>.scope/container`, `docker-<id>.scope/init.scope`) and containers nested in
//! containers (kind nodes, docker-in-docker) resolve to the innermost container.
//!
//! `crio-conmon-<id>` and `libpod-conmon-<id>` hold the runtime's monitor process, which runs
//! beside the container, outside its cgroup and resource limits. It is not the container, so
//! it is reported as no container at all; its cost stays with the node's regular processes, as
//! it does in the kubelet's and cAdvisor's per-container numbers.

use kepler_core::Runtime;

/// Finds the container a cgroup path belongs to: its id, its runtime, and the UID of its
/// Kubernetes pod when the path has one. Accepts a bare path (`/docker/<id>`) or a whole
/// `/proc/<pid>/cgroup` line (`4:cpu,cpuacct:/docker/<id>`, `0::/…`). Paths relative to a
/// cgroup namespace (`/../../kubepods-…`) work too.
pub fn container_from_cgroup_path(path: &str) -> Option<(String, Runtime, Option<String>)> {
    let mut ancestors = path.rsplit('/');
    let (id, runtime, pod) = loop {
        match segment(ancestors.next()?) {
            Segment::Container { id, runtime, pod } => break (id, runtime, pod),
            Segment::Monitor => return None,
            Segment::Other => {}
        }
    };
    let mut ancestors = ancestors.peekable();
    let parent = ancestors.peek().copied();
    let pod = pod.or_else(|| ancestors.find_map(pod_uid));
    let runtime = runtime.unwrap_or(match (&pod, parent) {
        (Some(_), _) => Runtime::Kubernetes,
        (None, Some("docker")) => Runtime::Docker,
        (None, Some("libpod_parent")) => Runtime::Podman,
        _ => Runtime::Unknown,
    });
    Some((id.to_owned(), runtime, pod))
}

enum Segment<'a> {
    /// `runtime` is `None` for a bare id, whose runtime depends on its parents.
    Container {
        id: &'a str,
        runtime: Option<Runtime>,
        pod: Option<String>,
    },
    /// A runtime's monitor (conmon) beside a container.
    Monitor,
    Other,
}

/// Prefixes of systemd scopes (and cgroupfs directories) named after a container id. Monitors
/// come before the runtimes whose prefix they share.
const PREFIXES: &[(&str, Option<Runtime>)] = &[
    ("crio-conmon-", None),
    ("libpod-conmon-", None),
    ("cri-containerd-", Some(Runtime::Containerd)),
    ("crio-", Some(Runtime::Crio)),
    ("docker-", Some(Runtime::Docker)),
    ("libpod-", Some(Runtime::Podman)),
];

fn segment(segment: &str) -> Segment<'_> {
    // `<pod slice>:<prefix>:<id>`: the runtime's systemd-style cgroupsPath used literally, as
    // containerd does under its own service with the systemd driver (kind, k3s).
    let mut parts = segment.splitn(3, ':');
    if let (Some(slice), Some(prefix), Some(id)) = (parts.next(), parts.next(), parts.next()) {
        if !is_container_id(id) {
            return Segment::Other;
        }
        let runtime = match prefix {
            "cri-containerd" | "containerd" => Runtime::Containerd,
            "crio" => Runtime::Crio,
            "docker" => Runtime::Docker,
            "libpod" => Runtime::Podman,
            _ => Runtime::Unknown,
        };
        return Segment::Container {
            id,
            runtime: Some(runtime),
            pod: pod_uid(slice),
        };
    }
    let name = segment.strip_suffix(".scope").unwrap_or(segment);
    for (prefix, runtime) in PREFIXES {
        if let Some(id) = name.strip_prefix(prefix) {
            return match runtime {
                _ if !is_container_id(id) => Segment::Other,
                None => Segment::Monitor,
                Some(runtime) => Segment::Container {
                    id,
                    runtime: Some(*runtime),
                    pod: None,
                },
            };
        }
    }
    if is_container_id(name) {
        return Segment::Container {
            id: name,
            runtime: None,
            pod: None,
        };
    }
    Segment::Other
}

fn is_container_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The pod UID of a pod-level cgroup: `pod<uid>` (cgroupfs driver) or
/// `kubepods[-<qos>]-pod<uid with _ for ->.slice` (systemd driver; kind prefixes `kubelet-`).
fn pod_uid(segment: &str) -> Option<String> {
    let uid = match segment.strip_suffix(".slice") {
        Some(slice) => {
            let at = slice.rfind("-pod")?;
            if !slice.get(..at)?.contains("kubepods") {
                return None;
            }
            slice.get(at + 4..)?
        }
        None => segment.strip_prefix("pod")?,
    };
    // Regular pods have a dashed UUID; static pods a 32-digit hex hash.
    let valid = (32..=36).contains(&uid.len())
        && uid
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_');
    valid.then(|| uid.replace('_', "-"))
}

#[cfg(test)]
mod tests;
