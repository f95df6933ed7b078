#!/usr/bin/env bash
# What finding new processes costs: a listing of /proc against probing pids through their CPU
# clock (crates/sources/src/procfs/discover.rs), and opening the `stat` of those pids (none in
# use: a listed process that ended before its read), with EXTRA more sleeping processes, passes a
# second apart (caches as an agent at a 1 s interval leaves them) and back to back. Needs cc.
#   bash bench/procfs_discover.sh [EXTRA] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
extra=${1:-0} rounds=${2:-10}
. bench/lib.sh
command -v cc >/dev/null || { echo "needs cc" >&2; exit 2; }
cc -O2 -o "$tmp/procfs_discover" bench/procfs_discover.c
for _ in $(seq "$extra"); do sleep infinity & pids+=($!); done
sleep 1
printf '| processes listed | between passes | listing | pids probed | probing | opening their `stat` |\n|---|---|---|---|---|---|\n'
for probes in 100 1000; do
  "$tmp/procfs_discover" "$rounds" 1000000 "$probes"
  "$tmp/procfs_discover" "$((rounds * 10))" 0 "$probes"
done
