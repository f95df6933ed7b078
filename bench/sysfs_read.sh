#!/usr/bin/env bash
# What a meter's read of one sysfs attribute costs, opened at every read (open, read, close) or
# held open and read again from its start (one pread), as the RAPL and hwmon meters now do on
# sysfs. Each way is timed once every PERIOD ms, so that caches are as cold as between two
# ticks, and the medians are printed. Needs cc.
#   bash bench/sysfs_read.sh [ATTRIBUTE] [SAMPLES] [PERIOD_MS]
#   (defaults: /sys/class/net/lo/statistics/tx_packets, 200, 100)
set -euo pipefail
cd "$(dirname "$0")/.."
attr=${1:-/sys/class/net/lo/statistics/tx_packets}
samples=${2:-200}
period=${3:-100}
. bench/lib.sh
command -v cc >/dev/null || { echo "needs cc" >&2; exit 2; }
cat >"$tmp/read.c" <<'EOF'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static long long ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}
int main(int argc, char **argv) {
    const char *path = argv[1];
    int n = atoi(argv[2]), period_ms = atoi(argv[3]);
    long long *opened = calloc(n, sizeof *opened), *held = calloc(n, sizeof *held);
    char buf[64];
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || !opened || !held)
        return 1;
    for (int i = 0; i < n; i++) {
        struct timespec gap = {0, period_ms * 1000000L};
        nanosleep(&gap, NULL);
        long long t0 = ns();
        int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (f < 0 || read(f, buf, sizeof buf) <= 0)
            return 1;
        close(f);
        opened[i] = ns() - t0;
        nanosleep(&gap, NULL);
        t0 = ns();
        if (pread(fd, buf, sizeof buf, 0) <= 0)
            return 1;
        held[i] = ns() - t0;
    }
    qsort(opened, n, sizeof *opened, cmp);
    qsort(held, n, sizeof *held, cmp);
    printf("| way | median (µs) | 90th percentile (µs) |\n|---|---|---|\n");
    printf("| open, read, close | %.1f | %.1f |\n", opened[n / 2] / 1e3, opened[n * 9 / 10] / 1e3);
    printf("| pread of the held file | %.1f | %.1f |\n", held[n / 2] / 1e3, held[n * 9 / 10] / 1e3);
    return 0;
}
EOF
cc -O2 -o "$tmp/read" "$tmp/read.c"
echo "$attr, $samples samples each, one every $period ms"
"$tmp/read" "$attr" "$samples" "$period"
