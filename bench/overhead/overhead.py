#!/usr/bin/env python3
"""Agent overhead side by side: kepler-rs (eBPF and procfs sources, 5 s and 1 s intervals) and
Scaphandre 1.0.0, run together under the same background load, scraped every 5 s.

Normally started through run.sh, which builds and installs the binaries. Per round and
scenario: start the load, start every agent in a cgroup of its own, scrape each every 5 s
(staggered), let them warm up, then measure a window: CPU from the cgroup's cpu.stat
(usage_usec, which keeps the time of exited threads) plus, for the eBPF agents, the run time of
their own BPF programs (bpf_stats; the kernel charges it to whichever task was switching, so it
is not in any agent's own CPU time), RSS at the end of the window, series and latency of the
scrapes inside it. Rounds visit the scenarios in a rotated order so that drift in the
background load falls on every scenario. Raw rows go to raw.jsonl; report.py makes the table.
"""

import argparse
import contextlib
import ctypes
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import report  # noqa: E402

# name -> load.py arguments (None: no extra load)
LOADS = {
    "idle": None,
    "sleep1k": ["sleepers", "1000"],
    "sleep10k": ["sleepers", "10000"],
    "wake1k": ["wakers", "1000"],
    "churn100": ["churn", "100"],
    "churn1k": ["churn", "1000"],
    # The same sleepers in a cgroup of their own, as a container's processes run (the others
    # run in the bench's cgroup: the root on the development VM).
    "sleep1k-cg": ["sleepers", "1000"],
    "sleep10k-cg": ["sleepers", "10000"],
    # Churn beside many processes: what a source that lists /proc to find new ones pays for
    # every process at every scan after a task started.
    "sleep1k-churn100": ["churn", "100", "1000"],
}
# Run only when named (--scenarios): the full run's six are the issue's.
EXTRA_LOADS = ["sleep1k-cg", "sleep10k-cg", "sleep1k-churn100"]
QUICK_LOADS = ["idle", "wake1k", "churn100"]

# (name, kind, interval); Scaphandre has no interval: its Prometheus exporter refreshes when
# scraped (at most every 2 s), so the 5 s scrape sets its pace.
AGENTS = [
    ("ebpf-5s", "ebpf", "5s"),
    ("procfs-5s", "procfs", "5s"),
    ("ebpf-1s", "ebpf", "1s"),
    ("procfs-1s", "procfs", "1s"),
    ("scaphandre", "scaphandre", None),
]

SCRAPE_PERIOD_S = 5.0
# A realistic RAPL counter range (this is what Intel server parts report), started away from
# zero; the counters advance at these powers.
MAX_ENERGY_UJ = 262143328850
ZONES = [("intel-rapl:0", "package-0", 40.0), ("intel-rapl:0:0", "dram", 8.0)]
MODULES = (
    "intel_rapl_msr 20480 0 - Live 0x0000000000000000\n"
    "intel_rapl_common 40960 1 intel_rapl_msr, Live 0x0000000000000000\n"
)

# Scaphandre reads /sys/class/powercap and /proc/modules at fixed paths, so it runs in a private
# mount namespace with the fixture bound over them. Where /sys/class/powercap does not exist
# (no RAPL, as on a VM) sysfs cannot grow a directory, so the fixture's class/ replaces
# /sys/class in that namespace only; Scaphandre reads nothing else under /sys/class. A kernel
# without loadable modules has no /proc/modules to bind over (and Scaphandre panics without
# it), so there modules_shim.c redirects that one path.
SCAPH_WRAPPER = r"""
set -e
if [ -d /sys/class/powercap ]; then
    mount --bind "$1/powercap" /sys/class/powercap
else
    mount --bind "$1" /sys/class
fi
if [ -e /proc/modules ]; then
    mount --bind "$2" /proc/modules
else
    export KEPLER_BENCH_MODULES="$2" LD_PRELOAD="$5"
fi
exec "$3" prometheus --address 127.0.0.1 --port "$4"
"""


