#!/usr/bin/env python3
"""Probe, on the GPU machine, two questions behind SLO mode's baseline.

1. How much of an eager PyTorch LC's latency is its own CPU side, and how
   much does that move from one LC process to the next, unpinned and pinned
   to one core (sched_setaffinity)? Runs the LC alone RUNS times each way.
2. Does stopping the BE process's CPU side (SIGSTOP) give the LC its
   standalone latency within a window, with BE still training, and does BE
   go on and finish after SIGCONT? Runs BE training beside the LC, stops
   BE for PAUSE seconds twice, and prints the LC's latency per second with
   the paused seconds marked.

Usage (as root on the GPU machine, from the repository root):
    python3 scripts/gpu-probe-pause.py [OUTDIR]
Environment: RUNS (3), SECS (8), PAUSE (4).
"""

import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.join(HERE, "..", "bench", "pytorch")
OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/probe-pause"
RUNS = int(os.environ.get("RUNS", "3"))
SECS = int(os.environ.get("SECS", "8"))
PAUSE = float(os.environ.get("PAUSE", "4"))
os.makedirs(OUT, exist_ok=True)


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))] if xs else float("nan")


def start_lc(name, cpus=None, requests=None):
    out = os.path.join(OUT, name + ".json")
    n = requests or SECS * 50
    cmd = [sys.executable, "-u", os.path.join(PY, "lc_infer.py"), "--period", "20ms", "--requests", str(n),
           "--warmup", "20", "--model", "resnet50", "--wait-go", "--out", out]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    line = p.stdout.readline()
    if not line.startswith("READY"):
        raise SystemExit(f"{name}: no READY: {line!r}")
    return p, out


def go(p):
    t = time.monotonic_ns()
    p.stdin.write("go\n")
    p.stdin.flush()
    return t


def summary(out):
    s = json.load(open(out))["samples"]
    lat = [x["latency_ns"] / 1e3 for x in s]
    la = [x["launch_call_ns"] / 1e3 for x in s]
    wait = [a - b for a, b in zip(lat, la)]
    return s, (f"latency p50 {q(lat, .5):6.0f} p99 {q(lat, .99):6.0f} | launch p10 {q(la, .1):5.0f} p50 {q(la, .5):5.0f} "
               f"p90 {q(la, .9):5.0f} | sync wait p50 {q(wait, .5):5.0f} us")


print("cpus:", os.cpu_count(), "affinity:", sorted(os.sched_getaffinity(0)))
for f in ("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"):
    try:
        print(f, open(f).read().strip())
    except OSError as e:
        print(f, "unreadable:", e.strerror)
sys.stdout.flush()

# 1. The LC alone, a fresh process each run, unpinned and pinned, interleaved.
for r in range(RUNS):
    for mode, cpus in (("unpinned", None), ("pinned", {3})):
        p, out = start_lc(f"alone-{mode}-{r}", cpus)
        go(p)
        p.wait()
        print(f"alone {mode:8s} run {r}: {summary(out)[1]}", flush=True)

# 2. BE training beside the LC; BE stopped twice for PAUSE s.
total = 40
be_out = os.path.join(OUT, "be.json")
be = subprocess.Popen([sys.executable, "-u", os.path.join(PY, "be_train.py"), "--duration", f"{total + 20}s",
                       "--model", "resnet50", "--batch", "64", "--out", be_out], stdout=subprocess.PIPE, text=True)
line = be.stdout.readline()
if not line.startswith("READY"):
    raise SystemExit(f"be: no READY: {line!r}")
p, out = start_lc("beside-be", requests=total * 50)
t0 = go(p)
pauses = []
for start in (10, 24):
    time.sleep(max(0, (t0 + start * 1e9 - time.monotonic_ns()) / 1e9))
    a = time.monotonic_ns()
    os.kill(be.pid, signal.SIGSTOP)
    time.sleep(PAUSE)
    os.kill(be.pid, signal.SIGCONT)
    pauses.append((a, time.monotonic_ns()))
p.wait()
s, line = summary(out)
print("beside BE (whole run):", line)
by = {}
for x in s:
    sec = int((x["arrival_mono_ns"] - t0) // 1e9)
    by.setdefault(sec, []).append(x)
for sec in sorted(by):
    xs = by[sec]
    mid = t0 + (sec + 0.5) * 1e9
    paused = any(a <= t0 + sec * 1e9 and t0 + (sec + 1) * 1e9 <= b for a, b in pauses)
    part = any(a < t0 + (sec + 1) * 1e9 and t0 + sec * 1e9 < b for a, b in pauses) and not paused
    lat = [x["latency_ns"] / 1e3 for x in xs]
    la = [x["launch_call_ns"] / 1e3 for x in xs]
    print(f"  s{sec:02d} {'PAUSED' if paused else ('part  ' if part else '      ')} n={len(xs):3d} p50 {q(lat, .5):6.0f} "
          f"launch p50 {q(la, .5):6.0f} wait p50 {q([a - b for a, b in zip(lat, la)], .5):6.0f}")
t_end = time.monotonic_ns()
rc = be.wait(timeout=60)
print(f"BE exited rc={rc} {(time.monotonic_ns() - t_end) / 1e9:.1f} s after the LC; its result:",
      json.dumps({k: v for k, v in json.load(open(be_out)).items() if k in ("kernels", "kernels_per_sec", "duration_s")}))
p, out = start_lc("alone-after")
go(p)
p.wait()
print("alone after:", summary(out)[1])
comp = json.load(open(be_out))["completions_mono_ns"]
per = [0] * (total + 1)
for c in comp:
    sec = int((c - t0) // 1e9)
    if 0 <= sec <= total:
        per[sec] += 1
print("BE iterations completed per second of the LC's run:", per)
print("pauses (s after go):", [(round((a - t0) / 1e9, 2), round((b - t0) / 1e9, 2)) for a, b in pauses])
