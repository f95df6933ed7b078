#!/usr/bin/env bash
# What a thread that wakes once a second costs on this machine before it does any work: the
# scheduler's runtime per wake (schedstat) of programs that sleep a second and then read
# KB kilobytes of their own memory, as a sampler touches its tables. The floor under any
# agent's cost per snapshot at a 1 s interval (docs/benchmarks.md). Needs cc.
#   bash bench/wake_floor.sh [SECONDS] [KB ...]      (defaults: 30 s; 0 256 1024)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
shift || true
sizes=("$@")
[ ${#sizes[@]} = 0 ] && sizes=(0 256 1024)
. bench/lib.sh
command -v cc >/dev/null || { echo "needs cc" >&2; exit 2; }
cat >"$tmp/wake.c" <<'EOF'
#include <stdlib.h>
#include <string.h>
#include <time.h>
int main(int argc, char **argv) {
    size_t bytes = (argc > 1 ? strtoul(argv[1], NULL, 10) : 0) * 1024;
    char *buf = bytes ? malloc(bytes) : NULL;
    if (bytes && !buf)
        return 1;
    if (buf)
        memset(buf, 1, bytes);
    volatile unsigned long sink = 0;
    for (;;) {
        struct timespec second = {1, 0};
        clock_nanosleep(CLOCK_MONOTONIC, 0, &second, NULL);
        for (size_t i = 0; i < bytes; i += 64)
            sink += buf[i];
    }
}
EOF
cc -O2 -o "$tmp/wake" "$tmp/wake.c"
for kb in "${sizes[@]}"; do
  "$tmp/wake" "$kb" &
  pids+=($!)
done
sleep 3
# runtime ns and time slices of each, before and after the window
read_all() { for p in "${pids[@]}"; do cut -d' ' -f1,3 /proc/"$p"/schedstat; done; }
before=$(read_all)
sleep "$secs"
after=$(read_all)
printf '| memory read per wake | runtime per wake (µs) | wakes |\n|---|---|---|\n'
paste <(printf '%s\n' "${sizes[@]}") <(echo "$before") <(echo "$after") |
  awk '{ w = $5 - $3; printf "| %s KiB | %.1f | %d |\n", $1, ($4 - $2) / (w ? w : 1) / 1000, w }'
