#!/usr/bin/env python3
"""Latency-critical PyTorch worker for gpreempt-bench.

Runs periodic inference requests of a torchvision model with random weights
(weights=None: nothing is downloaded) and measures each request's latency:
from just before the input copy and forward pass are issued to the return of
the synchronize of its stream, in CLOCK_MONOTONIC nanoseconds (time.monotonic_ns),
the clock the Go orchestrator uses too.

Protocol (shared with `gpreempt-bench lc`): prints "READY pid=<pid>" on stdout
after the CUDA context exists and --warmup requests ran; with --wait-go it then
waits for a line on stdin before measuring; writes a JSON result with the
schema of internal/bench.LCResult to --out ("-": stdout).

    python3 lc_infer.py --period 20ms --requests 1000 --out lc.json
"""

import argparse
import gc
import json
import os
import random
import re
import sys
import time

SCHEMA = 1
_UNITS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_duration(s):
    """Parses a Go-style duration with one unit ("3.5ms", "500us", "0") to ns."""
    s = s.strip()
    if s in ("", "0"):
        return 0
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)(ns|us|\u00b5s|ms|s)", s)
    if not m:
        raise argparse.ArgumentTypeError(f"bad duration {s!r} (want e.g. 500us, 3.5ms)")
    return int(round(float(m.group(1)) * _UNITS[m.group(2)]))


def parse_prep(s):
    """Parses a preparation distribution like internal/bench.ParsePrep: "0",
    "500us", "fixed:500us" or "uniform:300us:700us"; returns (min_ns, max_ns)."""
    parts = s.strip().split(":")
    if len(parts) == 1:
        d = parse_duration(parts[0])
        return d, d
    if len(parts) == 2 and parts[0] == "fixed":
        d = parse_duration(parts[1])
        return d, d
    if len(parts) == 3 and parts[0] == "uniform":
        lo, hi = parse_duration(parts[1]), parse_duration(parts[2])
        if hi < lo:
            raise argparse.ArgumentTypeError(f"prep {s!r}: max below min")
        return lo, hi
    raise argparse.ArgumentTypeError(f"bad prep distribution {s!r}")


def spin_until(t_ns):
    # CPU-side preparation is CPU work, and sleeping would wake up late.
    while time.monotonic_ns() < t_ns:
        pass


def sleep_until(t_ns):
    tail = 300_000  # spin the last 300 us: time.sleep overshoots
    d = t_ns - time.monotonic_ns()
    if d > tail:
        time.sleep((d - tail) / 1e9)
    spin_until(t_ns)


