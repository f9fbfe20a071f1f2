// The hint API's C entry points (include/gpreempt.h). Each starts with a
// 5-byte NOP (nopl 0x0(%rax,%rax,1)) and tail-calls the Go implementation:
// on x86-64 (kernel 6.18+) a uprobe on that NOP is turned into a call, so
// tracing hints costs ~0.3 us per hit instead of a ~28 us trap
// (docs/TRACING.md). abi_test.go checks the bytes in the built library.
#include <stdint.h>
#include "_cgo_export.h"

#if defined(__x86_64__)
#define UPROBE_NOP5 __asm__ volatile(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00")
#else
#define UPROBE_NOP5 do { } while (0)
#endif

#define GPREEMPT_EXPORT __attribute__((visibility("default"), noinline))

GPREEMPT_EXPORT uint64_t gpreempt_hint(char *cls, uint64_t expected_prep_us)
{
	UPROBE_NOP5;
	return gpreempt_go_hint(cls, expected_prep_us);
}

GPREEMPT_EXPORT int gpreempt_ready(uint64_t handle)
{
	UPROBE_NOP5;
	return gpreempt_go_ready(handle);
}

GPREEMPT_EXPORT int gpreempt_cancel(uint64_t handle)
{
	UPROBE_NOP5;
	return gpreempt_go_cancel(handle);
}

GPREEMPT_EXPORT uint64_t gpreempt_begin(char *cls)
{
	UPROBE_NOP5;
	return gpreempt_go_begin(cls);
}

GPREEMPT_EXPORT int gpreempt_end(uint64_t handle)
{
	UPROBE_NOP5;
	return gpreempt_go_end(handle);
}
