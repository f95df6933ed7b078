// SPDX-License-Identifier: Apache-2.0
/*
 * Loads a BPF object, attaches its programs and holds them for SECONDS (bench/ebpf_floor.sh).
 * Programs that need an attach target from their loader (the page-cache fentry/kprobe pair of
 * kepler.bpf.o) are skipped: the benchmark measures sched_switch.
 *   load OBJECT SECONDS
 */
#include <bpf/libbpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s OBJECT SECONDS\n", argv[0]);
		return 2;
	}
	struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
	struct bpf_program *p;

	if (!obj) {
		perror("open");
		return 1;
	}
	bpf_object__for_each_program(p, obj) {
		if (strstr(bpf_program__name(p), "pgcache"))
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
