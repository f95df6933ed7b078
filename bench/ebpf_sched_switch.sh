#!/usr/bin/env bash
# Cost of the eBPF source's programs per call, from the kernel's own BPF statistics
# (kernel.bpf_stats_enabled=1: run_time_ns and run_cnt per program), idle and under a
# context-switch-heavy load, plus the agent-side CPU per snapshot. Needs root, bpftool and
# stress-ng. Usage: bench/ebpf_sched_switch.sh [LOAD_SECONDS] (default 10)
set -euo pipefail
secs=${1:-10}
cd "$(dirname "$0")/.."

for tool in bpftool stress-ng; do
    command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 2; }

cargo build -q --release -p kepler-ebpf --example ebpf_hold
hold=target/release/examples/ebpf_hold

old_stats=$(sysctl -n kernel.bpf_stats_enabled)
log=$(mktemp)
hold_pid=
cleanup() {
    [ -n "$hold_pid" ] && kill "$hold_pid" 2>/dev/null || true
    sysctl -q kernel.bpf_stats_enabled="$old_stats"
    rm -f "$log"
}
trap cleanup EXIT
sysctl -q kernel.bpf_stats_enabled=1

# Holds the programs (and snapshots once a second) for the whole run, then reports its own
# CPU per snapshot.
"$hold" $((2 * secs + 2)) >"$log" 2>&1 &
hold_pid=$!
for _ in $(seq 100); do grep -q '^ready' "$log" && break; sleep 0.1; done
grep -q '^ready' "$log" || { cat "$log" >&2; exit 1; }

# "name run_time_ns run_cnt" of our programs (names are kepler_*).
sample() {
    bpftool prog show -j | jq -r '.[] | select(.name // "" | startswith("kepler_"))
        | "\(.name) \(.run_time_ns // 0) \(.run_cnt // 0)"'
}

# Prints one table row per program between two samples.
rows() {
    local label=$1 before=$2 after=$3 dur=$4
    join <(sort <<<"$before") <(sort <<<"$after") | while read -r name t0 c0 t1 c1; do
        calls=$((c1 - c0))
        if [ "$calls" -gt 0 ]; then
            ns=$(( (t1 - t0) / calls ))
        else
            ns=-
        fi
        printf '| %-22s | %-15s | %12d | %10d | %7s |\n' "$label" "$name" "$calls" \
            $((calls / dur)) "$ns"
    done
}

printf '| %-22s | %-15s | %12s | %10s | %7s |\n' scenario program calls calls/s ns/call
printf '|%s|%s|%s|%s|%s|\n' ------------------------ ----------------- -------------- ------------ ---------

a=$(sample); sleep "$secs"; b=$(sample)
rows "idle ${secs}s" "$a" "$b" "$secs"

a=$(sample)
stress-ng --switch 2 -t "${secs}s" -q >/dev/null 2>&1
b=$(sample)
rows "stress-ng --switch 2" "$a" "$b" "$secs"

wait "$hold_pid" 2>/dev/null || true; hold_pid=
echo
echo "kernel $(uname -r), $(nproc) CPUs; loader: $(grep -m1 '^loaded' "$log" | cut -d: -f1)"
grep '^per snapshot' "$log" | sed 's/^/agent /' || true
