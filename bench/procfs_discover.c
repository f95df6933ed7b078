// What finding new processes costs two ways (issue 14; crates/sources/src/procfs/discover.rs):
// listing /proc, and asking the CPU clock of each of N pids past the kernel's last pid given
// out (none of them in use, as most pids a scan probes are not: they went to threads, or to
// processes that ended) whether it leads a thread group; and, for the same pids, what a failed
// open of /proc/<pid>/stat costs, the way a scan tried a listed process that had ended since.
// Passes alternate and sleep between them, so that each meets caches as cold as an agent
// scanning once a second leaves them.
//   procfs_discover ROUNDS SLEEP_US PROBES
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int last_pid(void) {
    char b[128] = "";
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f || !fgets(b, sizeof b, f))
        exit(1);
    fclose(f);
    char *field = strrchr(b, ' ');
    return field ? atoi(field + 1) : 0;
}

static double listing(int *entries) {
    double t0 = now();
    DIR *d = opendir("/proc");
    struct dirent *e;
    *entries = 0;
    while (d && (e = readdir(d)))
        if (e->d_name[0] >= '1' && e->d_name[0] <= '9') {
            ++*entries;
            sink += atoi(e->d_name);
        }
    if (d)
        closedir(d);
    return now() - t0;
}

static double probing(int from, int probes) {
    double t0 = now();
    for (int i = 0; i < probes; i++) {
        // MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
        clockid_t c = ((~(clockid_t)(from + i)) << 3) | 2;
        struct timespec ts;
        if (clock_gettime(c, &ts) == 0)
            sink += ts.tv_nsec;
    }
    return now() - t0;
}

static double opening(int from, int probes) {
    char path[64];
    double t0 = now();
    for (int i = 0; i < probes; i++) {
        snprintf(path, sizeof path, "/proc/%d/stat", from + i);
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
            sink += fd;
            close(fd);
        }
    }
    return now() - t0;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 10, us = argc > 2 ? atoi(argv[2]) : 1000000;
    int probes = argc > 3 ? atoi(argv[3]) : 100, entries = 0;
    // Far enough past the cursor that no pid probed is given out during the run.
    int from = last_pid() + 100000;
    double listed = 0, probed = 0, opened = 0;
    for (int r = 0; r < rounds; r++) {
        usleep(us);
        listed += listing(&entries);
        usleep(us);
        probed += probing(from, probes);
        usleep(us);
        opened += opening(from, probes);
    }
    listed /= rounds;
    probed /= rounds;
    opened /= rounds;
    printf("| %d | %g s | %.1f µs (%.2f an entry) | %d | %.1f µs (%.3f a pid) | %.1f µs (%.3f a pid) |\n",
           entries, us / 1e6, listed * 1e6, listed * 1e6 / entries, probes, probed * 1e6,
           probed * 1e6 / probes, opened * 1e6, opened * 1e6 / probes);
    return sink == 42;
}
