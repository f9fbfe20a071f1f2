#!/usr/bin/env bash
# Two LCs with hints as MPS clients (one channel group, the MPS server's)
# against the same two LCs as separate processes (a channel group each), with
# and without a fixed-work BE classed be at $BE_TS, on the GPU machine, as
# root, from the repo root with the binaries of `make gpu-binaries` in
# .carry/. Each LC is the synthetic one of must-show 4 (500 us preparation,
# one 20 us kernel on every SM, hints, poller launcher); the BE runs outside
# MPS. Cases, interleaved, $REPS times:
#   alone      one LC, its own process (the reference: "one LC alone")
#   alone-mps  one LC, an MPS client
#   two        two LCs, each its own process, classed lc
#   two-mps    two LCs, MPS clients; the MPS server classed lc
#   two-be     two + the BE classed be
#   two-mps-be two-mps + the BE classed be
#   be-only    the BE alone (its rate over the LCs' window, for BE's share)
# Per case: each LC's p50/p99 and the BE's kernels/s over the LCs' common
# measurement window, in $OUT/mps.txt (with `gpreemptctl ps` under MPS:
# whose channel groups there are). The MPS control daemon is started with its
# own pipe directory (only the LCs are given it) and quit at the end.
set -uo pipefail
OUT=${OUT:-/tmp/gpreempt-out}
W=${W:-/tmp/gpreempt-mps}
C=${C:-.carry}
REPS=${REPS:-3}
REQUESTS=${REQUESTS:-2000}
BE_TS=${BE_TS:-1us}
CASES=${CASES:-alone alone-mps two two-mps two-be two-mps-be be-only}
rm -rf "$W"; mkdir -p "$W/pipe" "$W/log" "$OUT"
f="$OUT/mps.txt"
nvidia-smi --query-gpu=name,clocks.sm,driver_version --format=csv > "$f"
if ! command -v nvidia-cuda-mps-control > /dev/null; then
  echo "no nvidia-cuda-mps-control on this machine" | tee -a "$f"; exit 2
fi
MPSENV=(CUDA_MPS_PIPE_DIRECTORY="$W/pipe" CUDA_MPS_LOG_DIRECTORY="$W/log")
env "${MPSENV[@]}" nvidia-cuda-mps-control -d || { echo "MPS control daemon did not start" | tee -a "$f"; exit 2; }
trap 'echo quit | env "${MPSENV[@]}" nvidia-cuda-mps-control; sleep 1' EXIT
LCARGS=(--prep 500us --hints --hint-launcher poller --kernel-iters 2000 --period 3500us --requests "$REQUESTS" --warmup 100 --wait-go)

# lc NAME MPS(0|1): starts an LC worker waiting for $W/go; its pid in $W/NAME.pid.
lc() {
  local e=()
  [ "$2" = 1 ] && e=("${MPSENV[@]}")
  ( while [ ! -e "$W/go" ]; do sleep 0.01; done; echo go ) |
    env "${e[@]}" $C/gpreempt-bench lc "${LCARGS[@]}" --out "$W/$1.json" > "$W/$1.out" 2> "$W/$1.err" &
  echo $! > "$W/$1.pid"
}
ready() { # ready FILE...: wait until each prints READY (30 s at most)
  for x in "$@"; do
    for i in $(seq 300); do grep -q READY "$W/$x.out" 2>/dev/null && break; sleep 0.1; done
    grep -q READY "$W/$x.out" || { echo "$x not READY: $(tail -3 "$W/$x.err")"; return 1; }
  done
}
pidof_ready() { sed -n 's/.*READY pid=\([0-9]*\).*/\1/p' "$W/$1.out" | head -1; }

