#!/usr/bin/env bash
# Does BE's work slow an LC's CPU? lc_decode.py's CPU meter (a fixed loop, in its thread's CPU time)
# runs on CPU $LC (2) every 50 ms while be_gemm.py (8192 fp16 products, 8 s duty) runs pinned near (the
# lanes' BE CPUs, 4,5) and then far; per phase, the meter's median in BE's working halves over its
# idle ones (100 ms from either edge left out). With the CPUs' SMT siblings, and per phase which
# CPUs took the GPU's interrupts (irq_delta.py). $OUT/cpu-beside-be.txt.
#   bash scripts/probe/cpu-beside-be.sh [SECONDS_A_PHASE] [NEAR] [FAR]    (root, GPU machine)
set -u
S=${1:-70}; NEAR=${2:-4,5}; FAR=${3:-12,13}; LC=${LC:-2}
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"; T=$OUT/cpu-beside-be.txt
BE=${BE:-python3 bench/pytorch/be_gemm.py --n 8192 --queue 2 --duty-period 8s --duration ${S}s --out /dev/null}
for c in $LC ${NEAR//,/ } ${FAR//,/ }; do
  echo "cpu$c siblings $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null) core $(cat /sys/devices/system/cpu/cpu$c/topology/core_id 2>/dev/null)"
done > "$T"
for phase in near far; do
  cpus=$NEAR; [ $phase = far ] && cpus=$FAR
  taskset -c "$LC" python3 -c '
import time
while True:  # lc_decode.py CPU_METER_LOOP, its cpu_meter()
    t, x = time.thread_time_ns(), 0
    for i in range(50000):
        x += i
    print(time.monotonic_ns(), time.thread_time_ns() - t, flush=True); time.sleep(0.05)' > "/tmp/meter-$phase.log" &
  m=$!; trap 'kill $m 2>/dev/null' EXIT
  taskset -c "$cpus" $BE > "/tmp/be-$phase.log" 2>&1 &
  b=$!; until grep -q READY "/tmp/be-$phase.log" || ! kill -0 $b 2>/dev/null; do sleep 0.1; done
  ready=$(python3 -c 'import time; print(time.monotonic_ns())') # samples from here on: BE set up
  cat /proc/interrupts > "/tmp/irq-$phase-0.txt"; irq0=$(cut -d' ' -f1 /proc/uptime) # BE's start-up left out
  wait $b; cat /proc/interrupts > "/tmp/irq-$phase-1.txt"; irq1=$(cut -d' ' -f1 /proc/uptime)
  kill $m; wait $m 2>/dev/null
  python3 - "$phase" "$cpus" "/tmp/meter-$phase.log" "$ready" <<'PY' >> "$T"
import statistics as st, sys
half, guard, v = 4e9, 1e8, ([], [])  # be_gemm.py works while CLOCK_MONOTONIC / half is even
for line in open(sys.argv[3]):
    t, d = map(int, line.split())
    k = int(t // half)
    if t >= int(sys.argv[4]) and guard <= t - k * half <= half - guard:
        v[k % 2].append(d)
if v[0] and v[1]:
    print(f"{sys.argv[1]} (BE on CPUs {sys.argv[2]}): meter with BE / alone {st.median(v[0]) / st.median(v[1]):.3f}, "
          f"medians {st.median(v[0]) / 1e6:.3f} / {st.median(v[1]) / 1e6:.3f} ms over {len(v[0])} / {len(v[1])} samples")
PY
  python3 "$(dirname "${BASH_SOURCE[0]}")/irq_delta.py" "/tmp/irq-$phase-0.txt" "/tmp/irq-$phase-1.txt" --cpus "$LC" --seconds "$(awk "BEGIN { print $irq1 - $irq0 }")" >> "$T"
done
cat "$T"
