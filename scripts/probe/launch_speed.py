#!/usr/bin/env python3
"""Do an LC's own launch gaps measure its CPU's speed, as its loop does, and how much of its noise?

    python3 scripts/probe/launch_speed.py CALLS.jsonl.gz LC [--be-duty 8s] [--rows ROWS.jsonl] [--against T.jsonl]

CALLS: a recording of the LC's calls (`gpreemptctl trace requests --record`; traced-lc.sh's
calls-MODE-*.jsonl.gz). LC: the app's requests, the bench LC's --out (arrival_mono_ns, prep_ns,
latency_ns, cpu_meter_ns: its CPU loop's time around it) or a bench's RESULTS.json.gz:SCENARIO.
Both on CLOCK_MONOTONIC.

A request's CPU gaps: one launch's entry to the next of its thread, no synchronize entered
between, the thread on its CPU throughout (its count of blocks unchanged; without one, its CPU
time grew by half the gap, which a CPU time moving at ticks seldom shows): the Python work the
vCPU's speed sets. Per request their median (from 10). Printed: the correlations of log median
gap with log loop time and of log latency with each; one request's scatter (SD of log latency)
as it is, per gap and per loop. With --be-duty D (BE working the even halves of D/2, requests
counted as the bench counts them): the median gap's and the loop's ratios with BE over alone;
the p50 ratio as measured, per gap and per loop, with 95% bootstrap intervals; their spread
between blocks of 4 duty cycles (SD of log ratio; 5 requests a half up): one measurement's
scatter; BE's geometric factor (least squares on logs, 95%) on the gap alone and net of the
loop, on latency per gap and on latency net of the loop: a gap BE lengthens shows in the first
two. Without a duty (traced-lc.sh's phases) the medians of two recordings say the same.
--against T: gpreemptctl's traced requests (`trace requests --replay CALLS --each --json`), its
CPU gap over this median for each app request that holds one. --rows: each request's start,
end, latency, median and mean CPU gap, their count and loop time (ns), a JSON line each."""
import argparse, gzip, json, math, random, statistics

from reference_error import bench_half, requests
from span_alone import duration_us


def duration_ns(s):
    if (us := duration_us(s)) <= 0:
        raise argparse.ArgumentTypeError(f"want a duration like 8s or 800ms, not {s!r}")
    return int(us * 1e3)


def corr(x, y):
    mx, my = statistics.mean(x), statistics.mean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx) if sxx > 0 else math.nan  # one of them constant: no correlation to read


def load_lc(arg):
    """The app's samples: its own --out, or a bench RESULTS.json.gz:SCENARIO's LC."""
    path, _, name = arg.partition(":")
    if not name:
        return json.load(open(path))
    for sc in json.load(gzip.open(path))["scenarios"]:
        if sc["name"] == name and sc.get("lc"):
            return sc["lc"]
    raise SystemExit(f"launch_speed.py: {path} has no scenario {name!r} with LC requests")


def cpu_gaps(path, spans):
    """Each request's CPU gaps (ns), in the order of spans."""
    calls = []
    try:
        for line in gzip.open(path, "rt"):
            if line.strip():
                c = json.loads(line)  # compact: a long recording holds millions
                calls.append((c["at_ns"], c["tid"], c["role"], c["kind"], c.get("blocked", 0), c.get("on_cpu_ns", 0)))
    except (EOFError, json.JSONDecodeError):  # a recorder stopped mid-write: its calls up to there
        print(f"{path}: cut short after {len(calls)} calls")
    calls.sort(key=lambda c: c[0])
    gaps = [[] for _ in spans]
    last = {}  # thread: (its last launch's entry, its blocks then, its on-CPU time then); dropped at a synchronize's entry
    j = 0
    for at, tid, role, kind, blocked, cpu in calls:
        if role == "sync" and kind == "enter":
            last.pop(tid, None)
            continue
        if role != "launch" or kind != "enter":
            continue
        while j < len(spans) and spans[j][1] <= at:
            j += 1
        if tid in last and j < len(spans) and spans[j][0] <= last[tid][0]:
            t0, b0, cpu0 = last[tid]
            gap = at - t0
            on = blocked == b0 if blocked and b0 else not cpu0 or 2 * (cpu - cpu0) >= gap
            if gap > 0 and on:
                gaps[j].append(gap)
        last[tid] = (at, blocked, cpu)
    return gaps