for rep in $(seq "$REPS"); do
  for c in $CASES; do
    rm -f "$W/go" "$W"/lc*.json "$W"/lc*.out "$W"/be.json "$W"/be.out
    lcs=()
    mps=0; case $c in *mps*) mps=1;; esac
    case $c in alone*) lcs=(lc1);; two*) lcs=(lc1 lc2);; esac
    bepid=
    if [[ $c == *be* ]]; then
      $C/gpreempt-bench be --duration "$((REQUESTS * 35 / 10000 + 30))s" --out "$W/be.json" > "$W/be.out" 2> "$W/be.err" &
      bepid=$!
      for i in $(seq 300); do grep -q READY "$W/be.out" 2>/dev/null && break; sleep 0.1; done
      $C/gpreemptctl class --pid "$(pidof_ready be)" --be-timeslice "$BE_TS" be >> "$W/class.log" 2>&1 || echo "rep $rep $c: BE not classed" >> "$f"
    fi
    for l in "${lcs[@]}"; do lc "$l" "$mps"; done
    ready "${lcs[@]}" >> "$f" || true
    if [[ $c == two* ]]; then
      if [ "$mps" = 1 ]; then
        srv=$(echo get_server_list | env "${MPSENV[@]}" nvidia-cuda-mps-control | head -1)
        echo "rep $rep $c: MPS server pid ${srv:-none}" >> "$W/class.log"
        $C/gpreemptctl class --pid "$srv" lc >> "$W/class.log" 2>&1 || echo "rep $rep $c: MPS server $srv not classed" >> "$f"
      else
        for l in "${lcs[@]}"; do $C/gpreemptctl class --pid "$(pidof_ready $l)" lc >> "$W/class.log" 2>&1 || echo "rep $rep $c: $l not classed" >> "$f"; done
      fi
    fi
    if [ "$rep" = 1 ] && [ "$c" = two-mps-be ]; then
      { echo "== gpreemptctl ps, rep 1, $c"; $C/gpreemptctl ps; } >> "$f" 2>&1
    fi
    if [ "$c" = be-only ]; then
      sleep $((REQUESTS * 35 / 10000 + 2))
      kill -TERM $bepid; wait $bepid
      python3 - "$W/be.json" "$rep" >> "$f" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
t = b["completions_mono_ns"]
mid = t[len(t) // 4:3 * len(t) // 4]  # the middle half: steady
print(f"rep {sys.argv[2]} be-only: BE {(len(mid) - 1) / ((mid[-1] - mid[0]) / 1e9):.1f} kernels/s")
PY
      continue
    fi
    touch "$W/go"
    ( sleep 3; nvidia-smi --query-gpu=clocks.sm --format=csv,noheader > "$W/clock" ) &
    for l in "${lcs[@]}"; do wait "$(cat "$W/$l.pid")"; done
    [ -n "$bepid" ] && { kill -TERM $bepid; wait $bepid; }
    wait $! 2>/dev/null
    echo "rep $rep $c: SM clock 3 s into the measurement: $(cat "$W/clock" 2>/dev/null)" >> "$f"
    python3 - "$W" "$rep" "$c" "${lcs[@]}" >> "$f" <<'PY'
import json, os, sys
w, rep, case, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
lcs = [json.load(open(os.path.join(w, n + ".json"))) for n in names]
start = max(l["measure_start_mono_ns"] for l in lcs)
end = min(l["measure_end_mono_ns"] for l in lcs)
def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(p * (len(xs) - 1) + 0.5)))]
parts = []
for n, l in zip(names, lcs):
    lat = [s["latency_ns"] / 1e3 for s in l["samples"]]
    parts.append(f"{n} p50 {q(lat, .5):.1f} p99 {q(lat, .99):.1f} us (n={len(lat)})")
be = os.path.join(w, "be.json")
if "be" in case.split("-") and os.path.exists(be):
    t = json.load(open(be))["completions_mono_ns"]
    n = sum(1 for x in t if start < x <= end)
    parts.append(f"BE {n / ((end - start) / 1e9):.1f} kernels/s over the LCs' common window")
print(f"rep {rep} {case}: " + "; ".join(parts) + f" (common window {(end - start) / 1e9:.1f} s)")
PY
  done
done
cp "$W/class.log" "$OUT/" 2>/dev/null
cat "$f"
