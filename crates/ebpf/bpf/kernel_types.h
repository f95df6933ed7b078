/* SPDX-License-Identifier: GPL-2.0-only OR Apache-2.0 */
/*
 * The few kernel types kepler.bpf.c reads, declared with preserve_access_index so that clang
 * emits CO-RE relocations: the loader fixes every field offset against the running kernel's BTF
 * (/sys/kernel/btf/vmlinux). We declare them here instead of including a bpftool-generated
 * vmlinux.h because that header embeds the build machine's full struct layouts into the object's
 * BTF, which would make the committed object depend on the kernel it was built on; with these
 * declarations the object depends only on this source and the clang version.
 */
#ifndef KEPLER_KERNEL_TYPES_H
#define KEPLER_KERNEL_TYPES_H

#include <linux/types.h>
#include <stdbool.h>

typedef struct {
	int counter;
} atomic_t;

struct signal_struct {
	/* Threads of the group that have not yet passed the exit path's decrement. */
	atomic_t live;
	/* CPU time and switches of the group's threads already released. */
	__u64 sum_sched_runtime;
	unsigned long nvcsw;
	unsigned long nivcsw;
} __attribute__((preserve_access_index));

struct sched_entity {
	/* The scheduler's own count of the task's CPU time, in ns. */
	__u64 sum_exec_runtime;
} __attribute__((preserve_access_index));

/* Only the name matters: the loader relocates the value against the running kernel. */
enum cgroup_subsys_id {
	cpu_cgrp_id = 0,
};

struct kernfs_node {
	__u64 id; /* the cgroup id: the inode number of the cgroup's directory */
} __attribute__((preserve_access_index));

struct cgroup {
	struct kernfs_node *kn;
} __attribute__((preserve_access_index));

struct cgroup_subsys_state {
	struct cgroup *cgroup;
} __attribute__((preserve_access_index));

struct css_set {
	struct cgroup_subsys_state *subsys[16];
	/* The task's cgroup in the default (v2) hierarchy. */
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));

struct task_struct {
	unsigned int flags;
	int exit_state;
	int pid;
	int tgid;
	struct sched_entity se;
	unsigned long nvcsw;
	unsigned long nivcsw;
	/* Start time since boot including suspend: what /proc/<pid>/stat field 22 shows. */
	__u64 start_boottime;
	struct task_struct *group_leader;
	struct signal_struct *signal;
	struct css_set *cgroups;
	char comm[16];
} __attribute__((preserve_access_index));

/* The first argument of every iterator program: which session (one per iterator file). */
struct bpf_iter_meta {
	__u64 session_id;
} __attribute__((preserve_access_index));

#endif
