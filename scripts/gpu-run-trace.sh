#!/usr/bin/env bash
# Issue 5 on the GPU machine (docs/TRACING.md, "On the H100"): trace tsg on a
# new CUDA process, trace rpc histograms of gpreemptctl's controls, LC latency
# without and with `trace requests`, and the per-ioctl tracing overhead.
# Run as root from the repo root with `make trace-gpu-binaries` in .carry/.
set -uo pipefail
OUT=${OUT:-/tmp/gpreempt-trace}; mkdir -p "$OUT"
C=.carry
# hold N: a PyTorch process holding a CUDA context for N seconds; sets TPID.
hold() {
  rm -f /tmp/target.out
  python3 -c 'import sys, torch
x = torch.ones(1 << 20, device="cuda"); (x * 2).sum().item(); torch.cuda.synchronize()
print("READY", flush=True); sys.stdin.read()' < <(sleep "$1") > /tmp/target.out 2>&1 & TPID=$!
  until grep -q READY /tmp/target.out 2>/dev/null; do sleep 0.2; done
}

lib=$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')
{ echo "libcuda: $lib"; (nm -D --defined-only "$lib" 2>/dev/null || readelf -Ws --dyn-syms "$lib" 2>/dev/null) |
  grep -E ' (cuLaunchKernel|cuLaunchKernelEx|cuGraphLaunch|cuStreamSynchronize|cuEventSynchronize|cuCtxSynchronize)(_ptsz|_ptds|_v2)?( |$)'
} > "$OUT/libcuda-symbols.txt" 2>&1

# 1. trace tsg on a new CUDA process, then gpreemptctl's changes and a preemption.
$C/gpreemptctl trace tsg --duration 20s > "$OUT/trace-tsg.txt" 2>&1 & TR=$!; sleep 1
hold 12
echo "target pid $TPID" >> "$OUT/steps.txt"
$C/gpreemptctl class --pid $TPID be >> "$OUT/steps.txt" 2>&1
$C/gpreemptctl preempt --pid $TPID --compute-only >> "$OUT/steps.txt" 2>&1
wait $TPID; wait $TR; echo "trace tsg rc=$?" >> "$OUT/steps.txt"

# 2. trace rpc: SET_TIMESLICE and PREEMPT latency histograms.
$C/gpreemptctl trace rpc --duration 30s > "$OUT/trace-rpc.txt" 2>&1 & TR=$!; sleep 1
hold 27
for i in $(seq 50); do
  $C/gpreemptctl set-timeslice --pid $TPID --compute-only 1ms > /dev/null
  $C/gpreemptctl preempt --pid $TPID --compute-only > /dev/null
done
kill $TPID; wait $TR; echo "trace rpc rc=$?" >> "$OUT/steps.txt"

# 3 and 4. LC latency without tracing, then with `trace requests` on the LC process.
$C/gpreempt-bench lc --requests 2000 --out /tmp/lc-untraced.json > /tmp/lc-untraced.out 2>&1
rm -f /tmp/lc.go; mkfifo /tmp/lc.go
$C/gpreempt-bench lc --requests 2000 --wait-go --out /tmp/lc-traced.json < /tmp/lc.go > /tmp/lc.out 2>&1 & LC=$!
exec 3>/tmp/lc.go
until grep -q 'READY pid=' /tmp/lc.out; do sleep 0.2; done
P=$(sed -n 's/.*READY pid=\([0-9]*\).*/\1/p' /tmp/lc.out)
$C/gpreemptctl trace requests --pid $P --interval 5s > "$OUT/trace-requests.txt" 2>&1 & TR=$!; sleep 2
echo go >&3; wait $LC; exec 3>&-; kill -INT $TR; wait $TR; echo "trace requests rc=$?" >> "$OUT/steps.txt"
rm -f /tmp/lc.go
python3 - > "$OUT/lc-traced-vs-untraced.txt" <<'PY'
import json
def q(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))] / 1e3
for name in ("untraced", "traced"):
    s = json.load(open(f"/tmp/lc-{name}.json"))["samples"]
    lat = [x["latency_ns"] for x in s]
    print(f"{name:9s} n={len(lat)} latency p50 {q(lat, .5):.1f} us  p90 {q(lat, .9):.1f} us  p99 {q(lat, .99):.1f} us")
PY

# 5. Overhead per traced RM ioctl (and per uprobe where gcc exists).
(cd internal/trace && ../../$C/trace.test -test.run '^$' -test.bench IoctlOverhead \
  -test.benchtime 400000x -test.count 8) > "$OUT/trace-overhead.txt" 2>&1
command -v gcc > /dev/null && (cd internal/trace && ../../$C/trace.test -test.run '^$' \
  -test.bench UprobeOverhead -test.benchtime 20000x -test.count 5) >> "$OUT/trace-overhead.txt" 2>&1
cat "$OUT/steps.txt" "$OUT/lc-traced-vs-untraced.txt"
