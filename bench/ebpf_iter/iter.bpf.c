// SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0
/*
 * What reading every process's CPU time from the kernel's own accounting costs, instead of
 * charging it at every sched_switch (bench/ebpf_iter.sh). A task iterator: for each thread, one
 * record of its group, its own run time (se.sum_exec_runtime, which the scheduler keeps at
 * every switch and tick anyway) and, on the group leader, the run time of the group's threads
 * already gone (signal->sum_sched_runtime) and its default-hierarchy cgroup.
 */
#include <linux/types.h>

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

struct kernfs_node {
	__u64 id;
} __attribute__((preserve_access_index));

struct cgroup {
	struct kernfs_node *kn;
} __attribute__((preserve_access_index));

struct css_set {
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));

struct signal_struct {
	__u64 sum_sched_runtime;
} __attribute__((preserve_access_index));

struct sched_entity {
	__u64 sum_exec_runtime;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct sched_entity se;
	struct signal_struct *signal;
	struct css_set *cgroups;
} __attribute__((preserve_access_index));

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

struct record {
	__u32 tgid;
	__u32 pid;
	__u64 run_ns;
	__u64 gone_threads_ns; /* leader only */
	__u64 cgroup_id; /* leader only */
};

SEC("iter/task")
int dump_task(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct record r = {};

	if (!task)
		return 0;
	r.tgid = task->tgid;
	r.pid = task->pid;
	r.run_ns = task->se.sum_exec_runtime;
	if (r.pid == r.tgid) {
		r.gone_threads_ns = BPF_CORE_READ(task, signal, sum_sched_runtime);
		r.cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	}
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}
