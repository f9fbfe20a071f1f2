#!/usr/bin/env python3
"""What SLO mode reads of each arm, judged by its reference or by the LC alone through its span.

    python3 scripts/probe/span_alone.py [--scatter [--per-cpu]] RESULTS.json.gz[:STATUS.jsonl] [...]
    python3 scripts/probe/span_alone.py --measured STATUS.jsonl [...]
    python3 scripts/probe/span_alone.py --reading RESULTS.json.gz [...]

RESULTS is a bench run's results.json.gz with an SLO scenario (slo:*) under --be-duty and a
source that gives one sample a request (scraped, traced-request): the app's requests, and
gpreemptd's status reads (each window's number, arm, BE share and span on the LC's clock).
Each request is placed in the window it ended in, as gpreemptd places its sample, and the
measurements are replayed under the arms gpreemptd held (internal/slo's measure, for one LC):

  reference  20 requests of windows BE worked through (not the first of an arm not aligned),
             judged by the reference gpreemptd showed then: from STATUS (the daemon's status
             reads, w<N>-<part>/<part>-status.jsonl in gpu-run-lanes.sh's archive) where given,
             else its target over 1.10 (which a build that judges by the span moves too).
  span       the same, judged by the LC alone through the measurement's span (the requests of
             windows BE idled through from its first sample on) once that holds 10; it waits
             for them while they would come at their rate so far within 60 windows, 30 from
             its first sample at most, else takes the reference.
  began      span, with the window BE began in after idling left out of both: its requests,
             placed by when they ended, ran partly before BE.
  started    span, with the requests of that window whose first launch came before BE began
             (by the bench's duty: BE works in the even halves of CLOCK_MONOTONIC) left out, as
             a traced request's start would place them. The window BE stopped in stays with BE.

For each arm: the app's own ratio over its spans (the bench's lc_duty_by_arm: requests by BE's
duty halves), and the median of each rule's measurements of it. A measurement still waiting as
gpreemptd left the arm is not made. Then how far each rule read from the app, beside the
reference over the arms both measured. Only requests of the bench's measurement are recorded:
the lead-in's are not.

With --scatter, instead: each arm's span-rule measurements within one run (three or more), their
SD over their mean, and that relative SD pooled over the arms (each weighted by its measurements
less one): how much one measurement of an arm scatters, the simulator's Spread to compare. With
--per-cpu, each request's latency is first divided by its CPU loop's time (cpu_meter_ns, the LC's
CPU speed around it; runs without one are left out): what the scatter would be were the vCPU's
speed taken out. With --measured, the same of gpreemptd's own measurements as its status reads
(STATUS.jsonl) show them: each measurement's ratio (latency over target), by the arm it was made under.
With --reading, SLO mode's reading of each arm it measured twice or more (the bench's daemon_ratio) against
the app's ratio over the same spans, as measured and per its CPU loop, and the LC's CPU loop with BE over
alone in every scenario: the cost to the LC's CPU that a judgement per its CPU leaves out."""
import gzip, json, math, re, statistics, sys

from reference_error import requests, wq50  # stats.WeightedQuantile(_, 0.5) of unit weights: the lower middle

MIN_SAMPLES, MIN_ALONE, MAX_ACCUMULATE, FACTOR = 20, 10, 30, 1.10


def duration_us(s):  # a Go duration's String: 172.028ms, 1.5s, 950µs
    m = re.fullmatch(r"([0-9.]+)(ns|µs|us|ms|s)", s)
    return float(m[1]) * {"ns": 1e-3, "µs": 1, "us": 1, "ms": 1e3, "s": 1e6}[m[2]] if m else 0


def status_reads(path):
    """Each of gpreemptd's status reads (the bench's status jsonl, written back to back): its slo."""
    text, dec, i = open(path).read(), json.JSONDecoder(), 0
    while (i := len(text) - len(text[i:].lstrip())) < len(text):
        r, i = dec.raw_decode(text, i)
        yield (r.get("status") or {}).get("slo") or {}


def references(path):
    """The learnt reference each status read showed, by the window it decided (the last one
    where a read names the span's alone instead)."""
    out, last = {}, 0
    for slo in status_reads(path):
        m = re.match(r"standalone \(BE stopped or idle\) (\S+?),", ((slo.get("lc") or [{}])[0]).get("reference", ""))
        last = duration_us(m[1]) if m else last
        if last and (slo.get("last") or {}).get("window") is not None:
            out[slo["last"]["window"]] = last
    return out


def windows(sc, refs):
    """The status reads by window: its LC span, BE share, arm, alignment and reference."""
    out = {}
    for r in sc.get("slo", []):
        lc = (r.get("lc") or [{}])[0]
        if r.get("window") is not None and "from_mono_ns" in lc:
            out[r["window"]] = dict(lo=lc["from_mono_ns"], hi=lc["to_mono_ns"], idle=r.get("be_share", 0) <= 0,
                                    arm=r["arm"], aligned=r.get("aligned", True),
                                    ref=refs.get(r["window"], 0) if refs else lc.get("target_us", 0) / FACTOR)
    return out


