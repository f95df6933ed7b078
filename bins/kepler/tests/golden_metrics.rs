//! Golden `/metrics`: the agent's real pipeline (procfs source, cgroup classifier, fake meter,
//! sampler, attributor, exporter state and encoder) on a fixture procfs tree, four ticks, and
//! the exposition compared byte for byte with `tests/golden/`. It exists so that refactors can
//! show they change no metric name, label or value. Regenerate after an intended change with
//! `UPDATE_GOLDEN=1 cargo test -p kepler --test golden_metrics` and review the diff.
//!
//! Determinism: the fixture advances `/proc/stat`, `/proc/uptime` and every process's CPU time
//! by fixed amounts per tick, and the fake meter and the sampler share one manual clock moved
//! by the same step, so intervals, energies and watts are exact. Sample order within a family
//! is canonicalised (see `golden_support::canonical`); nothing else is touched.

mod golden_support;

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kepler_agent::sampler::Sampler;
use kepler_core::{AttributionConfig, Attributor};
use kepler_exporters::{
    AgentState, AgentStats, BuildInfo, EbpfCounts, ExportContext, Format, Output, OwnProcess,
    ProcessStats, PrometheusOutput, Publication, SelfCollectors,
};
use kepler_meters::{Clock, FakeMeter, FakeSettings, ManualClock};
use kepler_sources::ProcfsSource;
use kepler_workloads::CgroupClassifier;

/// Ticks taken; the first only sets baselines.
const TICKS: usize = 4;
/// The agent's default `monitor.interval`, as clock time and in USER_HZ ticks (100 per second).
const STEP: Duration = Duration::from_secs(5);
const STEP_UPTIME_TICKS: u64 = 500;
const UPTIME_START_TICKS: u64 = 100_000;

/// Node CPU ticks per step over 2 CPUs: (user, system, idle, iowait); each row adds up to
/// 2 × `STEP_UPTIME_TICKS`.
const NODE_STEPS: [(u64, u64, u64, u64); TICKS - 1] = [
    (330, 120, 530, 20),
    (600, 160, 230, 10),
    (450, 150, 390, 10),
];

const DOCKER_ID: &str = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899";
const APP_ID: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const SIDECAR_ID: &str = "0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de";
const POD_SLICE: &str = "kubepods-burstable-pod7c2f4a1e_9b3d_4e5f_8a6b_1c2d3e4f5a6b.slice";
const ENDED_POD_SLICE: &str = "kubepods-besteffort-pod0f1e2d3c_4b5a_4968_8776_a5b4c3d2e1f0.slice";
const ENDED_ID: &str = "cafef00dcafef00dcafef00dcafef00dcafef00dcafef00dcafef00dcafef00d";
const VM_UUID: &str = "5f3c9a2e-8b1d-4c6e-9a7f-2d4b6c8e0a13";

struct Process {
    pid: u32,
    comm: &'static str,
    kernel_thread: bool,
    exe: Option<&'static str>,
    cmdline: &'static [&'static str],
    cgroup: String,
    start_ticks: u64,
    /// Ticks at which the process exists (`first..=last`).
    first: usize,
    last: usize,
    /// CPU ticks used before tick `first`, then during each step.
    base: u64,
    steps: [u64; TICKS - 1],
}

impl Process {
    fn alive(&self, tick: usize) -> bool {
        (self.first..=self.last).contains(&tick)
    }

    fn cpu_ticks(&self, tick: usize) -> u64 {
        self.base + self.steps[self.first..tick].iter().sum::<u64>()
    }
}

fn v2(path: &str) -> String {
    format!("0::{path}\n")
}

#[allow(clippy::too_many_arguments)]
fn process(
    pid: u32,
    comm: &'static str,
    exe: Option<&'static str>,
    cmdline: &'static [&'static str],
    cgroup: String,
    start_ticks: u64,
    base: u64,
    steps: [u64; TICKS - 1],
) -> Process {
    Process {
        pid,
        comm,
        kernel_thread: false,
        exe,
        cmdline,
        cgroup,
        start_ticks,
        first: 0,
        last: TICKS - 1,
        base,
        steps,
    }
}

