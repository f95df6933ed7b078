// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * Per-process (thread group) CPU accounting for kepler-rs.
 *
 * sched_switch charges the time since the previous switch on this CPU to the task leaving it,
 * keyed by tgid in `tasks`. When the last thread of a group leaves the CPU for the last time
 * (TASK_DEAD with no live thread left), its totals move to the `exits` ring buffer, which user
 * space drains every tick, so a process living shorter than one tick is still counted. When the
 * ring is full the entry stays in `tasks`, marked exited, and user space collects it from there:
 * a burst of exits larger than the ring delays their report but loses no CPU time.
 * Optional programs (softirq, page cache) add event counts to the same entries, and hardware
 * counters are read at each switch when the loader opened them.
 *
 * A switch charges the leaving group's slot in `slots` rather than its entry in `tasks` once the
 * group holds one: an array element found by arithmetic (tgid modulo the array's size), where
 * the hash map's lookup walks a bucket to an entry, two cold lines a call at ordinary switch
 * rates. A group's reading is its entry plus its slot: user space adds the two, the exit record
 * carries both. A group's first switch, its final switches, and every switch of a group whose
 * slot another group holds go through the entry as before; one switch in sixteen charged to a
 * slot also looks the entry up, to refresh the group's cgroup.
 *
 * Iterator accounting replaces the per-switch accounting when nothing needs it (no hardware
 * counter, softirq or page-cache count is read): user space runs the task iterator once per
 * snapshot, which writes into each entry what the scheduler counted for the group's live
 * threads, and kepler_exit takes kepler_switch's place on sched_switch: it only acts on a
 * thread's final switch, adding the thread's final runtime to its group and handing the group
 * over when it was the last. The cost then follows the number of threads per snapshot and of
 * exits, not the number of switches. Each pass also copies every group's reading into a slot of
 * `pass_out`, an array user space maps and reads in place.
 *
 * The record layouts below are mirrored by crates/ebpf/src/abi.rs: change both together.
 */
#include "kernel_types.h"
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define TASK_DEAD 0x80
#define PF_KTHREAD 0x00200000
#define NET_TX_SOFTIRQ 2
#define NET_RX_SOFTIRQ 3
#define BLOCK_SOFTIRQ 4
#define EEXIST 17
#define CGROUP_EVERY 16
#define FLAG_KTHREAD 1
#define FLAG_EXITED 2

/* Set by the loader before load; the verifier then drops the hardware-counter code when off. */
const volatile __u8 hw_counters = 0;
/* The size of `slots` less one (a power of two less one), set by the loader; 0: no slots. */
const volatile __u32 slot_mask = 0;

struct task_totals {
	__u64 start_ns; /* group leader's start_boottime: tells reused tgids apart */
	__u64 cgroup_id; /* default-hierarchy cgroup at the last switch */
	__u64 cpu_ns;
	__u64 switches;
	__u64 page_cache_hits;
	__u64 irq_net_tx;
	__u64 irq_net_rx;
	__u64 irq_block;
	__u64 cycles;
	__u64 instructions;
	__u64 cache_misses;
	__u32 flags; /* bit 0: kernel thread; bit 1: exited, left here because `exits` was full */
	__u32 pass; /* iterator accounting: the pass that last wrote cpu_ns and switches */
	/* Iterator accounting: the final runtime and switches of the group's ended threads. */
	__u64 dead_ns;
	__u64 dead_switches;
	__u32 slot; /* iterator accounting: the group's slot in `pass_out` during pass `pass` */
	__u32 _pad;
	/*
	 * Iterator accounting: the pass's reading on the kernel's own basis, what the group's
	 * released threads left in its signal_struct plus every live thread, which needs no
	 * final-switch program (see `kepler_iter`).
	 */
	__u64 sig_ns;
	__u64 sig_switches;
};

/*
 * Iterator accounting: what one pass read of a group, in the slot the pass gave it (slots are
 * given in the order the pass meets groups, from 0). The array is mapped by user space, which
 * reads a pass from it rather than the whole process map: no walk of every bucket, no copy.
 */
struct pass_slot {
	__u32 tgid;
	__u32 flags;
	__u64 start_ns;
	__u64 cgroup_id;
	__u64 cpu_ns;
	__u64 switches;
	__u64 sig_ns;
	__u64 sig_switches;
};

/*
 * Per-switch accounting: what a group's switches charged since it took this slot of `slots`
 * (slot tgid modulo the array's size). `owner` is the group's tgid (with `start_ns`, its
 * identity), SLOT_FREE when the slot holds nothing, SLOT_BUSY while a CPU takes or empties it;
 * a CPU that finds it busy charges the group's entry instead. One cache line.
 */
struct slot {
	__u64 owner;
	__u64 start_ns;
	__u64 cpu_ns;
	__u64 switches;
	__u64 cycles;
	__u64 instructions;
	__u64 cache_misses;
	__u64 _pad;
};

#define SLOT_FREE 0
#define SLOT_BUSY (~0ULL)

/* Which pass the slots of `pass_out` hold, and how many it gave. */
struct pass_fill {
	__u32 pass;
	__u32 used;
};

struct exit_record {
	__u32 tgid;
	__u32 _pad;
	char comm[16];
	/*
	 * The cgroup of the cpu controller's hierarchy, read at exit. On hybrid hosts runtimes
	 * often place containers only in v1 hierarchies while the unified cgroup (cgroup_id) stays
	 * a service's; this lets user space still find the container. Same as cgroup_id on
	 * cgroup2-only hosts; 0 when unknown.
	 */
	__u64 cpu_cgroup_id;
	struct task_totals totals;
};

/*
 * Per CPU: when the running task was switched in, and which group it belongs to. User space
 * reads it to add the running stretch of a task that has not left its CPU for a long time
 * (a CPU hog alone on a CPU may not switch for seconds) instead of crediting it all later.
 */
struct cpu_state {
	__u64 last_ns;
	__u64 cycles;
	__u64 instructions;
	__u64 cache_misses;
	__u32 cur_tgid;
	__u32 _pad;
	__u64 cur_start_ns;
};

enum kstat {
	KSTAT_TASKS_FULL = 0, /* a new tgid found `tasks` full: its time is lost */
	KSTAT_EXITS_LOST = 1, /* `exits` was full: an exited group's totals are lost */
	KSTAT_TGID_REUSED = 2, /* a stale entry was found for a reused tgid and handed over */
	KSTAT_EXITS_DEFERRED = 3, /* `exits` was full: the entry stays in `tasks`, marked exited */
	KSTAT_PASS_OUT_FULL = 4, /* a pass met more groups than `pass_out` has slots */
	KSTAT_COUNT, /* the number of slots: keep it last */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); /* the loader sets the configured size */
	__type(key, __u32);
	__type(value, struct task_totals);
} tasks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10); /* the loader sets the configured size */
} exits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16384); /* the loader sets the size of `tasks` */
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct pass_slot);
} pass_out SEC(".maps");