def be_began(lo, hi, half):
    """When BE began working within [lo, hi) by the duty (None: it did not)."""
    t = -(-lo // half) * half
    while t < hi:
        if (t // half) % 2 == 0:
            return t
        t += half
    return None


def replay(sc, refs, span, began=False, started=False, value=None):
    """SLO mode's measurements of each arm, (arm, ratio); value(sample) is what a request gives a
    measurement (its latency in µs, or that per its CPU's speed: then a measurement without the
    span's alone, judged by a reference in µs, is not made)."""
    ws = windows(sc, refs)
    order = sorted(ws)
    placed, starts = {w: [] for w in order}, {w: [] for w in order}
    for q, s in zip(requests(sc["lc"]), sc["lc"]["samples"]):
        end = s["arrival_mono_ns"] + s["latency_ns"]
        start = q[0] + s.get("prep_ns", 0)  # its first launch: after the one before ended (an LC behind its arrivals) and its preparation
        w = next((w for w in order if ws[w]["lo"] <= end < ws[w]["hi"]), None)
        if w is not None:
            placed[w].append(value(s) if value else s["latency_ns"] / 1e3)
            starts[w].append(start)
    out, arm, pts, alone, first, was_idle = [], None, [], [], 0, False
    for i, w in enumerate(order):
        x = ws[w]
        moved = x["arm"] != arm
        if moved:
            arm, pts, alone = x["arm"], [], []
        was_idle_before = was_idle
        skip, was_idle = began and was_idle and not x["idle"], x["idle"]
        if x["idle"]:
            alone += placed[w] if pts else []
        elif not (moved and not x["aligned"]) and not skip:
            first = first if pts else i
            b = be_began(x["lo"], x["hi"], sc.get("be_duty", 8_000_000_000) // 2) if started and was_idle_before else None
            pts += [v for v, t in zip(placed[w], starts[w]) if b is None or t >= b]
        if len(pts) < MIN_SAMPLES or not x["ref"]:
            continue
        ref = x["ref"]
        if span:
            span_windows = i - first + 1
            if alone and len(alone) < MIN_ALONE and span_windows <= MAX_ACCUMULATE and len(alone) * 2 * MAX_ACCUMULATE >= MIN_ALONE * span_windows:
                continue
            ref = wq50(alone) if len(alone) >= MIN_ALONE else ref
        if value is None or span and len(alone) >= MIN_ALONE:
            out.append((arm, wq50(pts) / ref))
        pts, alone = [], []
    return out


def slo_scenarios(path):
    """A bench run's SLO scenarios with the app's requests by arm."""
    for sc in json.load(gzip.open(path))["scenarios"]:
        if sc["name"].startswith("slo") and sc.get("lc_duty_by_arm"):
            yield sc


def main(paths):
    errs = {"reference": [], "span": [], "began": [], "started": []}
    for arg in paths:
        p, _, status = arg.partition(":")
        refs = references(status) if status else None
        for sc in slo_scenarios(p):
            got = {"reference": replay(sc, refs, False), "span": replay(sc, refs, True), "began": replay(sc, refs, True, True),
                   "started": replay(sc, refs, True, started=True)}
            print(f"{p} {sc['name']}")
            print("| arm | app: ratio (requests with BE / alone) | reference (measurements) | span (measurements) | began (measurements) | started (measurements) |")
            print("|---|---|---|---|---|---|")
            apps = {}
            for a in sc["lc_duty_by_arm"]:
                if a.get("p50_ratio"):
                    apps.setdefault(a["arm"], []).append((a["p50_ratio"], a["with_be"], a["alone"]))
            for arm, spans in apps.items():
                cells, reads = [], {}
                for rule, ms in got.items():
                    v = [r for a, r in ms if a == arm]
                    reads[rule] = statistics.median(v) if v else None
                    cells.append(f"{reads[rule]:.3f} ({len(v)})" if v else "–")
                app = sum(r * (n + m) for r, n, m in spans) / sum(n + m for _, n, m in spans)
                print(f"| {arm} | " + ", ".join(f"{r:.3f} ({n} / {m})" for r, n, m in spans) + " | " + " | ".join(cells) + " |")
                for rule, v in reads.items():  # each rule beside the reference, over the arms both measured
                    if v is not None and reads["reference"] is not None:
                        errs[rule].append((abs(v - app), abs(reads["reference"] - app)))
    for rule, pairs in errs.items():
        if pairs and rule != "reference":
            for name, e in ((rule, [a for a, _ in pairs]), ("reference", [b for _, b in pairs])):
                print(f"{name} over the {len(e)} arms {rule} and the reference measured: off the app's ratio by {min(e):.3f}-{max(e):.3f}, "
                      f"median {statistics.median(e):.3f}; over 0.10 in {sum(x > 0.10 for x in e)}, over 0.15 in {sum(x > 0.15 for x in e)}")


def scatter(paths, per_cpu=False):
    rows = []
    for p in paths:
        for sc in slo_scenarios(p.partition(":")[0]):
            if per_cpu and not all(s.get("cpu_meter_ns", 0) > 0 for s in sc["lc"]["samples"]):
                continue
            # per its CPU's speed then: only the value, each request placed by its real end (the loop's unit cancels in a ratio)
            value = (lambda s: s["latency_ns"] / s["cpu_meter_ns"]) if per_cpu else None
            by = {}
            for arm, r in replay(sc, None, True, value=value):
                by.setdefault(arm, []).append(r)
            rows += arm_scatter(p, by)
    pool(rows)


def arm_scatter(label, by):
    """Each arm's measurements (by arm; three or more) as (n, relative SD), each printed."""
    rows = []
    for arm, v in by.items():
        if len(v) >= 3:
            rows.append((len(v), statistics.stdev(v) / statistics.mean(v)))
            print(f"{label} {arm}: {len(v)} measurements {' '.join(f'{x:.3f}' for x in v)}, relative SD {rows[-1][1]:.3f}")
    return rows


def pool(rows):
    if rows:
        pooled = (sum((n - 1) * s * s for n, s in rows) / sum(n - 1 for n, _ in rows)) ** 0.5
        print(f"pooled over {len(rows)} arms, {sum(n for n, _ in rows)} measurements: relative SD {pooled:.3f}")


def geomean(rows):
    """The weighted geometric mean of (value, weight) rows and, unweighted, its two standard errors."""
    logs = [math.log(v) for v, _ in rows]
    m = sum(x * w for x, (_, w) in zip(logs, rows)) / sum(w for _, w in rows)
    se = statistics.stdev(logs) / len(logs) ** 0.5 if len(logs) > 1 else math.nan
    return math.exp(m), math.exp(statistics.mean(logs)), 2 * se


def reading(paths):
    """--reading: SLO mode's reading of each arm against the app's ratio over the same spans (arms it
    measured twice or more, 30 requests a half or more), and the LC's CPU loop with BE over alone in
    every scenario with one: what a judgement per the LC's CPU leaves out."""
    arms, loops = [], []
    for p in paths:
        for sc in json.load(gzip.open(p.partition(":")[0]))["scenarios"]:
            if (r := (sc.get("lc_duty") or {}).get("cpu_meter_p50_ratio")):
                loops.append((r, 1))
            for a in sc.get("lc_duty_by_arm") or []:
                if a.get("daemon_measurements", 0) >= 2 and min(a["with_be"], a["alone"]) >= 30 and not a.get("daemon_metric"):  # tpot: another ratio
                    loop = a.get("p50_per_cpu_ratio")  # none where the bench wrote no CPU loop's ratio
                    arms.append((a["p50_ratio"] / a["daemon_ratio"], loop and loop / a["daemon_ratio"], a["with_be"] + a["alone"]))
                    print(f"{p} {sc['name']} {a['arm']}: app {a['p50_ratio']:.3f}, per its CPU loop {loop or math.nan:.3f}, SLO mode {a['daemon_ratio']:.3f} ({a['daemon_measurements']})")
    for name, rows in (("the app's ratio", [(x, n) for x, _, n in arms]), ("the app's per its CPU loop", [(y, n) for _, y, n in arms if y])):
        if rows:
            w, u, se = geomean(rows)
            print(f"{name} over SLO mode's reading, {len(rows)} arms: {w:.3f} weighted by requests, {u:.3f} ± {se:.3f} by arm")
    if loops:
        _, u, se = geomean(loops)
        print(f"the LC's CPU loop with BE over alone, {len(loops)} scenarios: {u:.3f} [{u * math.exp(-se):.3f}, {u * math.exp(se):.3f}]")


def measured(paths):
    """--measured: the scatter of gpreemptd's own measurements, from its status reads: each
    measurement's ratio as the read that first shows it (its LC row's count grew) gives it, under
    the arm the read before showed (the one it was made under: a read shows the window's decision)."""
    rows = []
    for p in paths:
        made, by, before = 0, {}, None
        for slo in status_reads(p):
            lc, search = (slo.get("lc") or [{}])[0], (slo.get("searches") or [{}])[0]
            if lc.get("measurements", 0) not in (0, made) and lc.get("ratio"):
                by.setdefault(before or search.get("arm"), []).append(lc["ratio"])
            made, before = lc.get("measurements", 0) or made, search.get("arm") or before
        rows += arm_scatter(p, by)
    pool(rows)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--measured":
        measured(sys.argv[2:])
    elif sys.argv[1] == "--reading":
        reading(sys.argv[2:])
    elif sys.argv[1] == "--scatter":
        per_cpu = len(sys.argv) > 2 and sys.argv[2] == "--per-cpu"
        scatter(sys.argv[2 + per_cpu:], per_cpu)
    else:
        main(sys.argv[1:])