def run_lead_in(period_ns, duration_ns, one):
    """Runs one() once a period for duration_ns, before the measured
    window: its requests are pushed to gpreemptd but not kept, so that its
    SLO mode settles first. Returns how many ran."""
    n, t = 0, time.monotonic_ns()
    while n * period_ns < duration_ns:
        sleep_until(t + n * period_ns)
        one()
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--period", type=parse_duration, default="20ms", help="time between request arrivals")
    ap.add_argument("--requests", type=int, default=1000, help="measured requests")
    ap.add_argument("--warmup", type=int, default=20, help="requests run before READY and discarded")
    ap.add_argument("--prep", type=parse_prep, default="0", help="CPU preparation before each request: DURATION, fixed:D, uniform:MIN:MAX")
    ap.add_argument("--model", default="resnet50", help="torchvision.models constructor name")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="capture the forward pass in a CUDA graph and replay it per request, as serving stacks do; "
                         "without it (eager) each request issues its kernels one by one from Python over milliseconds: a "
                         "launch-bound LC, which makes a short BE timeslice pay a switch per kernel (gpreempt-bench's "
                         "pytorch-eager-* scenarios)")
    ap.add_argument("--seed", type=int, default=1, help="seed for --prep")
    ap.add_argument("--wait-go", action="store_true", help="after READY, wait for a line on stdin")
    ap.add_argument("--out", default="-", help="result JSON file ('-': stdout)")
    ap.add_argument("--hints", action="store_true",
                    help="pre-preemption through libgpreempt (python/gpreempt): hint when preparation starts, ready after the forward pass is queued")
    ap.add_argument("--gate", action="store_true",
                    help="hold each whole request in libgpreempt's request gate (python/gpreempt): the GPU is kept from BE "
                         "work from the request's start to its synchronize")
    ap.add_argument("--hint-launcher", choices=("goroutine", "poller"), default="goroutine",
                    help="with --hints: the engine's launcher (GPREEMPT_LAUNCHER_POLLER)")
    ap.add_argument("--switch-after", type=int, default=0, metavar="N",
                    help="with --cuda-graph: run eager from the N-th measured request on (0: never)")
    add_push_flags(ap, "the measured requests' latency windows")
    args = ap.parse_args()
    if args.requests <= 0 or args.period <= 0:
        ap.error("--requests and --period must be positive")
    if args.prep[1] >= args.period:
        ap.error("preparation must be shorter than the period")

    import torch
    import torchvision

    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    # Pick convolution algorithms once, during warmup, not per request.
    torch.backends.cudnn.benchmark = True
    model = getattr(torchvision.models, args.model)(weights=None).to(dev).eval()
    x_host = torch.randn(args.batch, 3, 224, 224).pin_memory()
    x = torch.empty_like(x_host, device=dev)
    ev_start = torch.cuda.Event(enable_timing=True)
    ev_end = torch.cuda.Event(enable_timing=True)
    stream = torch.cuda.current_stream(dev)  # every request's work, eager or graph replay

    def forward_eager():
        with torch.inference_mode():
            model(x)

    # request() calls forward; --switch-after rebinds it to forward_eager.
    forward = forward_eager
    if args.cuda_graph:
        # Warm up on a side stream (cuDNN picks its algorithms here), then
        # capture; capture must not see the autotuning.
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                model(x)
        torch.cuda.current_stream(dev).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), torch.no_grad():
            model(x)
        forward = graph.replay

    gp = gate = None
    if args.hints and args.gate:
        ap.error("--hints and --gate: one or the other")
    if args.hints or args.gate:
        gp = import_gpreempt().Engine(device=args.device, launcher=args.hint_launcher, gate="on" if args.gate else "off")
    if args.gate:
        # The whole request (copy, forward, synchronize) is one gated span;
        # no preparation hint.
        gate, gp = gp, None
    # Made before READY: a missing package fails the worker at its start.
    # The reporter hands the engine SLO mode's arm (its gate, pre-preemption).
    pusher = import_gpreempt().Reporter(args.push_latency, args.push_period / 1e9, gp or gate) if args.push_latency else None
    lo, hi = args.prep
    expected_prep_us = (lo + hi) // 2 // 1000

    def request(hint=None):
        if gate is not None:
            with gate.request("infer"):
                return request_body(hint)
        return request_body(hint)

    def request_body(hint):
        t0, c0 = time.monotonic_ns(), time.thread_time_ns()
        ev_start.record()
        # Its first CUDA call has returned: a traced request starts inside it, after the dispatch before it.
        t_first = time.monotonic_ns()
        x.copy_(x_host, non_blocking=True)
        forward()
        ev_end.record()
        if hint is not None:
            hint.ready()
        t_issued = time.monotonic_ns()
        # The request's stream, not the device: a device-wide synchronize
        # would also wait for the request gate's own stream.
        stream.synchronize()
        c1 = time.thread_time_ns()
        t1 = time.monotonic_ns()
        gpu_ns = int(ev_start.elapsed_time(ev_end) * 1e6)
        # c1 - c0: this thread's CPU time over the request's own span.
        return t0, t_first, t_issued, t1, gpu_ns, c1 - c0

    for _ in range(max(args.warmup, 1)):
        request(gp.request("infer", expected_prep_us) if gp else None)
    print(f"READY pid={os.getpid()}", flush=True)
    if args.wait_go and not sys.stdin.readline():
        sys.exit("lc_infer.py: stdin closed before the go line")

    rng = random.Random(args.seed)
    samples = []
    late = 0
    # Requests allocate little; a cyclic collection would only add pauses.
    gc.collect()
    gc.disable()
    if pusher:
        pusher.start()
    lead_rng = random.Random(args.seed + 0x6C656164)  # measured requests' preps unchanged

    def lead_one():
        prep = lo if hi <= lo else lead_rng.randint(lo, hi)
        spin_until(time.monotonic_ns() + prep)
        t0, _, _, t1, _, _ = request(gp.request("infer", expected_prep_us) if gp else None)
        if pusher:
            pusher.record(t1 - t0)

    lead_in = run_lead_in(args.period, args.lead_in, lead_one)
    start = time.monotonic_ns()
    for i in range(args.requests):
        if args.switch_after and i == args.switch_after:
            # The workload changes half-way through the run: the graph LC
            # runs eager from here on.
            forward = forward_eager
        arrival = start + i * args.period
        now = time.monotonic_ns()
        if now < arrival:
            sleep_until(arrival)
            now = arrival
        elif now - arrival > args.period:
            late += 1
        prep = lo if hi <= lo else rng.randint(lo, hi)
        hint = gp.request("infer", expected_prep_us) if gp else None
        spin_until(now + prep)
        t0, t_first, t_issued, t1, gpu_ns, cpu_ns = request(hint)
        samples.append({
            "arrival_mono_ns": arrival,
            "prep_ns": prep,
            "launch_call_ns": t_issued - t0,
            "first_call_ns": t_first - t0,
            "latency_ns": t1 - t0,
            "gpu_ns": gpu_ns,
            "cpu_ns": cpu_ns,  # this thread's CPU time in the request
        })
        if pusher:
            pusher.record(t1 - t0)
    end = time.monotonic_ns()
    if pusher:
        pusher.stop()
    gc.enable()

    result = {
        "schema": SCHEMA,
        "worker": "lc_infer.py",
        "pid": os.getpid(),
        "device": torch.cuda.get_device_name(dev),
        "gpu_stamps": False,
        "config": {
            "model": args.model,
            "batch": args.batch,
            "cuda_graph": args.cuda_graph,
            "period_ns": args.period,
            "prep_ns": list(args.prep),
            "seed": args.seed,
            "switch_after": args.switch_after,
            "lead_in_ns": args.lead_in,
            "lead_in_requests": lead_in,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
        },
        "requested": args.requests,
        "warmup": args.warmup,
        "measure_start_mono_ns": start,
        "measure_end_mono_ns": end,
        "late": late,
        "samples": samples,
    }
    if gp is not None:
        result["prepreempt"] = gp.stats()
        result["config"]["hints"] = True
        result["config"]["hint_launcher"] = args.hint_launcher
        gp.close()
    if gate is not None:
        result["prepreempt"] = gate.stats()
        result["config"]["gate"] = True
        gate.close()
    write_json(args.out, result)


def import_gpreempt():
    """The gpreempt package (python/gpreempt): beside this script, as
    gpreempt-bench writes it, else a checkout's (the scripts run from
    bench/pytorch)."""
    try:
        import gpreempt
    except ImportError:
        sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
        import gpreempt
    return gpreempt


def add_push_flags(ap, what):
    """The flags of an LC worker that pushes what it measures to gpreemptd
    (gpreempt-bench's slo: scenarios): what is what it pushes."""
    ap.add_argument("--push-latency", default="", metavar="SOCKET",
                    help=f"push {what} to gpreemptd at this unix socket (its SLO mode)")
    ap.add_argument("--push-period", type=parse_duration, default="1s",
                    help="with --push-latency: one window this long (the daemon's slo.window)")
    ap.add_argument("--lead-in", type=parse_duration, default="0",
                    help="after the go line, run requests this long before measuring (pushed with --push-latency, not kept)")


def write_json(path, obj):
    text = json.dumps(obj, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
        return
    # Atomic: the orchestrator reads the file as soon as the process exits.
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
