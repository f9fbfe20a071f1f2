#!/usr/bin/env bash
# Why a traced LC's quiet gap is or is not learnt, and where a traced request's
# start and end lie against the app's own: `gpreemptctl trace requests --each -o json`
# (each request's start and end, each second's gap histogram) on a resnet50 LC every
# 20 ms, CUDA graph alone, then eager alone and beside resnet50 training (held
# stopped with SIGSTOP until then). Output: $OUT/gaps-{graph,eager}.jsonl and the
# app's own requests, $OUT/lc-{graph,eager}.json.
#   bash scripts/probe/traced-gaps.sh
set -u # as root on the GPU machine, from the repo root, with .carry/gpreemptctl
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"
C=.carry
ready() { for i in $(seq 90); do grep -q READY "$1" && return; sleep 1; done; }
trace() { $C/gpreemptctl trace requests --pid $1 --duration $2 --interval 1s --each --json; }
python3 -u bench/pytorch/be_train.py --duration 120s --device 0 --out /tmp/be.json > /tmp/be.out 2>&1 &
B=$!
ready /tmp/be.out
kill -STOP $B; sleep 1 # its queued iterations drain
for mode in graph eager; do
  args=(); [ $mode = graph ] && args=(--cuda-graph)
  n=400; [ $mode = eager ] && n=1000
  python3 -u bench/pytorch/lc_infer.py "${args[@]}" --period 20ms --requests $n --warmup 50 --out $OUT/lc-$mode.json > /tmp/lc-$mode.out 2>&1 &
  P=$!
  ready /tmp/lc-$mode.out
  echo '{"type":"phase","phase":"alone"}' > $OUT/gaps-$mode.jsonl
  trace $P 5s >> $OUT/gaps-$mode.jsonl 2>&1
  if [ $mode = eager ]; then
    kill -CONT $B; sleep 1
    echo '{"type":"phase","phase":"beside"}' >> $OUT/gaps-$mode.jsonl
    trace $P 8s >> $OUT/gaps-$mode.jsonl 2>&1
  fi
  wait $P
done
kill -CONT $B 2>/dev/null; kill $B 2>/dev/null; wait $B 2>/dev/null
grep -h '"title"' $OUT/gaps-*.jsonl | python3 -c '
import json, sys
for l in sys.stdin:
    d = json.loads(l)
    print(d["title"], d["requests"], "p50", d["latency_us"].get("p50"), "gap", d["quiet_gap_us"], d["learnt"], [(round(g["low_us"]), round(g["count"], 1), round(g["cpu_work"], 1)) for g in d.get("gaps", [])])'
