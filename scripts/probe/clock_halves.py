#!/usr/bin/env python3
"""Does the SM clock's drop while BE works slow the LC, or does its wait on BE's timeslices?

    python3 scripts/probe/clock_halves.py [--gpu N] [--mhz M] CLOCKS RESULTS.json.gz [...]

CLOCKS is a lanes call's lane-clocks.log (scripts/gpu-run-lanes.sh: "uptime, index, MHz, W,
temp" each second, uptime on the clock the requests are stamped with); RESULTS its runs on GPU N
(0) under --be-duty. A request counts for the half it starts 100 ms or more into and ends within,
as the bench counts it (reference_error.py's bench_half), and takes the mean SM clock of GPU N's
readings from the one before it starts to the one after it ends (NVML's reading lags ~100 ms).
Per scenario: the LC's p50 while BE idled, and while it worked split at M MHz (1900): where the
requests beside BE run as slowly at the full clock as at the dropped one, the clock is not what
slows them."""
import argparse, bisect, gzip, json

from reference_error import bench_half, median, requests


def readings(path, gpu):
    """[(uptime s, SM MHz)] of GPU gpu, in order."""
    out = []
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        try:
            t, index, mhz = float(f[0]), int(f[1]), float(f[2])
        except (IndexError, ValueError):
            continue  # nvidia-smi's own messages
        if index == gpu:
            out.append((t, mhz))
    return out


def clock_over(clocks, times, lo, hi):
    """The mean of the readings from the one before lo to the one after hi (None without one)."""
    i = max(0, bisect.bisect_left(times, lo) - 1)
    j = min(len(clocks), bisect.bisect_right(times, hi) + 1)
    sel = [m for _, m in clocks[i:j]]
    return sum(sel) / len(sel) if sel else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--mhz", type=float, default=1900)
    ap.add_argument("clocks")
    ap.add_argument("results", nargs="+")
    a = ap.parse_args()
    clocks = readings(a.clocks, a.gpu)
    times = [t for t, _ in clocks]
    print(f"| scenario | alone p50 ms (requests, MHz) | with BE at {a.mhz:.0f} MHz or more: p50 ms (requests) "
          f"| with BE under it: p50 ms (requests, MHz) | under / at or more |")
    print("|---|---:|---:|---:|---:|")
    for path in a.results:
        for sc in json.load(gzip.open(path))["scenarios"]:
            lc, duty = sc.get("lc"), sc.get("be_duty")
            if not lc or not lc.get("samples") or not duty:
                continue
            rows = {0: [], 1: []}
            for q in requests(lc):
                h = bench_half(q, duty // 2)
                c = clock_over(clocks, times, q[0] / 1e9, q[1] / 1e9)
                if h is not None and c is not None:
                    rows[h].append((c, q[2] / 1e3))
            hi = [ms for c, ms in rows[0] if c >= a.mhz]
            lo = [(c, ms) for c, ms in rows[0] if c < a.mhz]
            if not rows[1] or not hi or not lo:
                print(f"| {sc['name']} | too few requests in a group | | | |")
                continue
            p_hi, p_lo = median(hi), median([ms for _, ms in lo])
            print(f"| {sc['name']} | {median([ms for _, ms in rows[1]]):.1f} ({len(rows[1])}, {median([c for c, _ in rows[1]]):.0f}) "
                  f"| {p_hi:.1f} ({len(hi)}) | {p_lo:.1f} ({len(lo)}, {median([c for c, _ in lo]):.0f}) | {p_lo / p_hi:.3f} |")


if __name__ == "__main__":
    main()
