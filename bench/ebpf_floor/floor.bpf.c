// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * Reference sched_switch programs that do less than kepler_switch, to tell the cost of the
 * work from the cost of being called (bench/ebpf_floor.sh). Built three times:
 *   FLOOR_LEVEL 0: returns at once (the trampoline and bpf_stats' own clock reads);
 *   FLOOR_LEVEL 1: + the per-CPU switch bookkeeping (one per-CPU array value, the clock);
 *   FLOOR_LEVEL 2: + one hash lookup by tgid and two atomic adds on the entry, which is what
 *                  per-process accounting needs at the least;
 *   FLOOR_LEVEL 3: level 2 with the hash map's entries allocated as they are made
 *                  (BPF_F_NO_PREALLOC: from the kernel's slab, not one block made at load);
 *   FLOOR_LEVEL 4: level 2 with an array indexed by tgid in place of the hash map: one line
 *                  found by arithmetic, no hash, no bucket. It holds tgids below its size
 *                  only, so it is a reference for what a table with a slot per process would
 *                  cost a switch, not a way to account (pid_max is 4,194,304 on most hosts).
 */
#include "../../crates/ebpf/bpf/kernel_types.h"
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

#ifndef FLOOR_LEVEL
#define FLOOR_LEVEL 0
#endif

struct per_cpu {
	__u64 last_ns;
	__u32 cur_tgid;
	__u32 _pad;
};

struct totals {
	__u64 cpu_ns;
	__u64 switches;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct per_cpu);
} floor_cpu SEC(".maps");

#if FLOOR_LEVEL == 4
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 32768); /* the kernel's default pid_max */
	__type(key, __u32);
	__type(value, struct totals);
} floor_tasks SEC(".maps");
#else
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
#if FLOOR_LEVEL == 3
	__uint(map_flags, BPF_F_NO_PREALLOC);
#endif
	__type(key, __u32);
	__type(value, struct totals);
} floor_tasks SEC(".maps");
#endif

SEC("tp_btf/sched_switch")
int BPF_PROG(floor_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
#if FLOOR_LEVEL >= 1
	__u32 zero = 0;
	struct per_cpu *cs = bpf_map_lookup_elem(&floor_cpu, &zero);

	if (!cs)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 last = cs->last_ns;
	__u32 tgid = prev->tgid;

	cs->last_ns = now;
	cs->cur_tgid = next->tgid;
	if (tgid == 0 || last == 0)
		return 0;
#endif
#if FLOOR_LEVEL >= 2
	struct totals *t = bpf_map_lookup_elem(&floor_tasks, &tgid);

	if (!t) {
		struct totals fresh = {};

		/* An array has every slot already; a tgid past its end is not counted. */
		if (FLOOR_LEVEL == 4)
			return 0;

		bpf_map_update_elem(&floor_tasks, &tgid, &fresh, BPF_NOEXIST);
		return 0;
	}
	__sync_fetch_and_add(&t->cpu_ns, now - last);
	__sync_fetch_and_add(&t->switches, 1);
#endif
	return 0;
}
