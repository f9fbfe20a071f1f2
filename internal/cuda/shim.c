// The driver API is reached only through pointers resolved with dlsym, so the
// binary builds and starts on machines without NVIDIA's driver or toolkit and
// reports a clear error there instead of failing to load.

#include "shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

// CUDA_ERROR_INVALID_VALUE and CUDA_ERROR_NOT_INITIALIZED from cuda.h.
#define GP_ERROR_INVALID_VALUE 1
#define GP_ERROR_NOT_INITIALIZED 3

// CUjit_option values from cuda.h.
#define GP_JIT_ERROR_LOG_BUFFER 5
#define GP_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6

// The versioned names (_v2) are the ones cuda.h maps the plain names to; the
// unversioned symbols keep an older ABI (32-bit sizes and device pointers) or
// older semantics (cuStreamDestroy, cuEventDestroy, cuDevicePrimaryCtxRelease)
// and must not be used.
static CUresult (*p_cuGetErrorName)(CUresult, const char **);
static CUresult (*p_cuGetErrorString)(CUresult, const char **);
static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDriverGetVersion)(int *);
static CUresult (*p_cuDeviceGetCount)(int *);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDeviceGetName)(char *, int, CUdevice);
static CUresult (*p_cuDeviceGetAttribute)(int *, int, CUdevice);
static CUresult (*p_cuDeviceTotalMem_v2)(size_t *, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxSetFlags_v2)(CUdevice, unsigned);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRelease_v2)(CUdevice);
static CUresult (*p_cuCtxGetCurrent)(CUcontext *);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuCtxSynchronize)(void);
static CUresult (*p_cuCtxGetStreamPriorityRange)(int *, int *);
static CUresult (*p_cuModuleLoadDataEx)(CUmodule *, const void *, unsigned,
                                        int *, void **);
