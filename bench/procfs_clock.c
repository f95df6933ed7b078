// What reading a process's CPU time costs, three ways, over every process in /proc: a held
// /proc/<pid>/schedstat read again with pread, the same file opened, read and closed by path,
// and clock_gettime on the process's CPU clock (issue 14; crates/sources/src/procfs/clock.rs).
// Passes alternate between the ways and sleep between them, so that each meets caches as
// cold as an agent reading once a second leaves them.
//   procfs_clock ROUNDS SLEEP_US
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { MAX = 20000, WAYS = 3 };
static int pids[MAX], fds[MAX], n;
static char buf[256];
static long long sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double pass(int way) {
    double t0 = now();
    for (int i = 0; i < n; i++) {
        if (way == 0) {
            ssize_t k = pread(fds[i], buf, sizeof buf, 0);
            if (k > 0) sink += buf[0];
        } else if (way == 1) {
            char path[64];
            snprintf(path, sizeof path, "/proc/%d/schedstat", pids[i]);
            int fd = open(path, O_RDONLY);
            if (fd >= 0) {
                ssize_t k = read(fd, buf, sizeof buf);
                if (k > 0) sink += buf[0];
                close(fd);
            }
        } else {
            // MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
            clockid_t c = ((~(clockid_t)pids[i]) << 3) | 2;
            struct timespec ts;
            if (clock_gettime(c, &ts) == 0) sink += ts.tv_nsec;
        }
    }
    return now() - t0;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20, us = argc > 2 ? atoi(argv[2]) : 500000;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)) && n < MAX) {
        int p = atoi(e->d_name);
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/schedstat", p);
        int fd = p > 0 ? open(path, O_RDONLY) : -1;
        if (fd >= 0) {
            pids[n] = p;
            fds[n] = fd;
            n++;
        }
    }
    double total[WAYS] = {0};
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < WAYS; k++) {
            int way = (r + k) % WAYS;
            usleep(us);
            total[way] += pass(way);
        }
    const char *names[WAYS] = {"held schedstat, pread", "schedstat by path", "CPU clock"};
    for (int way = 0; way < WAYS; way++)
        printf("| %d | %d µs | %s | %.2f |\n", n, us, names[way], total[way] / rounds * 1e6 / n);
    return sink == 42;
}
