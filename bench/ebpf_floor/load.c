// SPDX-License-Identifier: Apache-2.0
/*
 * Loads a BPF object, attaches its programs and holds them for SECONDS (bench/ebpf_floor.sh).
 * Programs that need an attach target from their loader (the page-cache fentry/kprobe pair of
 * kepler.bpf.o) are skipped: the benchmark measures sched_switch. With PROGRAM, only that one
 * is loaded (kepler.bpf.o has two for sched_switch, one per accounting, never both attached).
 *   load OBJECT SECONDS [PROGRAM]
 */
#include <bpf/libbpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: %s OBJECT SECONDS [PROGRAM]\n", argv[0]);
		return 2;
	}
	struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
	struct bpf_program *p;

	if (!obj) {
		perror("open");
		return 1;
	}
	bpf_object__for_each_program(p, obj) {
		const char *name = bpf_program__name(p);

		if (strstr(name, "pgcache") || (argc == 4 && strcmp(name, argv[3]) != 0))
			bpf_program__set_autoload(p, false);
	}
	if (bpf_object__load(obj)) {
		perror("load");
		return 1;
	}
	bpf_object__for_each_program(p, obj) {
		if (bpf_program__autoload(p) && !bpf_program__attach(p)) {
			fprintf(stderr, "attach %s failed\n", bpf_program__name(p));
			return 1;
		}
	}
	printf("ready\n");
	fflush(stdout);
	sleep(atoi(argv[2]));
	return 0;
}
