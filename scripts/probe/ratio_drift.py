#!/usr/bin/env python3
"""Does an arm's ratio (the LC's p50 with BE working over its p50 with BE idle) drift within a run, or only scatter?

    python3 scripts/probe/ratio_drift.py [--cycles K] [--min-s S] RESULTS.json.gz [...]

RESULTS is a bench run's results.json.gz under --be-duty: each scenario with LC requests, and
for an slo:* one each span an arm was held (the bench's lc_duty_by_arm), S seconds or longer
(60), is cut into blocks of K duty cycles (2). A request counts for the duty half it starts
100 ms or more into and ends within, as the bench counts it (internal/bench's eachHalf, as
reference_error.py's bench_half: it starts at its arrival or the end of the one before,
whichever is later). Per block with 5
requests a half:
the ratio of the halves' medians and its bootstrap variance (400 resamples). Per span: the
blocks' ratios, their SD against the SD sampling alone gives (F, the variance ratio) and the
lag-1 correlation of successive blocks (white noise of n blocks: about -1/n). Last, pooled over
the spans, the between-block variance over the sampling variance (each span weighted by its
blocks less one): near 1, and lag-1 correlations not above -1/n, say the ratio only scatters;
a drift shows as F over 1 with positive lag-1 correlations."""
import argparse, gzip, json, random, statistics as st

from reference_error import bench_half, requests


def halves(lc, half_ns):
    """Each request the bench counts (reference_error's eachHalf), with its start and its half (0 while BE works, 1 while it idles)."""
    for q, r in zip(requests(lc), lc["samples"]):
        if (h := bench_half(q, half_ns)) is not None:
            yield r, q[0], h


def spans(sc, min_s):
    t0, t1 = sc["window_start_mono_ns"], sc["window_end_mono_ns"]
    arms = sc.get("lc_duty_by_arm") or [{"arm": "fixed", "from_s": 0}]
    for j, a in enumerate(arms):
        lo = t0 + a["from_s"] * 1e9
        hi = t0 + arms[j + 1]["from_s"] * 1e9 if j + 1 < len(arms) else t1
        if (hi - lo) / 1e9 >= min_s:
            yield a["arm"], lo, hi


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=2)
    ap.add_argument("--min-s", type=float, default=60)
    ap.add_argument("results", nargs="+")
    args = ap.parse_args()
    rng = random.Random(7)
    pooled = []
    for path in args.results:
        d = json.load(gzip.open(path))
        for sc in d["scenarios"]:
            if not (sc.get("lc") or {}).get("samples") or not sc.get("be_duty"):
                continue
            half_ns = sc["be_duty"] // 2
            for arm, lo, hi in spans(sc, args.min_s):
                blocks = {}
                for r, start, h in halves(sc["lc"], half_ns):
                    if lo <= start < hi:
                        b = int((start - lo) // (2 * half_ns * args.cycles))
                        blocks.setdefault(b, ([], []))[h].append(r["latency_ns"])
                ratios, variances = [], []
                for b in sorted(blocks):
                    w, i = blocks[b]
                    if len(w) < 5 or len(i) < 5:
                        continue
                    ratios.append(st.median(w) / st.median(i))
                    boot = [st.median(rng.choices(w, k=len(w))) / st.median(rng.choices(i, k=len(i))) for _ in range(400)]
                    variances.append(st.variance(boot))
                if len(ratios) < 4:
                    continue
                m, between, sampling = st.mean(ratios), st.variance(ratios), st.mean(variances)
                lag1 = sum((ratios[k] - m) * (ratios[k + 1] - m) for k in range(len(ratios) - 1)) / sum((x - m) ** 2 for x in ratios)
                name = path.split("/")[-1].replace("-results.json.gz", "")
                print(f"{name:28} {sc['name']:26} {arm:11} {(hi - lo) / 1e9:4.0f}s blocks {len(ratios):2d} (mean {m:.3f}): "
                      f"{' '.join(f'{x:.2f}' for x in ratios)}  SD {between ** .5:.3f}, sampling {sampling ** .5:.3f}, "
                      f"F {between / sampling:.2f}, lag-1 {lag1:+.2f} (noise {-1 / len(ratios):+.2f})")
                pooled.append((between, sampling, len(ratios), lag1))
    if pooled:
        f = sum(b * (n - 1) for b, _, n, _ in pooled) / sum(s * (n - 1) for _, s, n, _ in pooled)
        pos = sum(1 for *_, n, l in pooled if l > 0)
        print(f"pooled: {len(pooled)} spans, {sum(n for _, _, n, _ in pooled)} blocks; between-block over sampling variance {f:.2f}; "
              f"lag-1 correlation above 0 in {pos}, mean {st.mean(l for *_, l in pooled):+.2f} "
              f"(noise alone {st.mean(-1 / n for _, _, n, _ in pooled):+.2f})")


if __name__ == "__main__":
    main()
