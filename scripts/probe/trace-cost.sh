#!/usr/bin/env bash
# What `gpreemptctl trace requests` (a uprobe on every launch) costs an LC alone, in one process:
# the LC (MODE, as traced-lc.sh's: eager, graph, llama, gpt2) runs alone while its requests are
# traced for SPAN and left untraced for SPAN in turn, CYCLES times; its own requests that began
# and ended inside a phase, past SETTLE after its start (the probes go in and come out over
# seconds), are compared: p50 traced over p50 untraced (a 95% bootstrap interval; each phase's
# own p50 beside it), with the launches a request the trace saw; $OUT gets the result
# (trace-cost-MODE.txt) and its files in one archive (trace-cost-MODE.tgz).
# Eager LCs differ by 20-80% from process to process: this compares one process with itself.
# The LC runs on LC_CPUS and the tracer on TRACER_CPUS (2,3 and 4,5 where the machine has 8
# CPUs or more; "" leaves either unpinned): a tracer on the LC's CPU would cost it the CPU.
#   bash scripts/probe/trace-cost.sh gpt2
set -u # as root on the GPU machine, from the repo root, with .carry/gpreemptctl (make gpu-binaries)
source "$(dirname "${BASH_SOURCE[0]}")/../lib/daemon.sh" # wait_ready
MODE=${1:-gpt2} TAG=${2:-}
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"
C=${C:-.carry} SPAN=${SPAN:-20} SETTLE=${SETTLE:-4} CYCLES=${CYCLES:-5}
if [ "$(nproc)" -ge 8 ]; then LC_CPUS=${LC_CPUS-2,3} TRACER_CPUS=${TRACER_CPUS-4,5}; else LC_CPUS=${LC_CPUS-} TRACER_CPUS=${TRACER_CPUS-}; fi
lcpin=(${LC_CPUS:+taskset -c "$LC_CPUS"}) tracerpin=(${TRACER_CPUS:+taskset -c "$TRACER_CPUS"}) # taskset execs: $! is the LC's pid
case $MODE in
  eager) lc=(bench/pytorch/lc_infer.py --period 20ms --warmup 50);;
  graph) lc=(bench/pytorch/lc_infer.py --cuda-graph --period 20ms --warmup 50);;
  llama) lc=(bench/pytorch/lc_decode.py --family llama-330m --batch 2 --prompt 128 --new-tokens 32 --period 1s);;
  gpt2) lc=(bench/pytorch/lc_decode.py --family gpt2 --prompt 64 --new-tokens 16 --period 800ms);;
  *) echo "trace-cost.sh: MODE must be eager, graph, llama or gpt2, not $MODE" >&2; exit 2;;
esac
period=$(printf '%s\n' "${lc[@]}" | sed -n '/--period/{n;p}')
# requests enough for every phase and the start's slack, at one a period (800ms, 1s)
n=$(python3 -c "import re,sys; v,u=re.fullmatch(r'([0-9.]+)(ms|s)',sys.argv[1]).groups(); print(int((2*$SPAN*$CYCLES+30)/(float(v)*{'ms':1e-3,'s':1}[u])))" "$period") || exit 1
now() { python3 -c 'import time; print(time.monotonic_ns())'; } # the clock the app stamps its requests on
phases=$OUT/trace-cost-$MODE$TAG-phases.txt; : > "$phases"
"${lcpin[@]}" python3 -u "${lc[@]}" --requests "$n" --out "$OUT/lc-cost-$MODE$TAG.json" > "/tmp/lc-cost-$MODE.out" 2>&1 &
P=$!
wait_ready "/tmp/lc-cost-$MODE.out" $P 90 || { echo "trace-cost.sh: the LC did not come up: /tmp/lc-cost-$MODE.out" >&2; kill $P 2>/dev/null; exit 1; }
traces=()
for ((i = 0; i < CYCLES; i++)); do
  echo "untraced $(now)" >> "$phases"; sleep "$SPAN"; echo "end $(now)" >> "$phases"
  echo "traced $(now)" >> "$phases"
  traces+=("$OUT/trace-cost-$MODE$TAG-$i.jsonl")
  if ! "${tracerpin[@]}" $C/gpreemptctl trace requests --pid $P --duration "${SPAN}s" --interval "${SPAN}s" --each --json > "${traces[-1]}" 2>&1; then
    echo "trace-cost.sh: the trace failed (${traces[-1]}): no traced phase to compare" >&2; kill $P 2>/dev/null; exit 1
  fi
  echo "end $(now)" >> "$phases"
