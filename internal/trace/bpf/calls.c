//go:build ignore

// calls.c: entries and returns of user-space functions (libcuda's launch and
// synchronize calls, the hint API of libgpreempt), for per-request
// timelines. One program serves every function: the attach cookie says
// which one fired (role << 24 | index into the Go side's symbol table).

#include "common.h"
#include <bpf/bpf_core_read.h>

char __license[] SEC("license") = "Dual MIT/GPL";

// The kernel's struct pt_regs, as uprobe programs see it. Only the argument
// and return registers are read.
#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	__u64 ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};
#define ARG0(r) ((r)->di)
#define ARG1(r) ((r)->si)
#define RET(r) ((r)->ax)
#elif defined(__TARGET_ARCH_arm64)
struct pt_regs {
	__u64 regs[31];
	__u64 sp, pc, pstate;
};
#define ARG0(r) ((r)->regs[0])
#define ARG1(r) ((r)->regs[1])
#define RET(r) ((r)->regs[0])
#else
#error "calls.c: no pt_regs layout for this target (bpf2go -target amd64 or arm64)"
#endif

// The calling thread's scheduler accounting, as much of it as is read:
// relocated by CO-RE against the running kernel's BTF, so no offset is
// assumed.
struct sched_entity {
	__u64 sum_exec_runtime;
} __attribute__((preserve_access_index));

struct task_struct {
	struct sched_entity se;
	unsigned long nvcsw;
} __attribute__((preserve_access_index));

// The roles of package trace (type Role) that the programs treat apart.
enum role {
	ROLE_HINT = 3, // gpreempt_hint(char *class, uint64_t expected_prep_us)
};

enum call_kind {
	KIND_CALL_ENTER = 3, // distinct from rmioctl.c's kinds: one decoder serves both rings
	KIND_CALL_RETURN = 4,
};

struct call_event {
	__u32 kind;
	__u32 pid;
	__u32 tid;
	__u32 _pad;
	__u64 ns;
	// The thread's CPU time so far (task->se.sum_exec_runtime), 0 when
	// it could not be read. The scheduler brings it up to date when the
	// thread is switched out and at each tick, so while the thread runs
	// it lags by at most a tick.
	__u64 on_cpu_ns;
	// How often the thread has blocked so far (task->nvcsw, its
	// voluntary context switches), plus one; 0 when it could not be read.
	// Exact at any moment, unlike the CPU time: two of a thread's calls
	// with the same count had it never sleep between them.
	__u64 blocked;
	__u64 cookie;
	__u64 arg0;
	__u64 arg1;
	__u64 ret;
	__u8 comm[16];
	// For a hint's entry, the class string its first argument points
	// to (NUL-terminated, truncated).
	__u8 str[16];
};

const struct call_event *unused_call_event __attribute__((unused));
const enum role *unused_role __attribute__((unused));

volatile const __u32 filter_tgid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} call_events SEC(".maps");

DECLARE_DROP_COUNTER(call_dropped);

// on_cpu_ns is the current thread's CPU time so far, or 0.
static __always_inline __u64 on_cpu_ns(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 ns = 0;

	if (bpf_core_field_exists(task->se.sum_exec_runtime))
		ns = BPF_CORE_READ(task, se.sum_exec_runtime);
	return ns;
}

// blocked is the current thread's voluntary context switches plus one, or 0.
static __always_inline __u64 blocked(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	if (!bpf_core_field_exists(task->nvcsw))
		return 0;
	return BPF_CORE_READ(task, nvcsw) + 1;
}

// reserve filters by process and fills a ring-buffer record for the call
// at ctx (arguments at entry, the return value at return; str zeroed), or
// returns NULL (filtered out, or the ring is full: counted).
static __always_inline struct call_event *reserve(struct pt_regs *ctx, __u32 kind)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;

	if (filter_tgid && tgid != filter_tgid)
		return NULL;
	struct call_event *e = bpf_ringbuf_reserve(&call_events, sizeof(*e), 0);
	if (!e) {
		count_drop(&call_dropped);
		return NULL;
	}
	e->kind = kind;
	e->pid = tgid;
	e->tid = (__u32)pid_tgid;
	e->_pad = 0;
	e->ns = now;
	e->on_cpu_ns = on_cpu_ns();
	e->blocked = blocked();
	e->cookie = bpf_get_attach_cookie(ctx);
	__builtin_memset(e->str, 0, sizeof(e->str));
	if (kind == KIND_CALL_ENTER) {
		e->arg0 = ARG0(ctx);
		e->arg1 = ARG1(ctx);
		e->ret = 0;
	} else {
		e->arg0 = 0;
		e->arg1 = 0;
		e->ret = RET(ctx);
	}
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	return e;
}

static __always_inline int emit(struct pt_regs *ctx, __u32 kind)
{
	struct call_event *e = reserve(ctx, kind);

	if (e)
		bpf_ringbuf_submit(e, SUBMIT_FLAGS);
	return 0;
}

SEC("uprobe")
int call_enter(struct pt_regs *ctx)
{
	return emit(ctx, KIND_CALL_ENTER);
}

SEC("uretprobe")
int call_return(struct pt_regs *ctx)
{
	return emit(ctx, KIND_CALL_RETURN);
}

// emit_hint is emit for gpreempt_hint's entry, which also copies the class
// string. Its programs are sleepable, so that the copy may fault the page
// in: a string literal's page is often not yet mapped when the first hint
// passes it, and a non-faulting read would find nothing.
static __always_inline int emit_hint(struct pt_regs *ctx)
{
	struct call_event *e = reserve(ctx, KIND_CALL_ENTER);

	if (!e)
		return 0;
	// A fixed-size copy may cross into an unmapped page after a short
	// string; then read up to the NUL without faulting.
	if (e->arg0 && bpf_copy_from_user(e->str, sizeof(e->str), (const void *)e->arg0))
		bpf_probe_read_user_str(e->str, sizeof(e->str), (const void *)e->arg0);
	bpf_ringbuf_submit(e, SUBMIT_FLAGS);
	return 0;
}

SEC("uprobe.s")
int call_enter_hint(struct pt_regs *ctx)
{
	return emit_hint(ctx);
}

// The same programs for uprobe_multi links, which carry all of a
// process's functions of one program in one link (the tracer uses them
// from Linux 6.10: see uprobeMultiSupport); a program is loaded for one
// kind of link or the other. Closing such a link removes its uprobes with
// one wait for the kernel's grace periods, where per-function uprobes
// wait once each.

SEC("uprobe.multi")
int call_enter_multi(struct pt_regs *ctx)
{
	return emit(ctx, KIND_CALL_ENTER);
}

SEC("uretprobe.multi")
int call_return_multi(struct pt_regs *ctx)
{
	return emit(ctx, KIND_CALL_RETURN);
}

SEC("uprobe.multi.s")
int call_enter_hint_multi(struct pt_regs *ctx)
{
	return emit_hint(ctx);
}