/// Plain processes, kernel threads, a docker container (hybrid cgroup file), a pod of two
/// containers, a QEMU guest, a process and a one-process pod that end after tick 1, and a
/// process that starts before tick 2.
fn processes() -> Vec<Process> {
    let docker = format!("/system.slice/docker-{DOCKER_ID}.scope");
    let pod = format!("/kubepods.slice/kubepods-burstable.slice/{POD_SLICE}");
    let session = "/user.slice/user-1000.slice/session-3.scope";
    let nginx = &["nginx: master process /usr/sbin/nginx -g daemon off;"];
    vec![
        process(
            1,
            "systemd",
            Some("/usr/lib/systemd/systemd"),
            &["/sbin/init", "splash"],
            v2("/init.scope"),
            1,
            2500,
            [3, 1, 2],
        ),
        Process {
            kernel_thread: true,
            ..process(2, "kthreadd", None, &[], v2("/"), 1, 10, [0, 0, 0])
        },
        Process {
            kernel_thread: true,
            ..process(
                37,
                "kworker/1:2-events",
                None,
                &[],
                v2("/"),
                250,
                800,
                [5, 9, 11],
            )
        },
        process(
            812,
            "sshd",
            Some("/usr/sbin/sshd"),
            &["sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups"],
            v2("/system.slice/ssh.service"),
            900,
            120,
            [2, 4, 6],
        ),
        // Label escaping: a double quote and a backslash in comm, a space in exe.
        process(
            990,
            "we\"ird\\name",
            Some("/opt/we ird/bin/tool"),
            &["/opt/we ird/bin/tool", "--x"],
            v2(session),
            5000,
            40,
            [7, 0, 3],
        ),
        process(
            1500,
            "nginx",
            Some("/usr/sbin/nginx"),
            nginx,
            format!("12:cpu,cpuacct:{docker}\n1:name=systemd:{docker}\n0::{docker}\n"),
            20_000,
            900,
            [40, 66, 31],
        ),
        process(
            1501,
            "nginx",
            Some("/usr/sbin/nginx"),
            &["nginx: worker process"],
            v2(&docker),
            20_010,
            3000,
            [61, 23, 47],
        ),
        process(
            2100,
            "app",
            Some("/app/server"),
            &["/app/server", "--port=8080"],
            v2(&format!("{pod}/cri-containerd-{APP_ID}.scope")),
            30_000,
            12_000,
            [88, 201, 150],
        ),
        process(
            2200,
            "envoy",
            Some("/usr/local/bin/envoy"),
            &["envoy", "-c", "/etc/envoy.yaml"],
            v2(&format!("{pod}/cri-containerd-{SIDECAR_ID}.scope")),
            30_050,
            400,
            [13, 17, 19],
        ),
        process(
            3000,
            "qemu-system-x86",
            Some("/usr/bin/qemu-system-x86_64"),
            &[
                "/usr/bin/qemu-system-x86_64",
                "-name",
                "guest=vm1,debug-threads=on",
                "-uuid",
                VM_UUID,
                "-m",
                "2048",
                "-enable-kvm",
            ],
            v2("/machine.slice/machine-qemu\\x2d1\\x2dvm1.scope/libvirt/emulator"),
            40_000,
            50_000,
            [120, 240, 180],
        ),
        Process {
            last: 1,
            ..process(
                4242,
                "make",
                Some("/usr/bin/make"),
                &["make", "-j4"],
                v2(session),
                99_000,
                300,
                [58, 0, 0],
            )
        },
        // Its container and pod end with it.
        Process {
            last: 1,
            ..process(
                5100,
                "redis-server",
                Some("/usr/local/bin/redis-server"),
                &["redis-server *:6379"],
                v2(&format!(
                    "/kubepods.slice/kubepods-besteffort.slice/{ENDED_POD_SLICE}/crio-{ENDED_ID}.scope"
                )),
                60_000,
                700,
                [22, 0, 0],
            )
        },
        // Starts after tick 1 was taken (uptime 1005 s), so all of its CPU time counts at tick 2.
        Process {
            first: 2,
            ..process(
                4300,
                "cc1",
                Some("/usr/lib/gcc/x86_64-linux-gnu/12/cc1"),
                &["cc1", "-O2", "main.c"],
                v2(session),
                100_720,
                130,
                [0, 0, 98],
            )
        },
    ]
}

