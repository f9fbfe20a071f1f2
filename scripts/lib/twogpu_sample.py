"""The samplers of scripts/gpu-run-2gpu.sh, each run until SIGTERM or
SIGINT: gpreemptd's status once a --interval (statuspoll), /proc/PID/stat's
state of some pids (procstate), and a BE process with work on both GPUs
(dual).
"""

import json
import os
import signal
import time

from twogpu_probe import mono_ns, unix_get


class Stop:
    def __init__(self):
        self.stop = False
        signal.signal(signal.SIGTERM, self.set)
        signal.signal(signal.SIGINT, self.set)

    def set(self, *_):
        self.stop = True


def cmd_statuspoll(a):
    st = Stop()
    with open(a.out, "a") as f:
        while not st.stop:
            t = mono_ns()
            body = unix_get(a.sock, "/v1/status")
            try:
                s = json.loads(body) if body else None
            except ValueError:
                s = None
            f.write(json.dumps({"mono_ns": t, "wall": time.time(), "status": s}) + "\n")
            f.flush()
            end = t + int(a.interval * 1e9)
            while not st.stop and mono_ns() < end:
                time.sleep(0.05)
    return 0


def cmd_procstate(a):
    st = Stop()
    pids = [int(p) for p in a.pids]
    n = {p: 0 for p in pids}
    stopped = {p: 0 for p in pids}
    spans = {p: [] for p in pids}
    cur = {p: None for p in pids}
    period = int(a.interval * 1e9)
    t_next = mono_ns()
    while not st.stop:
        t = mono_ns()
        for p in pids:
            try:
                s = open(f"/proc/{p}/stat").read()
                state = s[s.rindex(")") + 2]
            except (OSError, ValueError, IndexError):
                continue
            n[p] += 1
            if state in "Tt":
                stopped[p] += 1
                if cur[p] is None:
                    cur[p] = t
            elif cur[p] is not None:
                spans[p].append([cur[p], t])
                cur[p] = None
        t_next += period
        time.sleep(max(0, t_next - mono_ns()) / 1e9)
    for p in pids:
        if cur[p] is not None:
            spans[p].append([cur[p], mono_ns()])
    with open(a.out, "w") as f:
        json.dump({"interval_s": a.interval, "pids": {str(p): {"samples": n[p], "stopped": stopped[p], "spans": spans[p]} for p in pids}}, f)
    return 0


def cmd_dual(a):
    import torch

    xs = [torch.randn(a.n, a.n, device=f"cuda:{i}") for i in (0, 1)]
    for i, x in enumerate(xs):
        (x @ x).sum().item()
    print(f"READY pid={os.getpid()} devices={[torch.cuda.get_device_name(i) for i in (0, 1)]}", flush=True)
    st = Stop()
    end = time.time() + a.life
    while time.time() < end and not st.stop:
        for x in xs:
            x @ x
        for i in (0, 1):
            torch.cuda.synchronize(i)
    return 0