class BenchError(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_ctxt():
    """The machine's context switches so far: each one runs the eBPF agents' programs."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("ctxt "):
                return int(line.split()[1])
    return 0


def read_loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# --- in-kernel statistics --------------------------------------------------------------------

BPF_ENABLE_STATS = 32
SYS_BPF = {"x86_64": 321, "aarch64": 280}


class BpfStats:
    """Turns on the kernel's per-program run time accounting for as long as it is held.

    BPF_ENABLE_STATS returns a file descriptor that keeps the accounting on until closed,
    whatever anyone writes to the sysctl meanwhile (other users on a shared machine restore it
    when they finish). Falls back to the sysctl, restored on exit."""

    def __init__(self):
        self.fd = None
        self.sysctl_old = None

    def __enter__(self):
        nr = SYS_BPF.get(platform.machine())
        if nr is not None:
            libc = ctypes.CDLL(None, use_errno=True)
            attr = ctypes.create_string_buffer(8)  # enable_stats.type = BPF_STATS_RUN_TIME (0)
            fd = libc.syscall(nr, BPF_ENABLE_STATS, attr, len(attr))
            if fd >= 0:
                self.fd = fd
                return self
        path = "/proc/sys/kernel/bpf_stats_enabled"
        with open(path) as f:
            self.sysctl_old = f.read().strip()
        with open(path, "w") as f:
            f.write("1")
        return self

    def __exit__(self, *_):
        if self.fd is not None:
            os.close(self.fd)
        if self.sysctl_old is not None:
            with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
                f.write(self.sysctl_old)


# Programs the agent runs itself, inside its own read() of an iterator: their time is in the
# agent's CPU time already.
RUN_BY_THE_AGENT = {"kepler_iter"}


def prog_name(prog_id):
    try:
        out = subprocess.run(["bpftool", "-j", "prog", "show", "id", prog_id],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out).get("name", "")
    except (OSError, subprocess.CalledProcessError, ValueError):
        return ""


def bpf_programs(pid):
    """fd numbers of the BPF programs a process holds (its links hold the same programs), one
    per program (a program can be held through two descriptors), but those it runs itself."""
    fds = []
    seen = set()
    base = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(base):
        try:
            with open(f"{base}/{fd}") as f:
                text = f.read()
        except OSError:
            continue
        if "prog_type:" in text and "link_id:" not in text:
            prog_id = next((l.split()[1] for l in text.splitlines() if l.startswith("prog_id:")), "")
            if prog_id not in seen and prog_name(prog_id) not in RUN_BY_THE_AGENT:
                seen.add(prog_id)
                fds.append(fd)
    return fds


def bpf_run(pid, fds):
    """Run time (ns) and calls of the programs behind `fds`, summed."""
    ns = calls = 0
    for fd in fds:
        with open(f"/proc/{pid}/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("run_time_ns:"):
                    ns += int(line.split()[1])
                elif line.startswith("run_cnt:"):
                    calls += int(line.split()[1])
    return ns, calls


# --- fixture -----------------------------------------------------------------------------------


class Powercap(threading.Thread):
    """A powercap tree laid out as the kernel shows it (flat zone directories), advanced by a
    writer; files are replaced atomically so no reader sees a half-written counter."""

    def __init__(self, root):
        super().__init__(daemon=True)
        self.sysfs = os.path.join(root, "sys")
        self.powercap = os.path.join(self.sysfs, "class", "powercap")
        os.makedirs(os.path.join(self.powercap, "intel-rapl"))
        with open(os.path.join(self.powercap, "intel-rapl", "enabled"), "w") as f:
            f.write("1\n")
        for zone, name, _ in ZONES:
            d = os.path.join(self.powercap, zone)
            os.makedirs(d)
            with open(os.path.join(d, "name"), "w") as f:
                f.write(name + "\n")
            with open(os.path.join(d, "max_energy_range_uj"), "w") as f:
                f.write(f"{MAX_ENERGY_UJ}\n")
        self.modules = os.path.join(root, "modules")
        with open(self.modules, "w") as f:
            f.write(MODULES)
        self.shim = ""
        if not os.path.exists("/proc/modules"):
            self.shim = os.path.join(root, "modules_shim.so")
            cc = ["cc", "-shared", "-fPIC", "-O2", "-o", self.shim]
            subprocess.run([*cc, os.path.join(HERE, "modules_shim.c"), "-ldl"], check=True)
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.write()

    def write(self):
        us = (time.monotonic() - self.t0) * 1e6
        for i, (zone, _, watts) in enumerate(ZONES):
            value = int(MAX_ENERGY_UJ // 3 * (i + 1) + us * watts) % MAX_ENERGY_UJ
            d = os.path.join(self.powercap, zone)
            with open(os.path.join(d, ".energy_uj"), "w") as f:
                f.write(f"{value}\n")
            os.replace(os.path.join(d, ".energy_uj"), os.path.join(d, "energy_uj"))

    def run(self):
        while not self.stop.wait(0.25):
            self.write()


# --- load --------------------------------------------------------------------------------------


class Load:
    def __init__(self, name, args):
        self.name = name
        self.args = args
        self.proc = None
        self.rate = None
        self.cgroup = None

    def start(self, cgroup_parent, timeout_s=600):
        if self.args is None:
            return
        env = dict(os.environ)
        if self.name.endswith("-cg"):
            self.cgroup = Cgroup(cgroup_parent, f"load-{self.name}")
            env["LOAD_CGROUP"] = self.cgroup.path
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "load.py"), *self.args],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=env,
        )
        line = read_line(self.proc.stdout, timeout_s)
        if line.strip() != "ready":
            self.stop()
            raise BenchError(f"load {self.name} did not start: {line!r}")

    def stop(self):
        if self.proc is None:
            return
        if self.args[0] == "churn" and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            line = read_line(self.proc.stdout, 30)
            parts = line.split()
            if len(parts) == 3 and parts[0] == "spawned" and float(parts[2]) > 0:
                self.rate = int(parts[1]) / float(parts[2])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        # The children are orphans now; wait until init has reaped them, so that the next
        # scenario starts from a quiet process table.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        self.proc = None
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None


def read_line(stream, timeout_s):
    out = []
    t = threading.Thread(target=lambda: out.append(stream.readline()), daemon=True)
    t.start()
    t.join(timeout_s)
    return out[0] if out else ""


# --- agents ------------------------------------------------------------------------------------


class Cgroup:
    """A cgroup v2 directory per agent, for CPU time that includes exited threads."""

    def __init__(self, parent, name):
        self.path = os.path.join(parent, name)
        os.mkdir(self.path)

    def usage_us(self):
        with open(os.path.join(self.path, "cpu.stat")) as f:
            for line in f:
                if line.startswith("usage_usec"):
                    return int(line.split()[1])
        raise BenchError(f"no usage_usec in {self.path}/cpu.stat")

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)


def cgroup2_mount():
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                return parts[1]
    raise BenchError("no cgroup2 hierarchy mounted (needed for per-agent CPU time)")


class Agent:
    def __init__(self, spec, opts, fixture, workdir, cgroup_parent):
        self.name, self.kind, self.interval = spec
        self.port = free_port()
        self.log_path = os.path.join(workdir, f"{self.name}.log")
        self.cgroup = Cgroup(cgroup_parent, self.name)
        self.cmd = agent_command(spec, opts, fixture, workdir, self.port)
        self.proc = None
        self.prog_fds = []
        self.scrapes = []
        self.thread = None

    def start(self):
        procs = os.path.join(self.cgroup.path, "cgroup.procs")
        # The shell joins the cgroup and then becomes the agent, so the agent's first thread
        # (and every later one) is counted there.
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                ["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *self.cmd],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.name} exited ({self.proc.returncode}): {self.log_tail()}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                if self.kind == "ebpf":
                    self.prog_fds = bpf_programs(self.proc.pid)
                    if not self.prog_fds:
                        raise BenchError(f"{self.name} holds no BPF programs: {self.log_tail()}")
                return
            time.sleep(0.2)
        raise BenchError(f"{self.name} did not listen within {timeout_s} s: {self.log_tail()}")

    def log_tail(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-2000:]

    def sample(self):
        cpu = self.cgroup.usage_us() * 1e-6
        ns, calls = bpf_run(self.proc.pid, self.prog_fds) if self.prog_fds else (0, 0)
        return cpu, ns * 1e-9, calls

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def scrape_loop(self, first_at, stop):
        at = first_at
        while not stop.wait(max(0.0, at - time.monotonic())):
            self.scrapes.append(scrape(self.port, time.monotonic()))
            at += SCRAPE_PERIOD_S
            # A scrape slower than the period is followed at once, never by a burst.
            at = max(at, time.monotonic())

    def stop(self):
        if self.proc is None:
            self.cgroup.remove()
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        self.cgroup.remove()


def agent_command(spec, opts, fixture, workdir, port):
    name, kind, interval = spec
    if kind == "scaphandre":
        return [
            "unshare", "--mount", "--propagation", "private",
            "sh", "-c", SCAPH_WRAPPER, "sh",
            os.path.join(fixture.sysfs, "class"), fixture.modules, opts.scaphandre, str(port),
            fixture.shim,
        ]  # fmt: skip
    config = os.path.join(workdir, f"{kind}.yaml")
    if not os.path.exists(config):
        with open(config, "w") as f:
            f.write(f"ebpf:\n  enabled: {'true' if kind == 'ebpf' else 'false'}\n")
    # Each agent runs a copy of its own, as the one agent of a node does: the agent pages its
    # start-up code out (MADV_PAGEOUT), which leaves alone the pages other processes map too,
    # so agents sharing one file would keep each other's start-up code resident.
    binary = os.path.join(workdir, f"kepler-{name}")
    if not os.path.exists(binary):
        shutil.copy2(opts.kepler, binary)
    return [
        binary,
        "--config.file", config,
        "--host.sysfs", fixture.sysfs,
        "--monitor.interval", interval,
        "--web.listen-address", f"127.0.0.1:{port}",
        "--log.level", "warn",
    ]  # fmt: skip


# Which way the eBPF agent chose to account CPU time (sched_switch or task_iterator), and with
# the task iterator how it learns of ended processes (final_switch or cgroup_counters).
ACCOUNTING = re.compile(rb'kepler_agent_ebpf_accounting_info\{([^}]*)\} 1')
LABEL = re.compile(rb'([a-z_]+)="([^"]*)"')


def scrape(port, started):
    """One GET /metrics: wall time to the end of the body, and the number of samples."""
    t0 = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
    except OSError as e:
        return {"at": started, "ok": False, "error": str(e)}
    ms = (time.perf_counter() - t0) * 1e3
    lines = [line for line in body.split(b"\n") if line and not line.startswith(b"#")]
    accounting = None
    for m in map(ACCOUNTING.match, lines):
        if m:
            labels = {k.decode(): v.decode() for k, v in LABEL.findall(m.group(1))}
            accounting = labels.get("accounting")
            if labels.get("exits") == "cgroup_counters":
                accounting += "+counted"
            break
    return {
        "at": started,
        "ok": resp.status == 200,
        "ms": ms,
        "series": len(lines),
        "bytes": len(body),
        "accounting": accounting,
    }


# --- one measurement ----------------------------------------------------------------------------


def measure(opts, round_no, load_name, agent_order, fixture, workdir, cgroup_parent, out):
    load = Load(load_name, LOADS[load_name])
    agents = []
    stop = threading.Event()
    threads = []
    try:
        load.start(cgroup_parent)
        time.sleep(2)  # the spawner's own start-up is not the scenario
        agents = [Agent(s, opts, fixture, workdir, cgroup_parent) for s in agent_order]
        # One after another: the eBPF agent weighs the host's switch rate over its first second
        # to choose how it accounts, and other agents starting would be in it.
        for a in agents:
            a.start()
            a.wait_ready(60)
        t0 = time.monotonic()
        for i, a in enumerate(agents):
            first = t0 + i * SCRAPE_PERIOD_S / len(agents)
            t = threading.Thread(target=a.scrape_loop, args=(first, stop), daemon=True)
            t.start()
            threads.append(t)
        time.sleep(opts.warmup)
        w0 = time.monotonic()
        ctxt0 = read_ctxt()
        before = {a.name: a.sample() for a in agents}
        time.sleep(opts.window)
        after = {a.name: a.sample() for a in agents}
        ctxt1 = read_ctxt()
        w1 = time.monotonic()
        loadavg = read_loadavg()
        rss = {a.name: a.rss_mib() for a in agents}
        stop.set()
        for t in threads:
            t.join(90)
    finally:
        stop.set()
        for a in agents:
            a.stop()
        load.stop()
    elapsed = w1 - w0
    for a in agents:
        cpu = after[a.name][0] - before[a.name][0]
        bpf = after[a.name][1] - before[a.name][1]
        calls = after[a.name][2] - before[a.name][2]
        inside = [s for s in a.scrapes if w0 <= s["at"] <= w1]
        good = [s for s in inside if s["ok"]]
        last = good[-1] if good else None
        row = {
            "round": round_no,
            "scenario": load_name,
            "agent": a.name,
            "kind": a.kind,
            "interval": a.interval,
            "window_s": round(elapsed, 3),
            "user_pct": 100 * cpu / elapsed,
            "bpf_pct": 100 * bpf / elapsed,
            "cpu_pct": 100 * (cpu + bpf) / elapsed,
            # The in-kernel cost of one program call (issue 14: ≤ 300 ns), whichever programs
            # the agent keeps attached; none when nothing ran in the window.
            "bpf_calls_per_s": calls / elapsed,
            "bpf_ns_per_call": 1e9 * bpf / calls if calls else None,
            "rss_mib": rss[a.name],
            "series": last["series"] if last else None,
            "accounting": last.get("accounting") if last else None,
            "body_bytes": last["bytes"] if last else None,
            "scrape_ms": statistics.median(s["ms"] for s in good) if good else None,
            "scrapes": len(good),
            "failed_scrapes": len(inside) - len(good),
            "loadavg": loadavg,
            "switches_per_s": (ctxt1 - ctxt0) / elapsed,
            "churn_rate": load.rate,
        }
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(
            f"  {a.name:<11} cpu {row['cpu_pct']:6.3f} % (bpf {row['bpf_pct']:.3f})"
            f"  rss {row['rss_mib']:6.1f} MiB  series {row['series']}  scrape "
            f"{row['scrape_ms'] if row['scrape_ms'] is None else round(row['scrape_ms'], 1)} ms",
            flush=True,
        )
    if load.rate is not None:
        print(f"  churn achieved {load.rate:.0f}/s", flush=True)


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kepler", default="target/release/kepler")
    p.add_argument("--scaphandre", default=os.path.join(HERE, ".tools", "bin", "scaphandre"))
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 3; quick 1)")
    p.add_argument("--window", type=float, help="measured seconds (default 30; quick 15)")
    p.add_argument("--warmup", type=float, help="seconds before measuring (default 12; quick 8)")
    p.add_argument("--scenarios", help="comma-separated subset of: " + ", ".join(LOADS))
    p.add_argument("--quick", action="store_true", help="smoke run: " + ", ".join(QUICK_LOADS))
    p.add_argument(
        "--agents",
        help="comma-separated subset of: " + ", ".join(a[0] for a in AGENTS)
        + " (default all; one agent alone measures it without the others' load)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    p.add_argument("--out", help="results directory (default bench/overhead/results/<time>)")
    opts = p.parse_args(argv)
    opts.rounds = opts.rounds or (1 if opts.quick else 3)
    opts.window = opts.window or (15.0 if opts.quick else 30.0)
    opts.warmup = opts.warmup or (8.0 if opts.quick else 12.0)
    if opts.scenarios:
        opts.loads = opts.scenarios.split(",")
    else:
        opts.loads = QUICK_LOADS if opts.quick else [l for l in LOADS if l not in EXTRA_LOADS]
    unknown = [s for s in opts.loads if s not in LOADS]
    if unknown:
        p.error(f"unknown scenarios {unknown}; known: {list(LOADS)}")
    names = opts.agents.split(",") if opts.agents else [a[0] for a in AGENTS]
    unknown = [n for n in names if n not in {a[0] for a in AGENTS}]
    if unknown:
        p.error(f"unknown agents {unknown}; known: {[a[0] for a in AGENTS]}")
    opts.agent_specs = [a for a in AGENTS if a[0] in names]
    if opts.rounds < 1 or opts.window <= 0 or opts.warmup < 0:
        p.error("rounds must be ≥ 1, window > 0, warmup ≥ 0")
    return opts


def plan(opts):
    """(round, load, agent order) in run order: scenarios and agent start order rotate."""
    steps = []
    for r in range(opts.rounds):
        loads = opts.loads[r % len(opts.loads) :] + opts.loads[: r % len(opts.loads)]
        for i, load in enumerate(loads):
            agents = opts.agent_specs
            k = (r + i) % len(agents)
            steps.append((r + 1, load, agents[k:] + agents[:k]))
    return steps


def main(argv):
    opts = parse_args(argv)
    steps = plan(opts)
    per_step = opts.warmup + opts.window + 15
    print(
        f"{len(steps)} measurements ({opts.rounds} rounds × {len(opts.loads)} scenarios), "
        f"{len(opts.agent_specs)} agents each, window {opts.window:g} s after {opts.warmup:g} s warm-up; "
        f"about {len(steps) * per_step / 60:.0f} min plus load start-up",
        flush=True,
    )
    if opts.dry_run:
        for r, load, order in steps:
            extra = " ".join(LOADS[load] or ["no", "extra", "load"])
            print(f"round {r}: {load:<9} ({extra}) agents {' '.join(a[0] for a in order)}")
        return 0
    if os.geteuid() != 0:
        raise BenchError("needs root: eBPF, a mount namespace for Scaphandre, cgroups")
    paths = [opts.kepler]
    if any(a[1] == "scaphandre" for a in opts.agent_specs):
        paths.append(opts.scaphandre)
    for path in paths:
        if not os.access(path, os.X_OK):
            raise BenchError(f"{path} is not an executable (run.sh builds and installs it)")
    out_dir = opts.out or os.path.join(HERE, "results", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    os.makedirs(out_dir, exist_ok=True)
    cg_parent = os.path.join(cgroup2_mount(), f"kepler-bench-overhead-{os.getpid()}")
    os.mkdir(cg_parent)
    started = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="kepler-overhead-") as tmp, BpfStats():
            fixture = Powercap(tmp)
            fixture.start()
            with open(os.path.join(out_dir, "raw.jsonl"), "w") as out:
                for r, load, order in steps:
                    print(f"round {r}/{opts.rounds}: {load} (load average {read_loadavg():.2f})", flush=True)
                    measure(opts, r, load, order, fixture, tmp, cg_parent, out)
            fixture.stop.set()
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(cg_parent)
    meta = {
        "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "minutes": round((time.time() - started) / 60, 1),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "rounds": opts.rounds,
        "window_s": opts.window,
        "warmup_s": opts.warmup,
        "argv": argv,
    }
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    table = report.render(out_dir)
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write(table)
    print()
    print(table)
    print(f"results in {out_dir}")
    return 0


def interrupted(*_):
    raise KeyboardInterrupt


if __name__ == "__main__":
    # SIGTERM unwinds like Ctrl-C, so that agents and load (in sessions of their own) are ended.
    signal.signal(signal.SIGTERM, interrupted)
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"overhead.py: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
