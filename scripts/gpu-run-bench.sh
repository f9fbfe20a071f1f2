#!/usr/bin/env bash
# Benchmarks with repetitions on the GPU machine (as root), from the binaries
# `make gpu-binaries` put in .carry/. Usage:
#   scripts/gpu-run-bench.sh RUN...     RUN: a name from the case below
# Each run's results go to $RUNS/<run> (default /tmp/gb); every results.md is
# appended to $OUT/summary.md, and results.json/.md and the PNGs are copied to
# $OUT/<run>/. `compare` compares the `matrix` run with the one-run result of
# the same command, $BASELINE (default docs/results/prepreempt-A-poller-20s.json.gz,
# written before repetitions existed; raw results are not tracked, so it must
# be a local copy), and `compare2` two matrix runs (run `matrix` and `matrix2`
# first).
set -uo pipefail
OUT=${OUT:-/tmp/gpreempt-out}; RUNS=${RUNS:-/tmp/gb}; mkdir -p "$OUT" "$RUNS"
C=$PWD/.carry
export GPREEMPT_LIB=$C/libgpreempt.so
B=$C/gpreempt-bench
# The synthetic pre-preemption matrix: 5000 requests (17.5 s) per run, the
# floor that gives p99 50 requests above it; 5 repetitions, about 7 minutes.
matrix=(--gpreemptctl "$C/gpreemptctl" --scenarios standalone,be-1us,prepreempt-be-1us,be-only
        --prep 500us --hint-launcher poller --lc-calibrate-us 0 --lc-iters 2000 --duration 17.5s --repeat "${REPEAT:-5}")
# The eager (launch-bound) PyTorch LC: 400 requests a run (20 ms each), so
# p99 is flagged as resting on few requests; about 3 minutes.
eager=(--gpreemptctl "$C/gpreemptctl" --scenarios pytorch-eager-standalone,pytorch-eager-be-1ms,pytorch-eager-be-1us,pytorch-eager-be-only
       --duration 8s --repeat "${EAGER_REPEAT:-2}")
run() { # name args...
  local name=$1; shift
  echo "== $name: gpreempt-bench $*" | tee -a "$OUT/summary.md"
  local s; s=$(date +%s)
  "$B" "$@" > "$RUNS/$name.log" 2>&1
  echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$OUT/summary.md"
}
for name in "$@"; do
  case $name in
    matrix|matrix2) run "$name" run "${matrix[@]}" --out "$RUNS/$name" ;;
    eager)   run eager run "${eager[@]}" --out "$RUNS/eager" ;;
    multi)   run multi run --gpreemptctl "$C/gpreemptctl" --scenarios standalone,multi-tenant,be-ratio:be:3:be:1,be-only \
               --lc-calibrate-us 0 --lc-iters 2000 --duration 17.5s --repeat "${REPEAT:-3}" --out "$RUNS/multi" ;;
    sweep)   run sweep run --gpreemptctl "$C/gpreemptctl" \
               --scenarios standalone,be-1us,standalone@x2,be-1us@x2,standalone@x4,be-1us@x4,be-only \
               --lc-calibrate-us 0 --lc-iters 2000 --repeat "${REPEAT:-3}" --out "$RUNS/sweep" ;;
    soak)    run soak run --gpreemptctl "$C/gpreemptctl" --scenarios standalone,prepreempt-be-1us \
               --prep 500us --hint-launcher poller --lc-calibrate-us 0 --lc-iters 2000 --soak "${SOAK:-3m}" --out "$RUNS/soak" ;;
    compare) base=${BASELINE:-docs/results/prepreempt-A-poller-20s.json.gz}
             [ -e "$base" ] || { echo "compare: no $base (raw results are not tracked; set BASELINE to an earlier run's results.json)" | tee -a "$OUT/summary.md"; continue; }
             run compare compare "$base" "$RUNS/matrix/results.json"
             cat "$RUNS/compare.log" >> "$OUT/summary.md"; continue ;;
    compare2) run compare2 compare "$RUNS/matrix/results.json" "$RUNS/matrix2/results.json"
             cat "$RUNS/compare2.log" >> "$OUT/summary.md"; continue ;;
    *) echo "unknown run $name" >&2; exit 2 ;;
  esac
  mkdir -p "$OUT/$name"
  cp "$RUNS/$name"/results.{json,md} "$RUNS/$name"/*.png "$OUT/$name/" 2>/dev/null
  cat "$RUNS/$name/results.md" >> "$OUT/summary.md" 2>/dev/null || tail -20 "$RUNS/$name.log" >> "$OUT/summary.md"
done