/// The largest-remainder split gives a leftover micro-joule to the lower index on a tie of
/// remainders, and the index follows the procfs listing order. Ties are impossible when each
/// step's CPU-time weights are distinct and add up to a prime (a remainder collision would need
/// the prime to divide energy × a difference smaller than itself, and then nothing is left
/// over), so the fixture is checked for that rather than trusted.
fn assert_no_split_ties(processes: &[Process]) {
    for tick in 1..TICKS {
        let previous_uptime = UPTIME_START_TICKS + (tick as u64 - 1) * STEP_UPTIME_TICKS;
        let mut weights: Vec<u64> = Vec::new();
        for p in processes.iter().filter(|p| p.alive(tick)) {
            if p.first == tick {
                assert!(
                    p.start_ticks >= previous_uptime,
                    "pid {} would be a baseline",
                    p.pid
                );
                weights.push(p.base);
            } else {
                weights.push(p.steps[tick - 1]);
            }
        }
        weights.retain(|&w| w > 0);
        let sum: u64 = weights.iter().sum();
        let count = weights.len();
        weights.sort_unstable();
        weights.dedup();
        assert_eq!(
            weights.len(),
            count,
            "tick {tick}: two processes have the same weight"
        );
        // `u64::is_multiple_of` is newer than the workspace's rust-version.
        let prime = sum > 1
            && (2..sum)
                .take_while(|d| d * d <= sum)
                .all(|d| sum / d * d != sum);
        assert!(prime, "tick {tick}: weights add up to {sum}, not a prime");
        let (user, system, idle, iowait) = NODE_STEPS[tick - 1];
        assert_eq!(
            user + system + idle + iowait,
            2 * STEP_UPTIME_TICKS,
            "tick {tick}"
        );
        assert!(
            sum <= user + system,
            "tick {tick}: processes busier than the node"
        );
    }
}

