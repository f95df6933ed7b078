#!/usr/bin/env python3
"""Background load for the overhead benchmark: extra processes on the host.

    load.py sleepers N    N processes that never wake (`sleep infinity`)
    load.py wakers N      N processes that wake once a second (a perl select loop)
    load.py churn RATE    RATE short-lived processes (`true`) per second
    load.py churn RATE N  the same beside N processes that never wake

With LOAD_CGROUP=DIR in the environment it first moves itself into the cgroup2 cgroup DIR, so
that the load runs in a cgroup of its own as a container's processes would (the default: the
caller's cgroup, the root on the development VM).

The caller starts it in a session of its own and ends it and every child with one killpg.
It prints "ready" once the load is in place; on SIGTERM, churn prints the number of
processes it started and the seconds it ran, as "spawned COUNT SECONDS".
"""

import os
import shutil
import signal
import sys
import time

# Spawned rather than forked from Python: a forked interpreter keeps ~850 KiB of private pages
# per child, `sleep` ~150 KiB, which is what lets 10,000 of them fit on a small machine.
SLEEP_ARGV = ["sleep", "infinity"]
WAKE_ARGV = ["perl", "-e", "select(undef, undef, undef, 1) while 1"]
TRUE_ARGV = ["true"]


def spawn(argv):
    path = shutil.which(argv[0])
    if path is None:
        sys.exit(f"load.py: {argv[0]} not found")
    return lambda: os.posix_spawn(path, argv, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def start_all(count, argv):
    start = spawn(argv)
    for _ in range(count):
        start()


def hold(count, argv):
    start_all(count, argv)
    print("ready", flush=True)
    while True:
        signal.pause()


def churn(rate, sleepers=0):
    start_all(sleepers, SLEEP_ARGV)
    start = spawn(TRUE_ARGV)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    print("ready", flush=True)
    t0 = time.monotonic()
    spawned = 0
    # Paced against the clock in 10 ms steps, so a busy machine shows up as a lower achieved
    # rate (reported) rather than as a burst that catches up.
    while not stop:
        due = int((time.monotonic() - t0) * rate)
        while spawned < due and not stop:
            start()
            spawned += 1
        reap()
        time.sleep(0.01)
    elapsed = time.monotonic() - t0
    reap()
    print(f"spawned {spawned} {elapsed:.3f}", flush=True)


def join_cgroup():
    cgroup = os.environ.get("LOAD_CGROUP")
    if cgroup:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))


def main():
    kinds = ("sleepers", "wakers", "churn")
    if not 3 <= len(sys.argv) <= 4 or sys.argv[1] not in kinds:
        sys.exit(__doc__)
    if len(sys.argv) == 4 and sys.argv[1] != "churn":
        sys.exit(__doc__)
    kind, n = sys.argv[1], int(sys.argv[2])
    join_cgroup()
    if kind == "sleepers":
        hold(n, SLEEP_ARGV)
    elif kind == "wakers":
        hold(n, WAKE_ARGV)
    else:
        churn(n, int(sys.argv[3]) if len(sys.argv) == 4 else 0)


if __name__ == "__main__":
    main()
