#!/usr/bin/env bash
# What the NVML meter adds to the agent's CPU time per tick, on a machine with an NVIDIA GPU
# while a CUDA process runs: the agent (procfs source, 1 s interval) with experimental.gpu
# off and on, interleaved, each measured over WINDOW seconds after a 5 s start-up.
#   bash bench/gpu_meter_cost.sh [KEPLER_BINARY] [ROUNDS] [WINDOW] [BASELINE_BINARY]
# With a baseline (an earlier build), it runs gpu-on with that one too, in the same rounds.
# Needs python3 with torch (the load) and a release agent (`cargo build --release -p kepler`,
# or `scripts/gpu_check.sh stage` for a machine without a toolchain).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

bin=${1:-target/release/kepler}
rounds=${2:-2}
window=${3:-30}
baseline=${4:-}

python3 bench/cuda_load.py $((rounds * 3 * (window + 8) + 20)) &
pids+=($!)
sleep 8

# CPU time in ns of all the agent's threads (schedstat: ns resolution, where stat's ticks
# are 10 ms); its threads live as long as it does.
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {print s}'; }

measure() { # binary gpu-enabled -> "ms of CPU per second of wall time"
  local bin=$1
  shift
  printf 'ebpf:\n  enabled: false\nexperimental:\n  gpu:\n    enabled: %s\n' "$1" >"$tmp/k.yaml"
  "$bin" --config.file "$tmp/k.yaml" --web.listen-address 127.0.0.1:28283 --monitor.interval 1s \
    >"$tmp/agent-$1.log" 2>&1 &
  local agent=$!
  sleep 5
  local t0 s0 t1 s1
  t0=$(cpu_ns $agent)
  s0=$(date +%s.%N)
  sleep "$window"
  t1=$(cpu_ns $agent)
  s1=$(date +%s.%N)
  kill $agent
  wait $agent 2>/dev/null || true
  python3 -c "print(f'{($t1 - $t0) / 1e6 / ($s1 - $s0):.2f}')"
}

if [ -n "$baseline" ]; then
  echo "| round | gpu off: ms CPU per s | gpu on, baseline | gpu on | NVML per tick, baseline (ms) | NVML per tick (ms) |"
  echo "|---|---|---|---|---|---|"
else
  echo "| round | gpu off: ms CPU per s | gpu on: ms CPU per s | NVML per tick (ms) |"
  echo "|---|---|---|---|"
fi
for r in $(seq "$rounds"); do
  off=$(measure "$bin" false)
  on=$(measure "$bin" true)
  if [ -n "$baseline" ]; then
    base=$(measure "$baseline" true)
    echo "| $r | $off | $base | $on | $(python3 -c "print(f'{$base - $off:.2f}')") | $(python3 -c "print(f'{$on - $off:.2f}')") |"
  else
    echo "| $r | $off | $on | $(python3 -c "print(f'{$on - $off:.2f}')") |"
  fi
done
grep -m1 'power meter selected.*gpu' "$tmp/agent-true.log" || echo "(gpu meter not selected: see the agent log)"
