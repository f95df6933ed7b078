#!/usr/bin/env bash
# Two agent builds side by side under the same load at the same time: each one's user+system
# CPU and minor faults over the same window, so that a busy or changing machine weighs on both
# alike (runs one after the other on a shared machine differ by more than the change under
# test). Each agent attaches its own BPF programs; their in-kernel time is not counted here.
# Root (eBPF).
#   bash bench/churn_ab.sh BIN_A BIN_B [KIND] [N] [INTERVAL] [ROUNDS]
# KIND N is a load of bench/overhead/load.py: churn 1000 (default: 1,000 spawns/s) or wakers
# 1000 (1,000 processes waking every second). Each round starts both agents afresh, in
# alternating order (with the procfs source at idle the one started first measured 2–7 % lower
# in each of 8 rounds, 2026-12-07), warms up 12 s and measures 25 s (see WARMUP below).
# SCRAPE=S scrapes each agent every S seconds (staggered), as Prometheus would; the table then
# splits each agent's CPU between its sampler thread (snapshots and attribution) and the others
# (HTTP: encoding and sending). The scraper is one Python process that starts none: a fork
# would make the procfs source list /proc again. CONFIG=FILE passes --config.file FILE to both
# (`ebpf: {enabled: false}` for the procfs source); CONFIG_A=FILE and CONFIG_B=FILE give each
# build a configuration of its own instead, so that one build run twice weighs what a setting
# costs. LOAD_CGROUP=1 runs the load in a cgroup2 cgroup of its own, as a container's processes
# would run (the default: this script's cgroup). WARMUP=S and WINDOW=S set the warm-up and the
# measured window, in seconds (12 and 25 by default), for what an agent does differently once
# it has run a while.
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1 b=$2 kind=${3:-churn} n=${4:-1000} interval=${5:-5s} rounds=${6:-3}
warmup=${WARMUP:-12} window=${WINDOW:-25}
. bench/lib.sh
fake_powercap "$tmp" >/dev/null
load_cgroup=
if [ -n "${LOAD_CGROUP:-}" ]; then
  cg2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
  load_cgroup=$cg2/kepler-bench-load-$$
  mkdir "$load_cgroup"
fi
LOAD_CGROUP=$load_cgroup setsid python3 bench/overhead/load.py "$kind" "$n" >/dev/null &
load=$!
# The load runs in a session of its own: end it and every child it started.
end_load() {
  kill -TERM -- -"$load" 2>/dev/null || true
  if [ -n "$load_cgroup" ]; then
    echo 1 > "$load_cgroup/cgroup.kill" 2>/dev/null || true
    for _ in $(seq 50); do rmdir "$load_cgroup" 2>/dev/null && break; sleep 0.2; done
  fi
}
trap 'end_load; bench_cleanup' EXIT
sleep 3
# CPU time in ns summed over the agent's threads (schedstat; utime+stime count 10 ms ticks,
# too coarse for 0.05 % of a core over 25 s). The agent's threads live as long as it does.
cpu() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%d", s}'; }
sampler_cpu() {
  for t in /proc/"$1"/task/*; do
    [ "$(cat "$t/comm")" = kepler-sampler ] && cut -d' ' -f1 "$t/schedstat"
  done | awk '{s += $1} END {printf "%d", s}'
}
scrape=${SCRAPE:-}
faults() { awk '{print $10}' "/proc/$1/stat"; }
# The accounting each agent chose at start (eBPF source): on a host near the break-even switch
# rate two agents may choose differently, and their CPU then does not compare.
accounting() {
  curl -s "http://127.0.0.1:$1/metrics" |
    sed -n 's/^kepler_agent_ebpf_accounting_info{accounting="\([a-z_]*\)".*/\1/p' | head -n 1
}
printf '| round | build | agent user+system CPU (%% of one core) | of which the sampler thread | minor faults/s | RSS (MiB) | accounting |\n|---|---|---|---|---|---|---|\n'
for r in $(seq "$rounds"); do
  order=(a b)
  [ $((r % 2)) = 0 ] && order=(b a)
  agents=()
  ports=()
  labels=()
  for side in "${order[@]}"; do
    if [ "$side" = a ]; then bin=$a config=${CONFIG_A:-${CONFIG:-}}; else bin=$b config=${CONFIG_B:-${CONFIG:-}}; fi
    label=$bin
    [ -n "${CONFIG_A:-}${CONFIG_B:-}" ] && label="$bin ($(basename "${config:-defaults}"))"
    labels+=("$label")
    port=$(free_port)
    "$bin" ${config:+--config.file "$config"} --host.sysfs "$tmp" \
      --web.listen-address 127.0.0.1:"$port" --monitor.interval "$interval" \
      --log.level warn >/dev/null 2>&1 &
    agents+=($!)
    pids+=($!)
    ports+=("$port")
  done
  scraper=
  if [ -n "$scrape" ]; then
    python3 -c '
import sys, time, urllib.request
period, ports = float(sys.argv[1]), sys.argv[2:]
while True:
    for port in ports:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
        except OSError:
            pass
        time.sleep(period / len(ports))
' "$scrape" "${ports[@]}" &
    scraper=$!
  fi
  sleep "$warmup"
  c0=() s0=() f0=()
  for p in "${agents[@]}"; do
    c0+=("$(cpu "$p")") s0+=("$(sampler_cpu "$p")") f0+=("$(faults "$p")")
  done
  sleep "$window"
  for i in 0 1; do
    p=${agents[$i]}
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$p/status")
    printf '| %s | %s | %.3f | %.3f | %d | %.1f | %s |\n' "$r" "${labels[$i]}" \
      "$(echo "($(cpu "$p")-${c0[$i]})*100/($window*1000000000)" | bc -l)" \
      "$(echo "($(sampler_cpu "$p")-${s0[$i]})*100/($window*1000000000)" | bc -l)" \
      $(( ($(faults "$p") - ${f0[$i]}) / window )) "$(echo "$rss/1024" | bc -l)" \
      "$(accounting "${ports[$i]}")"
  done
  [ -n "$scraper" ] && kill "$scraper"
  kill "${agents[@]}"
  wait "${agents[@]}" 2>/dev/null || true
done
