#!/usr/bin/env python3
"""Where threads were off their CPU, from scripts/lib/offcpu.sh's trace.

    offcpu.py TRACE[.xz] TID [TID...] [--from S --to S]

For each thread: its time off its CPU, by the state it left in (S sleep,
D wait, R+ preempted) and by kernel stack (the 12 innermost frames), with
who ran next. A sleep or wait ends at the thread's wakeup (a switch in from
an idle CPU is not always recorded), a preemption at its switch back in; one
with neither before the thread's next switch out is counted apart.
--from/--to keep switches in that span of the trace's clock (seconds,
CLOCK_MONOTONIC as offcpu.sh has the trace stamp them)."""
import argparse, collections, lzma, re

SWITCH = re.compile(r"\s(\d+\.\d+): sched_switch: prev_comm=.* prev_pid=(\d+) .*prev_state=(\S+) ==> "
                    r"next_comm=(.*) next_pid=(\d+)")
WAKEUP = re.compile(r"\s(\d+\.\d+): sched_wakeup: comm=.* pid=(\d+) ")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace"); ap.add_argument("tids", nargs="+")
    ap.add_argument("--from", dest="t0", type=float, default=0.0)
    ap.add_argument("--to", dest="t1", type=float, default=float("inf"))
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    opener = lzma.open if a.trace.endswith(".xz") else open
    with opener(a.trace, "rt", errors="replace") as f:
        lines = f.read().split("\n")
    want = set(a.tids)
    left = {}  # tid -> (t, state, next, stack)
    offs, unpaired = collections.defaultdict(list), collections.Counter()

    def back(tid, t):
        t0, st, by, stack = left.pop(tid)
        if a.t0 <= t0 <= a.t1:
            offs[tid].append((t - t0, st, by, stack))

    for i, line in enumerate(lines):
        w = WAKEUP.search(line)
        if w and w[2] in left and left[w[2]][1][0] in "SD":
            back(w[2], float(w[1]))
            continue
        m = SWITCH.search(line)
        if not m:
            continue
        t, prev, state, nxt, nxt_pid = float(m[1]), m[2], m[3], m[4].strip(), m[5]
        if prev in left:  # out again: its return went unrecorded
            unpaired[prev] += 1
            del left[prev]
        if prev in want:
            stack = []
            for l in lines[i + 1:i + 60]:
                if l.startswith(" => "):
                    stack.append(l[4:].strip())
                elif "<stack trace>" not in l:
                    break
            left[prev] = (t, state, nxt, tuple(f for f in stack if "sched_switch" not in f and
                                                 f not in ("__schedule", "schedule"))[:12])
        if nxt_pid in want and nxt_pid in left:
            back(nxt_pid, t)
    for tid in a.tids:
        o = offs.get(tid, [])
        print(f"thread {tid}: off its CPU {sum(d for d, *_ in o) * 1e3:.1f} ms in {len(o)} switches"
              f" ({unpaired[tid]} more with no wakeup or return recorded)")
        by_state = collections.defaultdict(float)
        for d, st, _, _ in o:
            by_state[st] += d
        print("  by state: " + ", ".join(f"{s} {v * 1e3:.1f} ms" for s, v in sorted(by_state.items(), key=lambda kv: -kv[1])))
        tot, cnt, nxt = collections.defaultdict(float), collections.Counter(), collections.defaultdict(collections.Counter)
        for d, st, by, stack in o:
            k = (st, stack)
            tot[k] += d; cnt[k] += 1; nxt[k][by] += 1
        for k in sorted(tot, key=tot.get, reverse=True)[:a.top]:
            print(f"  {tot[k] * 1e3:.1f} ms in {cnt[k]} switches (max {max(d for d, st, by, s in o if (st, s) == k) * 1e3:.1f}),"
                  f" state {k[0]}, next {dict(nxt[k].most_common(3))}")
            print("".join(f"      {s}\n" for s in k[1]), end="")


if __name__ == "__main__":
    main()
