// common.h: the few kernel types and constants the gpreempt BPF programs
// need, declared by hand instead of a generated vmlinux.h (megabytes, tied to
// one kernel): the programs read only syscall tracepoint records, whose
// layout is fixed ABI (see /sys/kernel/tracing/events/syscalls/*/format), and
// uprobe registers.
#pragma once

typedef unsigned char __u8;
typedef short int __s16;
typedef short unsigned int __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long int __s64;
typedef long long unsigned int __u64;
typedef __u16 __le16;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;

// From include/uapi/linux/bpf.h:
enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_ANY = 0,
	BPF_RB_NO_WAKEUP = 1,
};

#include <bpf/bpf_helpers.h>

// drop_counter counts events lost because the ring buffer (or the in-flight
// table) was full; user space sums it over CPUs and reports it.
#define DECLARE_DROP_COUNTER(name)                                             \
	struct {                                                               \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                       \
		__uint(max_entries, 1);                                        \
		__type(key, __u32);                                            \
		__type(value, __u64);                                          \
	} name SEC(".maps")

// Records are submitted without waking the reader: a wakeup costs the
// traced thread about 1.3 us (an IPI to the reader's CPU), more than the
// rest of the tracing. The reader polls the ring instead (every 10 ms by
// default), so events arrive up to one poll late.
#define SUBMIT_FLAGS BPF_RB_NO_WAKEUP

static __always_inline void count_drop(void *map)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(map, &zero);
	if (n)
		*n += 1;
}
