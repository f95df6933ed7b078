#!/usr/bin/env bash
# What reading every thread's CPU time from the scheduler's own counters costs, per read and per
# thread (bench/ebpf_iter/iter.bpf.c, a BPF task iterator): the alternative to charging time at
# every sched_switch, whose cost grows with switches instead of with threads. Pins the iterator,
# then reads it whole READS times with 0, 1,000 and 10,000 extra sleeping processes and prints
# the median CPU time of one read (open, read to the end, close) and per thread.
# Needs root, clang, libbpf-dev, bpftool, python3.
#   bench/ebpf_iter.sh [READS]   (default 50)
set -euo pipefail
reads=${1:-50}
cd "$(dirname "$0")/.."
source bench/lib.sh

need_root_and clang bpftool python3
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

arch=$(uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
clang -O2 -g -target bpf -D__TARGET_ARCH_"$arch" -I/usr/include/"$(uname -m)"-linux-gnu \
  -Wall -Werror -c bench/ebpf_iter/iter.bpf.c -o "$tmp/iter.o"
pin=/sys/fs/bpf/kepler-bench-iter-$$
bpftool iter pin "$tmp/iter.o" "$pin"
trap 'rm -f "$pin"; bench_cleanup' EXIT

printf '| %-24s | %7s | %-22s | %-13s |\n' "extra sleeping processes" threads "CPU per read, median" "per thread"
printf '|%s|%s|%s|%s|\n' -------------------------- --------- ------------------------ ---------------
for extra in 0 1000 10000; do
  for _ in $(seq "$extra"); do
    sleep 3600 &
    pids+=($!)
  done
  sleep 2
  python3 - "$pin" "$reads" "$extra" <<'PY'
import os, sys, time
pin, reads, extra = sys.argv[1], int(sys.argv[2]), sys.argv[3]
RECORD = 32  # struct record in iter.bpf.c
def read_all():
    fd = os.open(pin, os.O_RDONLY)
    n = 0
    while chunk := os.read(fd, 1 << 16):
        n += len(chunk)
    os.close(fd)
    return n // RECORD
times = []
for _ in range(reads):
    t0 = time.process_time_ns()
    threads = read_all()
    times.append(time.process_time_ns() - t0)
times.sort()
med = times[len(times) // 2]
print(f"| {int(extra):>24,} | {threads:>7,} | {med / 1e3:>19,.0f} µs | {med / threads:>10,.0f} ns |")
PY
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  pids=()
done
echo
echo "kernel $(uname -r), $(nproc) CPUs, $reads reads each, load average $(cut -d' ' -f1-3 /proc/loadavg)"
