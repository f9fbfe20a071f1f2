#!/usr/bin/env python3
"""Which CPUs took a device's interrupts between two copies of /proc/interrupts.

    python3 scripts/probe/irq_delta.py BEFORE AFTER [--match nvidia] [--cpus 2,3] [--seconds S]
    python3 scripts/probe/irq_delta.py --series LOG [--match nvidia] [--cpus 2,3] [--half 4]

BEFORE and AFTER are copies of /proc/interrupts (`cat /proc/interrupts > F`); the lines whose
name (the text after the counts) holds --match are summed by CPU. It prints each CPU that took
any, most first, with its share, and per interrupt line the CPUs that took them; --cpus names
CPUs to report on whether they took any (an LC's: a GPU's interrupts on its CPU slow it while
they come, as BE's work makes them). --seconds gives rates too. Lines or CPUs in one copy and not
the other are left out (a device that came or went between them).

--series LOG: copies taken once a second (scripts/gpu-run-lanes.sh's lane-irqs.log: a line
"@ UPTIME" and then /proc/interrupts, each second), each second's interrupts put in the half of
BE's duty its copy closes (BE works while UPTIME / HALF is even, as the bench's --be-duty on
CLOCK_MONOTONIC, which /proc/uptime's CLOCK_BOOTTIME is but for suspend); per CPU named and per
CPU that took most, the rate while BE worked and while it idled.
"""
import argparse, sys


def parse(path, match):
    """{irq: (name, [count per CPU])} of the lines whose name holds match; the CPUs' names."""
    with open(path) as f:
        lines = f.read().splitlines()
    if not lines or not lines[0].split() or not lines[0].split()[0].startswith("CPU"):
        sys.exit(f"irq_delta.py: {path}: no /proc/interrupts header")
    return parse_lines(lines, match)


def series(path, match, cpus_named, half):
    """Rates per CPU while BE works and idles, from copies taken once a second."""
    copies, cur = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("@ "):
                cur = [float(line.split()[1]), []]
                copies.append(cur)
            elif cur is not None:
                cur[1].append(line.rstrip("\n"))
    rates, secs, cpus = {}, [0.0, 0.0], None
    prev = None
    for t, lines in copies:
        if not lines or not lines[0].split() or not lines[0].split()[0].startswith("CPU"):
            continue
        now, names = parse_lines(lines, match)
        if prev is not None and names == prev[2]:
            h = int(t // half) % 2  # 0: BE works
            secs[h] += t - prev[0]
            for irq in set(now) & set(prev[1]):
                for i, (x, y) in enumerate(zip(prev[1][irq][1], now[irq][1])):
                    rates.setdefault(i, [0, 0])[h] += max(0, y - x)
        prev, cpus = (t, now, names), names
    if cpus is None or not all(secs):
        sys.exit(f"irq_delta.py: {path}: too few copies for both of BE's halves")
    print(f"'{match}' interrupts a second, BE working / idle ({secs[0]:.0f} s / {secs[1]:.0f} s):")
    top = sorted(rates, key=lambda i: -sum(rates[i]))[:4]
    named = [cpus.index(f"CPU{int(c)}") for c in filter(None, cpus_named.split(",")) if f"CPU{int(c)}" in cpus]
    for i in dict.fromkeys(named + [i for i in top if sum(rates[i])]):
        w, d = rates.get(i, [0, 0])
        print(f"  {cpus[i].lower()}: {w / secs[0]:.1f} / {d / secs[1]:.1f}" + (" (named)" if i in named else ""))


def parse_lines(lines, match):
    out = {}
    cpus = lines[0].split()
    for line in lines[1:]:
        irq, _, rest = line.partition(":")
        fields = rest.split()
        counts = []
        for x in fields[:len(cpus)]:
            if not x.isdigit():
                break
            counts.append(int(x))
        name = " ".join(fields[len(counts):])
        if len(counts) == len(cpus) and match in name:
            out[irq.strip()] = (name, counts)
    return out, cpus


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before", nargs="?")
    ap.add_argument("after", nargs="?")
    ap.add_argument("--match", default="nvidia")
    ap.add_argument("--cpus", default="")
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--series")
    ap.add_argument("--half", type=float, default=4)
    a = ap.parse_args()
    if a.series:
        return series(a.series, a.match, a.cpus, a.half)
    if not (a.before and a.after):
        ap.error("BEFORE and AFTER, or --series LOG")
    b, cpus_b = parse(a.before, a.match)
    e, cpus_e = parse(a.after, a.match)
    if cpus_b != cpus_e:
        sys.exit("irq_delta.py: the two copies name different CPUs")
    by_cpu, lines = [0] * len(cpus_b), []
    for irq in sorted(set(b) & set(e), key=lambda k: (len(k), k)):
        d = [max(0, y - x) for x, y in zip(b[irq][1], e[irq][1])]
        by_cpu = [s + x for s, x in zip(by_cpu, d)]
        if sum(d):
            took = ", ".join(f"{cpus_b[i].lower()} {x}" for i, x in sorted(enumerate(d), key=lambda p: -p[1]) if x)
            lines.append(f"  irq {irq} ({e[irq][0]}): {took}")
    total = sum(by_cpu)
    rate = (lambda n: f", {n / a.seconds:.0f}/s") if a.seconds > 0 else (lambda n: "")
    print(f"'{a.match}' interrupts: {total}{rate(total)}")
    for i, n in sorted(enumerate(by_cpu), key=lambda p: -p[1]):
        if n:
            print(f"  {cpus_b[i].lower()}: {n} ({100 * n / total:.1f}%{rate(n)})")
    print("\n".join(lines))
    for c in filter(None, a.cpus.split(",")):
        name = f"CPU{int(c)}"
        if name not in cpus_b:
            print(f"cpu{int(c)}: not in the copies")
            continue
        n = by_cpu[cpus_b.index(name)]
        print(f"cpu{int(c)}: {'took ' + str(n) if n else 'took none'} of them")


if __name__ == "__main__":
    main()
