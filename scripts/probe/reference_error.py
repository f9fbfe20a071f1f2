#!/usr/bin/env python3
"""How far gpreemptd's SLO reference (the LC's latency alone) sits from the app's own, under --be-duty.

    python3 scripts/probe/reference_error.py ARCHIVE.tgz [ARCHIVE.tgz ...] [--tail-ms N]
                                             [--bucket-values {auto,top,middle}]

ARCHIVE is a raw-rep*.tgz that scripts/gpu-run-lanes.sh writes: lanes o<N>-<part>/ with the
bench's <part>-rep<R>-results.json.gz and self-all.tar.gz (w<N>-<part>/, the daemon's status
jsonl). Each archive is unpacked into a temporary directory, removed after. For every scraped-*
lane, and every scenario in it with LC requests and a BE duty cycle (an SLO one, slo:*, and/or a
static one), it prints one row of two tables:

  bench       the bench's p50s alone / with BE: a request counts for the duty half it starts
              >= 100 ms into and ends within.
  daemon-like requests pooled by the 1 s window they end in, idle windows (BE idle all window)
              against working ones, on the daemon's own window grid (SLO scenarios: idle where
              the status read's be_share is 0); a static scenario has none, so the median over
              10 grids 0.1 s apart (idle: no BE work, its tail included, in the window). Windows
              wholly inside the measurement. 'exact': the requests'
              own latencies; 'hist': as the scraped histogram gives them to the daemon (each
              window's values in their 5% bucket, scrape.Hist.Values, pooled, lower middle).
  prev rule   the same, counting a request only if the ceil(latency / 1 s) windows before its
              own share that window's state.
  reference   the median over the measurement's status reads of target_us / the objective's
              factor, and ref / A: A the report's app alone p50 (daemon_view's app_alone_us: the
              bench-rule alone requests under no gate arm), else the bench's alone p50.
              ref / A = windows x hist x history: daemon-like exact / A, hist / exact, and
              reference / hist (what the reference's age and its own measurements add).
  straddlers  idle-window requests that BE's work (its working halves, plus --tail-ms of queued
              work) touched; working-window requests that ran mostly alone; and the worst of the
              10 shifted grids (its alone p50 against the row's).
  lag         the reference at each read against the median of the app's last <= 20 alone
              requests (bench rule) ended by then, reads with >= 10: median [min-max].

--bucket-values: where a window's values sit in their bucket. The daemon since 0e89743 puts them
at the middle of their share (rank j+0.5); before, at the top (rank j+1). 'auto' reads the
revision from the status jsonl's "version" and asks git (the repository holding this script)
whether 0e89743 is its ancestor; without an answer, top, with a note.

Clocks: the requests (arrival_mono_ns), BE's duty (it works while CLOCK_MONOTONIC / (duty/2) is
even), the daemon's windows (from_mono_ns, to_mono_ns] and the bench's status reads (mono_ns)
are all CLOCK_MONOTONIC on one host, so nothing is aligned across clocks.
"""
import argparse, bisect, glob, gzip, json, math, os, re, statistics, subprocess, tarfile, tempfile

GUARD = 100_000_000           # the bench's dutyGuard (ns)
WIN = 1_000_000_000           # the daemon's window (ns)
MIDDLE_SINCE = "0e89743"      # scrape: a window's values at the middle of their share of a bucket
# lc_decode.py's FINE_HISTOGRAM (app_request_latency_seconds): 5% buckets from 1 ms.
BOUNDS = [round(0.001 * 1.05 ** i, 9) for i in range(226)] + [math.inf]


def median(xs):               # stats.Median: interpolated
    return statistics.median(xs) if xs else math.nan


def wq50(xs):                 # stats.WeightedQuantile(_, 0.5), unit weights: the lower middle
    return sorted(xs)[math.ceil(0.5 * len(xs)) - 1] if xs else math.nan


def hist_values(lat_s, middle):
    """scrape.Hist.Values (us) of a window whose histogram holds lat_s (s): value j at rank j+0.5
    (middle) or j+1 (top), spread evenly across its bucket (Hist.At). No window comes near the
    daemon's 4096-value limit."""
    counts = [0] * len(BOUNDS)
    for v in lat_s:
        counts[bisect.bisect_left(BOUNDS, v)] += 1
    cum = [sum(counts[:i + 1]) for i in range(len(counts))]

    def at(r):
        below = 0
        for i, ub in enumerate(BOUNDS):
            c = cum[i] - below
            if c <= 0 or cum[i] < r:
                below = cum[i]
                continue
            if math.isinf(ub):
                return BOUNDS[i - 1]
            lo = BOUNDS[i - 1] if i else 0.0
            return lo + (ub - lo) * (r - below) / c
    return [int(at(j + (0.5 if middle else 1)) * 1e9) / 1e3 for j in range(len(lat_s))]


