"""The reports of scripts/gpu-run-2gpu.sh's parts, from what the runs left
in files: classing-report (each worker's reads and the trace's changes
against the class its GPU's rule gives), slo-report (the searches per GPU
and the bench's objectives) and gate-report (each BE's kernels/s over the
LC's requests, /proc stops). Each writes markdown (--md) and prints it.
"""

import gzip
import json
import os
import re
import statistics


# --- classing -------------------------------------------------------------------

def trace_changes(path, pids):
    """From `gpreemptctl -o json trace tsg`: per pid, every change of one of
    its groups' timeslice (whoever made it: libcuda, gpreemptd, a read that
    found a new value), with the trace's lost-event count."""
    out = {p: {"allocs": [], "changes": []} for p in pids}
    last, lost, offsets, lines = {}, None, [], []
    if not path or not os.path.exists(path):
        return out, None, 0
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("type") == "end":
                lost = ev.get("lost")
            if ev.get("type") != "update":
                continue
            g = ev.get("group") or {}
            if ev.get("event") == "tsg-alloc" and g.get("created_ns"):
                offsets.append(g["created_ns"] / 1e9 - ev["time_s"])
            if g.get("pid") in out:
                lines.append(ev)
    off = statistics.median(offsets) if offsets else None
    for ev in lines:
        g = ev["group"]
        t = int((ev["time_s"] + off) * 1e9) if off is not None else None
        rec = out[g["pid"]]
        key = (g["pid"], g["client"], g["handle"])
        if ev["event"] == "tsg-alloc":
            rec["allocs"].append({"t_ns": t, "tsg": g["handle"]})
        ts = g.get("timeslice_us") or 0
        if ts and last.get(key) != ts:
            rec["changes"].append({"t_ns": t, "tsg": g["handle"], "engine": g.get("engine"), "timeslice_us": ts,
                                   "by": (ev.get("by") or {}).get("comm"), "detail": ev.get("detail")})
            last[key] = ts
    return out, lost, len(lines)


def classed_lines(log, pids):
    out = {p: [] for p in pids}
    if not log or not os.path.exists(log):
        return out
    for m in re.finditer(r'msg=classed pid=(\d+) comm=\S+ class=(\S+) rule=(\S+) groups=(\d+) after_setup=(\S+)', open(log).read()):
        p = int(m.group(1))
        if p in out:
            out[p].append({"class": m.group(2), "rule": m.group(3), "groups": int(m.group(4)), "after_setup": m.group(5)})
    return out


