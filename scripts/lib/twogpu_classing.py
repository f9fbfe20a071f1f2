"""twogpu.py classing: start the classing part's workers, an LC and a BE on
each GPU, and read their channel groups' timeslices every 10 ms for the
first second from the first group seen (found in gpreemptctl trace tsg's
output, else by gpreemptctl ps); the reads go to --out for
twogpu_report.cmd_classing_report to judge.
"""

import json
import os
import re
import subprocess
import threading
import time

from twogpu_probe import GroupReader, handle, mono_ns, nvml_gpus, ps_groups, unix_get

# The part's workers: an LC and a BE on each GPU, the GPU named in every
# way a process can be put on it. "cvd" is CUDA_VISIBLE_DEVICES (None:
# unset; UUID0/UUID1 are replaced), "device" the bench's --device (the
# process's own ordinal). The script exports CUDA_DEVICE_ORDER=PCI_BUS_ID,
# so that ordinals count as nvidia-smi and NVML do.
WORKERS = [
    # name        role  GPU  CUDA_VISIBLE_DEVICES  --device
    ("lc0-plain", "lc", 0, None, 0),
    ("be0-cvd0", "be", 0, "0", 0),
    ("lc1-cvd1", "lc", 1, "1", 0),
    ("be1-uuid", "be", 1, "UUID1", 0),
    ("be1-dev1", "be", 1, None, 1),
    ("lc0-swap", "lc", 0, "1,0", 1),
    ("lc1-uuid", "lc", 1, "UUID1", 0),
    ("be0-uuid", "be", 0, "UUID0", 0),
]


def parse_expect(s):
    """"lc:0=5000000,be:0=200,..." -> {("lc", 0): 5000000, ...}."""
    out = {}
    for part in s.split(","):
        k, v = part.split("=")
        role, gpu = k.split(":")
        out[(role, int(gpu))] = int(v)
    return out


def worker_plan(a):
    plan = []
    for name, role, gpu, cvd, dev in WORKERS:
        if cvd is not None:
            cvd = cvd.replace("UUID0", a.uuid0).replace("UUID1", a.uuid1)
        if role == "lc":
            args = ["lc", "--device", str(dev), "--requests", str(a.lc_requests), "--warmup", "10"]
        else:
            args = ["be", "--device", str(dev), "--duration", a.be_duration]
        plan.append(dict(name=name, role=role, gpu=gpu, cvd=cvd, device=dev, args=args))
    return plan


# A trace line that names a new group or its engine.
NEW_GROUP = re.compile(r'"event"\s*:\s*"(tsg-alloc|engine)"')


