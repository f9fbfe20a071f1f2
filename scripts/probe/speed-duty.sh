#!/usr/bin/env bash
# The launch-gap CPU meter over long --be-duty runs (scripts/probe/launch_speed.py): gpu-run-lanes.sh's
# lanes (default: the static classes, GPT-2 on GPU 0 and the Llama shape on GPU 1, 300 s each), each
# lane's LC's calls recorded (gpreemptctl trace requests --record) from its start, then read against the
# app's own requests of SCENARIO. As root on the two-GPU machine, from the repo root, binaries xz'd in
# $XZ_DIR. $OUT gets speed-<part>.txt, rows-<part>.jsonl.gz (launch_speed.py --rows) and the lanes' files.
#   XZ_DIR=.gpu REP=59 bash scripts/probe/speed-duty.sh
set -u
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT" .carry
D=${SPEED_DURATION:-300} SCENARIO=${SCENARIO:-llm-be-200us}
PARTS=(${SPEED_PARTS:-gpt2-fixed llama-fixed})
xz -dc "$XZ_DIR/gpreemptctl.xz" > .carry/gpreemptctl && chmod +x .carry/gpreemptctl
record() { # record GPU PART: lane GPU's LC, from its start for the run's length
  local d=$1 part=$2 p= q
  for _ in $(seq 900); do
    for q in $(pgrep -f lc_decode.py); do tr '\0' '\n' < /proc/$q/environ 2>/dev/null | grep -qx "GPREEMPT_BENCH_DEVICE=$d" && p=$q; done
    [ -n "$p" ] && break; sleep 0.5
  done
  [ -n "$p" ] || { echo "gpu$d: no LC came up"; return; }
  .carry/gpreemptctl trace requests --pid "$p" --duration "$((D + 60))s" --interval 30s --json --record "/tmp/calls-$part.jsonl.gz" > "/tmp/trace-$part.log" 2>&1
}
recs=()
for d in "${!PARTS[@]}"; do record "$d" "${PARTS[$d]}" & recs+=($!); done
env DURATION0=${D}s DURATION1=${D}s BEONLY_DURATION=${BEONLY_DURATION:-30s} NO_STANDALONE=1 \
  LANE0="${PARTS[0]}:static:$((D + 180))" LANE1="${PARTS[1]}:static:$((D + 180))" bash scripts/gpu-run-lanes.sh
pkill -INT -f "gpreemptctl trace requests"; wait "${recs[@]}" # a recorder past its LC ends now, its file closed
for d in "${!PARTS[@]}"; do
  part=${PARTS[$d]} res=$(ls /tmp/o$d-${PARTS[$d]}/*-results.json.gz 2>/dev/null | head -1)
  { echo "== $part (gpu$d) $SCENARIO"; tail -3 /tmp/trace-$part.log
    python3 scripts/probe/launch_speed.py /tmp/calls-$part.jsonl.gz "$res:$SCENARIO" --be-duty 8s --rows /tmp/rows-$part.jsonl; } > "$OUT/speed-$part.txt" 2>&1
  gzip -f /tmp/rows-$part.jsonl && cp /tmp/rows-$part.jsonl.gz "$OUT/"
  cat "$OUT/speed-$part.txt"
done
