#!/usr/bin/env bash
# How fast the SM clock comes back once a power-capped BE is stopped
# (docs/GATE.md, "Physical limits"): be_gemm.py saturates GPU 0, then is
# held with SIGSTOP for HOLD_MS and resumed for RUN_MS, CYCLES times, the
# gate's pattern for an LC request every HOLD_MS+RUN_MS; nvidia-smi samples
# the SM clock, power and throttle reasons every 10 ms. Reads only: no
# clock, power or mode is changed. Prints the median clock by time since
# each stop, and what a clock-bound probe (ten 2048^3 fp16 products,
# timed every ~5 ms by a second process) took then: NVML's clock may be
# reported late, the probe's time is the clock the LC gets. As root or the
# GPU's user, from the repo root.
set -euo pipefail
OUT=${OUT:-/tmp/clock-recovery}; mkdir -p "$OUT"
HOLD_MS=${HOLD_MS:-400}; RUN_MS=${RUN_MS:-600}; CYCLES=${CYCLES:-12}; N=${N:-8192}
# BE and probe outlive the cycles; they are stopped when the cycles end.
LIFE=$(( 20 + CYCLES * (HOLD_MS + RUN_MS) / 1000 ))
python3 bench/pytorch/be_gemm.py --n "$N" --duration "${LIFE}s" > "$OUT/be.json" 2> "$OUT/be.err" &
BE=$!
nvidia-smi -i 0 --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv,noheader,nounits -lms 10 > "$OUT/smi.csv" &
SMI=$!
trap 'kill $SMI 2>/dev/null; kill -CONT $BE 2>/dev/null; kill $BE 2>/dev/null' EXIT
python3 - "$OUT/probe.txt" "$LIFE" <<'PY' &
import sys, time, torch
a = torch.randn(2048, 2048, device="cuda:0", dtype=torch.float16)
end = time.time() + float(sys.argv[2])
with open(sys.argv[1], "w") as f:
    while time.time() < end:
        t0 = time.time()
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
        f.write(f"{t0:.6f} {(time.time() - t0) * 1e3:.3f}\n")
        time.sleep(0.005)
PY
PROBE=$!
sleep 8
: > "$OUT/events.txt"
for _ in $(seq "$CYCLES"); do
  kill -STOP $BE; echo "stop $(date +%s.%N)" >> "$OUT/events.txt"
  sleep "$(printf %d.%03d $((HOLD_MS / 1000)) $((HOLD_MS % 1000)))"
  kill -CONT $BE; echo "cont $(date +%s.%N)" >> "$OUT/events.txt"
  sleep "$(printf %d.%03d $((RUN_MS / 1000)) $((RUN_MS % 1000)))"
done
kill $SMI $PROBE 2>/dev/null || true; kill $BE 2>/dev/null || true; wait $BE 2>/dev/null || true
trap - EXIT
python3 - "$OUT" "$HOLD_MS" <<'PY'
import sys, datetime, statistics as st
out, hold = sys.argv[1], int(sys.argv[2])
smp = []
for line in open(f"{out}/smi.csv"):
    f = [x.strip() for x in line.split(",")]
    try:
        t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()  # nvidia-smi writes local time
        smp.append((t, float(f[1]), float(f[2]), f[3]))
    except (ValueError, IndexError):
        pass
ev = [(k, float(t)) for k, t in (l.split() for l in open(f"{out}/events.txt"))]
stops = [t for k, t in ev if k == "stop"]
pr = [tuple(map(float, l.split())) for l in open(f"{out}/probe.txt") if len(l.split()) == 2]
print(f"{len(smp)} samples, {len(pr)} probes, {len(stops)} stops; hold {hold} ms")
print("ms after stop | SM clock MHz (median over stops) | power W | samples | probe ms (median) | probes")
for lo in range(-100, hold + 200, 25):
    c, p = [], []
    for s in stops:
        for t, mhz, w, _ in smp:
            if lo <= (t - s) * 1000 < lo + 25:
                c.append(mhz); p.append(w)
    q = [d for s in stops for t, d in pr if lo <= (t - s) * 1000 < lo + 25]
    if c:
        print(f"{lo:5d}-{lo+25:<5d} | {st.median(c):6.0f} | {st.median(p):6.0f} | {len(c)} | {st.median(q) if q else float('nan'):7.3f} | {len(q)}")
PY
