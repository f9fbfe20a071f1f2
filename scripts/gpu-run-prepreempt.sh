#!/usr/bin/env bash
# Issue 4 on the GPU machine: pre-preemption runs of docs/PREPREEMPT.md, from
# the binaries `make gpu-binaries` put in .carry/. Usage:
#   [DURATION=20s] scripts/gpu-run-prepreempt.sh RUN...   RUN: a name from the case below
# Each run's results go to /tmp/pp/<run>; results.md files are concatenated
# into $OUT/summary.md and everything is packed into $OUT/pp-runs.tar.gz.
set -uo pipefail
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT" /tmp/pp
C=$PWD/.carry
export GPREEMPT_LIB=$C/libgpreempt.so
common=(--gpreemptctl "$C/gpreemptctl" --lc-calibrate-us 0 --lc-iters 2000 --duration "${DURATION:-6s}")
fixed=(--scenarios standalone,be-1us,prepreempt-be-1us,be-only --prep 500us)
uniform=(--scenarios standalone,be-1us,prepreempt-be-1us,be-only --prep-dist uniform:300us:700us)
pytorch=(--scenarios pytorch-standalone,pytorch-be-1us,pytorch-prepreempt-be-1us,pytorch-be-only --duration "${PYTORCH_DURATION:-25s}")
for run in "$@"; do
  case $run in
    A-goroutine) args=("${common[@]}" "${fixed[@]}" --hint-launcher goroutine) ;;
    A-poller)    args=("${common[@]}" "${fixed[@]}" --hint-launcher poller) ;;
    B-goroutine) args=("${common[@]}" "${uniform[@]}" --hint-launcher goroutine) ;;
    B-poller)    args=("${common[@]}" "${uniform[@]}" --hint-launcher poller) ;;
    B-poller-q10) args=("${common[@]}" "${uniform[@]}" --hint-launcher poller --hint-prep-quantile 0.1) ;;
    B-poller-q25) args=("${common[@]}" "${uniform[@]}" --hint-launcher poller --hint-prep-quantile 0.25) ;;
    P-goroutine) args=("${common[@]}" "${pytorch[@]}" --hint-launcher goroutine) ;;
    P-poller)    args=("${common[@]}" "${pytorch[@]}" --hint-launcher poller) ;;
    *) echo "unknown run $run" >&2; exit 2 ;;
  esac
  echo "== $run: gpreempt-bench run ${args[*]}" | tee -a "$OUT/summary.md"
  s=$(date +%s)
  "$C/gpreempt-bench" run "${args[@]}" --out /tmp/pp/$run > /tmp/pp/$run.log 2>&1
  echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$OUT/summary.md"
  cat /tmp/pp/$run/results.md >> "$OUT/summary.md" 2>/dev/null || tail -20 /tmp/pp/$run.log >> "$OUT/summary.md"
done
tar -C /tmp -czf "$OUT/pp-runs.tar.gz" pp
