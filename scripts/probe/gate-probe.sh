#!/usr/bin/env bash
# GPU probe for the request gate (docs/GATE.md): what keeps a launch-bound LC
# resident, what blocks it, and whether GPFIFO_SCHEDULE suspend/resume of a
# loaded BE loses its work. Run on the GPU machine as root from the repo root
# with the binaries in $BIN (default .carry). Results on stdout and in $OUT.
set -uo pipefail
BIN=${BIN:-.carry}; OUT=${OUT:-/tmp/gate-probe}; mkdir -p "$OUT"
CTL="$BIN/gpreemptctl"
P=scripts/probe/gate_probe.py
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
lc() { python3 $P "$@"; }
start_be() {
  rm -f "$OUT/be-progress"
  python3 bench/pytorch/be_gemm.py --duration 600s --progress "$OUT/be-progress" --out "$OUT/be.json" >"$OUT/be.out" 2>&1 &
  BEPID=$!
  for _ in $(seq 100); do grep -q READY "$OUT/be.out" 2>/dev/null && break; sleep 0.2; done
  BEPID=$(sed -n 's/READY pid=//p' "$OUT/be.out")
}
be_rate() { # GEMMs per second over the last N seconds of progress
  tail -n "$1" "$OUT/be-progress" | awk 'NR==1{t=$1;n=$2} END{if (NR>1) printf "%.1f", ($2-n)/(($1-t)/1e9); else print "nan"}'
}
REQ=${REQ:-30}
common="--requests $REQ"
for rep in 1 2; do
  echo "== rep $rep standalone"
  lc $common --label standalone --mode none
  lc $common --label standalone --mode spin+empty
  start_be; sleep 2
  echo "BE alone: $(be_rate 2) GEMM/s"
  run() { # label, be-setup, lc-setup, mode
    [ -n "$2" ] && $CTL $2 >/dev/null
    lc $common --label "$1" --mode "$4" ${3:+--setup "$3"}
    $CTL reset --pid $BEPID >/dev/null
  }
  run defaults "" "" none
  run defaults-spin "" "" spin
  run lc+be1us "class --pid $BEPID --be-timeslice 1us be" "$CTL class --pid {pid} lc" none
  run lc+be1us-spin "class --pid $BEPID --be-timeslice 1us be" "$CTL class --pid {pid} lc" spin
  run lc+be1us-spin+empty "class --pid $BEPID --be-timeslice 1us be" "$CTL class --pid {pid} lc" spin+empty
  run lcts5s-spin "" "$CTL set-timeslice --pid {pid} 5s" spin
  run lcts5s-spin+empty "" "$CTL set-timeslice --pid {pid} 5s" spin+empty
  run lchigh-spin "" "$CTL set-interleave --pid {pid} high" spin
  run lc-bedefault-spin+empty "" "$CTL class --pid {pid} lc" spin+empty
  lc $common --label pause-be-sigstop --mode none --pause-pid $BEPID
  lc $common --label lc-pause-be-sigstop-spin+empty --mode spin+empty --pause-pid $BEPID --setup "$CTL class --pid {pid} lc"
  $CTL reset --pid $BEPID >/dev/null
  run lc+be1ms-spin+empty "class --pid $BEPID --be-timeslice 1ms be" "$CTL class --pid {pid} lc" spin+empty
  echo "BE progress last 3 s: $(be_rate 3) GEMM/s"
  kill $BEPID; wait 2>/dev/null
done
echo "== suspend/resume of a loaded BE, a fresh BE for each variant"
variant() { # label, command run 30 times
  start_be; sleep 2; echo "$1: BE alone $(be_rate 2) GEMM/s"
  for i in $(seq 30); do eval "$2"; done
  sleep 3; echo "$1: after 30 cycles $(be_rate 2) GEMM/s"; tail -n 2 "$OUT/be-progress"
  kill $BEPID; sleep 3; kill -9 $BEPID 2>/dev/null && echo "$1: BE needed SIGKILL"; wait 2>/dev/null
}
variant sigstop 'kill -STOP $BEPID; sleep 0.1; kill -CONT $BEPID; sleep 0.2'
variant preempt+suspend '$CTL preempt --pid $BEPID >/dev/null; $CTL suspend --pid $BEPID >/dev/null; sleep 0.1; $CTL resume --pid $BEPID >/dev/null; sleep 0.2'
variant suspend '$CTL suspend --pid $BEPID >/dev/null; sleep 0.1; $CTL resume --pid $BEPID >/dev/null; sleep 0.2'
exit 0
