#!/usr/bin/env bash
# An LC (MODE): gpreemptctl's traced requests against the app's own requests over the same spans,
# alone and beside resnet50 training, with each second's quiet gap (learnt or not). MODE is
# eager or graph (resnet50 every 20 ms, eager or a CUDA graph; 8 s traced a phase), llama (the
# Llama shape ~330M, batch 2, 32 new tokens, one request a second) or gpt2 (GPT-2-medium shape,
# 16 new tokens, every 800 ms; 20 s traced a phase). TAG names the output:
# $OUT/probe-MODE[TAG].jsonl (the traced requests and intervals), .txt (the RESULT lines), the
# LC's calls in each phase, $OUT/calls-MODE[TAG]-{alone,beside}.jsonl.gz (--record), and the
# app's own requests, $OUT/lc-MODE[TAG].json. BE starts first and is held stopped (SIGSTOP)
# through the trace alone: a BE that came up after the LC (its first start on a machine takes
# longer) left no LC to trace beside it.
#   bash scripts/probe/traced-lc.sh eager -rep1
set -u # as root on the GPU machine, from the repo root, with .carry/gpreemptctl (make gpu-binaries)
source "$(dirname "${BASH_SOURCE[0]}")/../lib/daemon.sh" # wait_ready
MODE=${1:-eager} TAG=${2:-}
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"
T=$(mktemp -d) # its own logs: two probes can run at once, one a GPU (CUDA_VISIBLE_DEVICES)
f=$OUT/probe-$MODE$TAG.jsonl
C=${C:-.carry} # another build: C=.carry-b
span=8s
case $MODE in
  eager) lc=(bench/pytorch/lc_infer.py --period 20ms --requests 1800 --warmup 50);;
  graph) lc=(bench/pytorch/lc_infer.py --cuda-graph --period 20ms --requests 1800 --warmup 50);;
  llama) lc=(bench/pytorch/lc_decode.py --family llama-330m --batch 2 --prompt 128 --new-tokens 32 --period 1s --requests 60) span=20s;;
  gpt2) lc=(bench/pytorch/lc_decode.py --family gpt2 --prompt 64 --new-tokens 16 --period 800ms --requests 72) span=20s;;
  *) echo "traced-lc.sh: MODE must be eager, graph, llama or gpt2, not $MODE" >&2; exit 2;;
esac
trace() { $C/gpreemptctl trace requests --pid $P --duration $span --interval 1s --each --json --record $OUT/calls-$MODE$TAG-$1.jsonl.gz; }
python3 -u bench/pytorch/be_train.py --duration 120s --device 0 --out $T/be.json > $T/be.out 2>&1 &
B=$!
wait_ready $T/be.out $B 90
kill -STOP $B; sleep 1 # its queued iterations drain
python3 -u "${lc[@]}" --out $OUT/lc-$MODE$TAG.json > $T/lc-$MODE.out 2>&1 &
P=$!
wait_ready $T/lc-$MODE.out $P 90
echo '{"type":"phase","phase":"alone"}' > "$f"
trace alone >> "$f" 2>&1
kill -CONT $B; sleep 1
echo '{"type":"phase","phase":"beside BE"}' >> "$f"
trace beside >> "$f" 2>&1
wait $P
kill -CONT $B 2>/dev/null; kill $B 2>/dev/null; wait $B 2>/dev/null
# Over each phase's traced span (its first traced request's start to its last's end; attaching
# and detaching the probes take seconds the app runs on through): the traced p50 against the
# app's p50 of its own requests that ended in that span, whole and, where the app stamps it, from
# its first CUDA call's return (the app's dispatch before that call is no part of a traced request).
python3 - "$f" $OUT/lc-$MODE$TAG.json <<'PY2' | tee -a "${f%.jsonl}.txt"
import json, sys, statistics as st
f, res = sys.argv[1:]
phases, phase = {}, None
for line in open(f):
    if not line.startswith("{"):
        continue
    d = json.loads(line)
    phase = d.get("phase", phase)
    p = phases.setdefault(phase, {"reqs": [], "learnt": []})
    if d.get("type") == "request" and d.get("kind") == "request":  # steps (never quiet) apart
        p["reqs"].append(d)
    elif d.get("type") == "request":
        p["steps"] = p.get("steps", 0) + 1
    elif d.get("title", "").startswith("interval") and d.get("requests"):
        p["learnt"].append(d.get("learnt"))
ends, prev = [], -1
for s in json.load(open(res))["samples"]:
    end = max(s["arrival_mono_ns"], prev) + s["prep_ns"] + s["latency_ns"]
    prev = end
    # from its first CUDA call's return (lc_infer.py stamps it): a traced request starts inside that call
    ends.append((end, s["latency_ns"] / 1e3, (s["latency_ns"] - s["first_call_ns"]) / 1e3 if s.get("first_call_ns") else None))
for name, p in phases.items():
    r = p["reqs"]
    if not r:
        print(f"RESULT {f.rsplit('/', 1)[-1]} {name}: no traced request")
        continue
    lo, hi = min(x["start_ns"] for x in r), max(x["end_ns"] for x in r)
    app = [l for e, l, _ in ends if lo <= e <= hi]
    first = [l for e, _, l in ends if lo <= e <= hi and l is not None]
    # a busy period of requests run back to back counts as each of them, at their mean
    n = sum(x.get("requests", 1) for x in r)
    t = st.median(x["latency_us"] / x.get("requests", 1) for x in r for _ in range(x.get("requests", 1)))
    a = st.median(app)
    print(f"RESULT {f.rsplit('/', 1)[-1]} {name}: traced p50 {t:.0f}us ({n} requests, {len(r)} busy periods, {p.get('steps', 0)} steps while never quiet), app p50 {a:.0f}us ({len(app)} requests ending in the traced span), "
          f"traced/app {t / a:.2f}x" + (f", app p50 from its first CUDA call's return {st.median(first):.0f}us, traced/that {t / st.median(first):.2f}x" if first else "") +
          f"; gap learnt in {sum(1 for x in p['learnt'] if x)} of {len(p['learnt'])} intervals with requests")
PY2
