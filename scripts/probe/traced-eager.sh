#!/usr/bin/env bash
# The eager resnet50 LC every 20 ms: gpreemptctl's traced requests (quiet gap learnt?) against
# the app's own requests in the same spans, alone and beside resnet50 training.
set -u # as root on the GPU machine, from the repo root, with .carry/gpreemptctl (make gpu-binaries); results in $OUT
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"
C=.carry
mono() { python3 -c 'import time; print(time.monotonic_ns())'; }
python3 -u bench/pytorch/lc_infer.py --period 20ms --requests 2200 --warmup 50 --out /tmp/lce.json > /tmp/lce.out 2>&1 &
P=$!
for i in $(seq 90); do grep -q READY /tmp/lce.out && break; sleep 1; done
a0=$(mono); $C/gpreemptctl trace requests --pid $P --duration 8s > $OUT/probe-eager.txt 2>&1; a1=$(mono)
python3 -u bench/pytorch/be_train.py --duration 40s --device 0 --out /tmp/be.json > /tmp/be.out 2>&1 &
for i in $(seq 60); do grep -q READY /tmp/be.out && break; sleep 1; done
echo "===== beside resnet50 training" >> $OUT/probe-eager.txt
b0=$(mono); $C/gpreemptctl trace requests --pid $P --duration 8s >> $OUT/probe-eager.txt 2>&1; b1=$(mono)
wait $P
python3 - $a0 $a1 $b0 $b1 >> $OUT/probe-eager.txt <<'PY'
import json,sys,statistics as st
a0,a1,b0,b1=map(int,sys.argv[1:])
ss=json.load(open('/tmp/lce.json'))['samples']
for name,lo,hi in (("alone",a0,a1),("beside BE",b0,b1)):
    v=[s['latency_ns']/1e3 for s in ss if lo<=s['arrival_mono_ns'] and s['arrival_mono_ns']+s['latency_ns']<=hi]
    print(f"app {name}: {len(v)} requests, p50 {st.median(v):.0f}us" if v else f"app {name}: none")
PY
pkill -f be_train.py