static CUresult (*p_cuModuleUnload)(CUmodule);
static CUresult (*p_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*p_cuFuncGetAttribute)(int *, int, CUfunction);
static CUresult (*p_cuStreamCreateWithPriority)(CUstream *, unsigned, int);
static CUresult (*p_cuStreamDestroy_v2)(CUstream);
static CUresult (*p_cuStreamSynchronize)(CUstream);
static CUresult (*p_cuStreamQuery)(CUstream);
static CUresult (*p_cuStreamWaitEvent)(CUstream, CUevent, unsigned);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void **, void **);
static CUresult (*p_cuMemAlloc_v2)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemFree_v2)(CUdeviceptr);
static CUresult (*p_cuMemcpyHtoD_v2)(CUdeviceptr, const void *, size_t);
static CUresult (*p_cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
static CUresult (*p_cuMemsetD8_v2)(CUdeviceptr, unsigned char, size_t);
static CUresult (*p_cuMemsetD32_v2)(CUdeviceptr, unsigned, size_t);
static CUresult (*p_cuMemHostAlloc)(void **, size_t, unsigned);
static CUresult (*p_cuMemFreeHost)(void *);
static CUresult (*p_cuMemHostGetDevicePointer_v2)(CUdeviceptr *, void *,
                                                  unsigned);
static CUresult (*p_cuEventCreate)(CUevent *, unsigned);
static CUresult (*p_cuEventDestroy_v2)(CUevent);
static CUresult (*p_cuEventRecord)(CUevent, CUstream);
static CUresult (*p_cuEventQuery)(CUevent);
static CUresult (*p_cuEventSynchronize)(CUevent);
static CUresult (*p_cuEventElapsedTime)(float *, CUevent, CUevent);

struct gp_symbol {
  const char *name;
  void **slot;
};

#define GP_SYM(fn) {#fn, (void **)&p_##fn}

static const struct gp_symbol gp_symbols[] = {
    GP_SYM(cuGetErrorName),
    GP_SYM(cuGetErrorString),
    GP_SYM(cuInit),
    GP_SYM(cuDriverGetVersion),
    GP_SYM(cuDeviceGetCount),
    GP_SYM(cuDeviceGet),
    GP_SYM(cuDeviceGetName),
    GP_SYM(cuDeviceGetAttribute),
    GP_SYM(cuDeviceTotalMem_v2),
    GP_SYM(cuDevicePrimaryCtxSetFlags_v2),
    GP_SYM(cuDevicePrimaryCtxRetain),
    GP_SYM(cuDevicePrimaryCtxRelease_v2),
    GP_SYM(cuCtxGetCurrent),
    GP_SYM(cuCtxSetCurrent),
    GP_SYM(cuCtxSynchronize),
    GP_SYM(cuCtxGetStreamPriorityRange),
    GP_SYM(cuModuleLoadDataEx),
    GP_SYM(cuModuleUnload),
    GP_SYM(cuModuleGetFunction),
    GP_SYM(cuFuncGetAttribute),
    GP_SYM(cuStreamCreateWithPriority),
    GP_SYM(cuStreamDestroy_v2),
    GP_SYM(cuStreamSynchronize),
    GP_SYM(cuStreamQuery),
    GP_SYM(cuStreamWaitEvent),
    GP_SYM(cuLaunchKernel),
    GP_SYM(cuMemAlloc_v2),
    GP_SYM(cuMemFree_v2),
    GP_SYM(cuMemcpyHtoD_v2),
    GP_SYM(cuMemcpyDtoH_v2),
    GP_SYM(cuMemsetD8_v2),
    GP_SYM(cuMemsetD32_v2),
    GP_SYM(cuMemHostAlloc),
    GP_SYM(cuMemFreeHost),
    GP_SYM(cuMemHostGetDevicePointer_v2),
    GP_SYM(cuEventCreate),
    GP_SYM(cuEventDestroy_v2),
    GP_SYM(cuEventRecord),
    GP_SYM(cuEventQuery),
    GP_SYM(cuEventSynchronize),
    GP_SYM(cuEventElapsedTime),
};

static int gp_loaded;

int gp_load(char *errbuf, size_t errlen) {
  if (gp_loaded) {
    return 0;
  }
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char *why = dlerror();
    snprintf(errbuf, errlen, "%s", why != NULL ? why : "dlopen failed");
    return 1;
  }
  for (size_t i = 0; i < sizeof(gp_symbols) / sizeof(gp_symbols[0]); i++) {
    void *sym = dlsym(lib, gp_symbols[i].name);
    if (sym == NULL) {
      snprintf(errbuf, errlen, "symbol %s not found in libcuda.so.1",
               gp_symbols[i].name);
      return 2;
    }
    *gp_symbols[i].slot = sym;
  }
  // CUDA 12.8 added cuEventElapsedTime_v2, to which cuda.h now maps the
  // plain name (same signature); prefer it where the driver has it.
  void *elapsed_v2 = dlsym(lib, "cuEventElapsedTime_v2");
  if (elapsed_v2 != NULL) {
    p_cuEventElapsedTime = (CUresult(*)(float *, CUevent, CUevent))elapsed_v2;
  }
  gp_loaded = 1;
  return 0;
}

const char *gp_error_name(CUresult r) {
  const char *s = NULL;
  if (!gp_loaded || p_cuGetErrorName(r, &s) != 0) {
    return NULL;
  }
  return s;
}

const char *gp_error_string(CUresult r) {
  const char *s = NULL;
  if (!gp_loaded || p_cuGetErrorString(r, &s) != 0) {
    return NULL;
  }
  return s;
}

static inline CUresult gp_bind(CUcontext ctx) {
  CUcontext cur = NULL;
  CUresult r = p_cuCtxGetCurrent(&cur);
  if (r != 0) {
    return r;
  }
  if (cur == ctx) {
    return 0;
  }
  return p_cuCtxSetCurrent(ctx);
}

