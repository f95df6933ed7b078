// What reading a process the task iterator does not visit costs, per snapshot, with caches
// as cold as a once-a-second read leaves them: the way before issue 14's tenth pass (open and
// read `stat`, list `task/`, pread each held `schedstat`) and the way after (pread the held
// `stat` and each held `schedstat`). The two alternate, half a second apart.
//   read PID ROUNDS
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 4096

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PID ROUNDS\n", argv[0]);
        return 2;
    }
    int pid = atoi(argv[1]), rounds = atoi(argv[2]);
    if (rounds <= 0) {
        fprintf(stderr, "ROUNDS must be positive\n");
        return 2;
    }
    char path[512], task_dir[64], buf[4096];
    static int schedstat[MAX_THREADS];
    int threads = 0;
    snprintf(task_dir, sizeof task_dir, "/proc/%d/task", pid);
    DIR *d = opendir(task_dir);
    if (!d) {
        perror(task_dir);
        return 1;
    }
    struct dirent *e;
    while ((e = readdir(d)) && threads < MAX_THREADS) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s/schedstat", task_dir, e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd >= 0) schedstat[threads++] = fd;
    }
    closedir(d);
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int held_stat = open(path, O_RDONLY);
    if (held_stat < 0) {
        perror(path);
        return 1;
    }
    double before = 0, after = 0;
    for (int r = 0; r < rounds; r++) {
        usleep(500000);
        double t0 = now_us();
        int fd = open(path, O_RDONLY);
        if (fd < 0 || read(fd, buf, sizeof buf) < 0 || count_entries(task_dir) < 0) return 1;
        close(fd);
        for (int i = 0; i < threads; i++)
            if (pread(schedstat[i], buf, sizeof buf, 0) < 0) return 1;
        before += now_us() - t0;

        usleep(500000);
        t0 = now_us();
        if (pread(held_stat, buf, sizeof buf, 0) < 0) return 1;
        for (int i = 0; i < threads; i++)
            if (pread(schedstat[i], buf, sizeof buf, 0) < 0) return 1;
        after += now_us() - t0;
    }
    printf("| %d | %d | %.1f | %.1f | %.2f |\n", pid, threads, before / rounds, after / rounds,
           after / rounds / threads);
    return 0;
}
