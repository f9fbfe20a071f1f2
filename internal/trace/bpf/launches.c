//go:build ignore

// launches.c: counts kernel launches per process, for gpreemptd's measure
// of BE progress. The uprobes are attached per process (to the BE ones
// only, so no other process takes the breakpoint), and user space puts each
// such process's key in the table at attach time: the program only adds,
// and a process nobody attached to is never counted. No ring buffer, no
// registers: one atomic add per launch.

#include "common.h"

char __license[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);   // tgid
	__type(value, __u64); // launches since attach
} launch_counts SEC(".maps");

static __always_inline int count(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 *n = bpf_map_lookup_elem(&launch_counts, &tgid);

	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}

SEC("uprobe")
int count_launch(void *ctx)
{
	return count();
}

// One link for all of a process's launch functions (Linux 6.10+). Unlike a
// perf uprobe it asks no removal when another process hits the function:
// such a hit would take the probe's registration lock and wait out anyone
// attaching or detaching another probe on that function (the gate's).
SEC("uprobe.multi")
int count_launch_multi(void *ctx)
{
	return count();
}
