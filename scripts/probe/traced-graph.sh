#!/usr/bin/env bash
# Where the graph LC's request begins: the app's own span against traced requests that start at
# the first kernel/graph launch, and at the defaults (the first launch, input copy or event
# record), over the same spans.
set -u # as root on the GPU machine, from the repo root, with .carry/gpreemptctl (make gpu-binaries); results in $OUT
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"
C=.carry
mono() { python3 -c 'import time; print(time.monotonic_ns())'; }
python3 -u bench/pytorch/lc_infer.py --cuda-graph --period 20ms --requests 1200 --warmup 50 --out /tmp/lcg.json > /tmp/lcg.out 2>&1 &
P=$!
for i in $(seq 90); do grep -q READY /tmp/lcg.out && break; sleep 1; done
sleep 1
a0=$(mono); $C/gpreemptctl trace requests --pid $P --duration 7s --launch-symbols cuGraphLaunch,cuGraphLaunch_ptsz,cuLaunchKernel,cuLaunchKernel_ptsz > $OUT/probe-graph.txt 2>&1; a1=$(mono)
echo "===== the default symbols: launches, input copies and event records" >> $OUT/probe-graph.txt
b0=$(mono); $C/gpreemptctl trace requests --pid $P --duration 7s >> $OUT/probe-graph.txt 2>&1; b1=$(mono)
wait $P
python3 - $a0 $a1 $b0 $b1 >> $OUT/probe-graph.txt <<'PY'
import json, sys, statistics as st
a0, a1, b0, b1 = map(int, sys.argv[1:])
ss = json.load(open('/tmp/lcg.json'))['samples']
for name, lo, hi in (("kernel launches", a0, a1), ("defaults", b0, b1)):
    v = [s for s in ss if lo <= s['arrival_mono_ns'] and s['arrival_mono_ns'] + s['latency_ns'] <= hi]
    if v:
        print(f"app over the {name} trace: {len(v)} requests, p50 {st.median(x['latency_ns'] for x in v) / 1e3:.0f}us, "
              f"issue p50 {st.median(x['launch_call_ns'] for x in v) / 1e3:.0f}us")
PY
