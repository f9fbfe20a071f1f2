#!/usr/bin/env python3
"""Which CPUs took a device's interrupts: between two copies of /proc/interrupts, or through BE's duty.

    python3 scripts/probe/irq_delta.py BEFORE AFTER [--match nvidia] [--cpus 2,3] [--seconds S]
    python3 scripts/probe/irq_delta.py --series LOG [--match nvidia] [--cpus 2-3] [--half 4]

BEFORE and AFTER are copies of /proc/interrupts (`cat /proc/interrupts > F`); the lines whose
name (the text after the counts) holds --match and that are in both copies are summed by CPU
(a line in one copy only is a vector made or removed between them: the driver makes a GPU's
while a process holds it, unless persistence mode keeps them). It prints how many lines matched,
each CPU that took any, most first, with its share, and per line the CPUs that took them;
--cpus names CPUs (a list, as taskset's) to say whether they took any: an LC's, whose CPU may
run slow while a GPU's interrupts come to it. --seconds gives rates too. The two copies must
name the same CPUs.

--series LOG: copies taken about once a second (scripts/gpu-run-lanes.sh's lane-irqs.log: a line
"@ UPTIME" and then /proc/interrupts), each interval between two copies counted in BE's half
both lie in (BE works while UPTIME / HALF is even, as the bench's --be-duty on CLOCK_MONOTONIC,
which /proc/uptime's CLOCK_BOOTTIME is but for suspend); an interval across an edge of BE's
halves, or between copies that name other CPUs, is left out. Per CPU named and the CPUs that took
most, the rate while BE worked and while it idled.
"""
import argparse, sys


def cpu_list(text):
    """CPU numbers of a list as taskset takes one (2,3 or 2-3)."""
    out = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def parse_lines(lines, match):
    """{irq: (name, [count per CPU])} of the lines whose name holds match; the CPUs' names."""
    cpus = lines[0].split()
    out = {}
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


def header(lines):
    return bool(lines) and bool(lines[0].split()) and lines[0].split()[0].startswith("CPU")


def parse(path, match):
    with open(path) as f:
        lines = f.read().splitlines()
    if not header(lines):
        sys.exit(f"irq_delta.py: {path}: no /proc/interrupts header")
    return parse_lines(lines, match)


def named(cpus, wanted):
    """[(number, column or None)] of the CPUs wanted."""
    return [(c, cpus.index(f"CPU{c}") if f"CPU{c}" in cpus else None) for c in cpu_list(wanted)]


def series(path, match, wanted, half):
    """Rates per CPU while BE works and idles, from copies taken about once a second."""
    copies, cur = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("@ "):
                cur = (float(line.split()[1]), [])
                copies.append(cur)
            elif cur is not None:
                cur[1].append(line.rstrip("\n"))
    rates, secs, cpus, prev, matched = {}, [0.0, 0.0], None, None, 0
    for t, lines in copies:
        if not header(lines):
            continue
        now, names = parse_lines(lines, match)
        matched = max(matched, len(now))
        if prev is not None and names == prev[2] and int(prev[0] // half) == int(t // half):
            h = int(t // half) % 2  # 0: BE works
            secs[h] += t - prev[0]
            for irq in set(now) & set(prev[1]):
                for i, (x, y) in enumerate(zip(prev[1][irq][1], now[irq][1])):
                    rates.setdefault(names[i], [0, 0])[h] += max(0, y - x)
        prev, cpus = (t, now, names), names
    if cpus is None or not all(secs):
        sys.exit(f"irq_delta.py: {path}: too few copies for both of BE's halves")
    if not matched:
        print(f"no line names '{match}' in {path}")
        return
    print(f"'{match}' interrupts a second ({matched} lines), BE working / idle ({secs[0]:.0f} s / {secs[1]:.0f} s):")
    want = [f"CPU{c}" for c, _ in named(cpus, wanted)]
    top = [c for c in sorted(rates, key=lambda c: -sum(rates[c]))[:4] if sum(rates[c])]
    for c in dict.fromkeys(want + top):
        w, d = rates.get(c, [0, 0])
        print(f"  {c.lower()}: {w / secs[0]:.1f} / {d / secs[1]:.1f}" + (" (named)" if c in want else ""))


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
    both = sorted(set(b) & set(e), key=lambda k: (len(k), k))
    if not both:
        print(f"no line names '{a.match}' in both copies")
        return
    by_cpu, lines = [0] * len(cpus_b), []
    for irq in both:
        d = [max(0, y - x) for x, y in zip(b[irq][1], e[irq][1])]
        by_cpu = [s + x for s, x in zip(by_cpu, d)]
        if sum(d):
            took = ", ".join(f"{cpus_b[i].lower()} {x}" for i, x in sorted(enumerate(d), key=lambda p: -p[1]) if x)
            lines.append(f"  irq {irq} ({e[irq][0]}): {took}")
    total = sum(by_cpu)
    rate = (lambda n: f", {n / a.seconds:.0f}/s") if a.seconds > 0 else (lambda n: "")
    print(f"'{a.match}' interrupts ({len(both)} lines): {total}{rate(total)}")
    for i, n in sorted(enumerate(by_cpu), key=lambda p: -p[1]):
        if n:
            print(f"  {cpus_b[i].lower()}: {n} ({100 * n / total:.1f}%{rate(n)})")
    print("\n".join(lines))
    for c, i in named(cpus_b, a.cpus):
        print(f"cpu{c}: " + ("not in the copies" if i is None else f"took {by_cpu[i]} of them" if by_cpu[i] else "took none of them"))


if __name__ == "__main__":
    main()
