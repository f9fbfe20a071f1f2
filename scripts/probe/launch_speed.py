#!/usr/bin/env python3
"""Do an LC's own launch gaps measure its CPU's speed, as its loop does?

    python3 scripts/probe/launch_speed.py CALLS.jsonl.gz LC.json [--be-duty 8s]

CALLS is a recording of the LC's calls (`gpreemptctl trace requests --record`, as
scripts/probe/traced-lc.sh writes calls-MODE-*.jsonl.gz); LC is the app's own requests (the
bench LC's --out: samples with arrival_mono_ns, prep_ns, latency_ns and cpu_meter_ns, its CPU
loop's time around the request). The recording's clock is the trace's (CLOCK_MONOTONIC), the
app's the same.

For each of the app's requests, its CPU gaps: from one launch's entry to the next of the same
thread with no synchronize entered between them and the thread on its CPU through most of the gap
(its on-CPU time grew by half the gap or more, where the recording has it): the Python work
between two launches, which the vCPU's speed sets and the GPU should not. Per request, the median
of its CPU gaps (from 10 gaps up). Printed: how many requests; the correlation of log(median gap)
with log(loop time) over them, and of log(latency) with log(loop time), beside it; with
--be-duty D (BE working the even halves of CLOCK_MONOTONIC of D/2, as the bench's --be-duty;
a request counted for the half it starts 100 ms or more into and ends within, as the bench
counts it), the median gap and the loop's median with BE over alone: a gap that reads BE's GPU work as well as
the CPU shows in a ratio over the loop's. Without a duty (traced-lc.sh's phases alone and beside
BE), the medians printed for each recording, one over the other, say the same. A meter to take
samples per the LC's CPU speed needs the first correlation near the loop's own and the two
ratios alike."""
import argparse, gzip, json, math, re, statistics

from reference_error import bench_half, requests


def duration_ns(s):
    m = re.fullmatch(r"([0-9.]+)(ms|s)", s)
    if not m:
        raise argparse.ArgumentTypeError(f"want a duration like 8s or 800ms, not {s!r}")
    return int(float(m[1]) * {"ms": 1e6, "s": 1e9}[m[2]])


def corr(x, y):
    mx, my = statistics.mean(x), statistics.mean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx) if sxx > 0 else math.nan  # one of them constant: no correlation to read


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("calls")
    ap.add_argument("lc")
    ap.add_argument("--be-duty", type=duration_ns, default=0)
    args = ap.parse_args()
    calls = [json.loads(line) for line in gzip.open(args.calls, "rt") if line.strip()]
    calls.sort(key=lambda c: c["at_ns"])
    lc = json.load(open(args.lc))
    # each from its arrival or the one before's end, as the bench's eachHalf places it
    spans = [(q[0], q[1], s) for q, s in zip(requests(lc), lc["samples"]) if s.get("cpu_meter_ns", 0) > 0]
    gaps = {i: [] for i in range(len(spans))}
    last = {}  # thread: (its last launch's entry, its on-CPU time then); dropped at a synchronize's entry
    j = 0
    for c in calls:
        tid, at = c["tid"], c["at_ns"]
        if c["role"] == "sync" and c["kind"] == "enter":
            last.pop(tid, None)
            continue
        if c["role"] != "launch" or c["kind"] != "enter":
            continue
        while j < len(spans) and spans[j][1] <= at:
            j += 1
        if tid in last and j < len(spans) and spans[j][0] <= last[tid][0]:
            t0, cpu0 = last[tid]
            gap, cpu = at - t0, c.get("on_cpu_ns", 0) - cpu0
            if gap > 0 and (not cpu0 or 2 * cpu >= gap):
                gaps[j].append(gap)
        last[tid] = (at, c.get("on_cpu_ns", 0))
    rows = [(statistics.median(g), spans[i][2], spans[i][0], spans[i][1]) for i, g in gaps.items() if len(g) >= 10]
    print(f"requests: {len(spans)} with a loop time, {len(rows)} with 10 CPU gaps or more")
    if len(rows) < 3:
        return
    lg = [math.log(r[0]) for r in rows]
    lm = [math.log(r[1]["cpu_meter_ns"]) for r in rows]
    ll = [math.log(r[1]["latency_ns"]) for r in rows]
    print(f"correlation with log(loop time): log(median CPU gap) {corr(lg, lm):+.2f}, log(latency) {corr(ll, lm):+.2f}")
    print(f"medians: CPU gap {statistics.median(r[0] for r in rows) / 1e3:.1f} us, loop {statistics.median(r[1]['cpu_meter_ns'] for r in rows) / 1e6:.3f} ms")
    if args.be_duty:
        half = args.be_duty // 2
        by = {0: [], 1: []}
        for g, s, start, end in rows:  # a request in one half, 100 ms or more into it, as the bench counts it
            if (h := bench_half((start, end), half)) is not None:
                by[h].append((g, s["cpu_meter_ns"]))
        if by[0] and by[1]:
            ratio = lambda k: statistics.median(x[k] for x in by[0]) / statistics.median(x[k] for x in by[1])
            print(f"with BE over alone ({len(by[0])} / {len(by[1])} requests): median CPU gap {ratio(0):.3f}, loop {ratio(1):.3f}")


if __name__ == "__main__":
    main()