def be_factor(rows, y, loop):
    """BE's geometric factor on y (a log per request) by least squares on [1, BE works] (and log loop, with loop),
    with its 95% interval (exp of the BE coefficient and of it +- 1.96 standard errors), as text; None where the
    design is singular."""
    xs = [[1.0, float(h == 0)] + ([math.log(x[1]["cpu_meter_ns"])] if loop else []) for h, x in rows]
    k = len(xs[0])
    a = [[sum(r[i] * r[j] for r in xs) for j in range(k)] + [float(i == j) for j in range(k)] for i in range(k)]
    for i in range(k):  # a's inverse, Gauss-Jordan
        if abs(a[i][i]) < 1e-9 * len(xs):
            return None  # BE and the loop in step (or no request in a half): not told apart
        a[i] = [v / a[i][i] for v in a[i]]
        for j in range(k):
            if j != i:
                a[j] = [u - a[j][i] * v for u, v in zip(a[j], a[i])]
    inv = [r[k:] for r in a]
    ys = [y(x) for _, x in rows]
    b = [sum(inv[i][j] * sum(r[j] * v for r, v in zip(xs, ys)) for j in range(k)) for i in range(k)]
    s2 = sum((v - sum(c * u for c, u in zip(b, r))) ** 2 for r, v in zip(xs, ys)) / (len(ys) - k)
    se = math.sqrt(max(s2 * inv[1][1], 0))
    return "{:.3f} [{:.3f}, {:.3f}]".format(math.exp(b[1]), math.exp(b[1] - 1.96 * se), math.exp(b[1] + 1.96 * se))