/* Mapped by user space, which reads a group's slot where it read the group's entry. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16384); /* the loader sets the size of `tasks`, rounded up to a power of 2 */
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct slot);
} slots SEC(".maps");

/* Mapped by user space, which reads it every snapshot without a syscall, as it does kstats. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct pass_fill);
} pass_fill SEC(".maps");

/* Mapped by user space, like pass_fill. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KSTAT_COUNT);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} kstats SEC(".maps");

/* One perf event per CPU each, opened by the loader; max_entries 0 = number of CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(max_entries, 0);
} hw_cycles SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(max_entries, 0);
} hw_instr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(max_entries, 0);
} hw_cmiss SEC(".maps");

static __always_inline void kstat_inc(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&kstats, &which);

	if (v)
		__sync_fetch_and_add(v, 1);
}

/* Advances one counter of this CPU and returns how much it moved since the last switch. */
static __always_inline __u64 hw_delta(void *map, __u64 *last)
{
	struct bpf_perf_event_value v = {};

	if (bpf_perf_event_read_value(map, BPF_F_CURRENT_CPU, &v, sizeof(v)))
		return 0;
	__u64 d = v.counter - *last;
	*last = v.counter;
	return d;
}

/* The id of `task`'s cgroup in the cpu controller's hierarchy, or 0. */
static __always_inline __u64 cpu_cgroup_id(struct task_struct *task)
{
	struct cgroup_subsys_state *css = NULL;

	if (!bpf_core_enum_value_exists(enum cgroup_subsys_id, cpu_cgrp_id))
		return 0;
	__u32 idx = bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id);

	if (idx >= 16)
		return 0;
	struct css_set *cset = task->cgroups;

	if (bpf_probe_read_kernel(&css, sizeof(css), &cset->subsys[idx]) || !css)
		return 0;
	return BPF_CORE_READ(css, cgroup, kn, id);
}

