//go:build ignore

// rmioctl.c: NVIDIA resource-manager (RM) ioctls, seen from the syscall
// tracepoints (no kprobes or fentry on the machines this runs on).
//
// sys_enter_ioctl keeps the raw parameter block of NV_ESC_RM_ALLOC, _FREE
// and _CONTROL (and, for channel-group controls, the head of the control's
// own parameters) in a per-thread table; sys_exit_ioctl reads them again,
// because RM writes the status and any new handle back into the same user
// memory, and sends both copies to user space. Nothing is decoded here: the
// Go side owns every layout (package ioctl) and is fuzzed.

#include "common.h"

char __license[] SEC("license") = "Dual MIT/GPL";

// From kernel-open/common/inc/nv-ioctl-numbers.h and
// src/nvidia/arch/nvalloc/unix/include/nv_escape.h:
#define NV_IOCTL_MAGIC 'F'
#define NV_ESC_RM_FREE 0x29
#define NV_ESC_RM_CONTROL 0x2a
#define NV_ESC_RM_ALLOC 0x2b
// Sizes of NVOS00 (free), NVOS21 and NVOS54 (short alloc, control), NVOS64
// (long alloc). RM refuses any other size, so nothing else is worth a copy.
#define NVOS00_SIZE 16
#define NVOS54_SIZE 32
#define NVOS64_SIZE 48
// KEPLER_CHANNEL_GROUP_A: controls on channel groups are 0xa06cXXXX.
#define CHANNEL_GROUP_CLASS 0xa06c
// The channel-group controls' parameter blocks that matter (timeslice,
// interleave level, schedule, preempt) all fit in 8 bytes.
#define PARAMS_HEAD 8

enum event_kind {
	KIND_RM_CALL = 1,
	KIND_TASK_EXIT = 2,
};

// Which of the user-memory reads succeeded (rm_event.flags).
enum read_flags {
	READ_ARG_ENTER = 1 << 0,
	READ_ARG_EXIT = 1 << 1,
	READ_HEAD_ENTER = 1 << 2,
	READ_HEAD_EXIT = 1 << 3,
};

struct rm_event {
	__u32 kind;
	__u32 pid;
	__u32 tid;
	__u32 fd;
	__u32 cmd; // the ioctl request number: dir, size, type 'F', escape
	__u32 flags;
	__u32 head_len; // bytes of the control's params read (0..8)
	__u32 _pad;
	__u64 arg; // the user pointer to the parameter block
	__u64 enter_ns;
	__u64 exit_ns;
	__s64 ret; // the syscall's return: 0 or -errno
	__u8 comm[16];
	__u8 arg_enter[NVOS64_SIZE];
	__u8 arg_exit[NVOS64_SIZE];
	__u8 head_enter[PARAMS_HEAD];
	__u8 head_exit[PARAMS_HEAD];
};

// task_exit_event: a process ended; RM frees what its files owned without
// any ioctl, so the registry needs to hear it.
struct task_exit_event {
	__u32 kind;
	__u32 pid;
	__u64 ns;
	__u8 comm[16];
};

// Referenced so that clang keeps the types' BTF for bpf2go -type.
const struct rm_event *unused_rm_event __attribute__((unused));
const struct task_exit_event *unused_task_exit_event __attribute__((unused));

// filter_tgid, when not 0, limits tracing to one process. Set at load.
volatile const __u32 filter_tgid = 0;
// ignore_tgid, when not 0, is a process whose ioctls are never recorded
// (the daemon's own discovery probes and SETs). Set at load.
volatile const __u32 ignore_tgid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); // pid_tgid of the thread inside the ioctl
	__type(value, struct rm_event);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} rm_events SEC(".maps");

DECLARE_DROP_COUNTER(rm_dropped);

// From /sys/kernel/tracing/events/syscalls/sys_enter_ioctl/format: every
// syscall argument is widened to 8 bytes after the common header and nr.
struct sys_enter_ioctl_ctx {
	__u64 common; // common_type, common_flags, common_preempt_count, common_pid
	__s32 syscall_nr;
	__u32 _pad;
	__u64 fd;
	__u64 cmd;
	__u64 arg;
};

// From /sys/kernel/tracing/events/syscalls/sys_exit_ioctl/format.
struct sys_exit_ioctl_ctx {
	__u64 common;
	__s32 syscall_nr;
	__u32 _pad;
	__s64 ret;
};

// read_arg copies an RM parameter block of a size RM accepts; constant sizes
// keep the verifier simple.
static __always_inline int read_arg(__u8 *dst, __u32 size, __u64 src)
{
	switch (size) {
	case NVOS00_SIZE:
		return bpf_probe_read_user(dst, NVOS00_SIZE, (const void *)src);
	case NVOS54_SIZE:
		return bpf_probe_read_user(dst, NVOS54_SIZE, (const void *)src);
	case NVOS64_SIZE:
		return bpf_probe_read_user(dst, NVOS64_SIZE, (const void *)src);
	}
	return -1;
}