// GP_BOUND makes ctx current, then evaluates the driver call.
#define GP_BOUND(ctx, call)      \
  do {                           \
    CUresult gp_r = gp_bind(ctx); \
    if (gp_r != 0) {             \
      return gp_r;               \
    }                            \
    return (call);               \
  } while (0)

// Entry points usable before a context exists guard against a missing load,
// so a Go caller that skipped Load gets an error, not a NULL call.
CUresult gp_init(unsigned flags) {
  if (!gp_loaded) {
    return GP_ERROR_NOT_INITIALIZED;
  }
  return p_cuInit(flags);
}

CUresult gp_driver_version(int *version) {
  if (!gp_loaded) {
    return GP_ERROR_NOT_INITIALIZED;
  }
  return p_cuDriverGetVersion(version);
}

CUresult gp_device_count(int *count) {
  if (!gp_loaded) {
    return GP_ERROR_NOT_INITIALIZED;
  }
  return p_cuDeviceGetCount(count);
}

CUresult gp_device_get(CUdevice *dev, int ordinal) {
  if (!gp_loaded) {
    return GP_ERROR_NOT_INITIALIZED;
  }
  return p_cuDeviceGet(dev, ordinal);
}

CUresult gp_device_name(char *name, int len, CUdevice dev) {
  return p_cuDeviceGetName(name, len, dev);
}

CUresult gp_device_attribute(int *value, int attrib, CUdevice dev) {
  return p_cuDeviceGetAttribute(value, attrib, dev);
}

CUresult gp_device_total_mem(size_t *bytes, CUdevice dev) {
  return p_cuDeviceTotalMem_v2(bytes, dev);
}

