#!/usr/bin/env bash
# What the optional eBPF probes cost under network traffic, and what detaching them saves.
# Runs the agent (eBPF source, a simulated powercap meter) with loopback TCP traffic
# (bench/ebpf_probe_cost/blast.py), once with the defaults, where nothing reads the softirq
# counts and the agent detaches that probe, and once with ebpf.exportFeatures, which keeps it;
# the two alternate for ROUNDS rounds. Per program the agent holds: calls per second, ns per
# call and % of one core, from the kernel's BPF statistics (run_cnt, run_time_ns in the
# program's fdinfo); and the agent's own user + system CPU. Needs root, bpftool, jq, python3.
#   bench/ebpf_probe_cost.sh [SECONDS] [ROUNDS]   (defaults 15, 3)
# KEPLER_BIN=path runs an already built agent.
set -euo pipefail
secs=${1:-15}
rounds=${2:-3}
cd "$(dirname "$0")/.."
source bench/lib.sh

need_root_and bpftool jq python3
if [ -z "${KEPLER_BIN:-}" ]; then
    cargo build -q --release -p kepler
    KEPLER_BIN=target/release/kepler
fi

old_stats=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
    sysctl -q kernel.bpf_stats_enabled="$old_stats"
    bench_cleanup
}
trap cleanup EXIT
sysctl -q kernel.bpf_stats_enabled=1
fake_powercap "$tmp/sys" >/dev/null
printf 'ebpf:\n  enabled: true\n' >"$tmp/default.yaml"
printf 'ebpf:\n  enabled: true\n  exportFeatures: true\n' >"$tmp/export.yaml"

# "name run_cnt run_time_ns" for every program PID holds.
prog_stats() {
    local id
    for id in $(bpf_prog_ids "$1" | jq -r '.[]'); do
        bpftool prog show id "$id" -j | jq -r '"\(.name) \(.run_cnt // 0) \(.run_time_ns // 0)"'
    done
}

# CPU time of PID's threads, in ns (schedstat: finer than stat's clock ticks).
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%d", s}'; }

printf '| round | config | program | calls/s | ns/call | %% of one core |\n|---|---|---|---|---|---|\n'
for round in $(seq "$rounds"); do
    for config in default export; do
        "$KEPLER_BIN" --config.file "$tmp/$config.yaml" --host.sysfs "$tmp/sys" \
            --web.listen-address 127.0.0.1:0 --log.level warn >"$tmp/agent.log" 2>&1 &
        agent=$!
        python3 bench/ebpf_probe_cost/blast.py &
        blast=$!
        pids=("$agent" "$blast")
        sleep 4 # loaded, meters chosen, probes detached, traffic flowing
        prog_stats "$agent" | sort >"$tmp/a"
        c0=$(cpu_ns "$agent")
        sleep "$secs"
        prog_stats "$agent" | sort >"$tmp/b"
        c1=$(cpu_ns "$agent")
        kill "$blast" "$agent"
        wait "$blast" "$agent" 2>/dev/null || true
        join "$tmp/a" "$tmp/b" | awk -v s="$secs" -v r="$round" -v c="$config" '{
            n = $4 - $2; t = $5 - $3
            printf "| %s | %s | %s | %.0f | %.0f | %.3f |\n", r, c, $1, n / s, (n ? t / n : 0), t / s / 1e7
        }'
        awk -v a="$c0" -v b="$c1" -v s="$secs" -v r="$round" -v c="$config" \
            'BEGIN { printf "| %s | %s | the agent itself (user + system) | | | %.3f |\n", r, c, (b - a) / s / 1e7 }'
    done
done
