#!/usr/bin/env python3
"""Best-effort GEMM worker for gpreempt-bench: a back-to-back fp16 matrix
product loop (CuPy, or PyTorch when CuPy is missing), fixed work per
iteration, so its count measures the GPU time it got (a spin kernel that is
switched out still ends on time; a GEMM does not).

Protocol (shared with `gpreempt-bench`): prints "READY pid=<pid>" once the
CUDA context exists and a warm-up ran; with --wait-go it then waits for a line
on stdin; runs --duration, then writes a JSON result in the schema of
internal/bench.BEResult to --out ("-": stdout). --progress FILE appends one
line a second ("<monotonic ns> <iterations>"), so a harness can tell a BE
that stopped making progress from one that is merely slow.

    python3 be_gemm.py --n 8192 --duration 10s --out be.json
"""

import argparse
import json
import os
import sys
import time

SCHEMA = 1


def parse_duration(s):
    units = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
    for u in ("ns", "us", "ms", "s"):
        if s.endswith(u) and s[: -len(u)].replace(".", "", 1).isdigit():
            return int(float(s[: -len(u)]) * units[u])
    raise argparse.ArgumentTypeError(f"bad duration {s!r} (want e.g. 10s, 500ms)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=8192, help="matrix size (n x n x n fp16 product)")
    ap.add_argument("--duration", type=parse_duration, default=parse_duration("10s"))
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--wait-go", action="store_true")
    ap.add_argument("--progress", default="", help="file to append '<ns> <iterations>' to once a second")
    ap.add_argument("--out", default="-")
    a = ap.parse_args()
    if a.n <= 0 or a.n > 32768:
        ap.error(f"--n {a.n}: want 1 to 32768")
    try:
        import cupy as xp

        xp.cuda.Device(a.device).use()
        sync = xp.cuda.Stream.null.synchronize
        lib = "cupy"
    except ImportError:
        import torch as xp

        torch = xp
        torch.cuda.set_device(a.device)
        sync = torch.cuda.synchronize
        lib = "torch"
    if lib == "cupy":
        x = xp.random.random((a.n, a.n), dtype=xp.float32).astype(xp.float16)
        y = xp.random.random((a.n, a.n), dtype=xp.float32).astype(xp.float16)
        z = xp.empty_like(x)
        step = lambda: xp.matmul(x, y, out=z)
    else:
        x = torch.rand((a.n, a.n), device="cuda", dtype=torch.float16)
        y = torch.rand((a.n, a.n), device="cuda", dtype=torch.float16)
        z = torch.empty_like(x)
        step = lambda: torch.matmul(x, y, out=z)
    for _ in range(3):
        step()
    sync()
    print(f"READY pid={os.getpid()}", flush=True)
    if a.wait_go:
        sys.stdin.readline()
    prog = open(a.progress, "a", buffering=1) if a.progress else None
    t0 = time.monotonic_ns()
    end = t0 + a.duration
    n = 0
    next_report = t0 + 1_000_000_000
    # Two products in flight at most: the count then follows the GPU, not
    # how far the CPU ran ahead.
    while True:
        step()
        step()
        sync()
        n += 2
        now = time.monotonic_ns()
        if prog and now >= next_report:
            prog.write(f"{now} {n}\n")
            next_report += 1_000_000_000
        if now >= end:
            break
    t1 = time.monotonic_ns()
    res = {
        "schema": SCHEMA,
        "worker": "be_gemm",
        "lib": lib,
        "n": a.n,
        "iterations": n,
        "start_ns": t0,
        "end_ns": t1,
        "rate": n / ((t1 - t0) / 1e9),
    }
    out = sys.stdout if a.out == "-" else open(a.out, "w")
    json.dump(res, out)
    out.write("\n")
    out.flush()


if __name__ == "__main__":
    main()
