// SPDX-License-Identifier: Apache-2.0
/*
 * Loads a BPF object, attaches its programs and holds them for SECONDS (bench/ebpf_floor.sh).
 * Programs that need an attach target from their loader (the page-cache fentry/kprobe pair of
 * kepler.bpf.o) are skipped: the benchmark measures sched_switch. With PROGRAM, only that one
 * is loaded (kepler.bpf.o has two for sched_switch, one per accounting, never both attached).
 * An object with a `slot_mask` variable gets the mask of its `slots` array, as the agent's
 * loader sets it (without it, switches would never charge slots).
 *   load OBJECT SECONDS [PROGRAM]
 */
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Sets `slot_mask` in the object's .rodata to the size of `slots` less one, if it has both. */
static int set_slot_mask(struct bpf_object *obj)
{
	struct bpf_map *slots = bpf_object__find_map_by_name(obj, "slots");
	struct btf *btf = bpf_object__btf(obj);
	struct bpf_map *map;

	if (!slots || !btf)
		return 0;
	bpf_object__for_each_map(map, obj) {
		const char *name = bpf_map__name(map);
		size_t size;
		char *data;

		if (!strstr(name, ".rodata"))
			continue;
		/* Writable until load: libbpf copies it into the map then (as skeletons write it). */
		data = (char *)bpf_map__initial_value(map, &size);
		int id = btf__find_by_name_kind(btf, ".rodata", BTF_KIND_DATASEC);

		if (!data || id < 0)
			return -1;
		const struct btf_type *sec = btf__type_by_id(btf, id);
		const struct btf_var_secinfo *v = btf_var_secinfos(sec);

		for (int i = 0; i < btf_vlen(sec); i++, v++) {
			const struct btf_type *var = btf__type_by_id(btf, v->type);

			if (strcmp(btf__name_by_offset(btf, var->name_off), "slot_mask") == 0 &&
			    v->offset + 4 <= size) {
				unsigned int mask = bpf_map__max_entries(slots) - 1;

				memcpy(data + v->offset, &mask, 4);
				return 0;
			}
		}
	}
	return 0;
}

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
	if (set_slot_mask(obj)) {
		fprintf(stderr, "cannot set slot_mask\n");
		return 1;
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
