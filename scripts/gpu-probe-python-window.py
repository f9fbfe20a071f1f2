"""The Python engine's push window on the GPU machine: 60 requests with
hints through the carried libgpreempt.so (`make gpu-binaries`), then
Engine.window() (the holds of the 60 spinners), push_fields() (the next
window: none), and the stats' counters. From the repo root:

    python3 scripts/gpu-probe-python-window.py
"""
import json
import os
import sys
import time

sys.path.insert(0, "python")
import gpreempt  # noqa: E402

LIB = os.environ.get("GPREEMPT_LIB", ".carry/libgpreempt.so")

with gpreempt.Engine(device=0, launcher="poller", lib=LIB) as gp:
    print("first window:", json.dumps(gp.window()))
    for i in range(60):
        with gp.request("x", expected_prep_us=300) as r:
            t = time.monotonic_ns()
            while time.monotonic_ns() - t < 300_000:  # CPU-side preparation
                pass
            r.ready()
        time.sleep(0.002)
    time.sleep(0.1)  # the last spinner's hold is read by the engine
    print("window:", json.dumps(gp.window()))
    print("next push fields:", json.dumps(gp.push_fields()))
    st = gp.stats()
    print("stats:", json.dumps({k: st[k] for k in ("hints", "early", "late", "spinning")}),
          "held samples", len(st["held_ns_samples"]))
