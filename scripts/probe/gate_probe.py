#!/usr/bin/env python3
"""Probe: does a long kernel on an LC's own context keep the LC's channel
group resident through a launch-bound request, or block its other streams?

One process (CuPy): a request is K small kernels on the legacy default
stream with a CPU gap between launches (a launch-bound LC, like eager
decode), then a synchronize. Modes:
  none        nothing else
  spin        a 1-block spinner polling a host-mapped flag on a non-blocking
              stream, launched at the request's start, released at its end
  spin+empty  the same with an empty kernel queued behind the spinner
The spinner records %globaltimer at its start and end, its longest gap
between two polls and the total time of gaps over 5 us: a gap is time the
spinner was not running (its channel group switched out).
Prints one JSON line.
"""
import argparse, ctypes, json, os, subprocess, sys, time
import cupy as cp

SRC = r'''
extern "C" __device__ unsigned long long gt() {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
extern "C" __global__ void spin(volatile unsigned long long* flag, unsigned long long timeout,
                                unsigned long long* st) {
  unsigned long long t0 = gt(), last = t0, maxgap = 0, gaps = 0, ngaps = 0;
  while (*flag == 0) {
    unsigned long long t = gt();
    unsigned long long g = t - last;
    if (g > maxgap) maxgap = g;
    if (g > 5000) { gaps += g; ngaps++; }
    last = t;
    if (t - t0 > timeout) break;
  }
  st[0] = t0; st[1] = gt(); st[2] = maxgap; st[3] = gaps; st[4] = ngaps;
}
extern "C" __global__ void empty() {}
extern "C" __global__ void work(float* x, int iters) {
  float a = x[threadIdx.x], b = 1.0001f;
  for (int i = 0; i < iters; i++) a = a * b + 0.5f;
  if (a == 12345.f) x[threadIdx.x] = a;
}
'''


def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, int(p * len(v) + 0.5) - 1))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="none", choices=["none", "spin", "spin+empty"])
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--kernels", type=int, default=150)
    ap.add_argument("--gap-us", type=float, default=40)
    ap.add_argument("--iters", type=int, default=4000)
    ap.add_argument("--period-ms", type=float, default=60)
    ap.add_argument("--timeout-ms", type=float, default=2000)
    ap.add_argument("--setup", default="", help="shell command run once the context exists; {pid} is this pid")
    ap.add_argument("--label", default="")
    ap.add_argument("--pause-pid", type=int, default=0, help="SIGSTOP this pid at each request's start, SIGCONT at its end")
    a = ap.parse_args()
    mod = cp.RawModule(code=SRC)
    spin, empty, work = mod.get_function("spin"), mod.get_function("empty"), mod.get_function("work")
    x = cp.ones(128, dtype=cp.float32)
    flagp = cp.cuda.runtime.hostAlloc(64, 3)  # portable | mapped
    flag = ctypes.cast(flagp, ctypes.POINTER(ctypes.c_uint64))
    st = cp.zeros(8, dtype=cp.uint64)
    ss = cp.cuda.Stream(non_blocking=True)
    null = cp.cuda.Stream.null
    for _ in range(3):
        work((8,), (128,), (x, cp.int32(a.iters)), stream=null)
    null.synchronize()
    if a.setup:
        subprocess.run(a.setup.format(pid=os.getpid()), shell=True, check=True, stdout=subprocess.DEVNULL)
    lat, held, maxgap, gaps, ngaps = [], [], [], [], []
    gap_ns = int(a.gap_us * 1000)
    for r in range(a.requests + 3):
        t0 = time.monotonic_ns()
        if a.pause_pid:
            os.kill(a.pause_pid, 19)
        if a.mode != "none":
            flag[0] = 0
            spin((1,), (1,), (cp.uint64(flagp), cp.uint64(int(a.timeout_ms * 1e6)), st), stream=ss)
            if a.mode == "spin+empty":
                empty((1,), (1,), (), stream=ss)
        for k in range(a.kernels):
            work((8,), (128,), (x, cp.int32(a.iters)), stream=null)
            t = time.monotonic_ns()
            while time.monotonic_ns() - t < gap_ns:
                pass
        null.synchronize()
        t1 = time.monotonic_ns()
        if a.pause_pid:
            os.kill(a.pause_pid, 18)
        if a.mode != "none":
            flag[0] = 1
            ss.synchronize()
            s = st.get()
            if r >= 3:
                held.append((int(s[1]) - int(s[0])) / 1e3)
                maxgap.append(int(s[2]) / 1e3)
                gaps.append(int(s[3]) / 1e3)
                ngaps.append(int(s[4]))
        if r >= 3:
            lat.append((t1 - t0) / 1e3)
        d = a.period_ms * 1e6 - (time.monotonic_ns() - t0)
        if d > 0:
            time.sleep(d / 1e9)
    out = {"label": a.label, "mode": a.mode, "n": len(lat), "p50_us": q(lat, .5), "p99_us": q(lat, .99),
           "mean_us": sum(lat) / len(lat)}
    if held:
        out.update({"held_p50_us": q(held, .5), "maxgap_p50_us": q(maxgap, .5), "maxgap_max_us": max(maxgap),
                    "gaps_us_p50": q(gaps, .5), "ngaps_p50": q(ngaps, .5), "timeouts": sum(h >= a.timeout_ms * 1e3 for h in held)})
    print(json.dumps(out), flush=True)


main()