def cmd_classing_report(a):
    res = json.load(open(a.reads))
    expect = {tuple([k.split(":")[0], int(k.split(":")[1])]): v for k, v in res["expect"].items()}
    class_values = set(expect.values())
    defaults = {2048, 1024}  # libcuda's compute group, RM's other groups
    pids = [w["pid"] for w in res["workers"]]
    tr, lost, nlines = trace_changes(a.trace, pids)
    classed = classed_lines(a.log, pids)
    nvml = {int(k): v for k, v in (res.get("nvml") or {}).items()}
    dproc = {p["pid"]: p for p in (res.get("daemon_processes") or [])}
    rows, verdicts = [], []
    for w in res["workers"]:
        want = expect[(w["role"], w["gpu"])]
        other_gpu = expect[(w["role"], 1 - w["gpu"])]
        others = class_values - {want}
        reads = w["reads"] or []
        t0 = w["first_group_ns"]
        first_ok, first_compute, wrong, wrong_other_gpu, stray, errs = None, None, 0, 0, 0, 0
        compute = {h for h, e in (w.get("engines") or {}).items() if e == "compute"}
        gaps = [b[0] - a_[0] for a_, b in zip(reads, reads[1:])]
        for t, vals in reads:
            nums = [v for v in vals.values() if isinstance(v, int)]
            errs += len(vals) - len(nums)
            if any(v in others for v in nums):
                wrong += 1
            if other_gpu in nums:
                wrong_other_gpu += 1
            if any(v not in class_values and v not in defaults for v in nums):
                stray += 1
            if first_ok is None and nums and len(nums) == len(vals) and all(v == want for v in nums):
                first_ok = t
            if first_compute is None and any(vals.get(h) == want for h in compute):
                first_compute = t
        # The trace: every change of its groups' timeslice.
        ch = tr.get(w["pid"], {}).get("changes", [])
        allocs = tr.get(w["pid"], {}).get("allocs", [])
        a0 = min((x["t_ns"] for x in allocs if x["t_ns"]), default=None)
        t_wrong = [c for c in ch if c["timeslice_us"] in others]
        t_first = next((c["t_ns"] for c in ch if c["timeslice_us"] == want and c["t_ns"]), None)
        final = w.get("final_ps") or []
        final_ok = bool(final) and all(g.get("timeslice_us") == want for g in final)
        on = nvml.get(w["pid"])
        dp = dproc.get(w["pid"], {})
        ok = first_ok is not None and wrong == 0 and not t_wrong and on == [w["gpu"]]
        verdicts.append(ok)
        rows.append(dict(
            name=w["name"], pid=w["pid"], gpu=w["gpu"], nvml=on, cvd=w["cvd"], device=w["device"], role=w["role"], want_us=want,
            daemon_class=dp.get("class"), daemon_rule=dp.get("rule"), daemon_gpus=dp.get("gpus"),
            classed_log=classed[w["pid"]], method=w["method"], reads=len(reads),
            read_gap_ms=(statistics.median(gaps) / 1e6 if gaps else None), read_gap_max_ms=(max(gaps) / 1e6 if gaps else None),
            first_group_ms=((t0 - w["spawn_ns"]) / 1e6 if t0 else None),
            first_classed_read_ms=((first_ok - t0) / 1e6 if first_ok and t0 else None),
            first_classed_read_from_spawn_ms=((first_ok - w["spawn_ns"]) / 1e6 if first_ok else None),
            first_compute_classed_read_ms=((first_compute - t0) / 1e6 if first_compute and t0 else None),
            wrong_reads=wrong, other_gpu_class_reads=wrong_other_gpu, stray_reads=stray, read_errors=errs,
            trace_changes=[(round((c["t_ns"] - a0) / 1e6, 1) if c["t_ns"] and a0 else None, c["timeslice_us"], c["by"]) for c in ch],
            trace_wrong=len(t_wrong), trace_first_classed_ms=((t_first - a0) / 1e6 if t_first and a0 else None),
            final_ps=[g.get("timeslice_us") for g in final], final_ok=final_ok, errors=w["errors"][:5], pass_=ok))
    fmt = lambda v, f="{:.0f}": "–" if v is None else f.format(v)
    md = ["## classing (must-show 1): each process classed by its own GPU's rule", ""]
    md.append(f"Expected timeslices (all groups): GPU 0 LC {expect[('lc', 0)]} us, BE {expect[('be', 0)]} us; "
              f"GPU 1 LC {expect[('lc', 1)]} us, BE {expect[('be', 1)]} us. Reads: GET_TIMESLICE on every group every "
              f"{res['period_s'] * 1000:.0f} ms for {res['window_s']:.1f} s from the first channel group seen; "
              "'wrong' = a read showing another class's value (2048/1024 us, the driver's, are not wrong).")
    md.append("")
    md.append("| worker | pid | GPU (NVML) | CUDA_VISIBLE_DEVICES / --device | expected | daemon: class, rule, GPUs | reads (median / max gap ms) | first group after spawn (ms) | first classed read after first group (ms): compute / all groups | wrong reads (other GPU's class) | trace: changes (ms after alloc: us by) | trace wrong | final ps | verdict |")
    md.append("|---|---:|---|---|---:|---|---|---:|---:|---:|---|---:|---|---|")
    for r in rows:
        cvd = "(unset)" if r["cvd"] is None else r["cvd"]
        if len(cvd) > 14:
            cvd = cvd[:12] + "…"
        tch = ", ".join(f"{t}: {v} {b}" for t, v, b in r["trace_changes"][:6]) + (" …" if len(r["trace_changes"]) > 6 else "")
        md.append(f"| {r['name']} | {r['pid']} | {r['nvml']} (want {r['gpu']}) | {cvd} / {r['device']} | {r['want_us']} | "
                  f"{r['daemon_class']}, {r['daemon_rule']}, {r['daemon_gpus']} | {r['reads']} ({fmt(r['read_gap_ms'], '{:.1f}')} / {fmt(r['read_gap_max_ms'], '{:.1f}')}) | "
                  f"{fmt(r['first_group_ms'])} | {fmt(r['first_compute_classed_read_ms'])} / {fmt(r['first_classed_read_ms'])} | {r['wrong_reads']} ({r['other_gpu_class_reads']}) | "
                  f"{tch or '–'} | {r['trace_wrong']} | {r['final_ps']} | {'PASS' if r['pass_'] else 'FAIL'} |")
    md.append("")
    gaps = [r["read_gap_ms"] for r in rows if r["read_gap_ms"]]
    md.append(f"Achieved read resolution: median gap {fmt(statistics.median(gaps) if gaps else None, '{:.1f}')} ms "
              f"(methods: {sorted(set(str(r['method']) for r in rows))}); trace: {nlines} lines of these workers, lost events {lost}.")
    for r in rows:
        if r["errors"] or r["read_errors"] or r["stray_reads"]:
            md.append(f"- {r['name']}: read errors {r['read_errors']}, reads of other values {r['stray_reads']}; {r['errors']}")
        if len(r["classed_log"]) > 0:
            md.append(f"- {r['name']}: daemon log: " + "; ".join(f"{c['class']} by {c['rule']} ({c['groups']} groups, {c['after_setup']} after setup)" for c in r["classed_log"]))
    md.append("")
    md.append(f"**must-show 1: {'PASS' if all(verdicts) else 'FAIL'}** ({sum(verdicts)} of {len(verdicts)} workers on the expected GPU, classed, never read or set to another class's value)")
    open(a.md, "w").write("\n".join(md) + "\n")
    with gzip.open(a.json, "wt") as f:
        json.dump(dict(rows=rows, trace_lost=lost, raw=res), f)
    print("\n".join(md))
    return 0


