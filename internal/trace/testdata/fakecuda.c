// fakecuda.c: a stand-in for libcuda.so.1 and libgpreempt.so in the uprobe
// tests. It exports the functions the tracer probes, with libcuda's and the
// hint API's names; the synchronize calls sleep (2 ms, or FAKECUDA_SYNC_US)
// so that a request has a known minimum latency.
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default"), noinline))

typedef int CUresult;

// How long the synchronize calls sleep: 2 ms, or FAKECUDA_SYNC_US.
static unsigned sync_us = 2000;

__attribute__((constructor)) static void init(void)
{
	const char *s = getenv("FAKECUDA_SYNC_US");
	if (s)
		sync_us = (unsigned)atoi(s);
}

static void sleep_sync(void)
{
	if (sync_us)
		usleep(sync_us);
}

EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shmem, void *stream,
                               void **params, void **extra)
{
	(void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz;
	(void)shmem; (void)stream; (void)params; (void)extra;
	return 0;
}

EXPORT CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra)
{
	(void)config; (void)f; (void)params; (void)extra;
	return 0;
}

EXPORT CUresult cuStreamSynchronize(void *stream)
{
	(void)stream;
	sleep_sync();
	return 0;
}

EXPORT CUresult cuEventSynchronize(void *event)
{
	(void)event;
	sleep_sync();
	return 700; // CUDA_ERROR_ILLEGAL_ADDRESS: the tracer must carry it
}

EXPORT CUresult cuCtxSynchronize(void)
{
	sleep_sync();
	return 0;
}

// A request's input copy and event record, queued before its first kernel.
EXPORT CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, void *stream)
{
	(void)dst; (void)src; (void)n; (void)stream;
	return 0;
}

EXPORT CUresult cuEventRecord(void *event, void *stream)
{
	(void)event; (void)stream;
	return 0;
}

// The hint API's functions start with a 5-byte NOP, as libgpreempt's should:
// on x86-64 kernels 6.18+ a uprobe on it is optimized into a call (no
// trap), about 100 times cheaper than on any other instruction
// (docs/TRACING.md).
#define UPROBE_NOP5 __asm__ volatile(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00")

// The hint API as include/gpreempt.h declares it: a hint returns a
// request handle that ready and cancel take.
static uint64_t next_handle;

EXPORT uint64_t gpreempt_hint(char *cls, uint64_t expected_prep_us)
{
	UPROBE_NOP5;
	(void)cls;
	(void)expected_prep_us;
	return __atomic_add_fetch(&next_handle, 1, __ATOMIC_RELAXED);
}

EXPORT int gpreempt_ready(uint64_t handle)
{
	UPROBE_NOP5;
	(void)handle;
	return 0;
}

EXPORT int gpreempt_cancel(uint64_t handle)
{
	UPROBE_NOP5;
	(void)handle;
	return 0;
}
