#!/usr/bin/env bash
# Agent memory and CPU with N extra processes on the host (default 1000), on a simulated
# powercap tree, scraped every second. Prints a table. The extra processes wake once a second,
# so the eBPF source (which tracks tasks that run) sees them as well as procfs does.
#   bash bench/agent_rss.sh [N] [SECONDS] [EXTRA AGENT FLAGS...]
# KEPLER_BIN=path measures that binary instead of building the release one (to compare
# profiles: build each with `cargo build --profile ...` first).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
secs=${2:-30}
shift $(( $# > 2 ? 2 : $# ))
bin=${KEPLER_BIN:-./target/release/kepler}
[ -n "${KEPLER_BIN:-}" ] || cargo build --release -q --bin kepler
. bench/lib.sh

# A powercap tree with one package and one dram zone; a writer advances them at 40 W / 8 W.
pkg=$(fake_powercap "$tmp")
dram="$pkg/intel-rapl:0:0"
mkdir -p "$dram"
echo dram >"$dram/name"
echo 100000000000000 >"$dram/max_energy_range_uj"
echo 0 >"$dram/energy_uj"
(
  start=$(date +%s%N)
  while :; do
    now=$(date +%s%N)
    us=$(( (now - start) / 1000 ))
    echo $(( us * 40 )) >"$pkg/energy_uj.tmp" && mv "$pkg/energy_uj.tmp" "$pkg/energy_uj"
    echo $(( us * 8 )) >"$dram/energy_uj.tmp" && mv "$dram/energy_uj.tmp" "$dram/energy_uj"
    sleep 0.2
  done
) &
pids+=($!)

for _ in $(seq "$n"); do
  perl -e 'for (1..600) { select(undef, undef, undef, 1) }' & pids+=($!)
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" --host.sysfs "$tmp" --monitor.interval 1s \
  --web.listen-address "127.0.0.1:$port" --log.level warn "$@" 2>/dev/null &
agent=$!
pids+=($agent)
sleep 3
ticks_start=$(awk '{print $14+$15}' /proc/$agent/stat)
for _ in $(seq "$secs"); do
  curl -sf "http://127.0.0.1:$port/metrics" -o "$tmp/metrics" || true
  sleep 1
done
ticks_end=$(awk '{print $14+$15}' /proc/$agent/stat)
hz=$(getconf CLK_TCK)
rss_kib=$(awk '/VmRSS/ {print $2}' /proc/$agent/status)
hwm_kib=$(awk '/VmHWM/ {print $2}' /proc/$agent/status)
# The eBPF exit ring buffer is mapped into the agent (and counted twice, being double-mapped);
# it is kernel memory shared with the programs, shown apart from the agent's own.
bpf_kib=$(awk '/^[0-9a-f]+-[0-9a-f]+ /{m=($6=="anon_inode:bpf-map")} /^Rss:/{if(m)s+=$2} END{print s+0}' /proc/$agent/smaps)
# Anonymous memory (heap, stacks) is the agent's own; file-backed pages are its binary's and
# libraries' code, clean and shared through the page cache, reclaimable under pressure.
anon_kib=$(awk '/RssAnon/ {print $2}' /proc/$agent/status)
file_kib=$(awk '/RssFile/ {print $2}' /proc/$agent/status)
source=$(grep -q '^kepler_agent_ebpf_tracked_processes' "$tmp/metrics" && echo ebpf || echo procfs)
procs=$(grep -c '^kepler_process_cpu_seconds_total' "$tmp/metrics" || true)
series=$(grep -vc '^#' "$tmp/metrics" || true)
cpu=$(awk -v t=$((ticks_end - ticks_start)) -v hz="$hz" -v s="$secs" 'BEGIN {printf "%.2f", 100 * t / hz / s}')
printf '| source | extra processes | processes exported | series | RSS (MiB) | anonymous / file-backed (MiB) | of which BPF maps (MiB) | peak RSS (MiB) | agent CPU (%% of one core, 1 s interval, 1 scrape/s) |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
printf '| %s | %s | %s | %s | %.1f | %.1f / %.1f | %.1f | %.1f | %s |\n' "$source" "$n" "$procs" "$series" "$(echo "$rss_kib/1024" | bc -l)" "$(echo "$anon_kib/1024" | bc -l)" "$(echo "$file_kib/1024" | bc -l)" "$(echo "$bpf_kib/1024" | bc -l)" "$(echo "$hwm_kib/1024" | bc -l)" "$cpu"
