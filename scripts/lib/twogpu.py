#!/usr/bin/env python3
"""The helpers of scripts/gpu-run-2gpu.sh (issue 42): what the bash script
cannot do cheaply, one subcommand each. Kept in a file of its own, not in
heredocs, so that it compiles and its logic runs on a machine without a GPU
(the script's DRY_RUN=1 and a fake bench check it there).

  classing         start the classing part's workers and read their channel
                   groups' timeslices every 10 ms for the first second
  classing-report  judge those reads and the trace: per worker, the first
                   classed read and the reads of another GPU's class
  statuspoll       GET /v1/status every --interval, one JSON line each
  procstate        sample /proc/PID/stat's state of some pids every 5 ms
  dual             a BE process with work on cuda:0 and cuda:1 (PyTorch)
  slo-report       the two searches and the bench's objectives, per GPU
  gate-report      BE kernels/s on each GPU over the LC's requests, stops

Every time is CLOCK_MONOTONIC ns, the clock of the bench workers' JSON, of
gpreemptctl trace and of /proc/PID/stat samples here.

The subcommands live in sibling modules, by concern: twogpu_probe.py (what
is read from the machine: RM controls, gpreemptctl, the daemon's socket,
NVML), twogpu_classing.py (the classing run), twogpu_sample.py (the
samplers and the two-GPU process) and twogpu_report.py (the reports).
"""

import argparse
import sys

from twogpu_classing import cmd_classing
from twogpu_report import cmd_classing_report, cmd_gate_report, cmd_slo_report
from twogpu_sample import cmd_dual, cmd_procstate, cmd_statuspoll


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("classing")
    p.add_argument("--plan", action="store_true", help="print the workers and exit")
    p.add_argument("--uuid0", default="GPU-<uuid-of-0>")
    p.add_argument("--uuid1", default="GPU-<uuid-of-1>")
    p.add_argument("--bin", default=".carry")
    p.add_argument("--dir", default="/tmp/gpreempt-2gpu-out")
    p.add_argument("--sock", default="")
    p.add_argument("--trace", default="", help="gpreemptctl -o json trace tsg's output, followed for new groups")
    p.add_argument("--expect", default="lc:0=5000000,be:0=200,lc:1=3000,be:1=740")
    p.add_argument("--window", type=float, default=1.0)
    p.add_argument("--period", type=float, default=0.010)
    p.add_argument("--stagger", type=float, default=0.15)
    p.add_argument("--trace-grace", type=float, default=3.0, help="seconds to wait for the trace to show a worker's group before discovering it")
    p.add_argument("--give-up", type=float, default=15.0)
    p.add_argument("--lc-requests", type=int, default=1500)
    p.add_argument("--be-duration", default="6s")
    p.add_argument("--out", default="")
    p = sub.add_parser("classing-report")
    for f in ("reads", "trace", "log", "md", "json"):
        p.add_argument("--" + f, default="")
    p = sub.add_parser("statuspoll")
    p.add_argument("--sock", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--interval", type=float, default=1.0)
    p = sub.add_parser("procstate")
    p.add_argument("--out", required=True)
    p.add_argument("--interval", type=float, default=0.005)
    p.add_argument("pids", nargs="+")
    p = sub.add_parser("dual")
    p.add_argument("--life", type=float, default=30)
    p.add_argument("--n", type=int, default=2048)
    p = sub.add_parser("slo-report")
    for f in ("status", "dual-status", "results0", "results1", "snap-a", "snap-b", "snap-c", "md", "objective0", "objective1"):
        p.add_argument("--" + f, default="")
    p.add_argument("--dual-pid", type=int, default=0)
    p = sub.add_parser("gate-report")
    for f in ("variant", "title", "be0", "be1", "lc", "procstate", "status", "processes", "md", "json"):
        p.add_argument("--" + f, default="")
    p.add_argument("--bin", type=float, default=0.2)
    p.add_argument("--keep", type=float, default=0.85)
    a = ap.parse_args()
    return {"classing": cmd_classing, "classing-report": cmd_classing_report, "statuspoll": cmd_statuspoll,
            "procstate": cmd_procstate, "dual": cmd_dual, "slo-report": cmd_slo_report,
            "gate-report": cmd_gate_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