# --- slo and gate ----------------------------------------------------------------

def load_status(path):
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def searches_of(s):
    slo = (s.get("status") or {}).get("slo") or {}
    return slo.get("searches") or []


def cmd_slo_report(a):
    md = ["## slo (must-show 2): a search per GPU, each GPU's BE timeslice chosen by its own LC", ""]
    # The two-GPU process: snapshots of gpreemptctl -o json daemon status.
    md.append("### A process on both GPUs joins one search")
    for label, path in (("before (LC + BE on each GPU)", a.snap_a), ("with the two-GPU BE", a.snap_b), ("after it exited", a.snap_c)):
        try:
            s = json.load(open(path))
        except (OSError, ValueError) as e:
            md.append(f"- {label}: no status ({e})")
            continue
        slo = (s.get("status") or {}).get("slo") or {}
        srch = slo.get("searches") or []
        be = {b.get("pid"): b for b in slo.get("be") or []}
        procs = s.get("processes") or []
        md.append(f"- {label}: searches " + (", ".join(f"GPUs {x.get('gpus')} at {x.get('be_timeslice') or 'policy'} ({x.get('lcs')} LC)" for x in srch) or "none")
                  + "; processes: " + ", ".join(
                      f"{p.get('pid')}{' (two-GPU)' if p.get('pid') == a.dual_pid else ''} {p.get('class')} GPUs [{p.get('gpus', '')}]"
                      + (f" BE timeslice {be[p['pid']].get('timeslice') or '–'}{' apart' if be[p['pid']].get('apart') else ''}" if p.get("pid") in be else "")
                      for p in procs))
    # The same over the whole phase, from the status read once a second.
    seq = []
    st = load_status(a.dual_status) if a.dual_status else []
    for x in st:
        sets = " ".join(sorted("[" + ",".join(str(g) for g in (y.get("gpus") or [])) + "]" for y in searches_of(x))) or "none"
        if not seq or seq[-1][1] != sets:
            seq.append(((x["mono_ns"] - st[0]["mono_ns"]) / 1e9, sets))
    if seq:
        md.append("- searches over the phase (status once a second, s from its start): " + " → ".join(f"{t:.0f}s {v}" for t, v in seq))
    md.append("")
    # The bench runs, and the searches over each measurement.
    st = load_status(a.status)
    md.append("### The bench runs (one gpreempt-bench run per GPU, CUDA_VISIBLE_DEVICES=that GPU, same daemon)")
    md.append("")
    md.append("| GPU | scenario | rep | LC p50 / p99 vs standalone | objective | BE vs be-only | searches in the measured window (GPUs: BE timeslices seen) | BE share (daemon, median) | worst LC vs objective (daemon, median) |")
    md.append("|---|---|---:|---|---|---|---|---:|---:|")
    met = {}
    for gpu, path, obj in ((0, a.results0, a.objective0), (1, a.results1, a.objective1)):
        try:
            d = json.load(open(path))
        except (OSError, ValueError) as e:
            md.append(f"| {gpu} | no results.json ({e}) | | | | | | | |")
            continue
        for sc in d.get("scenarios", []):
            if not sc["name"].startswith("slo:"):
                continue
            w0, w1 = sc.get("window_start_mono_ns"), sc.get("window_end_mono_ns")
            seen, shares, worst = {}, [], []
            for s in st:
                if w0 and w1 and w0 <= s["mono_ns"] <= w1:
                    for x in searches_of(s):
                        key = ",".join(str(g) for g in x.get("gpus") or []) or "node"
                        seen.setdefault(key, [])
                        if x.get("be_timeslice") and (not seen[key] or seen[key][-1] != x["be_timeslice"]):
                            seen[key].append(x["be_timeslice"])
                        if key == str(gpu):
                            if x.get("be_share") is not None:
                                shares.append(x["be_share"])
                            if x.get("worst_lc_vs_objective") is not None:
                                worst.append(x["worst_lc_vs_objective"])
            p50, p99 = sc.get("lc_p50_vs_standalone"), sc.get("lc_p99_vs_standalone")
            ok = objective_met(obj, p50, p99)
            met.setdefault(gpu, []).append(ok)
            bev = sc.get("be_vs_be_only")
            md.append(f"| {gpu} | {sc['name']} | {sc['rep']} | {fmtx(p50)} / {fmtx(p99)} | {obj}: {'met' if ok else ('not met' if ok is not None else '?')} | "
                      f"{'–' if bev is None else f'{bev * 100:.1f}%'} | "
                      + ("; ".join(f"[{k}]: {' → '.join(v) or '–'}" for k, v in sorted(seen.items())) or "no status in the window")
                      + f" | {'–' if not shares else f'{statistics.median(shares) * 100:.1f}%'} | {'–' if not worst else f'{statistics.median(worst):.2f}'} |")
    md.append("")
    # Over the whole bench phase: how often the status showed the two searches.
    n, two = 0, 0
    for s in st:
        srch = searches_of(s)
        if srch:
            n += 1
            if sorted(tuple(x.get("gpus") or []) for x in srch) == [(0,), (1,)]:
                two += 1
    md.append(f"Status samples with a search (bench phase): {n}; with exactly the two searches [0] and [1]: {two}.")
    for gpu in (0, 1):
        v = met.get(gpu, [])
        md.append(f"- GPU {gpu}: objective met by the bench's measure in {sum(1 for x in v if x)} of {len(v)} repetitions")
    open(a.md, "w").write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


