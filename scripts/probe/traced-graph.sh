#!/usr/bin/env bash
# Where the graph LC's request begins: the app's own span against traced requests that start at
# the first kernel/graph launch, and at the defaults (the first launch, input copy or event record).
set -u # as root on the GPU machine, from the repo root, with .carry/gpreemptctl (make gpu-binaries); results in $OUT
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"
C=.carry
python3 -u bench/pytorch/lc_infer.py --cuda-graph --period 20ms --requests 1200 --warmup 50 --out /tmp/lcg.json > /tmp/lcg.out 2>&1 &
P=$!
for i in $(seq 90); do grep -q READY /tmp/lcg.out && break; sleep 1; done
sleep 1
$C/gpreemptctl trace requests --pid $P --duration 7s --launch-symbols cuGraphLaunch,cuGraphLaunch_ptsz,cuLaunchKernel,cuLaunchKernel_ptsz > $OUT/probe-graph.txt 2>&1
echo "===== the default symbols: launches, input copies and event records" >> $OUT/probe-graph.txt
$C/gpreemptctl trace requests --pid $P --duration 7s >> $OUT/probe-graph.txt 2>&1
wait $P
python3 - >> $OUT/probe-graph.txt <<'PY'
import json,statistics as st
d=json.load(open('/tmp/lcg.json'))
ss=d.get('samples') or d.get('requests') or []
def p50(k): v=[s[k] for s in ss if k in s]; return st.median(v)/1e3 if v else None
print("app requests", len(ss), "keys", sorted(ss[0].keys()) if ss else None)
for k in ("latency_ns","launch_call_ns","gpu_ns","cpu_ns"):
    print(k, "p50 us", p50(k))
PY
tail -3 /tmp/lcg.out >> $OUT/probe-graph.txt
