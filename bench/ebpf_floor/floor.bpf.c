// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * Reference sched_switch programs that do less than kepler_switch, to tell the cost of the
 * work from the cost of being called (bench/ebpf_floor.sh). Built three times:
 *   FLOOR_LEVEL 0: returns at once (the trampoline and bpf_stats' own clock reads);
 *   FLOOR_LEVEL 1: + the per-CPU switch bookkeeping (one per-CPU array value, the clock);
 *   FLOOR_LEVEL 2: + one hash lookup by tgid and two atomic adds on the entry, which is what
 *                  per-process accounting needs at the least.
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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct totals);
} floor_tasks SEC(".maps");

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

		bpf_map_update_elem(&floor_tasks, &tgid, &fresh, BPF_NOEXIST);
		return 0;
	}
	__sync_fetch_and_add(&t->cpu_ns, now - last);
	__sync_fetch_and_add(&t->switches, 1);
#endif
	return 0;
}
