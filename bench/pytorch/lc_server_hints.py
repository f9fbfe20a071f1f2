"""Example LC inference server loop with gpreempt hints (PyTorch).

Each request: a hint when its CPU-side preparation starts, the preparation
(decoding/normalising an input on the CPU, simulated here by --prep of busy
work), the host-to-device copy and the model, then ready() right after the
kernels are queued, then synchronize. Run it beside a training job that
gpreemptctl has put in the BE class:

    sudo gpreemptctl class --pid <trainer> --be-timeslice 1us be
    GPREEMPT_LIB=bin/libgpreempt.so PYTHONPATH=python \\
        python3 bench/pytorch/lc_server_hints.py --requests 500

Prints latency percentiles (preparation end to synchronize return) and the
engine's statistics. --no-hints runs the same loop without gpreempt.
"""

import argparse
import json
import time

import torch
import torchvision


def busy(us):
    end = time.perf_counter_ns() + us * 1000
    while time.perf_counter_ns() < end:
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--period-ms", type=float, default=20.0)
    ap.add_argument("--prep-us", type=int, default=500)
    ap.add_argument("--no-hints", action="store_true")
    a = ap.parse_args()

    dev = torch.device("cuda")
    model = getattr(torchvision.models, a.model)(weights=None).eval().to(dev)
    host = torch.randn(1, 3, 224, 224).pin_memory()
    gp = None
    if not a.no_hints:
        import gpreempt
        gp = gpreempt.Engine(device=torch.cuda.current_device())
    lat = []
    with torch.inference_mode():
        for _ in range(20):
            model(host.to(dev, non_blocking=True))
        torch.cuda.synchronize()
        for i in range(a.requests):
            t_arrive = time.perf_counter_ns()
            req = gp.request("infer", a.prep_us) if gp else None
            busy(a.prep_us)
            t0 = time.perf_counter_ns()
            y = model(host.to(dev, non_blocking=True))
            if req:
                req.ready()
            torch.cuda.current_stream().synchronize()
            lat.append((time.perf_counter_ns() - t0) / 1e3)
            sleep = a.period_ms / 1e3 - (time.perf_counter_ns() - t_arrive) / 1e9
            if sleep > 0:
                time.sleep(sleep)
    lat.sort()
    pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    out = {"hints": gp is not None, "p50_us": pct(0.5), "p99_us": pct(0.99), "max_us": lat[-1]}
    if gp:
        st = gp.stats()
        out["engine"] = {k: st[k] for k in ("backend", "hints", "early", "late", "expired", "dropped")}
        gp.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
