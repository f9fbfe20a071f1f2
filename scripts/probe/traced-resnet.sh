#!/usr/bin/env bash
# A resnet50 LC every 20 ms, eager or CUDA graph (MODE): gpreemptctl's traced requests against
# the app's own requests over the same spans, alone and beside resnet50 training, with each
# second's quiet gap (learnt or not). TAG names the output: $OUT/probe-MODE[TAG].txt. BE starts
# first and is held stopped (SIGSTOP) through the trace alone: a BE that came up after the LC
# (its first start on a machine takes longer) left no LC to trace beside it.
#   bash scripts/probe/traced-resnet.sh eager -rep1
set -u # as root on the GPU machine, from the repo root, with .carry/gpreemptctl (make gpu-binaries)
MODE=${1:-eager} TAG=${2:-}
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"
f=$OUT/probe-$MODE$TAG.txt
C=.carry
args=(); [ "$MODE" = graph ] && args=(--cuda-graph)
mono() { python3 -c 'import time; print(time.monotonic_ns())'; }
trace() { $C/gpreemptctl trace requests --pid $P --duration 8s --interval 1s; }
python3 -u bench/pytorch/be_train.py --duration 120s --device 0 --out /tmp/be.json > /tmp/be.out 2>&1 &
B=$!
for i in $(seq 90); do grep -q READY /tmp/be.out && break; sleep 1; done
kill -STOP $B; sleep 1 # its queued iterations drain
python3 -u bench/pytorch/lc_infer.py "${args[@]}" --period 20ms --requests 1800 --warmup 50 --out /tmp/lc-$MODE.json > /tmp/lc-$MODE.out 2>&1 &
P=$!
for i in $(seq 90); do grep -q READY /tmp/lc-$MODE.out && break; sleep 1; done
echo "===== $MODE alone" > "$f"
a0=$(mono); trace >> "$f" 2>&1; a1=$(mono)
kill -CONT $B; sleep 1
echo "===== $MODE beside resnet50 training" >> "$f"
b0=$(mono); trace >> "$f" 2>&1; b1=$(mono)
wait $P
kill -CONT $B 2>/dev/null; kill $B 2>/dev/null; wait $B 2>/dev/null
python3 - "$f" /tmp/lc-$MODE.json $a0 $a1 $b0 $b1 <<'PY' | tee -a "$f"
import json, re, sys, statistics as st
f, res = sys.argv[1], sys.argv[2]
a0, a1, b0, b1 = map(int, sys.argv[3:])
text = open(f).read()
traced = [float(m) for m in re.findall(r"^summary: .*?latency p50 (\d+)us", text, re.M)]
gaps = [re.findall(r"^interval \d+: .*quiet gap (\S+) \((learnt|not learnt yet)\)", part, re.M) for part in text.split("=====")[1:]]
ss = json.load(open(res))["samples"]
for i, (name, lo, hi) in enumerate((("alone", a0, a1), ("beside BE", b0, b1))):
    v = [s["latency_ns"] / 1e3 for s in ss if lo <= s["arrival_mono_ns"] and s["arrival_mono_ns"] + s["latency_ns"] <= hi]
    learnt = sum(1 for _, l in gaps[i] if l == "learnt") if i < len(gaps) else 0
    t = traced[i] if i < len(traced) else float("nan")
    app = st.median(v) if v else float("nan")
    print(f"RESULT {f.rsplit('/', 1)[-1]} {name}: traced p50 {t:.0f}us, app p50 {app:.0f}us ({len(v)} requests), "
          f"traced/app {t / app:.2f}x; gap learnt in {learnt} of {len(gaps[i]) if i < len(gaps) else 0} intervals")
PY
