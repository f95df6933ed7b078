#!/usr/bin/env bash
# What reading one process's CPU time costs through a held `schedstat`, a `schedstat` opened by
# path, and the process's CPU clock (`clock_gettime`), for every process on this machine with
# EXTRA more sleeping ones, passes a second apart (caches as an agent at a 1 s interval leaves
# them) and back to back. Needs cc.
#   bash bench/procfs_clock.sh [EXTRA] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
extra=${1:-0} rounds=${2:-20}
. bench/lib.sh
cc -O2 -o "$tmp/procfs_clock" bench/procfs_clock.c
for _ in $(seq "$extra"); do sleep infinity & pids+=($!); done
sleep 1
printf '| processes | between passes | way | µs a process (mean) |\n|---|---|---|---|\n'
"$tmp/procfs_clock" "$rounds" 1000000
"$tmp/procfs_clock" "$((rounds * 10))" 0
