#!/usr/bin/env bash
# Why a traced LC's quiet gap is or is not learnt, and where a traced request's
# start and end lie against the app's own: `gpreemptctl trace requests --each -o json`
# (each request's start and end, each second's gap histogram) on a resnet50 LC every
# 20 ms, CUDA graph alone, then eager alone and beside resnet50 training (held
# stopped with SIGSTOP until then). Output: $OUT/gaps-{graph,eager}.jsonl and the
# app's own requests, $OUT/lc-{graph,eager}.json, and the LC's calls as gpreemptctl saw them,
# $OUT/calls-{graph-alone,eager-alone,eager-beside}.jsonl.gz (--record); RESULT lines match each traced request
# with the app's that ended within 2 ms of it: where the traced one starts and ends against
# the app's (its t0 before its first call, t1 after its synchronize returns).
#   bash scripts/probe/traced-gaps.sh
set -u # as root on the GPU machine, from the repo root, with .carry/gpreemptctl
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"
C=${C:-.carry} # another build: C=.carry-b
ready() { for i in $(seq 90); do grep -q READY "$1" && return; sleep 1; done; }
# trace PID DURATION NAME: its calls recorded too, to replay the request definition on in tests.
trace() { $C/gpreemptctl trace requests --pid $1 --duration $2 --interval 1s --each --json --record $OUT/calls-$3.jsonl.gz; }
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
  trace $P 5s $mode-alone >> $OUT/gaps-$mode.jsonl 2>&1
  if [ $mode = eager ]; then
    kill -CONT $B; sleep 1
    echo '{"type":"phase","phase":"beside"}' >> $OUT/gaps-$mode.jsonl
    trace $P 8s $mode-beside >> $OUT/gaps-$mode.jsonl 2>&1
  fi
  wait $P
done
kill -CONT $B 2>/dev/null; kill $B 2>/dev/null; wait $B 2>/dev/null
grep -h '"title"' $OUT/gaps-*.jsonl | python3 -c '
import json, sys
for l in sys.stdin:
    d = json.loads(l)
    print(d["title"], d["requests"], "p50", d["latency_us"].get("p50"), "gap", d["quiet_gap_us"], d["learnt"], [(round(g["low_us"]), round(g["count"], 1), round(g["cpu_work"], 1)) for g in d.get("gaps", [])])'
for mode in graph eager; do
  python3 - $OUT/gaps-$mode.jsonl $OUT/lc-$mode.json $mode <<'PY'
import bisect, json, statistics as st, sys
trace, app, mode = sys.argv[1:]
reqs, phase = [], None
for line in open(trace):
    if line.startswith("{"):
        d = json.loads(line)
        phase = d.get("phase", phase)
        if d["type"] == "request":
            reqs.append((phase, d))
spans, prev = [], -1
for s in json.load(open(app))["samples"]:
    end = max(s["arrival_mono_ns"], prev) + s["prep_ns"] + s["latency_ns"]
    prev = end
    spans.append((end - s["latency_ns"], end))
ends = [e for _, e in spans]
by = {}
for ph, r in reqs:
    i = bisect.bisect_left(ends, r["end_ns"])
    j = min((k for k in (i - 1, i) if 0 <= k < len(ends)), key=lambda k: abs(ends[k] - r["end_ns"]))
    t0, t1 = spans[j]
    if abs(t1 - r["end_ns"]) <= 2e6:
        by.setdefault(ph, []).append(((r["start_ns"] - t0) / 1e3, (r["end_ns"] - t1) / 1e3, r["latency_us"], (t1 - t0) / 1e3, r.get("first", "?")))
for ph, v in by.items():
    med = lambda k: st.median(x[k] for x in v)
    firsts = sorted({x[4] for x in v}, key=lambda f: -sum(x[4] == f for x in v))
    print(f"RESULT {mode} {ph}: {len(v)} requests, traced start {med(0):+.0f}us and end {med(1):+.0f}us from the app's (p50), "
          f"traced p50 {med(2):.0f}us, app p50 {med(3):.0f}us ({med(2) / med(3):.2f}x); first call " +
          ", ".join(f"{f} {sum(x[4] == f for x in v)}" for f in firsts))
PY
done
