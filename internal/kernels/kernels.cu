// CUDA C source of gpreempt's kernels. kernels.ptx holds the PTX that is
// embedded in the Go binary and JIT-compiled by the driver; gen-ptx.sh
// regenerates it from this file with nvcc. The hand-written kernels.ptx
// mirrors this source instruction for instruction where it matters (the work
// each thread does, what is stamped and when), so keep the two in step.
//
// All entry points are extern "C" so that their PTX names are the plain
// names the Go side looks up.

// FMA chain constants: a <- a*0.9999 + 1e-4 converges to 1.0, so the chain
// never overflows, never goes denormal, and the compiler cannot fold it.
#define FMA_MUL 0.9999f
#define FMA_ADD 1e-4f

static __device__ __forceinline__ unsigned long long globaltimer(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// fma_chains runs four independent dependent-FMA chains of iters steps each
// (independent so that one warp keeps the FMA pipe busier than a single chain
// would) and returns their sum, which callers must consume.
static __device__ __forceinline__ float fma_chains(unsigned idx,
                                                   unsigned long long iters) {
  float base = (float)idx * 1e-6f;
  float a0 = base;
  float a1 = base + 0.1f;
  float a2 = base + 0.2f;
  float a3 = base + 0.3f;
  for (unsigned long long i = 0; i < iters; i++) {
    a0 = fmaf(a0, FMA_MUL, FMA_ADD);
    a1 = fmaf(a1, FMA_MUL, FMA_ADD);
    a2 = fmaf(a2, FMA_MUL, FMA_ADD);
    a3 = fmaf(a3, FMA_MUL, FMA_ADD);
  }
  return (a0 + a1) + (a2 + a3);
}

// empty does nothing: a launch that keeps a stream's queue non-empty.
extern "C" __global__ void empty(void) {}

// be_fma is the best-effort load: a fixed amount of arithmetic per thread
// (4*iters FMAs), never a time-based spin, so that time the kernel spends
// switched out shows up as lost throughput. Every thread writes out[idx], so
// out must hold gridDim.x*blockDim.x floats.
extern "C" __global__ void be_fma(float *out, unsigned long long iters) {
  unsigned idx = blockIdx.x * blockDim.x + threadIdx.x;
  out[idx] = fma_chains(idx, iters);
}

// lc_work is the latency-critical request: the same fixed work, sized by the
// caller to ~20 us on all SMs, and GPU-side stamps of its span:
//   stamps[0] = %globaltimer when block 0 starts,
//   stamps[1] = max over blocks of %globaltimer when the block finishes
//               (atomicMax: the timer only grows, so stamps[1] needs no reset
//               between launches),
//   stamps[2] = sink for the result; written only if it is -1, which it never
//               is, so that the work is not dead code.
// stamps must hold at least 3 (allocate 4) 64-bit words.
extern "C" __global__ void lc_work(unsigned long long *stamps,
                                   unsigned long long iters) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    stamps[0] = globaltimer();
  }
  unsigned idx = blockIdx.x * blockDim.x + threadIdx.x;
  float v = fma_chains(idx, iters);
  if (v == -1.0f) {
    ((float *)stamps)[4] = v;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicMax(&stamps[1], globaltimer());
  }
}

// spin_flag keeps one thread busy until *flag becomes nonzero or max_ns of
// %globaltimer have passed since it started; other threads and blocks exit
// at once, so launch it as <<<1, 1>>>. flag is normally pinned host memory
// mapped into the device (cuMemHostAlloc DEVICEMAP), released by the host.
// If stamp is not NULL it receives stamp[0] = start time, stamp[1] = exit
// time (so it must hold two 64-bit words). Used by pre-preemption: a resident
// spinner keeps the latency-critical context on the GPU.
extern "C" __global__ void spin_flag(volatile unsigned int *flag,
                                     unsigned long long max_ns,
                                     unsigned long long *stamp) {
  if (blockIdx.x != 0 || threadIdx.x != 0) {
    return;
  }
  unsigned long long t0 = globaltimer();
  if (stamp != 0) {
    stamp[0] = t0;
  }
  while (*flag == 0 && globaltimer() - t0 < max_ns) {
  }
  if (stamp != 0) {
    stamp[1] = globaltimer();
  }
}