def requests(lc):
    """(start, end, latency us): a request starts when due or when the one before it ended."""
    out, prev_end = [], -(1 << 62)
    for s in lc["samples"]:
        start = max(s["arrival_mono_ns"], prev_end)
        prev_end = start + s.get("prep_ns", 0) + s["latency_ns"]
        out.append((start, prev_end, s["latency_ns"] / 1e3))
    return out


def bench_half(q, half):
    """The bench's eachHalf: 0 with BE, 1 alone, None not counted."""
    k = q[0] // half
    if q[0] < 0 or q[0] - k * half < GUARD or q[1] >= (k + 1) * half:
        return None
    return k % 2


def be_overlap(a, b, half, tail):
    """ns of [a, b] in which BE worked: its working halves, each extended by tail."""
    tot, k = 0, a // half - 2
    while k * half < b:
        if k % 2 == 0:
            tot += max(0, min(b, (k + 1) * half + tail) - max(a, k * half))
        k += 1
    return tot


def daemon_grid(sr, pid, half, tail):
    """[(window, start, end, state)] from the status reads; a window whose LC row has no span
    gets one interpolated from its neighbours. Also how many windows' be_share disagrees with
    the duty's state."""
    ws = {}
    for s in sr.get("slo") or []:
        if not s.get("window"):
            continue
        d = ws.setdefault(s["window"], {"share": s.get("be_share")})
        row = next((l for l in s.get("lc") or [] if l.get("pid") == pid and l.get("to_mono_ns")), None)
        if row:
            d["span"] = (row["from_mono_ns"], row["to_mono_ns"])
    known = sorted((w, d["span"][1]) for w, d in ws.items() if "span" in d)
    if not known:
        return [], 0
    for w, d in ws.items():
        if "span" not in d:
            lo = max((k for k in known if k[0] < w), default=None)
            hi = min((k for k in known if k[0] > w), default=None)
            per = (hi[1] - lo[1]) / (hi[0] - lo[0]) if lo and hi else WIN
            ref = lo or hi
            end = int(ref[1] + (w - ref[0]) * per)
            d["span"] = (int(end - per), end)
    grid, disagree = [], 0
    for w, d in sorted(ws.items()):
        duty_idle = be_overlap(*d["span"], half, tail) == 0
        idle = duty_idle if d["share"] is None else d["share"] == 0
        disagree += d["share"] is not None and idle != duty_idle
        grid.append((w, *d["span"], "idle" if idle else "work"))
    return grid, disagree


def shifted_grid(t0, t1, phase, half, tail):
    out, s = [], t0 // WIN * WIN + phase - WIN
    while s < t1 + WIN:
        out.append((len(out), s, s + WIN, "work" if be_overlap(s, s + WIN, half, tail) else "idle"))
        s += WIN
    return out


def classify(reqs, grid, w0, w1, half, tail, prev_rule, middle):
    """The daemon-like p50s on one grid, with the straddlers."""
    idx = {g[0]: i for i, g in enumerate(grid)}
    inmeas = [g for g in grid if g[1] >= w0 and g[2] <= w1]
    cl = {"idle": [], "work": []}
    for i, (_, end, lat) in enumerate(reqs):
        g = next((g for g in grid if g[1] < end <= g[2]), None)
        if g is None or not any(m[1] < end <= m[2] for m in inmeas):
            continue
        if prev_rule:
            k, j = max(1, math.ceil(lat * 1e3 / (g[2] - g[1]))), idx[g[0]]
            if j - k < 0 or any(grid[j - m][3] != g[3] for m in range(1, k + 1)):
                continue
        cl[g[3]].append(i)

    def hist(ids):
        return wq50([v for g in inmeas for v in
                     hist_values([reqs[i][2] / 1e6 for i in ids if g[1] < reqs[i][1] <= g[2]], middle)])
    ov = {i: be_overlap(reqs[i][0], reqs[i][1], half, tail) for i in cl["idle"] + cl["work"]}
    return dict(alone=median([reqs[i][2] for i in cl["idle"]]), alone_b=hist(cl["idle"]),
                withbe=median([reqs[i][2] for i in cl["work"]]), withbe_b=hist(cl["work"]),
                s_idle=(sum(ov[i] > 0 for i in cl["idle"]), len(cl["idle"])),
                s_work=(sum(ov[i] < 0.5 * (reqs[i][1] - reqs[i][0]) for i in cl["work"]), len(cl["work"])))