/* The slot of `slots` that tgid maps to; NULL when slots are off. */
static __always_inline struct slot *slot_of(__u32 tgid)
{
	if (!slot_mask)
		return NULL;
	__u32 i = tgid & slot_mask;

	return bpf_map_lookup_elem(&slots, &i);
}

/* What a slot charged, taken out of it. */
struct slot_sum {
	__u64 cpu_ns;
	__u64 switches;
	__u64 cycles;
	__u64 instructions;
	__u64 cache_misses;
};

/*
 * Empties the slot of group (tgid, start), if it holds one, into `out`. The slot is marked busy
 * before it is read and freed after, and the caller adds `out` to the group's totals only after
 * that: user space, which reads a group's entry before its slot, then sees the slot's time in
 * one of the two, or for one snapshot in neither (a reading may fall short, never count twice).
 */
static __always_inline bool take_slot(__u32 tgid, __u64 start, struct slot_sum *out)
{
	struct slot *s = slot_of(tgid);

	if (!s || s->owner != tgid || s->start_ns != start)
		return false;
	if (__sync_val_compare_and_swap(&s->owner, (__u64)tgid, SLOT_BUSY) != tgid)
		return false;
	/* Emptied and taken again by a later group of the same tgid between the check and here. */
	if (s->start_ns != start) {
		__sync_lock_test_and_set(&s->owner, (__u64)tgid);
		return false;
	}
	out->cpu_ns = s->cpu_ns;
	out->switches = s->switches;
	out->cycles = s->cycles;
	out->instructions = s->instructions;
	out->cache_misses = s->cache_misses;
	__sync_lock_test_and_set(&s->owner, SLOT_FREE);
	return true;
}

/*
 * Gives group (tgid, start) tgid's slot when it is free, or held by a group that has no entry
 * any more (its entry was collected by user space). A group that finds the slot held by a live
 * group keeps charging its entry.
 */
static __always_inline void occupy_slot(__u32 tgid, __u64 start)
{
	struct slot *s = slot_of(tgid);

	if (!s)
		return;
	__u64 holder = s->owner;

	if (holder == SLOT_BUSY || (holder == tgid && s->start_ns == start))
		return;
	if (holder != SLOT_FREE) {
		__u32 key = (__u32)holder;
		struct task_totals *h = bpf_map_lookup_elem(&tasks, &key);

		if (h && h->start_ns == s->start_ns)
			return;
	}
	if (__sync_val_compare_and_swap(&s->owner, holder, SLOT_BUSY) != holder)
		return;
	s->start_ns = start;
	s->cpu_ns = 0;
	s->switches = 0;
	s->cycles = 0;
	s->instructions = 0;
	s->cache_misses = 0;
	__sync_lock_test_and_set(&s->owner, (__u64)tgid);
}

/*
 * Charges a switch to the leaving group's slot; false when the group holds none. The group's
 * entry is looked up only to refresh its cgroup, every CGROUP_EVERY switches.
 */
static __always_inline bool charge_slot(__u32 tgid, __u64 start, __u64 ran_ns, __u64 cycles,
					__u64 instructions, __u64 misses)
{
	struct slot *s = slot_of(tgid);

	if (!s || s->owner != tgid || s->start_ns != start)
		return false;
	__u64 seen = s->switches;

	__sync_fetch_and_add(&s->cpu_ns, ran_ns);
	__sync_fetch_and_add(&s->switches, 1);
	if (hw_counters) {
		__sync_fetch_and_add(&s->cycles, cycles);
		__sync_fetch_and_add(&s->instructions, instructions);
		__sync_fetch_and_add(&s->cache_misses, misses);
	}
	if ((seen % CGROUP_EVERY) == 0) {
		struct task_totals *t = bpf_map_lookup_elem(&tasks, &tgid);

		if (t && t->start_ns == start)
			t->cgroup_id = bpf_get_current_cgroup_id();
	}
	return true;
}

