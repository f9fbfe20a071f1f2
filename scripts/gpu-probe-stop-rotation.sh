#!/usr/bin/env bash
# Two BE processes taking turns by their CPU side (SIGSTOP / SIGCONT)
# instead of sharing the GPU by timeslice, beside two LCs with hints that
# are clients of one MPS server (GPU machine, as root, binaries of
# `make gpu-binaries` in .carry/). Must-show 4's lc2 p99 is lost waiting
# out two BE groups' turns; with one BE runnable at a time an LC's spinner
# waits out one.
#
# Two bench runs, back to back, each with its own standalone run:
#   fixed:    standalone, two LCs alone, two BE at 110us:50us (weights
#             3:1 at a 50 us unit, SLO mode's choice), be-only
#   rotation: standalone, two BE both at 50us, a loop that keeps one of the
#             two BE workers stopped (the first for ON, the second for OFF:
#             default 0.75 s and 0.25 s, 3:1 in time), be-only
#
#   scripts/gpu-probe-stop-rotation.sh            # results in $OUT
#   ON=0.75 OFF=0.25 REPS=2 DURATION=10s scripts/gpu-probe-stop-rotation.sh
set -uo pipefail
C=${C:-.carry}
OUT=${OUT:-/tmp/gpreempt-out}
W=${W:-/tmp/gpreempt-stop-rotation}
ON=${ON:-0.75}
OFF=${OFF:-0.25}
REPS=${REPS:-2}
DURATION=${DURATION:-10s}
rm -rf "$W"; mkdir -p "$W/pipe" "$W/log" "$OUT"
MPSENV=(CUDA_MPS_PIPE_DIRECTORY="$W/pipe" CUDA_MPS_LOG_DIRECTORY="$W/log")
env "${MPSENV[@]}" nvidia-cuda-mps-control -d || { echo "MPS control daemon did not start"; exit 2; }
trap 'echo quit | env "${MPSENV[@]}" nvidia-cuda-mps-control; sleep 1' EXIT

bes() { pgrep -f "gpreempt-bench be .*--out" | sort -n; }

rotate() {
  local p
  while true; do
    mapfile -t P < <(bes)
    if [ ${#P[@]} -ne 2 ]; then
      for p in "${P[@]}"; do kill -CONT "$p" 2> /dev/null; done
      sleep 0.05
      continue
    fi
    echo "$EPOCHREALTIME run ${P[0]} stop ${P[1]}"
    kill -CONT "${P[0]}"; kill -STOP "${P[1]}"; sleep "$ON"
    echo "$EPOCHREALTIME run ${P[1]} stop ${P[0]}"
    kill -CONT "${P[1]}"; kill -STOP "${P[0]}"; sleep "$OFF"
  done
}

bench() { # bench NAME SCENARIOS
  timeout --signal=INT 400 $C/gpreempt-bench run --gpreemptctl $C/gpreemptctl \
    --scenarios "$2" --prep 500us --hint-launcher poller --lc-calibrate-us 0 --lc-iters 2000 \
    --lc-env CUDA_MPS_PIPE_DIRECTORY="$W/pipe" --lc-env CUDA_MPS_LOG_DIRECTORY="$W/log" \
    --duration "$DURATION" --repeat "$REPS" --out "$W/$1" > "$W/$1.log" 2>&1
  echo "$1: gpreempt-bench rc=$?"
  cp "$W/$1/results.md" "$OUT/stop-rotation-$1-results.md" 2>/dev/null
}

nvidia-smi --query-gpu=name,clocks.sm,driver_version --format=csv > "$OUT/stop-rotation-machine.txt"
bench fixed standalone,prepreempt-multi-tenant:lc-only,prepreempt-multi-tenant:110us:50us,be-only
rotate > "$W/rotate.log" 2>&1 &
rpid=$!
bench rotation standalone,prepreempt-multi-tenant:50us:50us,be-only
kill $rpid; wait $rpid 2>/dev/null
for p in $(bes); do kill -CONT "$p"; done
{
  echo "ON=$ON OFF=$OFF REPS=$REPS DURATION=$DURATION"
  echo "rotations: $(grep -c ' run ' "$W/rotate.log")"
  for n in fixed rotation; do
    echo "== $n"
    grep -E "^\| (standalone|prepreempt-multi-tenant|be-only)" "$W/$n/results.md" | head -30
  done
} > "$OUT/stop-rotation-summary.txt"
cat "$OUT/stop-rotation-summary.txt"
tail -40 "$W/rotate.log" > "$OUT/stop-rotation-log-tail.txt"