// read_head copies up to PARAMS_HEAD bytes of a channel-group control's
// parameters (NVOS54.params), never past params_size: a 3-byte
// GPFIFO_SCHEDULE block may end a page.
static __always_inline __u32 read_head(__u8 *dst, const __u8 *nvos54)
{
	__u32 cmd = *(const __u32 *)(nvos54 + 8);
	__u64 params = *(const __u64 *)(nvos54 + 16);
	__u32 size = *(const __u32 *)(nvos54 + 24);

	if ((cmd >> 16) != CHANNEL_GROUP_CLASS || params == 0 || size == 0)
		return 0;
	if (size >= PARAMS_HEAD) {
		if (bpf_probe_read_user(dst, PARAMS_HEAD, (const void *)params))
			return 0;
		return PARAMS_HEAD;
	}
	size &= PARAMS_HEAD - 1;
	if (bpf_probe_read_user(dst, size, (const void *)params))
		return 0;
	return size;
}

static __always_inline int wanted(__u32 cmd)
{
	__u32 type = (cmd >> 8) & 0xff;
	__u32 nr = cmd & 0xff;
	__u32 size = (cmd >> 16) & 0x3fff;

	if (type != NV_IOCTL_MAGIC)
		return 0;
	switch (nr) {
	case NV_ESC_RM_FREE:
		return size == NVOS00_SIZE;
	case NV_ESC_RM_CONTROL:
		return size == NVOS54_SIZE;
	case NV_ESC_RM_ALLOC:
		return size == NVOS54_SIZE || size == NVOS64_SIZE;
	}
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_ioctl")
int rm_ioctl_enter(struct sys_enter_ioctl_ctx *ctx)
{
	__u32 cmd = (__u32)ctx->cmd;
	if (!wanted(cmd))
		return 0;

	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	if (filter_tgid && tgid != filter_tgid)
		return 0;
	if (ignore_tgid && tgid == ignore_tgid)
		return 0;

	struct rm_event e = {};
	e.kind = KIND_RM_CALL;
	e.pid = tgid;
	e.tid = (__u32)pid_tgid;
	e.fd = (__u32)ctx->fd;
	e.cmd = cmd;
	e.arg = ctx->arg;
	bpf_get_current_comm(e.comm, sizeof(e.comm));
	if (read_arg(e.arg_enter, (cmd >> 16) & 0x3fff, ctx->arg) == 0) {
		e.flags |= READ_ARG_ENTER;
		if ((cmd & 0xff) == NV_ESC_RM_CONTROL) {
			e.head_len = read_head(e.head_enter, e.arg_enter);
			if (e.head_len)
				e.flags |= READ_HEAD_ENTER;
		}
	}
	// Last, so that the copies above are not counted in the call's time.
	e.enter_ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&inflight, &pid_tgid, &e, BPF_ANY))
		count_drop(&rm_dropped);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_ioctl")
int rm_ioctl_exit(struct sys_exit_ioctl_ctx *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct rm_event *in = bpf_map_lookup_elem(&inflight, &pid_tgid);
	if (!in)
		return 0;

	struct rm_event *e = bpf_ringbuf_reserve(&rm_events, sizeof(*e), 0);
	if (!e) {
		count_drop(&rm_dropped);
		bpf_map_delete_elem(&inflight, &pid_tgid);
		return 0;
	}
	__builtin_memcpy(e, in, sizeof(*e));
	bpf_map_delete_elem(&inflight, &pid_tgid);
	e->exit_ns = now;
	e->ret = ctx->ret;
	if (read_arg(e->arg_exit, (e->cmd >> 16) & 0x3fff, e->arg) == 0) {
		e->flags |= READ_ARG_EXIT;
		// The head is read again for GET controls, whose answer RM
		// writes back; the enter copy's pointer is the one RM used.
		if ((e->cmd & 0xff) == NV_ESC_RM_CONTROL && (e->flags & READ_ARG_ENTER)) {
			if (read_head(e->head_exit, e->arg_enter))
				e->flags |= READ_HEAD_EXIT;
		}
	}
	bpf_ringbuf_submit(e, SUBMIT_FLAGS);
	return 0;
}

SEC("tracepoint/sched/sched_process_exit")
int rm_task_exit(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;

	// One event per process, from its main thread.
	if ((__u32)pid_tgid != tgid)
		return 0;
	if (filter_tgid && tgid != filter_tgid)
		return 0;
	struct task_exit_event *e = bpf_ringbuf_reserve(&rm_events, sizeof(*e), 0);
	if (!e) {
		count_drop(&rm_dropped);
		return 0;
	}
	e->kind = KIND_TASK_EXIT;
	e->pid = tgid;
	e->ns = bpf_ktime_get_ns();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, SUBMIT_FLAGS);
	return 0;
}