def fmtx(v):
    return "–" if v is None else f"{v:.2f}x"


def objective_met(obj, p50, p99):
    """obj like "p50<=1.25x, p99<=1.50x" against the bench's ratios to the
    standalone run (None where a ratio is missing)."""
    ok = True
    for part in obj.split(","):
        m = re.match(r"\s*p(50|99)\s*<=\s*([0-9.]+)x\s*$", part)
        if not m:
            return None
        v = p50 if m.group(1) == "50" else p99
        if v is None:
            return None
        ok = ok and v <= float(m.group(2))
    return ok


def rate_bins(completions, t0, t1, bin_ns):
    n = max(1, int((t1 - t0) // bin_ns))
    bins = [0] * n
    for c in completions:
        i = int((c - t0) // bin_ns)
        if 0 <= i < n:
            bins[i] += 1
    return [b * 1e9 / bin_ns for b in bins]


def cmd_gate_report(a):
    md = [f"### gate, variant {a.variant}: {a.title}", ""]
    try:
        be = {g: json.load(open(p)) for g, p in ((0, a.be0), (1, a.be1))}
        lc = json.load(open(a.lc))
    except (OSError, ValueError) as e:
        md.append(f"no worker results ({e}); see the logs in 2gpu-all.tar.gz")
        open(a.md, "w").write("\n".join(md) + "\n")
        print("\n".join(md))
        return 0
    ps = json.load(open(a.procstate)) if os.path.exists(a.procstate) else {"pids": {}}
    try:
        status = json.load(open(a.status))
    except (OSError, ValueError):
        status = {}
    gate = (status.get("status") or {}).get("gate") or {}
    samples = lc.get("samples") or []
    l0 = min(s["arrival_mono_ns"] for s in samples) if samples else lc.get("measure_start_mono_ns")
    l1 = max(s["arrival_mono_ns"] + s["latency_ns"] for s in samples) if samples else lc.get("measure_end_mono_ns")
    bin_ns = int(a.bin * 1e9)
    rows, res = [], {}
    for g in (0, 1):
        b = be[g]
        c = b.get("completions_mono_ns") or []
        before = rate_bins(c, max(b.get("start_mono_ns") or c[0], l0 - int(4e9)), l0, bin_ns) if c and l0 else []
        during = rate_bins(c, l0, l1, bin_ns) if c and l0 else []
        inreq = sum(1 for x in c if any(s["arrival_mono_ns"] <= x <= s["arrival_mono_ns"] + s["latency_ns"] for s in samples))
        reqtime = sum(s["latency_ns"] for s in samples) / 1e9
        pst = ps["pids"].get(str(b.get("pid")), {})
        med_before = statistics.median(before) if before else None
        r = dict(gpu=g, pid=b.get("pid"), rate_before=med_before, rate_during=(statistics.mean(during) if during else None),
                 min_bin_during=(min(during) if during else None), rate_in_requests=(inreq / reqtime if reqtime else None),
                 samples=pst.get("samples"), stopped_samples=pst.get("stopped"), stops=len(pst.get("spans", [])))
        res[g] = r
        f = lambda v: "–" if v is None else f"{v:.0f}"
        rows.append(f"| {g} | {r['pid']} | {f(r['rate_before'])} | {f(r['rate_during'])} | {f(r['min_bin_during'])} | {f(r['rate_in_requests'])} | "
                    f"{r['samples']} | {r['stopped_samples']} ({r['stops']} stops) |")
    md.append(f"LC: lc_decode.py eager on GPU 0, {len(samples)} requests over {(l1 - l0) / 1e9 if l0 and l1 else 0:.1f} s "
              f"(p50 {statistics.median([s['latency_ns'] for s in samples]) / 1e6 if samples else 0:.0f} ms a request). "
              f"BE kernels/s in {a.bin * 1000:.0f} ms bins: the median over the 4 s before the LC's first request, the mean and the lowest bin from its first request to its last one's end, and over the requests themselves.")
    md.append("")
    md.append("| BE on GPU | pid | kernels/s before | during (mean) | lowest bin during | within requests | /proc samples (5 ms) | of them stopped (T) |")
    md.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    md += rows
    md.append("")
    md.append(f"Gate status: held {gate.get('held')}, be_stopped {gate.get('be_stopped')}, closed {gate.get('closed')}, "
              f"held_seconds {gate.get('held_seconds')}, refused {gate.get('refused_budget')}, failures {gate.get('failures')}, lcs {gate.get('lcs')}.")
    try:
        procs = json.load(open(a.processes)).get("processes") or []
        md.append("Daemon's processes before the LC's first request: " + "; ".join(f"pid {p['pid']} {p.get('comm')} {p.get('class')} by {p.get('rule')} on GPUs [{p.get('gpus', '')}]" for p in procs))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    r1, r0 = res.get(1, {}), res.get(0, {})
    untouched = (r1.get("stopped_samples") == 0 and r1.get("rate_before") and r1.get("min_bin_during") is not None
                 and r1["min_bin_during"] >= a.keep * r1["rate_before"])
    gated = bool(r0.get("stopped_samples")) or bool(gate.get("be_stopped"))
    md.append("")
    held, stopped = gate.get("held") or 0, gate.get("be_stopped") or 0
    md.append(f"GPU 1's BE untouched (no T sample, lowest bin >= {a.keep:.0%} of before): **{'yes' if untouched else 'NO'}**; "
              f"GPU 0's BE held by the gate: {'yes' if gated else 'no (the gate did not act: nothing shown)'}; "
              f"SIGSTOPs per hold: {stopped / held if held else 0:.2f} (1.00: GPU 0's BE alone, 2.00: both BE).")
    res["verdict"] = dict(gpu1_untouched=bool(untouched), gpu0_gated=gated, stops_per_hold=(stopped / held if held else None))
    open(a.md, "w").write("\n".join(md) + "\n")
    json.dump(dict(variant=a.variant, be=res, gate=gate, lc_requests=len(samples)), open(a.json, "w"), default=str)
    print("\n".join(md))
    return 0
