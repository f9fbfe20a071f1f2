#!/usr/bin/env bash
# What counting a BE process's kernel launches (gpreemptd --be-progress)
# costs it, on the GPU machine, as root, from the repo root with the
# binaries of `make gpu-binaries` in .carry/: the PyTorch training BE and the
# fixed-work BE run alone (pytorch-be-only, be-only), classed be by
# gpreemptd in SLO mode (the workers inherit GPREEMPT_BEPROGRESS_RUN=1; the
# bench strips GPREEMPT_CLASS from what they inherit), with the counting on and off, alternating, $REPS
# times. The BE rates are in $OUT/beprogress.txt, with the daemon's status
# (launches per second, rate alone) of each counted run.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/daemon.sh"
OUT=${OUT:-/tmp/gpreempt-out}
W=${W:-/tmp/gpreempt-beprogress}
C=${C:-.carry}
REPS=${REPS:-3}
SOCK=/tmp/gpreemptd-beprogress/gpreemptd.sock
rm -rf "$W"; mkdir -p "$W" "$OUT" "$(dirname $SOCK)"
cat > "$W/policy.yaml" <<'YAML'
version: 1
classes:
  be: {timeslice: 200us, interleave: low}
  lc: {timeslice: 5s, interleave: high, objective: "p50<=1.05x"}
default: none
rules:
  - name: measured-be
    match: {env: {GPREEMPT_BEPROGRESS_RUN: "1"}}
    class: be
slo: {enabled: true, window: 1s}
YAML
f="$OUT/beprogress.txt"
nvidia-smi --query-gpu=name,clocks.sm,driver_version --format=csv > "$f"
for rep in $(seq "$REPS"); do
  for prog in true false; do
    $C/gpreemptd --config "$W/policy.yaml" --socket "$SOCK" --be-progress=$prog > "$W/d-$prog-$rep.log" 2>&1 &
    dpid=$!
    wait_sock "$SOCK" $dpid
    ( sleep 25; curl -s --unix-socket "$SOCK" http://d/v1/status > "$W/status-$prog-$rep.json" ) &
    GPREEMPT_BEPROGRESS_RUN=1 $C/gpreempt-bench run --scenarios pytorch-be-only,be-only --duration 10s --repeat 1 \
      --out "$W/run-$prog-$rep" > "$W/bench-$prog-$rep.log" 2>&1
    echo "== rep $rep, --be-progress=$prog (bench rc=$?)" >> "$f"
    grep -E '^\| (pytorch-)?be-only \|' "$W/run-$prog-$rep/results.md" | tail -2 >> "$f"
    python3 -c 'import json,sys; print("status:", json.load(open(sys.argv[1]))["slo"].get("be"))' "$W/status-$prog-$rep.json" >> "$f" 2>&1
    echo >> "$f"
    kill -TERM $dpid; wait $dpid
  done
done
grep -E 'counting launches|BE progress' "$W"/d-true-*.log | head -20 >> "$f"
cat "$f"
