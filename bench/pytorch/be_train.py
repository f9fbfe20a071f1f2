#!/usr/bin/env python3
"""Best-effort PyTorch worker for gpreempt-bench.

Trains a torchvision model (random weights, weights=None; random data, so
nothing is downloaded) in a loop and records when each training iteration
completed on the GPU (CLOCK_MONOTONIC ns, time.monotonic_ns), so that the
orchestrator can count iterations/s over another process's measurement
window. A CUDA event per iteration, at most --queue outstanding, keeps the GPU
busy without letting the host run arbitrarily far ahead.

Protocol (shared with `gpreempt-bench be`): prints "READY pid=<pid>" on stdout
once the first iteration completed; stops at --duration or on SIGTERM/SIGINT,
drains, and writes a JSON result with the schema of internal/bench.BEResult
(unit "iterations") to --out ("-": stdout).

    python3 be_train.py --duration 30s --out be.json
"""

import argparse
import collections
import json
import os
import signal
import sys
import time

from lc_infer import parse_duration, write_json

SCHEMA = 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=parse_duration, default="30s", help="how long to train (SIGTERM stops it earlier)")
    ap.add_argument("--model", default="resnet50", help="torchvision.models constructor name")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--queue", type=int, default=3, help="iterations in flight")
    ap.add_argument("--amp", action="store_true", help="bf16 autocast")
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    ap.add_argument("--duty-period", type=parse_duration, default=0,
                    help="train only while CLOCK_MONOTONIC / (period / 2) is even, idle while odd "
                         "(0: always): each LC process then runs beside BE and alone")
    ap.add_argument("--out", default="-", help="result JSON file ('-': stdout)")
    args = ap.parse_args()
    if args.duration <= 0 or args.queue < 1 or args.batch < 1 or args.duty_period < 0:
        ap.error("--duration, --queue and --batch must be positive, --duty-period not negative")
    half = args.duty_period // 2

    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    import torch
    import torchvision

    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    torch.backends.cudnn.benchmark = True
    model = getattr(torchvision.models, args.model)(weights=None).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (args.batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.amp):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    # The first iteration (cuDNN autotuning included) runs before READY.
    step()
    ev0 = torch.cuda.Event(enable_timing=True)
    ev1 = torch.cuda.Event(enable_timing=True)
    ev0.record()
    step()
    ev1.record()
    ev1.synchronize()
    first_ms = ev0.elapsed_time(ev1)
    print(f"READY pid={os.getpid()}", flush=True)

    completions = []
    pending = collections.deque()
    start = time.monotonic_ns()
    deadline = start + args.duration
    while not stop and time.monotonic_ns() < deadline:
        now = time.monotonic_ns()
        if half and (now // half) % 2:
            # The idle half: finish what is queued, then sleep to the next
            # working half a little at a time (a SIGTERM does not end a
            # sleep in Python).
            while pending:
                pending.popleft().synchronize()
                completions.append(time.monotonic_ns())
            time.sleep(min(0.05, max(0, ((now // half) + 1) * half - time.monotonic_ns()) / 1e9))
            continue
        step()
        # blocking=True: wait asleep, leaving the CPU to the LC worker.
        ev = torch.cuda.Event(blocking=True)
        ev.record()
        pending.append(ev)
        while pending and (len(pending) >= args.queue or pending[0].query()):
            pending.popleft().synchronize()
            completions.append(time.monotonic_ns())
    while pending:
        pending.popleft().synchronize()
        completions.append(time.monotonic_ns())
    end = time.monotonic_ns()
    wall = (end - start) / 1e9

    write_json(args.out, {
        "schema": SCHEMA,
        "worker": "be_train.py",
        "pid": os.getpid(),
        "device": torch.cuda.get_device_name(dev),
        "unit": "iterations",
        "config": {
            "model": args.model,
            "batch": args.batch,
            "queue": args.queue,
            "amp": args.amp,
            "duration_ns": args.duration,
            "duty_period_ns": args.duty_period,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
        },
        "kernel_iters": 0,
        "first_kernel_ms": first_ms,
        "kernels": len(completions),
        "kernels_per_sec": len(completions) / wall if wall > 0 else 0.0,
        "duration_s": wall,
        "start_mono_ns": start,
        "end_mono_ns": end,
        "completions_mono_ns": completions,
    })


if __name__ == "__main__":
    sys.exit(main())
