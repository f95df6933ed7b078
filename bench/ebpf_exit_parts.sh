#!/usr/bin/env bash
# Where iterator accounting's kepler_exit spends its time under process churn: the agent's
# program beside two variants with parts of a final switch compiled out of a scratch copy of
# crates/ebpf/bpf/kepler.bpf.c (the committed source is not touched):
#   full      the committed exit path;
#   no_reads  the same record, without the cgroup ids, the command name and the map lookup;
#   no_record no record at all: the calls' entry and the reads that decide a group has ended.
# Each variant is built into ebpf_hold (the committed object is swapped in for the build and put
# back after, and ebpf_hold rebuilt from it), held with --iterator, and measured from the
# kernel's BPF statistics while perl forks and execs /bin/true RATE times a second; the variants
# take turns, ROUNDS times. The variants are for measuring only: their records are incomplete.
# Needs root, cargo, clang, llvm-strip, bpftool, jq, perl, python3.
#   bench/ebpf_exit_parts.sh [SECONDS] [ROUNDS] [RATE]   (default 15, 3, 100; RATE 0 is idle)
set -euo pipefail
secs=${1:-15}
rounds=${2:-3}
rate=${3:-100}
cd "$(dirname "$0")/.."
source bench/lib.sh

need_root_and cargo clang llvm-strip bpftool jq perl python3

object=crates/ebpf/bpf/kepler.bpf.o
cp -p "$object" "$tmp/committed.o"
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
hold_pid=
finish() {
  [ -n "$hold_pid" ] && kill "$hold_pid" 2>/dev/null || true
  # A fresh mtime, so that cargo rebuilds what embedded a variant.
  cp "$tmp/committed.o" "$object"
  sysctl -q kernel.bpf_stats_enabled="$old_stats"
  bench_cleanup
}
trap finish EXIT

# The scratch copy, with a switch around each part; fails if the source no longer has a part.
python3 - crates/ebpf/bpf/kepler.bpf.c "$tmp/exit_parts.bpf.c" <<'EOF'
import sys

src, dst = sys.argv[1], sys.argv[2]
s = open(src).read()


def wrap(part, switch, instead):
    global s
    if s.count(part) != 1:
        sys.exit(f"ebpf_exit_parts: the source changed; not found once:\n{part}")
    s = s.replace(part, f"#ifdef {switch}\n{instead}\n#else\n{part}\n#endif")


wrap("\tr->cpu_cgroup_id = cpu_cgroup_id(prev);", "NO_READS", "\tr->cpu_cgroup_id = 0;")
wrap("\tif (bpf_probe_read_kernel_str(r->comm, sizeof(r->comm), prev->group_leader->comm) < 0)\n"
     "\t\t__builtin_memset(r->comm, 0, sizeof(r->comm));",
     "NO_READS", "\t__builtin_memset(r->comm, 0, sizeof(r->comm));")
wrap("\tr->totals.cgroup_id = bpf_get_current_cgroup_id();", "NO_READS",
     "\tr->totals.cgroup_id = 0;")
wrap("\tif (prev->signal->live.counter == 0 && !bpf_map_lookup_elem(&tasks, &tgid) &&\n"
     "\t    exit_unmet(prev, tgid, start))",
     "NO_READS", "\tif (prev->signal->live.counter == 0 && exit_unmet(prev, tgid, start))")
# An early return: what follows still compiles, and is dropped as dead code.
reserve = "\tstruct exit_record *r = bpf_ringbuf_reserve(&exits, sizeof(*r), 0);\n"
unmet = s.find("exit_unmet(struct task_struct *prev")
at = s.find(reserve, unmet) if unmet >= 0 else -1
if at < 0:
    sys.exit("ebpf_exit_parts: the source changed; exit_unmet's ring reservation not found")
s = s[:at] + "#ifdef NO_RECORD\n\treturn true;\n#endif\n" + s[at:]
open(dst, "w").write(s)
EOF
cp crates/ebpf/bpf/kernel_types.h "$tmp/"

arch=$(uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
variants=(full no_reads no_record)
for v in "${variants[@]}"; do
  case $v in
  full) defs=() ;;
  no_reads) defs=(-DNO_READS) ;;
  no_record) defs=(-DNO_READS -DNO_RECORD) ;;
  esac
  (cd "$tmp" && clang -O2 -g -target bpf -D__TARGET_ARCH_"$arch" -I. -I/usr/include/"$(uname -m)"-linux-gnu \
    -Wall -Werror "${defs[@]}" -c exit_parts.bpf.c -o "$v.o" && llvm-strip -g "$v.o")
  cp "$tmp/$v.o" "$object"
  cargo build -q --release -p kepler-ebpf --example ebpf_hold
  cp target/release/examples/ebpf_hold "$tmp/hold_$v"
done
cp "$tmp/committed.o" "$object"
# Leaves target/release/examples/ebpf_hold the committed program again for other benches.
cargo build -q --release -p kepler-ebpf --example ebpf_hold
sysctl -q kernel.bpf_stats_enabled=1

# "run_time_ns run_cnt" of the kepler_exit program PID holds.
sample() {
  bpftool prog show -j | jq -r --argjson ids "$(bpf_prog_ids "$1")" '.[]
    | select(.id as $i | $ids | index($i)) | select(.name == "kepler_exit")
    | "\(.run_time_ns // 0) \(.run_cnt // 0)"' | head -n 1
}

for v in "${variants[@]}"; do : >"$tmp/$v.ns"; : >"$tmp/$v.rate"; done
for _ in $(seq "$rounds"); do
  for v in "${variants[@]}"; do
    "$tmp/hold_$v" $((secs + 10)) --iterator >"$tmp/hold.log" 2>&1 &
    hold_pid=$!
    for _ in $(seq 300); do grep -qs '^ready' "$tmp/hold.log" && break; sleep 0.1; done
    grep -qs '^ready' "$tmp/hold.log" || { cat "$tmp/hold.log" >&2; exit 1; }
    sleep 2
    a=$(sample "$hold_pid")
    if [ "$rate" = 0 ]; then sleep "$secs"; else churn "$rate" "$secs" >/dev/null; fi
    b=$(sample "$hold_pid")
    kill "$hold_pid" 2>/dev/null || true
    wait "$hold_pid" 2>/dev/null || true
    hold_pid=
    read -r t0 c0 <<<"$a"
    read -r t1 c1 <<<"$b"
    calls=$((c1 - c0))
    [ "$calls" -gt 0 ] || continue
    echo $(((t1 - t0) / calls)) >>"$tmp/$v.ns"
    echo $((calls / secs)) >>"$tmp/$v.rate"
  done
done

# Median, minimum and maximum of the numbers in FILE.
stats() { sort -n "$1" | awk '{v[NR] = $1} END {printf "%d (%d–%d)", v[int((NR + 1) / 2)], v[1], v[NR]}'; }
median() { sort -n "$1" | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

printf '| %-10s | %8s | %-22s | %9s |\n' variant calls/s "ns/call median (range)" "µs/s"
printf '|%s|%s|%s|%s|\n' ------------ ---------- ------------------------ -----------
for v in "${variants[@]}"; do
  [ -s "$tmp/$v.ns" ] || continue
  c=$(median "$tmp/$v.rate")
  printf '| %-10s | %8d | %-22s | %9d |\n' "$v" "$c" "$(stats "$tmp/$v.ns")" \
    $(($(median "$tmp/$v.ns") * c / 1000))
done
echo
echo "kernel $(uname -r), $(nproc) CPUs, ${secs} s × ${rounds} rounds at ${rate} spawns/s," \
  "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