CUresult gp_primary_ctx_set_flags(CUdevice dev, unsigned flags) {
  return p_cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

CUresult gp_primary_ctx_retain(CUcontext *ctx, CUdevice dev) {
  return p_cuDevicePrimaryCtxRetain(ctx, dev);
}

CUresult gp_primary_ctx_release(CUdevice dev) {
  return p_cuDevicePrimaryCtxRelease_v2(dev);
}

CUresult gp_ctx_synchronize(CUcontext ctx) {
  GP_BOUND(ctx, p_cuCtxSynchronize());
}

CUresult gp_ctx_stream_priority_range(CUcontext ctx, int *least,
                                      int *greatest) {
  GP_BOUND(ctx, p_cuCtxGetStreamPriorityRange(least, greatest));
}

CUresult gp_module_load(CUcontext ctx, CUmodule *mod, const void *image,
                        char *errlog, unsigned errlog_len) {
  // The JIT's error log is the only way to learn what is wrong with a PTX
  // module that fails to load, so ask for it.
  int opts[2] = {GP_JIT_ERROR_LOG_BUFFER, GP_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[2] = {errlog, (void *)(uintptr_t)errlog_len};
  if (errlog_len > 0) {
    errlog[0] = '\0';
  }
  GP_BOUND(ctx, p_cuModuleLoadDataEx(mod, image, errlog_len > 0 ? 2 : 0,
                                     opts, vals));
}

CUresult gp_module_unload(CUcontext ctx, CUmodule mod) {
  GP_BOUND(ctx, p_cuModuleUnload(mod));
}

CUresult gp_module_function(CUcontext ctx, CUfunction *fn, CUmodule mod,
                            const char *name) {
  GP_BOUND(ctx, p_cuModuleGetFunction(fn, mod, name));
}

CUresult gp_func_attribute(CUcontext ctx, int *value, int attrib,
                           CUfunction fn) {
  GP_BOUND(ctx, p_cuFuncGetAttribute(value, attrib, fn));
}

CUresult gp_stream_create(CUcontext ctx, CUstream *stream, unsigned flags,
                          int priority) {
  GP_BOUND(ctx, p_cuStreamCreateWithPriority(stream, flags, priority));
}

CUresult gp_stream_destroy(CUcontext ctx, CUstream stream) {
  GP_BOUND(ctx, p_cuStreamDestroy_v2(stream));
}

CUresult gp_stream_synchronize(CUcontext ctx, CUstream stream) {
  GP_BOUND(ctx, p_cuStreamSynchronize(stream));
}

CUresult gp_stream_query(CUcontext ctx, CUstream stream) {
  GP_BOUND(ctx, p_cuStreamQuery(stream));
}

CUresult gp_stream_wait_event(CUcontext ctx, CUstream stream, CUevent ev) {
  GP_BOUND(ctx, p_cuStreamWaitEvent(stream, ev, 0));
}

CUresult gp_launch(CUcontext ctx, CUfunction fn, unsigned gx, unsigned gy,
                   unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shmem, CUstream stream, uint64_t *args,
                   int nargs) {
  void *params[GP_MAX_ARGS];
  if (nargs < 0 || nargs > GP_MAX_ARGS) {
    return GP_ERROR_INVALID_VALUE;
  }
  for (int i = 0; i < nargs; i++) {
    params[i] = &args[i];
  }
  GP_BOUND(ctx, p_cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shmem, stream,
                                 nargs > 0 ? params : NULL, NULL));
}

CUresult gp_mem_alloc(CUcontext ctx, CUdeviceptr *ptr, size_t size) {
  GP_BOUND(ctx, p_cuMemAlloc_v2(ptr, size));
}

CUresult gp_mem_free(CUcontext ctx, CUdeviceptr ptr) {
  GP_BOUND(ctx, p_cuMemFree_v2(ptr));
}

CUresult gp_memcpy_htod(CUcontext ctx, CUdeviceptr dst, const void *src,
                        size_t n) {
  GP_BOUND(ctx, p_cuMemcpyHtoD_v2(dst, src, n));
}

CUresult gp_memcpy_dtoh(CUcontext ctx, void *dst, CUdeviceptr src, size_t n) {
  GP_BOUND(ctx, p_cuMemcpyDtoH_v2(dst, src, n));
}

CUresult gp_memset_d8(CUcontext ctx, CUdeviceptr dst, unsigned char value,
                      size_t n) {
  GP_BOUND(ctx, p_cuMemsetD8_v2(dst, value, n));
}

CUresult gp_memset_d32(CUcontext ctx, CUdeviceptr dst, unsigned value,
                       size_t n) {
  GP_BOUND(ctx, p_cuMemsetD32_v2(dst, value, n));
}

CUresult gp_host_alloc(CUcontext ctx, void **ptr, size_t size,
                       unsigned flags) {
  GP_BOUND(ctx, p_cuMemHostAlloc(ptr, size, flags));
}

CUresult gp_host_free(CUcontext ctx, void *ptr) {
  GP_BOUND(ctx, p_cuMemFreeHost(ptr));
}

CUresult gp_host_device_pointer(CUcontext ctx, CUdeviceptr *dptr, void *ptr) {
  GP_BOUND(ctx, p_cuMemHostGetDevicePointer_v2(dptr, ptr, 0));
}

CUresult gp_event_create(CUcontext ctx, CUevent *ev, unsigned flags) {
  GP_BOUND(ctx, p_cuEventCreate(ev, flags));
}

CUresult gp_event_destroy(CUcontext ctx, CUevent ev) {
  GP_BOUND(ctx, p_cuEventDestroy_v2(ev));
}

CUresult gp_event_record(CUcontext ctx, CUevent ev, CUstream stream) {
  GP_BOUND(ctx, p_cuEventRecord(ev, stream));
}

CUresult gp_event_query(CUcontext ctx, CUevent ev) {
  GP_BOUND(ctx, p_cuEventQuery(ev));
}

CUresult gp_event_synchronize(CUcontext ctx, CUevent ev) {
  GP_BOUND(ctx, p_cuEventSynchronize(ev));
}

CUresult gp_event_elapsed(CUcontext ctx, float *ms, CUevent start,
                          CUevent end) {
  GP_BOUND(ctx, p_cuEventElapsedTime(ms, start, end));
}
