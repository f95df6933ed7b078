#!/usr/bin/env bash
# Cost of the eBPF source's programs per call, from the kernel's own BPF statistics
# (kernel.bpf_stats_enabled=1: run_time_ns and run_cnt per program), in four scenarios: idle,
# process churn at 100 and 1000 spawns/s (fork + exec of /bin/true, paced, so every spawn is a
# new thread group that later exits through the exit ring), and a context-switch storm
# (stress-ng --switch). Also the agent-side CPU per snapshot. Needs root, bpftool, jq, perl
# and stress-ng.
#   bench/ebpf_sched_switch.sh [SECONDS PER SCENARIO] (default 10)
# HOLD=path runs an already built ebpf_hold instead of building the release one.
# HOLD_ARGS=--iterator measures task iterator accounting: kepler_exit then takes kepler_switch's
# place on sched_switch (final switches only), and kepler_iter's calls are one per thread per
# snapshot (one a second).
set -euo pipefail
secs=${1:-10}
cd "$(dirname "$0")/.."
source bench/lib.sh

need_root_and bpftool jq perl stress-ng

if [ -z "${HOLD:-}" ]; then
    cargo build -q --release -p kepler-ebpf --example ebpf_hold
    HOLD=target/release/examples/ebpf_hold
fi

old_stats=$(sysctl -n kernel.bpf_stats_enabled)
log=$tmp/hold.log
hold_pid=
cleanup() {
    [ -n "$hold_pid" ] && kill "$hold_pid" 2>/dev/null || true
    sysctl -q kernel.bpf_stats_enabled="$old_stats"
    bench_cleanup
}
trap cleanup EXIT
sysctl -q kernel.bpf_stats_enabled=1

# Holds the programs (and snapshots once a second) for the whole run, then reports its own
# CPU per snapshot.
# shellcheck disable=SC2086 # HOLD_ARGS is a list of words.
"$HOLD" $((4 * secs + 4)) ${HOLD_ARGS:-} >"$log" 2>&1 &
hold_pid=$!
for _ in $(seq 100); do grep -q '^ready' "$log" && break; sleep 0.1; done
grep -q '^ready' "$log" || { cat "$log" >&2; exit 1; }

# The programs the hold process loaded.
ids=$(bpf_prog_ids "$hold_pid")

# "name run_time_ns run_cnt" of those programs.
sample() {
    bpftool prog show -j | jq -r --argjson ids "$ids" '.[] | select(.id as $i | $ids | index($i))
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
        printf '| %-32s | %-15s | %12d | %10d | %7s |\n' "$label" "$name" "$calls" \
            $((calls / dur)) "$ns"
    done
}

printf '| %-32s | %-15s | %12s | %10s | %7s |\n' scenario program calls calls/s ns/call
printf '|%s|%s|%s|%s|%s|\n' ---------------------------------- ----------------- -------------- ------------ ---------

a=$(sample); sleep "$secs"; b=$(sample)
rows "idle" "$a" "$b" "$secs"

for rate in 100 1000; do
    a=$(sample)
    got=$(churn "$rate" "$secs")
    b=$(sample)
    rows "churn $rate/s (reached $got/s)" "$a" "$b" "$secs"
done

a=$(sample)
stress-ng --switch 2 -t "${secs}s" -q >/dev/null 2>&1
b=$(sample)
rows "storm: stress-ng --switch 2" "$a" "$b" "$secs"

wait "$hold_pid" 2>/dev/null || true; hold_pid=
echo
echo "kernel $(uname -r), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg);" \
    "loader: $(grep -m1 '^loaded' "$log" | cut -d: -f1)"
grep '^per snapshot\|^ebpf:' "$log" | sed 's/^/agent /' || true