def scenario(sr, middle, tail):
    half, lc, w0, w1 = sr["be_duty"] // 2, sr["lc"], sr["window_start_mono_ns"], sr["window_end_mono_ns"]
    reqs = requests(lc)
    halves = {0: [], 1: []}
    for q in reqs:
        if (h := bench_half(q, half)) is not None:
            halves[h].append(q[2])
    dv = (sr.get("daemon_view") or [{}])[0]
    r = dict(name=sr["name"], alone=median(halves[1]), withbe=median(halves[0]),
             A=dv.get("app_alone_us") or median(halves[1]))

    def both(grid):
        return {rule: classify(reqs, grid, w0, w1, half, tail, rule == "prev", middle) for rule in ("plain", "prev")}
    phases = [(ph / 10, both(shifted_grid(w0, w1, ph * WIN // 10, half, tail))) for ph in range(10)]
    grid, disagree = daemon_grid(sr, lc["pid"], half, tail) if sr["name"].startswith("slo:") else ([], 0)
    if grid:
        r["d"] = both(grid)
        ph = statistics.median([g[2] % WIN / 1e9 for g in grid])
        r["grid"] = f"{ph:.2f}" + (f" ({disagree} disagree)" if disagree else "")
    else:
        r["d"] = {rule: {k: statistics.median([p[rule][k] for _, p in phases]) for k in ("alone", "alone_b", "withbe", "withbe_b")}
                  | {k: tuple(sum(p[rule][k][j] for _, p in phases) for j in (0, 1)) for k in ("s_idle", "s_work")}
                  for rule in ("plain", "prev")}
        r["grid"] = "10 phases"
    wph, wv = max(phases, key=lambda p: p[1]["plain"]["s_idle"][0] / max(p[1]["plain"]["s_idle"][1], 1))
    r["worst"] = f"{wv['plain']['s_idle'][0]}/{wv['plain']['s_idle'][1]} at {wph:.1f} s ({wv['plain']['alone'] / r['d']['plain']['alone']:.3f}x)"
    # the reference: target_us / the objective's factor at each status read of the measurement
    refs = []
    for s in sr.get("slo") or []:
        for l in s.get("lc") or []:
            if l.get("pid") == lc["pid"] and l.get("target_us") and w0 <= s["mono_ns"] <= w1:
                m = re.search(r"<=([\d.]+)x", l.get("objective") or "")
                refs.append((s["mono_ns"], l["target_us"] / (float(m.group(1)) if m else 1.1)))
    r["ref"] = median([v for _, v in refs])
    alone_reqs = [(q[1], q[2]) for q in reqs if bench_half(q, half) == 1]
    lag = []
    for t, v in refs:
        last = [lat for end, lat in alone_reqs if end <= t][-20:]
        if len(last) >= 10:
            lag.append(v / median(last))
    r["lag"] = f"{median(lag):.3f} [{min(lag):.3f}-{max(lag):.3f}] ({len(lag)} reads)" if lag else "–"
    return r


def fmt(x, p=0):
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{p}f}"


def ratio(a, b):
    return a / b if a and b and not math.isnan(a) and not math.isnan(b) else math.nan


def print_lane(title, rows, skipped):
    print(f"\n## {title}\n")
    print("| scenario | grid phase (s) | bench alone / with BE | daemon-like alone exact / hist | prev rule exact / hist | "
          "reference (median of reads) | ref / A | = windows x hist x history | idle-window reqs BE touched | "
          "same, worst of 10 phases (alone p50 moved) | lag: ref / app's last <=20 alone |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---|---|")
    for r in rows:
        p, q, R, A = r["d"]["plain"], r["d"]["prev"], r["ref"], r["A"]
        dec = f"{p['alone'] / A:.3f} x {p['alone_b'] / p['alone']:.3f} x {R / p['alone_b']:.3f}" if not math.isnan(R) else "–"
        print(f"| {r['name']} | {r['grid']} | {fmt(r['alone'])} / {fmt(r['withbe'])} | {fmt(p['alone'])} / {fmt(p['alone_b'])} | "
              f"{fmt(q['alone'])} / {fmt(q['alone_b'])} | {fmt(R)} | {fmt(ratio(R, A), 3)} | {dec} | "
              f"{p['s_idle'][0]}/{p['s_idle'][1]} | {r['worst']} | {r['lag']} |")
    print("\n| scenario | daemon-like with BE exact / hist | prev rule exact / hist | with/alone: bench, daemon-like, prev rule | "
          "working-window reqs that ran mostly alone (plain / prev rule) |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        p, q = r["d"]["plain"], r["d"]["prev"]
        print(f"| {r['name']} | {fmt(p['withbe'])} / {fmt(p['withbe_b'])} | {fmt(q['withbe'])} / {fmt(q['withbe_b'])} | "
              f"{fmt(ratio(r['withbe'], r['alone']), 3)}, {fmt(ratio(p['withbe'], p['alone']), 3)}, {fmt(ratio(q['withbe'], q['alone']), 3)} | "
              f"{p['s_work'][0]}/{p['s_work'][1]} / {q['s_work'][0]}/{q['s_work'][1]} |")
    for name, why in skipped:
        print(f"\n(no LC requests in {name}: {why})")


def bucket_mode(status, flag):
    """(middle?, what decided it) for one lane's daemon."""
    if flag != "auto":
        return flag == "middle", flag
    m = re.search(r"revision ([0-9a-f]{7,40})", open(status).read()) if status else None
    if not m:
        return False, "top (auto: no revision in the status jsonl)"
    sha = m.group(1)
    if sha.startswith(MIDDLE_SINCE):
        return True, f"middle (auto: revision {MIDDLE_SINCE})"
    try:
        rc = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "merge-base", "--is-ancestor",
                             MIDDLE_SINCE, sha], capture_output=True).returncode
    except OSError:
        rc = None
    if rc in (0, 1):
        return rc == 0, f"{'middle' if rc == 0 else 'top'} (auto: revision {sha[:7]})"
    return False, f"top (auto: git could not tell whether revision {sha[:7]} has {MIDDLE_SINCE}; see --bucket-values)"


def extract(tgz, into):
    with tarfile.open(tgz) as t:
        t.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


def archive(path, tail, flag):
    with tempfile.TemporaryDirectory() as tmp:
        extract(path, tmp)
        for lane in sorted(glob.glob(os.path.join(tmp, "o*-scraped-*"))):
            m = re.fullmatch(r"o(\d+)-(.+)", os.path.basename(lane))
            if not m or not os.path.isdir(lane):
                continue
            n, part = m.groups()
            wdir = os.path.join(tmp, os.path.basename(lane) + ".self", f"w{n}-{part}")
            if os.path.exists(os.path.join(lane, "self-all.tar.gz")):
                extract(os.path.join(lane, "self-all.tar.gz"), os.path.dirname(wdir))
            if not os.path.isdir(wdir):
                wdir = os.path.join(tmp, f"w{n}-{part}")  # archives that carry the worker's folder unpacked
            status = os.path.join(wdir, f"{part}-status.jsonl")
            middle, how = bucket_mode(status if os.path.exists(status) else None, flag)
            for res in sorted(glob.glob(os.path.join(lane, f"{part}-rep*-results.json.gz"))):
                rep = re.search(r"-rep(\d+)-results", res).group(1)
                rows, skipped = [], []
                for sr in json.load(gzip.open(res))["scenarios"]:
                    if sr.get("lc") and sr["lc"].get("samples") and sr.get("be_duty"):
                        rows.append(scenario(sr, middle, tail))
                    elif sr.get("error"):
                        skipped.append((sr["name"], sr["error"]))
                print_lane(f"{os.path.basename(path)}: lane o{n} ({part}), rep {rep}; bucket values {how}", rows, skipped)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("archives", nargs="+", metavar="ARCHIVE.tgz")
    ap.add_argument("--tail-ms", type=float, default=10, help="BE's queued work after a working half ends (ms; default 10)")
    ap.add_argument("--bucket-values", choices=("auto", "top", "middle"), default="auto",
                    help="where a window's values sit in their histogram bucket (default: by the daemon's revision)")
    a = ap.parse_args()
    print("Latencies in us. A: the report's app alone p50 (daemon_view.app_alone_us), else the bench's alone p50.")
    for path in a.archives:
        archive(path, int(a.tail_ms * 1e6), a.bucket_values)


if __name__ == "__main__":
    main()
