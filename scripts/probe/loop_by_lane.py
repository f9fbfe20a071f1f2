#!/usr/bin/env python3
"""The LC's CPU loop through BE's halves, by the CPUs its lane pinned it and BE to.

    python3 scripts/probe/loop_by_lane.py gpu*-rep*.md [...]

Each file is a lane's summary that scripts/gpu-run-lanes.sh writes ($OUT/gpu<N>-<part>-rep<R>.md):
its bench command names the LC's and BE's CPUs (--lc-cpus, --be-cpus), and its table "The LC
timed a fixed loop ..." gives per setting the loop's median with BE over alone and its 95%
interval. Per pair of CPU lists: the settings, the geometric mean of the ratio, its range, and
how many intervals lie wholly above 1 and wholly below (at 95%, about 2.5% of them each by chance),
and how many have a bound that reads 1.00: the summary rounds to two digits, so such an interval
may leave 1 out ([0.617, 0.996] reads [0.62, 1.00]); its results.json.gz says.
"""
import re, statistics, sys

PINS = re.compile(r"--lc-cpus (\S+) --be-cpus (\S+)")
ROW = re.compile(r"^\| (\S+) \| \d+ \| ([0-9.]+)x \| \[([0-9.]+), ([0-9.]+)\] \|")


def settings(path):
    """[(lc cpus, be cpus, ratio, lo, hi)] of one summary."""
    text = open(path).read()
    pins = PINS.search(text)
    _, found, rest = text.partition("The LC timed a fixed loop")
    if not found:
        return []
    out = []
    for line in rest.splitlines()[1:]:
        if line.startswith("|"):
            if m := ROW.match(line):
                out.append((pins.group(1) if pins else "unpinned", pins.group(2) if pins else "unpinned",
                            float(m.group(2)), float(m.group(3)), float(m.group(4))))
        elif out:
            break  # the table ended
    return out


def leave_one_out(v):
    """Of settings [(ratio, lo, hi)]: the intervals wholly above 1, wholly below, and with a bound that
    reads 1.00 once rounded (which may or may not leave 1 out)."""
    return (sum(lo > 1 for _, lo, _ in v), sum(hi < 1 for _, _, hi in v),
            sum(lo == 1.0 or hi == 1.0 for _, lo, hi in v))


def main(paths):
    by = {}
    for p in paths:
        for lc, be, r, lo, hi in settings(p):
            by.setdefault((lc, be), []).append((r, lo, hi))
    if not by:
        sys.exit("loop_by_lane.py: no loop table in " + " ".join(paths))
    n = sum(len(v) for v in by.values())
    print(f"{n} settings")
    print("| LC's CPUs | BE's CPUs | settings | loop with BE / alone, geometric mean | range | interval above 1 | below 1 | a bound at 1.00 |")
    print("|---|---|---:|---:|---|---:|---:|---:|")
    for (lc, be), v in sorted(by.items()):
        rs = [r for r, _, _ in v]
        print(f"| {lc} | {be} | {len(v)} | {statistics.geometric_mean(rs):.3f}x | {min(rs):.3f}-{max(rs):.3f}x | "
              + " | ".join(map(str, leave_one_out(v))) + " |")
    above, below, at_one = leave_one_out([x for v in by.values() for x in v])
    print(f"all: intervals above 1 in {above}, below in {below}, of {n} (about {round(0.025 * n)} each by chance); "
          f"a bound at 1.00 in {at_one}")


if __name__ == "__main__":
    main(sys.argv[1:])
