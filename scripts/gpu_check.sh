#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU but no Rust toolchain (a lent GPU machine
# that cannot reach crates.io):
#   bash scripts/gpu_check.sh stage DIR   # here: build the agent and the two GPU tests into DIR
#   bash scripts/gpu_check.sh run DIR     # there: run them; results under $OUT (or /tmp/gpu-check)
# `run` needs nvidia-smi and a python3 whose torch sees the GPU (or KEPLER_CUDA_WORKLOAD). The
# tests are crates/meters/tests/nvml.rs and bins/kepler/tests/e2e_nvml.rs, with
# KEPLER_REQUIRE_GPU=1 so that a missing GPU fails them instead of skipping.
set -uo pipefail

mode=${1:?stage or run}
dir=${2:?a directory for the binaries}

test_binary() { # package test -> path of the release test executable
  cargo test --release -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -1
}

case $mode in
stage)
  set -e
  export CARGO_INCREMENTAL=0
  cargo build --release -p kepler
  mkdir -p "$dir"
  cp target/release/kepler "$dir/kepler"
  cp "$(test_binary kepler-meters nvml)" "$dir/nvml"
  cp "$(test_binary kepler e2e_nvml)" "$dir/e2e_nvml"
  # The e2e test starts the agent from the absolute path cargo compiled into it.
  realpath target/release/kepler >"$dir/kepler.path"
  ls -la "$dir"
  ;;
run)
  out=${OUT:-/tmp/gpu-check}
  mkdir -p "$out"
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1
  nvidia-smi --query-gpu=name,uuid,driver_version,power.draw,power.limit --format=csv \
    >>"$out/nvidia-smi.txt" 2>&1
  want=$(cat "$dir/kepler.path")
  mkdir -p "$(dirname "$want")"
  [ -e "$want" ] || cp "$dir/kepler" "$want"
  export KEPLER_REQUIRE_GPU=1
  status=0
  for t in nvml e2e_nvml; do
    "$dir/$t" --nocapture --test-threads 1 >"$out/$t.txt" 2>&1
    rc=$?
    echo "$t: rc=$rc" | tee -a "$out/summary.txt"
    [ $rc = 0 ] || status=1
  done
  # The agent as a user starts it (auto-detected usage source and meters, GPU on), under load.
  printf 'experimental:\n  gpu:\n    enabled: true\n' >"$out/kepler.yaml"
  "$dir/kepler" --config.file "$out/kepler.yaml" probe >"$out/probe.txt" 2>&1
  "$dir/kepler" --config.file "$out/kepler.yaml" --web.listen-address 127.0.0.1:28282 \
    --monitor.interval 1s >"$out/agent.log" 2>&1 &
  agent=$!
  sleep 4
  python3 bench/cuda_load.py 20 &
  load=$!
  sleep 15
  python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:28282/metrics").read().decode())' >"$out/metrics.txt"
  nvidia-smi --query-gpu=power.draw --format=csv,noheader >>"$out/summary.txt" 2>&1
  echo "agent cpu ticks (utime stime) after ~19 s: $(awk '{print $14, $15}' /proc/$agent/stat)" \
    >>"$out/summary.txt"
  kill $load $agent 2>/dev/null
  wait 2>/dev/null
  grep -E '^kepler_(node_gpu|process_gpu_watts)' "$out/metrics.txt" | head -40 >>"$out/summary.txt"
  cat "$out/summary.txt"
  exit $status
  ;;
*)
  echo "usage: $0 stage|run DIR" >&2
  exit 2
  ;;
esac
