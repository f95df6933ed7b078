#!/usr/bin/env python3
"""What reading every process's /proc/<pid>/stat costs per process, by path each time or
through descriptors held open and read again from offset 0 (as the procfs source now does for
up to MAX_HELD_STAT_FILES processes), and the kernel memory a held descriptor keeps.

    python3 bench/procfs_pread.py [EXTRA_SLEEPING_PROCESSES]   (default 0)

CPU time is this process's own (user + system), the median of 200 passes over every process,
minus nothing: the Python loop itself costs ~15 ns per process (printed as "loop only")."""
import os
import subprocess
import sys
import time

extra = int(sys.argv[1]) if len(sys.argv) > 1 else 0
sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(extra)]
try:
    pids = [p for p in os.listdir("/proc") if p.isdigit()]

    def per_process(pass_fn, passes=200):
        times = []
        for _ in range(passes):
            t0 = time.process_time_ns()
            pass_fn()
            times.append(time.process_time_ns() - t0)
        times.sort()
        return times[len(times) // 2] / len(pids)

    def by_path():
        for p in pids:
            try:
                fd = os.open(f"/proc/{p}/stat", os.O_RDONLY | os.O_NONBLOCK)
                os.read(fd, 4096)
                os.read(fd, 4096)
                os.close(fd)
            except OSError:
                pass

    def slab_kib():
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("Slab:"):
                    return int(line.split()[1])
        return 0

    slab_before = slab_kib()
    held = []
    for p in pids:
        try:
            fd = os.open(f"/proc/{p}/stat", os.O_RDONLY | os.O_NONBLOCK)
            os.pread(fd, 4096, 0)
            held.append(fd)
        except OSError:
            pass
    slab_held = slab_kib() - slab_before

    def through_held():
        for fd in held:
            try:
                os.pread(fd, 4096, 0)
            except OSError:
                pass

    def loop_only():
        for _ in pids:
            pass

    print(f"| way | ns per process ({len(pids):,} processes) |")
    print("|---|---|")
    for name, fn in [
        ("open, read, read to the end, close (by path)", by_path),
        ("pread of a held descriptor", through_held),
        ("loop only", loop_only),
    ]:
        print(f"| {name} | {per_process(fn):,.0f} |")
    print()
    print(
        f"kernel slab while {len(held):,} descriptors are held: +{slab_held:,} KiB "
        f"(≈ {slab_held * 1024 / max(len(held), 1):,.0f} bytes each; other activity moves it too)"
    )
    print(f"kernel {os.uname().release}, load average {os.getloadavg()[0]:.2f}")
    for fd in held:
        os.close(fd)
finally:
    for s in sleepers:
        s.kill()
        s.wait()
