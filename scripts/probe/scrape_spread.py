#!/usr/bin/env python3
"""What a scraped histogram's buckets cost SLO mode's measurements of an LC, against its own latencies.

    python3 scripts/probe/scrape_spread.py RESULTS.json.gz [...]

RESULTS is a bench run's results.json.gz (any scenario with LC requests under --be-duty; a
repetition's are in the raw-rep*.tgz scripts/gpu-run-lanes.sh writes). Each request is put in
lc_decode.py's FINE_HISTOGRAM buckets (5% apart) in the 1 s window it ended in, as gpreemptd's
scraper sees it, and each window's values are placed as internal/scrape's Hist.Values places them:

  middle   k values of a bucket in one window at (j + 1/2) / k of it (gpreemptd's placement: a
           lone value at its bucket's middle);
  rotated  the same, turned each window by the golden ratio times the windows that bucket held
           values in before, so that values pooled over windows spread through their buckets as
           one histogram's would (an alternative, not gpreemptd's).

Windows lie in one of BE's halves (1 s windows on whole seconds, halves on whole multiples of
the duty's half). A measurement pools the requests of the windows BE worked through, 20 or
more, judged by the requests of the windows BE idled through in its own span, once those are 10 (as
SLO mode judges an arm by the LC alone through its span); each is compared with the same
requests' own latencies: its p50 (the lower middle) and its ratio, the errors' mean, SD, and
95th percentile and largest of their sizes, and how many distinct ratios the placement gives.
"""
import bisect, gzip, json, math, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_error import BOUNDS, requests, wq50  # noqa: E402

PHI = (math.sqrt(5) - 1) / 2
WIN = 1_000_000_000
MEASURE, REFERENCE = 20, 10


def place(lat_s, turn):
    """A window's values (us): in each bucket its k values at (j + 1/2) / k of it, turned by turn(bucket)."""
    by = {}
    for v in lat_s:
        by.setdefault(bisect.bisect_left(BOUNDS, v), []).append(v)
    out = []
    for i, vs in sorted(by.items()):
        if math.isinf(BOUNDS[i]):
            out += [BOUNDS[i - 1] * 1e6] * len(vs)
            continue
        lo, hi, k = (BOUNDS[i - 1] if i else 0.0), BOUNDS[i], len(vs)
        out += [(lo + (hi - lo) * (((j + 0.5) / k + turn(i)) % 1.0)) * 1e6 for j in range(k)]
    return out


def measurements(sr):
    """[(exact, middle, rotated) p50 of a measurement, the same of the LC alone through its span]."""
    half = sr["be_duty"] // 2
    wins = {}
    for q in requests(sr["lc"]):
        wins.setdefault(q[1] // WIN, []).append(q[2] / 1e6)
    held = {}  # bucket: the windows it held values in so far
    acc, out = {0: [], 1: []}, []
    for w in sorted(wins):
        lat = wins[w]
        h = (w * WIN // half) % 2  # 0: BE works (the bench's halves)
        vals = ([v * 1e6 for v in lat], place(lat, lambda i: 0.0), place(lat, lambda i: held.get(i, 0) * PHI % 1.0))
        for i in {bisect.bisect_left(BOUNDS, v) for v in lat}:
            held[i] = held.get(i, 0) + 1
        if h == 1 and not acc[0]:
            continue  # a span starts with BE's work
        acc[h].append(vals)
        n = [sum(len(a[0]) for a in acc[k]) for k in (0, 1)]
        if n[0] >= MEASURE and n[1] >= REFERENCE:
            out.append(tuple(tuple(wq50([v for a in acc[k] for v in a[j]]) for j in range(3)) for k in (0, 1)))
            acc = {0: [], 1: []}
    return out


def spread(xs):
    a = sorted(abs(x) for x in xs)
    return (f"{statistics.mean(xs) * 100:+.2f}% | {statistics.pstdev(xs) * 100:.2f}% | "
            f"{a[max(math.ceil(0.95 * len(a)) - 1, 0)] * 100:.2f}% | {a[-1] * 100:.2f}%")


def main(paths):
    ms = []
    for p in paths:
        with gzip.open(p) as f:
            for sr in json.load(f)["scenarios"]:
                if sr.get("be_duty") and (sr.get("lc") or {}).get("samples"):
                    ms += measurements(sr)
    if not ms:
        sys.exit("scrape_spread.py: no measurement in " + " ".join(paths))
    print(f"{len(ms)} measurements of {MEASURE} or more requests while BE worked, each judged by {REFERENCE} or more "
          "while it idled in the measurement's span")
    print("| placement | p50 off the app's: mean | SD | 95th pct of its size | largest | ratio off the app's: mean | SD "
          "| 95th pct of its size | largest | distinct ratios |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, name in ((1, "middle"), (2, "rotated")):
        p50 = [m[k] / m[0] - 1 for m, _ in ms] + [r[k] / r[0] - 1 for _, r in ms]
        ratio = [(m[k] / r[k]) / (m[0] / r[0]) - 1 for m, r in ms]
        print(f"| {name} | {spread(p50)} | {spread(ratio)} | {len({round(m[k] / r[k], 6) for m, r in ms})} |")


if __name__ == "__main__":
    main(sys.argv[1:])
