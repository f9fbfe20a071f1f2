// Minimal, self-contained declarations of the CUDA driver API subset gpreempt
// uses, and of the shim that calls it through dlsym'd pointers. No CUDA header
// is needed to build: the types below are ABI-compatible with cuda.h (opaque
// handles are pointers, CUdevice is int, CUdeviceptr is 64-bit on every
// platform libcuda supports).

#ifndef GPREEMPT_CUDA_SHIM_H
#define GPREEMPT_CUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

// GP_MAX_ARGS bounds a kernel's parameter count; the Go side checks it too.
#define GP_MAX_ARGS 16

// gp_load dlopens libcuda.so.1 and resolves every entry point. It returns 0 on
// success, 1 when the library cannot be opened and 2 when a symbol is missing;
// errbuf receives a human-readable reason. Not thread-safe: the Go side calls it
// once under sync.Once.
int gp_load(char *errbuf, size_t errlen);

const char *gp_error_name(CUresult r);
const char *gp_error_string(CUresult r);

CUresult gp_init(unsigned flags);
CUresult gp_driver_version(int *version);
CUresult gp_device_count(int *count);
CUresult gp_device_get(CUdevice *dev, int ordinal);
CUresult gp_device_name(char *name, int len, CUdevice dev);
CUresult gp_device_attribute(int *value, int attrib, CUdevice dev);
CUresult gp_device_total_mem(size_t *bytes, CUdevice dev);

CUresult gp_primary_ctx_set_flags(CUdevice dev, unsigned flags);
CUresult gp_primary_ctx_retain(CUcontext *ctx, CUdevice dev);
CUresult gp_primary_ctx_release(CUdevice dev);

// Every call below that acts within a context takes it first and makes it
// current on the calling thread if it is not already (one cuCtxGetCurrent, a
// thread-local read inside libcuda, on the common path). Goroutines migrate
// between OS threads, so relying on a context made current earlier is unsafe.
CUresult gp_ctx_synchronize(CUcontext ctx);
CUresult gp_ctx_stream_priority_range(CUcontext ctx, int *least, int *greatest);

CUresult gp_module_load(CUcontext ctx, CUmodule *mod, const void *image,
                        char *errlog, unsigned errlog_len);
CUresult gp_module_unload(CUcontext ctx, CUmodule mod);
CUresult gp_module_function(CUcontext ctx, CUfunction *fn, CUmodule mod,
                            const char *name);
CUresult gp_func_attribute(CUcontext ctx, int *value, int attrib, CUfunction fn);

CUresult gp_stream_create(CUcontext ctx, CUstream *stream, unsigned flags,
                          int priority);
CUresult gp_stream_destroy(CUcontext ctx, CUstream stream);
CUresult gp_stream_synchronize(CUcontext ctx, CUstream stream);
CUresult gp_stream_query(CUcontext ctx, CUstream stream);
CUresult gp_stream_wait_event(CUcontext ctx, CUstream stream, CUevent ev);

// gp_launch builds the kernelParams array on its own stack from args: one
// 8-byte slot per parameter, the value stored at the slot's start. The driver
// copies parameter values during cuLaunchKernel, so args need not outlive it.
CUresult gp_launch(CUcontext ctx, CUfunction fn, unsigned gx, unsigned gy,
                   unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shmem, CUstream stream, uint64_t *args, int nargs);

CUresult gp_mem_alloc(CUcontext ctx, CUdeviceptr *ptr, size_t size);
CUresult gp_mem_free(CUcontext ctx, CUdeviceptr ptr);
CUresult gp_memcpy_htod(CUcontext ctx, CUdeviceptr dst, const void *src,
                        size_t n);
CUresult gp_memcpy_dtoh(CUcontext ctx, void *dst, CUdeviceptr src, size_t n);
CUresult gp_memset_d8(CUcontext ctx, CUdeviceptr dst, unsigned char value,
                      size_t n);
CUresult gp_memset_d32(CUcontext ctx, CUdeviceptr dst, unsigned value,
                       size_t n);

CUresult gp_host_alloc(CUcontext ctx, void **ptr, size_t size, unsigned flags);
CUresult gp_host_free(CUcontext ctx, void *ptr);
CUresult gp_host_device_pointer(CUcontext ctx, CUdeviceptr *dptr, void *ptr);

CUresult gp_event_create(CUcontext ctx, CUevent *ev, unsigned flags);
CUresult gp_event_destroy(CUcontext ctx, CUevent ev);
CUresult gp_event_record(CUcontext ctx, CUevent ev, CUstream stream);
CUresult gp_event_query(CUcontext ctx, CUevent ev);
CUresult gp_event_synchronize(CUcontext ctx, CUevent ev);
CUresult gp_event_elapsed(CUcontext ctx, float *ms, CUevent start, CUevent end);

#endif
