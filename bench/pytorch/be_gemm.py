#!/usr/bin/env python3
"""Best-effort GEMM worker for gpreempt-bench: a back-to-back fp16 matrix
product loop (PyTorch, cuBLAS), fixed work per product, so its count
measures the GPU time it got (a spin kernel that is switched out still ends
on time; a product does not). The BE of the llm-* scenarios.

Protocol (shared with `gpreempt-bench`): prints "READY pid=<pid>" once the
CUDA context exists and a warm-up ran; runs until --duration or SIGTERM,
then writes a JSON result in the schema of internal/bench.BEResult to --out
("-": stdout), with each product's completion time. --progress FILE appends
"<monotonic ns> <products>" once a second, so that a BE that stopped making
progress can be told from one that is merely slow.

    python3 be_gemm.py --n 8192 --duration 10s --out be.json
"""

import argparse
import os
import signal
import sys
import time

from lc_infer import parse_duration, write_json  # beside this script, as gpreempt-bench writes them

SCHEMA = 1
stop = False




def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=8192, help="matrix size (n x n x n fp16 product)")
    ap.add_argument("--queue", type=int, default=2, help="products in flight")
    ap.add_argument("--duration", type=parse_duration, default=parse_duration("10s"))
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--progress", default="", help="file to append '<ns> <products>' to once a second")
    ap.add_argument("--duty-period", type=parse_duration, default=0,
                    help="launch only while CLOCK_MONOTONIC / (period / 2) is even, idle while odd "
                         "(0: always): each LC process then runs beside BE and alone")
    ap.add_argument("--out", default="-")
    a = ap.parse_args()
    if not 1 <= a.n <= 32768 or not 1 <= a.queue <= 64 or a.duty_period < 0:
        ap.error("--n: 1 to 32768; --queue: 1 to 64; --duty-period: not negative")
    half = a.duty_period // 2

    def on_term(*_):
        global stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    import torch

    dev = torch.device("cuda", a.device)
    torch.cuda.set_device(dev)
    x = torch.rand((a.n, a.n), device=dev, dtype=torch.float16)
    y = torch.rand((a.n, a.n), device=dev, dtype=torch.float16)
    z = torch.empty_like(x)
    torch.matmul(x, y, out=z)
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ev0.record()
    torch.matmul(x, y, out=z)
    ev1.record()
    ev1.synchronize()
    first_ms = ev0.elapsed_time(ev1)
    print(f"READY pid={os.getpid()}", flush=True)
    prog = open(a.progress, "a", buffering=1) if a.progress else None
    completions, pending = [], []
    start = time.monotonic_ns()
    deadline = start + a.duration
    next_report = start + 1_000_000_000
    while not stop and time.monotonic_ns() < deadline:
        now = time.monotonic_ns()
        if half and (now // half) % 2:
            # The idle half: finish what is queued, then sleep to the next
            # working half, a little at a time (a SIGTERM does not end a
            # sleep in Python).
            for ev in pending:
                ev.synchronize()
                completions.append(time.monotonic_ns())
            pending.clear()
            time.sleep(min(0.05, max(0, ((now // half) + 1) * half - time.monotonic_ns()) / 1e9))
            continue
        torch.matmul(x, y, out=z)
        ev = torch.cuda.Event(blocking=True)
        ev.record()
        pending.append(ev)
        while pending and (len(pending) >= a.queue or pending[0].query()):
            pending.pop(0).synchronize()
            completions.append(time.monotonic_ns())
        if prog and completions and completions[-1] >= next_report:
            prog.write(f"{completions[-1]} {len(completions)}\n")
            next_report += 1_000_000_000
    for ev in pending:
        ev.synchronize()
        completions.append(time.monotonic_ns())
    end = time.monotonic_ns()
    wall = (end - start) / 1e9
    write_json(a.out, {
        "schema": SCHEMA, "worker": "be_gemm.py", "pid": os.getpid(), "device": torch.cuda.get_device_name(dev),
        "unit": "gemms", "config": {"n": a.n, "queue": a.queue, "duty_period_ns": a.duty_period, "torch": torch.__version__},
        "kernel_iters": 0, "first_kernel_ms": first_ms, "kernels": len(completions),
        "kernels_per_sec": len(completions) / wall if wall > 0 else 0.0, "duration_s": wall,
        "start_mono_ns": start, "end_mono_ns": end, "completions_mono_ns": completions,
    })


if __name__ == "__main__":
    sys.exit(main())