fn write_tree(root: &Path, tick: usize, processes: &[Process]) {
    // user nice system idle iowait irq softirq steal guest guest_nice
    let mut cpu = [120_000, 500, 40_000, 600_000, 3000, 0, 1500, 0, 20_000, 0];
    for &(user, system, idle, iowait) in &NODE_STEPS[..tick] {
        cpu[0] += user;
        cpu[2] += system;
        cpu[3] += idle;
        cpu[4] += iowait;
        // Guest time is part of user time; the source must not count it twice.
        cpu[8] += 100;
    }
    let line = |values: &[u64]| {
        values
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let half: Vec<u64> = cpu.iter().map(|v| v / 2).collect();
    let rest: Vec<u64> = cpu.iter().zip(&half).map(|(v, h)| v - h).collect();
    let stat = format!(
        "cpu  {}\ncpu0 {}\ncpu1 {}\nintr 1 2 3\nctxt 99\nbtime 1700000000\nprocesses 5000\n",
        line(&cpu),
        line(&half),
        line(&rest)
    );
    fs::write(root.join("stat"), stat).unwrap();
    let uptime = UPTIME_START_TICKS + tick as u64 * STEP_UPTIME_TICKS;
    fs::write(
        root.join("uptime"),
        format!("{}.{:02} 1800.00\n", uptime / 100, uptime % 100),
    )
    .unwrap();

    for p in processes {
        let dir = root.join(p.pid.to_string());
        if !p.alive(tick) {
            if dir.exists() {
                fs::remove_dir_all(&dir).unwrap();
            }
            continue;
        }
        fs::create_dir_all(&dir).unwrap();
        let cpu = p.cpu_ticks(tick);
        let (utime, stime) = (cpu - cpu / 4, cpu / 4);
        let flags: u64 = if p.kernel_thread {
            0x0020_8040
        } else {
            0x0040_0100
        };
        let stat = format!(
            "{pid} ({comm}) S 1 {pid} {pid} 0 -1 {flags} 120 0 3 0 {utime} {stime} 0 0 20 0 1 0 {start} \
             10485760 256 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
            pid = p.pid,
            comm = p.comm,
            start = p.start_ticks,
        );
        fs::write(dir.join("stat"), stat).unwrap();
        fs::write(dir.join("comm"), format!("{}\n", p.comm)).unwrap();
        let mut cmdline = Vec::new();
        for arg in p.cmdline {
            cmdline.extend_from_slice(arg.as_bytes());
            cmdline.push(0);
        }
        fs::write(dir.join("cmdline"), cmdline).unwrap();
        fs::write(dir.join("cgroup"), &p.cgroup).unwrap();
        let exe = dir.join("exe");
        if let (Some(target), false) = (p.exe, exe.is_symlink()) {
            std::os::unix::fs::symlink(target, exe).unwrap();
        }
    }
}

fn write_cpuinfo(root: &Path) {
    let mut text = String::new();
    for (processor, core) in [(0, 0), (1, 1)] {
        text.push_str(&format!(
            "processor\t: {processor}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 106\n\
             model name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\nphysical id\t: 0\n\
             core id\t\t: {core}\ncpu cores\t: 2\nflags\t\t: fpu vme de pse tsc msr\n\n"
        ));
    }
    fs::write(root.join("cpuinfo"), text).unwrap();
}

/// Runs the pipeline over the fixture and returns the state a scrape would encode.
/// The agent's own process as every scrape of the golden run reads it.
#[derive(Debug)]
struct FixedProcess(ProcessStats);

impl OwnProcess for FixedProcess {
    fn read(&self) -> std::io::Result<ProcessStats> {
        Ok(self.0)
    }
}

fn run_agent() -> Arc<AgentState> {
    let processes = processes();
    assert_no_split_ties(&processes);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_cpuinfo(root);
    write_tree(root, 0, &processes);
    // The fixture's times are in ticks of 1/100 s, Linux's USER_HZ on every architecture.
    let user_hz = kepler_sources::ProcfsReader::new(root).unwrap().user_hz();
    assert_eq!(user_hz, 100, "the golden files assume USER_HZ = 100");

    let mut context = ExportContext::new("golden-node");
    context.build = BuildInfo {
        arch: "amd64".into(),
        branch: "main".into(),
        revision: "0123456789abcdef0123456789abcdef01234567".into(),
        version: "0.1.0".into(),
        rust_version: "rustc 1.95.0".into(),
    };
    let host = kepler_sources::HostFacts::read(root, &root.join("sys"));
    context.cpu_info = Arc::from(host.cpus().unwrap().to_vec());
    let health = Arc::new(kepler_core::Health::new());
    context.health = health.clone();
    // Both of upstream's debug collectors, so the `process_*` families are covered.
    context.self_collectors = SelfCollectors {
        process: true,
        runtime: true,
    };
    // Read by each scrape; fixed here so that the files do not depend on the test's process.
    context.own_process = Some(Arc::new(FixedProcess(ProcessStats {
        cpu_seconds: 1.25 * TICKS as f64,
        resident_memory_bytes: 12_582_912,
        virtual_memory_bytes: 104_857_600,
        open_fds: 11,
        max_fds: 1_048_576,
        start_time_seconds: 1_700_000_000.5,
        threads: 6,
    })));
    let state = Arc::new(AgentState::new(context));
    let mut output = PrometheusOutput::new(state.clone());

    // One identity catalogue: the classifier writes the names it reads, attribution joins them.
    let catalogue = Arc::new(kepler_core::Catalogue::new());
    let classifier = CgroupClassifier::with_catalogue(catalogue.clone());
    let source = ProcfsSource::new(root.to_path_buf(), Arc::new(classifier)).unwrap();
    let clock = ManualClock::new();
    // A wrap point below what the package zone draws over the run, so the counter wraps.
    let settings = FakeSettings {
        max_energy_uj: 400_000_000,
        ..FakeSettings::default()
    };
    let meter = FakeMeter::with_clock(&settings, Arc::new(clock.clone())).unwrap();
    // The agent's defaults: ratio idle policy, upstream's terminated-workload limits.
    let attributor = Attributor::new(AttributionConfig::default()).with_catalogue(catalogue);
    let sampler_clock = clock.clone();
    let mut sampler = Sampler::new(Box::new(source), vec![Box::new(meter)], attributor, &health)
        .with_features(true)
        .with_clock(Box::new(move || sampler_clock.now()));

    for tick in 0..TICKS {
        if tick > 0 {
            clock.advance(STEP);
            write_tree(root, tick, &processes);
        }
        let snapshot = sampler.tick().unwrap();
        let stats = AgentStats {
            last_tick_duration: Duration::from_micros(1250),
            ticks: tick as u64 + 1,
            // Not from this source (procfs): fixed numbers so the eBPF self-metrics are covered.
            ebpf: Some(EbpfCounts {
                dropped: 3,
                tracked: 12,
                exits_deferred: 5,
                task_iterator: false,
                exits_counted: false,
            }),
        };
        output
            .publish(&Publication {
                snapshot: Arc::new(snapshot),
                stats,
                has_energy: sampler.had_energy(),
            })
            .unwrap();
    }
    state
}

fn golden(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

#[test]
fn metrics_match_the_golden_files() {
    let state = run_agent();
    for (format, file) in [
        (Format::Text004, "metrics.txt"),
        (Format::OpenMetrics, "metrics.openmetrics.txt"),
    ] {
        let text = String::from_utf8(state.encode(format).to_vec()).unwrap();
        golden_support::check(&golden(file), &golden_support::canonical(&text));
    }
}