static __always_inline void add_sum(struct task_totals *t, const struct slot_sum *sum)
{
	__sync_fetch_and_add(&t->cpu_ns, sum->cpu_ns);
	__sync_fetch_and_add(&t->switches, sum->switches);
	__sync_fetch_and_add(&t->cycles, sum->cycles);
	__sync_fetch_and_add(&t->instructions, sum->instructions);
	__sync_fetch_and_add(&t->cache_misses, sum->cache_misses);
}

/*
 * Hands an entry's totals to user space and removes it. The delete decides which CPU moves an
 * entry when two threads of a dying group race here: the loser discards its copy. With the ring
 * full, an exited group's entry (`task` set) stays in the map marked exited, for user space to
 * collect; a stale entry in the way of a reused tgid (`task` NULL) has to go, and is lost.
 * With `slots` (per-switch accounting) the group's slot goes with its entry: into the record,
 * taken only by the CPU whose delete won, or into the entry left marked exited.
 */
static __always_inline void move_to_exits(__u32 tgid, struct task_totals *t, struct task_struct *task,
					  bool slots)
{
	struct exit_record *r = bpf_ringbuf_reserve(&exits, sizeof(*r), 0);
	struct slot_sum sum = {};

	if (!r) {
		bool had = slots && take_slot(tgid, t->start_ns, &sum);

		if (task) {
			if (had)
				add_sum(t, &sum);
			/* Racing CPUs all set the same bit, and nothing else writes flags. */
			t->flags |= FLAG_EXITED;
			kstat_inc(KSTAT_EXITS_DEFERRED);
			return;
		}
		kstat_inc(KSTAT_EXITS_LOST);
		bpf_map_delete_elem(&tasks, &tgid);
		return;
	}
	r->tgid = tgid;
	r->_pad = 0;
	r->cpu_cgroup_id = task ? cpu_cgroup_id(task) : 0;
	if (!task || bpf_probe_read_kernel_str(r->comm, sizeof(r->comm), task->group_leader->comm) < 0)
		__builtin_memset(r->comm, 0, sizeof(r->comm));
	/* Copy before the delete: a deleted element's memory is reused by the map. */
	__builtin_memcpy(&r->totals, t, sizeof(r->totals));
	if (bpf_map_delete_elem(&tasks, &tgid)) {
		bpf_ringbuf_discard(r, BPF_RB_NO_WAKEUP);
		return;
	}
	if (slots && take_slot(tgid, r->totals.start_ns, &sum)) {
		r->totals.cpu_ns += sum.cpu_ns;
		r->totals.switches += sum.switches;
		r->totals.cycles += sum.cycles;
		r->totals.instructions += sum.instructions;
		r->totals.cache_misses += sum.cache_misses;
	}
	/* User space polls every tick: skip the wake-up and its irq_work. */
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

/*
 * The entry of `task`'s group (leader started at `start`), created on first sight; NULL when
 * the map is full. `slots`: per-switch accounting, whose groups may hold a slot.
 */
static __always_inline struct task_totals *task_entry(struct task_struct *task, __u32 tgid,
						      __u64 start, bool slots)
{
	struct task_totals *t = bpf_map_lookup_elem(&tasks, &tgid);

	if (t) {
		if (t->start_ns == start)
			return t;
		/* The old group's exit was never seen (lost race): report it rather than merge. */
		kstat_inc(KSTAT_TGID_REUSED);
		move_to_exits(tgid, t, NULL, slots);
	}
	struct task_totals fresh = {};

	fresh.start_ns = start;
	fresh.flags = (task->flags & PF_KTHREAD) ? FLAG_KTHREAD : 0;
	long err = bpf_map_update_elem(&tasks, &tgid, &fresh, BPF_NOEXIST);

	if (err && err != -EEXIST) {
		kstat_inc(KSTAT_TASKS_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&tasks, &tgid);
}

/*
 * Iterator accounting: a group that ends with its only thread the task iterator never met (it
 * lived between two passes, as most short-lived processes do) has no entry; its totals go to
 * the ring straight from the task, without an entry made only to be deleted. False when the
 * ring is full: the caller then leaves an entry marked exited, as for any other group.
 */
static __always_inline bool exit_unmet(struct task_struct *prev, __u32 tgid, __u64 start)
{
	struct exit_record *r = bpf_ringbuf_reserve(&exits, sizeof(*r), 0);

	if (!r)
		return false;
	__builtin_memset(&r->totals, 0, sizeof(r->totals));
	r->tgid = tgid;
	r->_pad = 0;
	r->cpu_cgroup_id = cpu_cgroup_id(prev);
	if (bpf_probe_read_kernel_str(r->comm, sizeof(r->comm), prev->group_leader->comm) < 0)
		__builtin_memset(r->comm, 0, sizeof(r->comm));
	r->totals.start_ns = start;
	r->totals.cgroup_id = bpf_get_current_cgroup_id();
	r->totals.cpu_ns = prev->se.sum_exec_runtime;
	r->totals.switches = prev->nvcsw + prev->nivcsw;
	r->totals.flags = (prev->flags & PF_KTHREAD) ? FLAG_KTHREAD : 0;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
	return true;
}

/*
 * Iterator accounting, at a thread's final switch: the scheduler has just brought its runtime
 * up to date, so it is final. The thread counts in its group's ended part from here on (the
 * task iterator skips ended threads), and the group is handed over when no thread is left;
 * a thread of it still on its way out adds a piece later, in an entry of its own.
 *
 * A function of its own, not inlined: kepler_exit's own code is then eight instructions for
 * the ~99 % of switches that are not final, where inlined they jumped over this body (2 KiB of
 * JIT code) to its return, one more cold cache line a call: ~100 ns less a call at idle
 * (~340 against ~440, docs/benchmarks.md).
 */
static __noinline int thread_ended(struct task_struct *prev)
{
	__u32 tgid = prev->tgid;

	if (tgid == 0)
		return 0;
	__u64 start = prev->group_leader->start_boottime;

	if (prev->signal->live.counter == 0 && !bpf_map_lookup_elem(&tasks, &tgid) &&
	    exit_unmet(prev, tgid, start))
		return 0;
	struct task_totals *t = task_entry(prev, tgid, start, false);

	if (!t)
		return 0;
	__sync_fetch_and_add(&t->dead_ns, prev->se.sum_exec_runtime);
	__sync_fetch_and_add(&t->dead_switches, prev->nvcsw + prev->nivcsw);
	if (prev->signal->live.counter != 0)
		return 0;
	/* What the group's ended threads used: the piece this entry hands over. */
	t->cpu_ns = t->dead_ns;
	t->switches = t->dead_switches;
	t->cgroup_id = bpf_get_current_cgroup_id();
	move_to_exits(tgid, t, prev, false);
	return 0;
}

/* What a switch charges the group leaving the CPU, for charge_entry. */
struct charge {
	__u64 start_ns;
	__u64 ran_ns;
	__u64 cycles;
	__u64 instructions;
	__u64 cache_misses;
	__u32 dead; /* the task's final switch */
	__u32 _pad;
};

/*
 * A switch the leaving group's slot does not take: the group holds none (its first switch,
 * or another group holds its slot), or the task is ending. A function of its own, like
 * thread_ended: kepler_switch's own code is then only what a switch charged to a slot runs.
 */
static __noinline int charge_entry(struct task_struct *prev, struct charge *c)
{
	__u32 tgid = prev->tgid;

	if (tgid == 0)
		return 0;
	struct task_totals *t = task_entry(prev, tgid, c->start_ns, true);

	if (!t)
		return 0;
	/* A plain read is enough here: it only picks the switches that refresh the cgroup. */
	__u64 seen = t->switches;

	__sync_fetch_and_add(&t->cpu_ns, c->ran_ns);
	__sync_fetch_and_add(&t->switches, 1);
	if (hw_counters) {
		__sync_fetch_and_add(&t->cycles, c->cycles);
		__sync_fetch_and_add(&t->instructions, c->instructions);
		__sync_fetch_and_add(&t->cache_misses, c->cache_misses);
	}
	/*
	 * The group's end is its last thread's final switch, after sched_process_exit: moving the
	 * totals there keeps the exit path's own CPU time (closing files, notifying the parent).
	 */
	bool group_done = c->dead && prev->signal->live.counter == 0;

	/*
	 * The cgroup (still prev's: current is prev until the switch) is read on the group's
	 * first switch, every CGROUP_EVERY switches after, and at its end. Reading it on every
	 * switch cost ~30 ns of the ~250; a process moved to another cgroup is seen within a few
	 * switches, and an exited one always carries its final cgroup.
	 */
	if ((seen % CGROUP_EVERY) == 0 || group_done)
		t->cgroup_id = bpf_get_current_cgroup_id();
	if (group_done)
		move_to_exits(tgid, t, prev, true);
	else if (!c->dead && (seen % CGROUP_EVERY) == 0)
		/* On the group's first switch, and now and then after while another holds the slot. */
		occupy_slot(tgid, c->start_ns);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(kepler_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u32 zero = 0;
	struct cpu_state *cs = bpf_map_lookup_elem(&cpu_state, &zero);

	if (!cs)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 last = cs->last_ns;
	__u64 cycles = 0, instructions = 0, misses = 0;
	__u32 tgid = prev->tgid;
	__u32 next_tgid = next->tgid;
	/*
	 * prev is the task switched in by this CPU's previous switch, whose group start is kept
	 * here: reusing it spares a read of the group leader, often a cache miss. The group's start
	 * survives exec (a thread that execs takes the old leader's start), so it cannot go stale.
	 */
	__u64 prev_start = cs->cur_start_ns;

	if (cs->cur_tgid != tgid || prev_start == 0)
		prev_start = tgid ? prev->group_leader->start_boottime : 0;
	cs->last_ns = now;
	cs->cur_tgid = next_tgid;
	if (next_tgid == 0)
		cs->cur_start_ns = 0;
	else if (next_tgid == tgid)
		cs->cur_start_ns = prev_start;
	else
		cs->cur_start_ns = next->group_leader->start_boottime;
	if (hw_counters) {
		cycles = hw_delta(&hw_cycles, &cs->cycles);
		instructions = hw_delta(&hw_instr, &cs->instructions);
		misses = hw_delta(&hw_cmiss, &cs->cache_misses);
	}

	/* tgid 0 is the idle task; last_ns 0 means this CPU's first switch since load. */
	if (tgid == 0 || last == 0)
		return 0;
	/* A final switch may end the group: that is the entry's work. */
	bool dead = prev_state == TASK_DEAD;

	if (!dead && charge_slot(tgid, prev_start, now - last, cycles, instructions, misses))
		return 0;
	struct charge c = {
		.start_ns = prev_start,
		.ran_ns = now - last,
		.cycles = cycles,
		.instructions = instructions,
		.cache_misses = misses,
		.dead = dead,
	};

	return charge_entry(prev, &c);
}

/*
 * Iterator accounting's sched_switch program, attached in kepler_switch's place when user space
 * turns to the task iterator: it acts on final switches only. A program of its own rather than
 * a flag in kepler_switch, because at a few dozen switches per CPU a second the flag's line is
 * a cache miss on every call, for an answer that never changes.
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(kepler_exit, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	return prev_state == TASK_DEAD ? thread_ended(prev) : 0;
}

/* Counts an event for the current task's group if it already has an entry. */
static __always_inline struct task_totals *current_entry(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (tgid == 0)
		return NULL;
	return bpf_map_lookup_elem(&tasks, &tgid);
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(kepler_softirq, unsigned int vec_nr)
{
	if (vec_nr != NET_TX_SOFTIRQ && vec_nr != NET_RX_SOFTIRQ && vec_nr != BLOCK_SOFTIRQ)
		return 0;
	struct task_totals *t = current_entry();

	if (!t)
		return 0;
	if (vec_nr == NET_TX_SOFTIRQ)
		__sync_fetch_and_add(&t->irq_net_tx, 1);
	else if (vec_nr == NET_RX_SOFTIRQ)
		__sync_fetch_and_add(&t->irq_net_rx, 1);
	else
		__sync_fetch_and_add(&t->irq_block, 1);
	return 0;
}

static __always_inline void count_page_cache_hit(void)
{
	struct task_totals *t = current_entry();

	if (t)
		__sync_fetch_and_add(&t->page_cache_hits, 1);
}

/*
 * Page-cache hits: the loader attaches one of these to folio_mark_accessed, else
 * mark_page_accessed. fentry is tried first (a direct call, cheaper than a kprobe's trap);
 * kernels without BPF trampolines, or that refuse them, get the kprobe.
 */
SEC("fentry")
int BPF_PROG(kepler_pgcache_fentry)
{
	count_page_cache_hit();
	return 0;
}

SEC("kprobe")
int kepler_pgcache(void *ctx)
{
	count_page_cache_hit();
	return 0;
}

/*
 * The next slot of `pass_out` for pass `pass`; past the array's end when the pass met more
 * groups than it has slots (user space then reads the process map instead). Passes run one at a
 * time (one iterator session's calls come in sequence), so plain updates are enough.
 */
static __always_inline __u32 claim_slot(__u32 pass)
{
	__u32 zero = 0;
	struct pass_fill *f = bpf_map_lookup_elem(&pass_fill, &zero);

	if (!f)
		return ~0U;
	if (f->pass != pass) {
		f->pass = pass;
		f->used = 0;
	}
	__u32 slot = f->used;

	if (!bpf_map_lookup_elem(&pass_out, &slot)) {
		kstat_inc(KSTAT_PASS_OUT_FULL);
		return ~0U;
	}
	f->used = slot + 1;
	return slot;
}

/* The context of a task iterator program (uapi: its layout is fixed). */
struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
};

/*
 * One call per thread, then one with no task at the end of the pass. A group's entry is
 * restarted from its ended threads' part at the first of its threads the pass meets, and each
 * live thread adds the runtime the scheduler counted for it. Beside that reading, which needs
 * kepler_exit to add each ended thread's final runtime, the pass makes one on the kernel's own
 * basis (sig_ns): the runtime the group's released threads left in its signal_struct (the sum
 * the kernel keeps for the group's /proc/<pid>/stat) plus its live threads. That one needs no
 * program on sched_switch at all; what it misses (a thread between its exit and its release,
 * the last moments of a group) reaches the group's cgroup through the cgroup's usage counter,
 * which user space reads when it runs without kepler_exit. A pass is one iterator session
 * (user space opens one per snapshot), so a pass cut short leaves nothing for the next one to
 * add to. A thread past exit_notify (a zombie, or being released) is skipped: its final switch
 * adds it to the ended part, and until then a reading only misses it, never counts it twice.
 */
SEC("iter/task")
int kepler_iter(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;

	if (!task)
		return 0;
	__u32 pass = ctx->meta->session_id;
	__u32 tgid = task->tgid;

	if (tgid == 0 || task->exit_state != 0)
		return 0;
	struct task_totals *t = task_entry(task, tgid, task->group_leader->start_boottime, false);

	if (!t)
		return 0;
	if (t->pass != pass) {
		struct signal_struct *sig = task->signal;

		t->pass = pass;
		t->cpu_ns = t->dead_ns;
		t->switches = t->dead_switches;
		t->sig_ns = sig->sum_sched_runtime;
		t->sig_switches = sig->nvcsw + sig->nivcsw;
		t->cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
		t->slot = claim_slot(pass);
	}
	__u64 runtime = task->se.sum_exec_runtime;
	__u64 switches = task->nvcsw + task->nivcsw;

	t->cpu_ns += runtime;
	t->switches += switches;
	t->sig_ns += runtime;
	t->sig_switches += switches;
	/* The slot follows the entry thread by thread, so it holds the group's reading at the end. */
	__u32 slot = t->slot;
	struct pass_slot *s = bpf_map_lookup_elem(&pass_out, &slot);

	if (s) {
		s->tgid = tgid;
		s->flags = t->flags;
		s->start_ns = t->start_ns;
		s->cgroup_id = t->cgroup_id;
		s->cpu_ns = t->cpu_ns;
		s->switches = t->switches;
		s->sig_ns = t->sig_ns;
		s->sig_switches = t->sig_switches;
	}
	return 0;
}