def cmd_classing(a):
    plan = worker_plan(a)
    if a.plan:
        print(f"{'worker':10s} {'role':4s} {'GPU':3s} {'CUDA_VISIBLE_DEVICES':42s} command")
        for w in plan:
            print(f"{w['name']:10s} {w['role']:4s} {w['gpu']:<3d} {w['cvd'] if w['cvd'] is not None else '(unset)':42s} "
                  f"TWOGPU_ROLE={w['role']} gpreempt-bench {' '.join(w['args'])} --out W/classing-{w['name']}.json")
        return 0
    os.makedirs(a.dir, exist_ok=True)
    bench = os.path.join(a.bin, "gpreempt-bench")
    ctl = os.path.join(a.bin, "gpreemptctl")
    window_ns, period_ns = int(a.window * 1e9), int(a.period * 1e9)
    lock = threading.Lock()
    trace = open(a.trace) if a.trace else None
    tbuf = ""
    workers, by_pid = [], {}

    def spawn(w):
        env = dict(os.environ, TWOGPU_ROLE=w["role"])
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if w["cvd"] is not None:
            env["CUDA_VISIBLE_DEVICES"] = w["cvd"]
        out = open(os.path.join(a.dir, f"classing-{w['name']}.log"), "w")
        w["spawn_ns"] = mono_ns()
        p = subprocess.Popen([bench] + w["args"] + ["--out", os.path.join(a.dir, f"classing-{w['name']}.json")],
                             env=env, stdout=out, stderr=subprocess.STDOUT)
        w.update(proc=p, pid=p.pid, reads=[], errors=[], first_group_ns=None, method=None, done=False,
                 ctl_thread=None, disc_thread=None)
        try:
            w["reader"] = GroupReader(p.pid)
        except OSError as e:
            w["reader"] = None
            w["errors"].append(f"pidfd_open: {e}")
        workers.append(w)
        by_pid[p.pid] = w

    def add_group(w, g):
        """Adds a group gpreemptctl or the trace named to w's reader; the
        caller holds lock."""
        try:
            if w["reader"]:
                w["reader"].add(g["fd"], handle(g["client"]), handle(g["handle"]), g.get("engine", ""))
        except OSError as e:
            w["errors"].append(str(e))

    def discover(w):
        """Fallback without the trace: gpreemptctl ps until groups show."""
        end = w["spawn_ns"] + int(a.give_up * 1e9)
        while mono_ns() < end and w["proc"].poll() is None:
            gs = ps_groups(ctl, w["pid"])
            if gs:
                with lock:
                    if w["first_group_ns"] is None:
                        w["first_group_ns"], w["method"] = mono_ns(), w["method"] or "ps+ioctl"
                    for g in gs:
                        add_group(w, g)
                # Groups made after this discovery: once more, later.
                time.sleep(0.3)
                for g in ps_groups(ctl, w["pid"]) or []:
                    with lock:
                        add_group(w, g)
                return
            time.sleep(0.05)

    def ctl_reads(w):
        """Fallback where the ioctl fails: gpreemptctl get-timeslice, as fast
        as it goes, until the window ends."""
        while mono_ns() < w["first_group_ns"] + window_ns and w["proc"].poll() is None:
            t0 = mono_ns()
            gs = None
            try:
                r = subprocess.run([ctl, "-o", "json", "get-timeslice", "--pid", str(w["pid"])],
                                   capture_output=True, text=True, timeout=5)
                d = json.loads(r.stdout)
                d = d[0] if isinstance(d, list) and d else d
                gs = {hex(handle(g["handle"])): g["timeslice_us"] for g in d.get("groups", [])}
            except (subprocess.TimeoutExpired, ValueError, OSError, AttributeError):
                pass
            if gs:
                with lock:
                    w["reads"].append([(t0 + mono_ns()) // 2, gs])

    def take_trace_lines():
        nonlocal tbuf
        if trace is None:
            return
        chunk = trace.read()
        if not chunk:
            return
        tbuf += chunk
        *lines, tbuf = tbuf.split("\n")
        for line in lines:
            if not NEW_GROUP.search(line):
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            g = ev.get("group") or {}
            w = by_pid.get(g.get("pid"))
            if w is None or ev.get("event") not in ("tsg-alloc", "engine") or w["method"] == "ps+ioctl":
                continue
            with lock:
                if w["first_group_ns"] is None:
                    # The window starts at the allocation, not when the
                    # line was read: a few ms earlier.
                    c, now = g.get("created_ns") or 0, mono_ns()
                    w["first_group_ns"] = c if w["spawn_ns"] <= c <= now else now
                    w["method"], w["first_alloc_created_ns"] = "trace+ioctl", c
                add_group(w, g)

    # One loop a tick: start the next worker when due (a.stagger apart),
    # take new groups from the trace, read every group in its window.
    pending = list(plan)
    t_next = next_spawn = mono_ns()
    deadline = None
    while deadline is None or mono_ns() < deadline:
        if pending and mono_ns() >= next_spawn:
            spawn(pending.pop(0))
            next_spawn = mono_ns() + int(a.stagger * 1e9)
            if not pending:
                deadline = mono_ns() + int(a.give_up * 1e9) + window_ns
        take_trace_lines()
        now = mono_ns()
        for w in workers:
            if w["done"]:
                continue
            if w["first_group_ns"] is None:
                # No group in the trace yet: start discovering once the
                # trace has had its chance (or at once without a trace).
                wait = 0.3 if trace is None else a.trace_grace
                if w["disc_thread"] is None and now - w["spawn_ns"] > wait * 1e9:
                    w["disc_thread"] = threading.Thread(target=discover, args=(w,), daemon=True)
                    w["disc_thread"].start()
                if now - w["spawn_ns"] > a.give_up * 1e9 or w["proc"].poll() is not None:
                    w["done"] = True
                    w["errors"].append("no channel group seen")
                continue
            if now > w["first_group_ns"] + window_ns or w["proc"].poll() is not None:
                w["done"] = True
                continue
            if w["ctl_thread"] is not None:
                continue
            with lock:
                vals = w["reader"].read() if w["reader"] else {}
            if vals:
                w["reads"].append([now, vals])
            bad = [v for v in vals.values() if isinstance(v, str)]
            if bad and len(bad) == len(vals):
                w["errors"].append(f"read at +{(now - w['first_group_ns']) / 1e6:.0f} ms: {bad[0]}")
            recent = w["reads"][-3:]
            failing = len(recent) == 3 and all(all(isinstance(v, str) for v in r[1].values()) for r in recent)
            # Groups seen but none can be read through our duplicate (no
            # pidfd, a refused pidfd_getfd or control): gpreemptctl's own
            # read instead, at the resolution it gives.
            unreadable = not vals and now - w["first_group_ns"] > 50_000_000
            if failing or unreadable:
                w["method"] += "->gpreemptctl"
                w["ctl_thread"] = threading.Thread(target=ctl_reads, args=(w,), daemon=True)
                w["ctl_thread"].start()
        if not pending and all(w["done"] for w in workers):
            break
        t_next += period_ns
        time.sleep(max(0, t_next - mono_ns()) / 1e9)
    for w in workers:
        if w["ctl_thread"] is not None:
            w["ctl_thread"].join(timeout=6)
        if w["reader"]:
            w["reader"].close()

    # Which GPU each is on (NVML) and what the daemon holds, while they run.
    nvml = nvml_gpus()
    procs = unix_get(a.sock, "/v1/processes")
    final = {w["pid"]: ps_groups(ctl, w["pid"]) for w in workers if w["proc"].poll() is None}
    for w in workers:
        try:
            w["proc"].wait(timeout=max(1, a.give_up))
        except subprocess.TimeoutExpired:
            w["proc"].kill()
            w["proc"].wait()
    res = dict(window_s=a.window, period_s=a.period, expect={f"{r}:{g}": v for (r, g), v in parse_expect(a.expect).items()},
               nvml=nvml, daemon_processes=json.loads(procs) if procs else None, workers=[])
    for w in workers:
        engines = {hex(h): e for h, (_, _, e) in w["reader"].groups.items()} if w["reader"] else {}
        for g in final.get(w["pid"]) or []:
            engines.setdefault(hex(handle(g["handle"])), g.get("engine", ""))
        res["workers"].append({k: w.get(k) for k in ("name", "role", "gpu", "cvd", "device", "args", "pid", "spawn_ns",
                                                     "first_group_ns", "first_alloc_created_ns", "method", "errors", "reads")}
                              | {"final_ps": final.get(w["pid"]), "exit": w["proc"].returncode, "engines": engines})
    with open(a.out, "w") as f:
        json.dump(res, f)
    return 0