done
wait $P
python3 - "$phases" "$OUT/lc-cost-$MODE$TAG.json" "$SETTLE" "${traces[@]}" <<'PY' | tee "$OUT/trace-cost-$MODE$TAG.txt"
import json, random, sys, statistics as st
phases, res, settle, traces = sys.argv[1], sys.argv[2], float(sys.argv[3]) * 1e9, sys.argv[4:]
spans, cur = [], None
for line in open(phases):
    what, t = line.split()
    if what == "end":
        spans.append((cur[0], cur[1] + settle, int(t)))
    else:
        cur = (what, int(t))
lat, each = {"traced": [], "untraced": []}, [[] for _ in spans]
for s in json.load(open(res))["samples"]:
    a, e = s["arrival_mono_ns"], s["arrival_mono_ns"] + s["latency_ns"]
    for i, (what, lo, hi) in enumerate(spans):
        if lo <= a and e <= hi:
            lat[what].append(s["latency_ns"] / 1e6)
            each[i].append(s["latency_ns"] / 1e6)
launches, steps, read = [], 0, []
for f in traces:
    kinds = set()
    for line in open(f):
        if line.startswith("{"):
            d = json.loads(line)
            if d.get("type") != "request" or not d.get("launches"):
                continue
            kinds.add(d.get("kind"))
            if d.get("kind") == "step": # never quiet: an LC behind its arrivals runs its requests back to back
                steps += 1
            else:
                launches.append(d["launches"] / max(d.get("requests", 1), 1))
    read.append("+".join(sorted(k.replace("request", "requests").replace("step", "steps") for k in kinds if k)) or "nothing")
# Each phase's own p50 (and, traced, what the trace measured): an eager LC's speed modes last tens
# of seconds, and show as phases of a kind that disagree; a trace begun inside a backlog reads steps.
traced = [i for i, (w, _, _) in enumerate(spans) if w == "traced"] # the k-th traced phase is the k-th trace
tag = {i: f" [{read[k]}]" for k, i in enumerate(traced) if k < len(read)}
print("phases, in turn:", ", ".join(f"{w} {st.median(v):.1f} ms ({len(v)}){tag.get(i, '')}" for i, ((w, _, _), v) in enumerate(zip(spans, each)) if v))
t, u = lat["traced"], lat["untraced"]
late = json.load(open(res)).get("late", 0)
if steps:
    print(f"the trace measured {steps} steps (the LC never quiet for 10 s: {late} of its requests started late)")
if not launches:
    sys.exit("the trace saw no request: no traced phase to compare")
if len(t) < 10 or len(u) < 10:
    sys.exit(f"too few requests inside the phases: traced {len(t)}, untraced {len(u)}")
rng = random.Random(1) # a 95% bootstrap interval of the ratio, requests resampled within each kind
boot = sorted(st.median(rng.choices(t, k=len(t))) / st.median(rng.choices(u, k=len(u))) for _ in range(4000))
print(f"RESULT traced p50 {st.median(t):.2f} ms ({len(t)} requests), untraced {st.median(u):.2f} ms ({len(u)}): "
      f"{st.median(t) / st.median(u):.3f}x [{boot[100]:.2f}, {boot[3899]:.2f}]; +{st.median(t) - st.median(u):.2f} ms a request, {st.median(launches):.0f} launches "
      f"a request traced: {1e3 * (st.median(t) - st.median(u)) / st.median(launches):.2f} us a launch")
PY
rc=${PIPESTATUS[0]}
# One archive of the phases, the app's requests and each trace's events (what each request's launches
# were read as): the device machine returns a few files a call.
tar czf "$OUT/trace-cost-$MODE$TAG.tgz" -C "$OUT" "${phases##*/}" "lc-cost-$MODE$TAG.json" "${traces[@]##*/}" &&
  rm -f "$phases" "$OUT/lc-cost-$MODE$TAG.json" "${traces[@]}"
exit "$rc"
