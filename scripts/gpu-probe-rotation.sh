#!/usr/bin/env bash
# Two BE processes taking turns on the GPU instead of sharing it by
# timeslice (GPU machine, as root, binaries of `make gpu-binaries` in
# .carry/): while gpreempt-bench runs two LCs with hints beside two BE at
# 1 us (prepreempt-multi-tenant:1us:1us), a loop keeps one BE suspended
# (gpreemptctl suspend/resume: GPFIFO_SCHEDULE) and swaps them, the first
# BE for ON, the second for OFF (default 300ms and 100ms: weights 3:1).
# Whenever there are not exactly two BE workers, every BE seen is resumed.
#
#   scripts/gpu-probe-rotation.sh            # results in $OUT
#   ON=0.3 OFF=0.1 DURATION=10s scripts/gpu-probe-rotation.sh
set -uo pipefail
C=${C:-.carry}
OUT=${OUT:-/tmp/gpreempt-out}
W=${W:-/tmp/gpreempt-rotation}
ON=${ON:-0.3}
OFF=${OFF:-0.1}
DURATION=${DURATION:-10s}
SCENARIOS=${SCENARIOS:-standalone,prepreempt-multi-tenant:1us:1us,be-only}
rm -rf "$W"; mkdir -p "$W" "$OUT"

ctl() { # ctl VERB PID: one gpreemptctl call, timed, to the loop's log
  local t0=$EPOCHREALTIME
  $C/gpreemptctl "$1" --pid "$2" > /dev/null 2>> "$W/rotate.err"
  echo "$t0 $1 $2 rc=$? $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1fms", (b-a)*1000}')"
}

rotate() {
  local p
  while true; do
    mapfile -t P < <(pgrep -f "gpreempt-bench be .*--out" | sort -n)
    if [ ${#P[@]} -ne 2 ]; then
      for p in "${P[@]}"; do ctl resume "$p"; done
      sleep 0.05
      continue
    fi
    ctl resume "${P[0]}"; ctl suspend "${P[1]}"; sleep "$ON"
    ctl resume "${P[1]}"; ctl suspend "${P[0]}"; sleep "$OFF"
  done
}

rotate > "$W/rotate.log" 2>&1 &
rpid=$!
timeout --signal=INT 420 $C/gpreempt-bench run --gpreemptctl $C/gpreemptctl \
  --scenarios "$SCENARIOS" --prep 500us --hint-launcher poller --lc-calibrate-us 0 \
  --lc-iters 2000 --duration "$DURATION" --repeat 1 --out "$W/bench" > "$W/bench.log" 2>&1
echo "gpreempt-bench rc=$?"
kill $rpid; wait $rpid 2>/dev/null
# Leave nothing suspended.
for p in $(pgrep -f "gpreempt-bench be .*--out"); do $C/gpreemptctl resume --pid "$p"; done
{
  echo "== rotation calls: $(grep -c rc= "$W/rotate.log") ($(grep -vc 'rc=0' "$W/rotate.log") failed)"
  grep suspend "$W/rotate.log" | awk '{print $5}' | sort -n | awk '{a[NR]=$1} END{if(NR) print "suspend call p50", a[int(NR/2)+1], "max", a[NR]}'
  sort "$W/rotate.err" | uniq -c | head
} > "$W/summary.txt"
cat "$W/summary.txt"
cp "$W/bench/results.md" "$OUT/rotation-results.md" 2>/dev/null
cp "$W/summary.txt" "$OUT/rotation-summary.txt"
tail -200 "$W/rotate.log" > "$OUT/rotation-log-tail.txt"
