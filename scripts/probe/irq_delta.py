#!/usr/bin/env python3
"""Which CPUs took a device's interrupts between two copies of /proc/interrupts.

    python3 scripts/probe/irq_delta.py BEFORE AFTER [--match nvidia] [--cpus 2,3] [--seconds S]

BEFORE and AFTER are copies of /proc/interrupts (`cat /proc/interrupts > F`); the lines whose
name (the text after the counts) holds --match are summed by CPU. It prints each CPU that took
any, most first, with its share, and per interrupt line the CPUs that took them; --cpus names
CPUs to report on whether they took any (an LC's: a GPU's interrupts on its CPU slow it while
they come, as BE's work makes them). --seconds gives rates too. Lines or CPUs in one copy and not
the other are left out (a device that came or went between them).
"""
import argparse, sys


def parse(path, match):
    """{irq: (name, [count per CPU])} of the lines whose name holds match; the CPUs' names."""
    with open(path) as f:
        lines = f.read().splitlines()
    if not lines or not lines[0].split() or not lines[0].split()[0].startswith("CPU"):
        sys.exit(f"irq_delta.py: {path}: no /proc/interrupts header")
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--match", default="nvidia")
    ap.add_argument("--cpus", default="")
    ap.add_argument("--seconds", type=float, default=0)
    a = ap.parse_args()
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