def ratio_ci(by, value, rng, n=2000):
    """The p50 ratio with BE over alone of value(request), and its 95% bootstrap interval."""
    a, b = [value(r) for r in by[0]], [value(r) for r in by[1]]
    point = statistics.median(a) / statistics.median(b)
    boots = sorted(statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b))) for _ in range(n))
    return point, boots[int(0.025 * n)], boots[int(0.975 * n) - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("calls")
    ap.add_argument("lc")
    ap.add_argument("--be-duty", type=duration_ns, default=0)
    ap.add_argument("--rows")
    ap.add_argument("--against")
    args = ap.parse_args()
    lc = load_lc(args.lc)
    # each from its arrival or the one before's end, as the bench's eachHalf places it
    spans = [(q[0], q[1], s) for q, s in zip(requests(lc), lc["samples"]) if s.get("cpu_meter_ns", 0) > 0]
    gaps = cpu_gaps(args.calls, spans)
    rows = [(statistics.median(g), spans[i][2], spans[i][0], spans[i][1]) for i, g in enumerate(gaps) if len(g) >= 10]
    if args.rows:
        with open(args.rows, "w") as f:
            for i, g in enumerate(gaps):
                if g:
                    s = spans[i][2]
                    f.write(json.dumps({"start_ns": spans[i][0], "end_ns": spans[i][1], "latency_ns": s["latency_ns"], "gap_p50_ns": statistics.median(g),
                                        "gap_mean_ns": statistics.mean(g), "gaps": len(g), "cpu_meter_ns": s["cpu_meter_ns"]}) + "\n")
    if args.against:  # gpreemptctl's traced requests (--replay --each --json): its CPU gap over ours, request by request
        traced = [t for t in (json.loads(x) for x in open(args.against) if '"type":"request"' in x) if t.get("cpu_gap_ns") and t["kind"] == "request"]
        d = [t["cpu_gap_ns"] / g - 1 for g, _, start, end in rows for t in traced
             if start <= (t["start_ns"] + t["end_ns"]) // 2 < end]  # its middle in the app's
        if d:
            print(f"gpreemptctl's CPU gap over this one's: {len(d)} requests, median {statistics.median(d):+.4f}, largest {max(map(abs, d)):.4f}")
    print(f"requests: {len(spans)} with a loop time, {len(rows)} with 10 CPU gaps or more")
    if len(rows) < 3:
        return
    lg = [math.log(r[0]) for r in rows]
    lm = [math.log(r[1]["cpu_meter_ns"]) for r in rows]
    ll = [math.log(r[1]["latency_ns"]) for r in rows]
    print(f"correlation with log(loop time): log(median CPU gap) {corr(lg, lm):+.2f}, log(latency) {corr(ll, lm):+.2f}; "
          f"log(latency) with log(median CPU gap) {corr(ll, lg):+.2f}")
    print(f"medians: CPU gap {statistics.median(r[0] for r in rows) / 1e3:.1f} us, loop {statistics.median(r[1]['cpu_meter_ns'] for r in rows) / 1e6:.3f} ms")
    sd = lambda v: statistics.pstdev(v)
    print(f"one request's scatter (sd of log latency): {sd(ll):.3f}, per its median CPU gap {sd([a - b for a, b in zip(ll, lg)]):.3f}, "
          f"per its loop {sd([a - b for a, b in zip(ll, lm)]):.3f}")
    if not args.be_duty:
        return
    half = args.be_duty // 2
    by = {0: [], 1: []}
    for g, s, start, end in rows:  # a request in one half, 100 ms or more into it, as the bench counts it
        if (h := bench_half((start, end), half)) is not None:
            by[h].append((g, s, start))
    if not (by[0] and by[1]):
        return
    ratio = lambda f: statistics.median(f(x) for x in by[0]) / statistics.median(f(x) for x in by[1])
    print(f"with BE over alone ({len(by[0])} / {len(by[1])} requests): median CPU gap {ratio(lambda x: x[0]):.3f}, loop {ratio(lambda x: x[1]['cpu_meter_ns']):.3f}")
    values = {"as measured": lambda x: x[1]["latency_ns"], "per median CPU gap": lambda x: x[1]["latency_ns"] / x[0],
              "per loop": lambda x: x[1]["latency_ns"] / x[1]["cpu_meter_ns"]}
    rng = random.Random(1)
    print("p50 ratio with BE over alone: " + ", ".join(f"{k} {p:.3f} [{lo:.3f}, {hi:.3f}]" for k, (p, lo, hi) in ((k, ratio_ci(by, v, rng)) for k, v in values.items())))
    # geometric, all requests at once: with the loop as a covariate the CPU's speed no longer hides a small factor
    both = [(h, x) for h, xs in by.items() for x in xs]
    gap, lat_gap = lambda x: math.log(x[0]), lambda x: math.log(x[1]["latency_ns"] / x[0])
    f = lambda y, loop: be_factor(both, y, loop) or "–"
    print(f"BE's factor (geometric, 95%): on the median CPU gap {f(gap, False)}, net of the loop {f(gap, True)}; "
          f"on latency per median CPU gap {f(lat_gap, False)}, on latency net of the loop {f(lambda x: math.log(x[1]['latency_ns']), True)}")
    block = 4 * args.be_duty  # four duty cycles a measurement
    blocks = {}
    for h, xs in by.items():
        for x in xs:
            blocks.setdefault(x[2] // block, {0: [], 1: []})[h].append(x)
    kept = [b for b in blocks.values() if len(b[0]) >= 5 and len(b[1]) >= 5]
    if len(kept) >= 3:
        print(f"over {len(kept)} blocks of {block / 1e9:.0f} s, the ratio's spread (sd of its log): " +
              ", ".join(f"{k} {sd([math.log(statistics.median(v(x) for x in b[0]) / statistics.median(v(x) for x in b[1])) for b in kept]):.3f}" for k, v in values.items()))


if __name__ == "__main__":
    main()
