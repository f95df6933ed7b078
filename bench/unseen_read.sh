#!/usr/bin/env bash
# What reading one process the eBPF task iterator does not visit costs a snapshot, before and
# after its `stat` was held (issue 14, tenth pass); the per-thread figure is what
# crates/ebpf/src/accounting.rs weighs as UNSEEN_NS_PER_THREAD. Needs cc; root to read pid 1.
#   bench/unseen_read.sh [PID] [ROUNDS]   (defaults 1, 20)
set -euo pipefail
pid=${1:-1}
rounds=${2:-20}
cd "$(dirname "$0")"
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
cc -O2 -Wall -o "$bin" unseen_read/read.c
echo "| pid | threads | before, µs | after, µs | after per thread (stat included), µs |"
echo "|---|---|---|---|---|"
"$bin" "$pid" "$rounds"
