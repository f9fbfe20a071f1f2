#!/usr/bin/env bash
# An eager LC's own speed alone, against what the host and the GPU did meanwhile: the GPT-2-medium
# decode LC (16 new tokens every 800 ms) runs alone on CPUs 2,3 (as the bench pins it), while each
# second records every CPU's steal and busy time (/proc/stat), the LC's threads' run and run-queue
# time (/proc/PID/task/*/schedstat) and the GPU's SM clock and power, and CPU 6 times the loop the
# LC times on its own thread around each request (lc_decode.py's cpu_meter_ns) every 100 ms.
# Output under $OUT: lc-speed.json (the app's requests), lc-speed-host.log, lc-speed-meter.log,
# lc-speed.txt (the requests joined with them, and RESULT lines). Its samplers stay on CPUs 0,1.
#   bash scripts/probe/lc-speed.sh [REQUESTS]
set -u # as root on the GPU machine, from the repo root
source "$(dirname "${BASH_SOURCE[0]}")/../lib/daemon.sh" # wait_ready
N=${1:-100}
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"
# CPU 6 times lc_decode.py's loop every 100 ms: (CLOCK_MONOTONIC s, the loop's CPU time ms).
taskset -c 6 python3 -c '
import time
N = 50000  # lc_decode.py CPU_METER_LOOP (not imported: that imports torch)
def cpu_meter():
    t, x = time.thread_time_ns(), 0
    for i in range(N):
        x += i
    return time.thread_time_ns() - t
while True:
    t0 = time.monotonic_ns(); print(t0 / 1e9, cpu_meter() / 1e6, flush=True); time.sleep(0.1)' > "$OUT/lc-speed-meter.log" &
M=$!
trap 'kill $M ${P:-} 2>/dev/null' EXIT
taskset -c 2,3 python3 -u bench/pytorch/lc_decode.py --family gpt2 --prompt 64 --new-tokens 16 --period 800ms \
  --requests "$N" --out "$OUT/lc-speed.json" > /tmp/lc-speed.out 2>&1 &
P=$!
wait_ready /tmp/lc-speed.out $P 120
taskset -cp 0,1 $$ > /dev/null # this shell and its samplers
while kill -0 $P 2>/dev/null; do # on CPUs 0,1, as the lanes keep them
  { echo "T $(cut -d' ' -f1 /proc/uptime)"; grep '^cpu[0-9]' /proc/stat
    for t in /proc/$P/task/*; do echo "task ${t##*/} $(cat $t/comm 2>/dev/null | tr ' ' _) $(cat $t/schedstat 2>/dev/null)"; done
    echo "gpu $(nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw --format=csv,noheader,nounits)"
    grep -m1 MHz /proc/cpuinfo; } >> "$OUT/lc-speed-host.log"
  sleep 1
done
wait $P; kill $M 2>/dev/null
python3 - "$OUT" <<'PY' | tee "$OUT/lc-speed.txt"
import json, sys, statistics as st
out = sys.argv[1]
reqs = json.load(open(f"{out}/lc-speed.json"))["samples"]
# host samples: per second, each CPU's steal and busy jiffies, the LC's threads' run / wait ns
snaps, cur = [], None
for line in open(f"{out}/lc-speed-host.log"):
    f = line.split()
    if f[0] == "T":
        cur = {"t": float(f[1]), "cpu": {}, "task": {}, "gpu": None}; snaps.append(cur)
    elif f[0][:3] == "cpu" and f[0][3:].isdigit():
        v = list(map(int, f[1:]))
        cur["cpu"][f[0]] = (v[7] if len(v) > 7 else 0, sum(v))  # steal, all
    elif f[0] == "task" and len(f) >= 5:
        cur["task"][f[1]] = (int(f[3]), int(f[4]))
    elif f[0] == "gpu":
        cur["gpu"] = line.split(None, 1)[1].strip()
meter = [tuple(map(float, l.split())) for l in open(f"{out}/lc-speed-meter.log") if len(l.split()) == 2]
def around(t0, t1):
    s = [x for x in snaps if t0 - 1 <= x["t"] <= t1 + 1]
    return s[0], s[-1]
print("start_s latency_ms tpot_ms own_meter_ms cpu6_meter_ms steal_2,3_% wait_ms(LC threads) gpu")
lat_fast, lat_slow = [], []
for r in reqs:
    t0 = r["arrival_mono_ns"] / 1e9; t1 = t0 + r["latency_ns"] / 1e9
    m = [x[1] for x in meter if t0 - 0.2 <= x[0] <= t1]
    try:
        a, b = around(t0, t1)
    except IndexError:
        continue
    st23 = sum(b["cpu"][c][0] - a["cpu"][c][0] for c in ("cpu2", "cpu3"))
    tot23 = sum(b["cpu"][c][1] - a["cpu"][c][1] for c in ("cpu2", "cpu3")) or 1
    wait = sum(b["task"][k][1] - a["task"][k][1] for k in b["task"] if k in a["task"]) / 1e6
    print(f"{t0:8.1f} {r['latency_ns']/1e6:7.1f} {r['tpot_ns']/1e6:6.2f} {r.get('cpu_meter_ns', 0)/1e6:6.2f} {st.median(m) if m else float('nan'):6.1f} {100*st23/tot23:5.1f} {wait:7.1f} {b['gpu']}")
def corr(xs, ys):
    return st.correlation(xs, ys) if len(xs) > 2 else float("nan")
def q(xs):
    d = st.quantiles(xs, n=10)
    return f"{d[0]:.2f} / {st.median(xs):.2f} / {d[-1]:.2f}"
own = [r for r in reqs if r.get("cpu_meter_ns")]
lat, mt = [r["latency_ns"] / 1e6 for r in own], [r["cpu_meter_ns"] / 1e6 for r in own]
if len(own) > 2:
    print(f"RESULT {len(own)} requests: latency p10/p50/p90 {q(lat)} ms; the LC's own loop {q(mt)} ms; correlation {corr(lat, mt):.2f}")
six = []
for r in reqs:
    t0 = r["arrival_mono_ns"] / 1e9; t1 = t0 + r["latency_ns"] / 1e9
    m = [x[1] for x in meter if t0 <= x[0] <= t1]
    if m:
        six.append((r["latency_ns"] / 1e6, st.mean(m)))
span = [x[1] for x in meter if reqs[0]["arrival_mono_ns"] / 1e9 <= x[0] <= reqs[-1]["arrival_mono_ns"] / 1e9]
if len(six) > 2:
    print(f"RESULT CPU 6's loop over the requests {q(span)} ms; correlation with the LC's latency {corr(*zip(*six)):.2f} over {len(six)} requests")
PY
