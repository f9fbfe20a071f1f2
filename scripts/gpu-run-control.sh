#!/usr/bin/env bash
# Issue 2 on the GPU machine: discovery and control of a real CUDA process,
# the GPU tests and the per-control cost benchmarks. Run from the repo root
# with the binaries built by `make gpu-binaries` in .carry/; writes to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"
C=.carry
{
  date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  cat /proc/driver/nvidia/version | head -1
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

# A CUDA process that holds a context and waits (PyTorch, as a user's would).
python3 -c 'import sys, torch
x = torch.ones(1 << 20, device="cuda"); (x * 2).sum().item(); torch.cuda.synchronize()
print("READY", flush=True); sys.stdin.read()' < <(sleep 120) > /tmp/target.out &
TPID=$!
for i in $(seq 60); do grep -q READY /tmp/target.out 2>/dev/null && break; sleep 0.5; done
echo "target pid $TPID"
{
  echo '$ gpreemptctl ps'; time $C/gpreemptctl --log-level info ps
  echo '$ gpreemptctl -o json ps --pid $TPID --stats'; $C/gpreemptctl -o json ps --pid $TPID --stats
  echo '$ gpreemptctl class --pid $TPID be'; $C/gpreemptctl class --pid $TPID be
  echo '$ gpreemptctl class --pid $TPID --be-timeslice 1us be'; $C/gpreemptctl class --pid $TPID --be-timeslice 1us be
  echo '$ gpreemptctl class --pid $TPID lc'; $C/gpreemptctl class --pid $TPID lc
  echo '$ gpreemptctl set-timeslice --pid $TPID --compute-only 2ms'; $C/gpreemptctl set-timeslice --pid $TPID --compute-only 2ms
  echo '$ gpreemptctl get-timeslice --pid $TPID'; $C/gpreemptctl get-timeslice --pid $TPID
  echo '$ gpreemptctl preempt --pid $TPID --compute-only'; $C/gpreemptctl preempt --pid $TPID --compute-only
  echo '$ gpreemptctl suspend/resume'; $C/gpreemptctl suspend --pid $TPID && $C/gpreemptctl resume --pid $TPID
  echo '$ gpreemptctl devices'; $C/gpreemptctl devices
  echo '$ error cases'
  $C/gpreemptctl ps --pid 999999; echo "rc=$?"
  $C/gpreemptctl ps --pid $$; echo "rc=$?"
  $C/gpreemptctl set-timeslice --pid $TPID 10s; echo "rc=$?"
} > "$OUT/ctl.txt" 2>&1
cat "$OUT/ctl.txt"
kill $TPID 2>/dev/null; wait $TPID 2>/dev/null

# GPU tests and control-cost benchmarks.
(cd tsg && ../$C/tsg.test -test.v -test.run GPU -test.bench GPU -test.benchtime 200x) > "$OUT/tsg-gpu.txt" 2>&1
echo "tsg.test rc=$?" >> "$OUT/tsg-gpu.txt"
tail -40 "$OUT/tsg-gpu.txt"
for t in cuda kernels gpu; do
  [ -x $C/$t.test ] || continue
  (cd internal/$t && ../../$C/$t.test -test.v -test.run GPU) > "$OUT/$t-gpu.txt" 2>&1
  echo "$t.test rc=$?" | tee -a "$OUT/$t-gpu.txt"
done
