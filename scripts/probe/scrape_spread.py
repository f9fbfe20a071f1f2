#!/usr/bin/env python3
"""What a scraped histogram's buckets cost SLO mode's measurements of an LC, against its own latencies.

    python3 scripts/probe/scrape_spread.py RESULTS.json.gz [...]

RESULTS is a bench run's results.json.gz (any scenario with LC requests under --be-duty). Each
request is put in lc_decode.py's FINE_HISTOGRAM buckets (5% apart) in the 1 s window it ended in,
as gpreemptd's scraper sees it, and its window's values are placed as internal/scrape's
Hist.Values places them:

  middle   k values of a bucket in one window at (j + 1/2) / k of it (gpreemptd's placement: a
           lone value at its bucket's middle);
  rotated  the same, turned each window by the golden ratio times the windows that bucket held
           values in before, so that values pooled over windows spread through their buckets as
           one histogram's would (an alternative, not gpreemptd's).

A measurement pools the requests of the windows BE worked through (the bench's halves) until 20,
judged by the last 10 or more of its idle halves (as SLO mode's measurement and reference); each
is compared with the same requests' own latencies: its p50 (lower middle) and its ratio, and how
many distinct ratios the placement gives.
"""
import bisect, gzip, json, math, os, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_error import BOUNDS, bench_half, requests, wq50  # noqa: E402

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
    """[(exact, middle, rotated) p50 of a measurement, the same of its reference]."""
    half = sr["be_duty"] // 2
    wins = {}
    for q in requests(sr["lc"]):
        if (h := bench_half(q, half)) is not None:
            wins.setdefault(q[1] // WIN, []).append((q[2], h))
    held = {}  # bucket: the windows it held values in so far
    acc, ref, out = {0: [], 1: []}, None, []
    for w in sorted(wins):
        for h in (0, 1):
            lat = [v / 1e6 for v, hh in wins[w] if hh == h]
            if lat:
                acc[h].append(([v * 1e6 for v in lat], place(lat, lambda i: 0.0),
                               place(lat, lambda i: held.get(i, 0) * PHI % 1.0)))
        for i in {bisect.bisect_left(BOUNDS, v / 1e6) for v, _ in wins[w]}:
            held[i] = held.get(i, 0) + 1
        if sum(len(a[0]) for a in acc[1]) >= REFERENCE:
            ref, acc[1] = tuple(wq50([v for a in acc[1] for v in a[k]]) for k in range(3)), []
        if ref and sum(len(a[0]) for a in acc[0]) >= MEASURE:
            out.append((tuple(wq50([v for a in acc[0] for v in a[k]]) for k in range(3)), ref))
            acc[0] = []
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
    print(f"{len(ms)} measurements of {MEASURE} requests, each judged by {REFERENCE} or more of BE's idle halves")
    print("| placement | p50 off the app's: mean | SD | 95th pct | max | ratio off the app's: mean | SD | 95th pct | max | distinct ratios |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, name in ((1, "middle"), (2, "rotated")):
        p50 = [m[k] / m[0] - 1 for m, _ in ms] + [r[k] / r[0] - 1 for _, r in ms]
        ratio = [(m[k] / r[k]) / (m[0] / r[0]) - 1 for m, r in ms]
        print(f"| {name} | {spread(p50)} | {spread(ratio)} | {len({round(m[k] / r[k], 6) for m, r in ms})} |")


if __name__ == "__main__":
    main(sys.argv[1:])
