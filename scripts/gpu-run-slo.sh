#!/usr/bin/env bash
# gpreemptd's SLO mode on the GPU machine (docs/SLO.md, "Must-shows"), as
# root, from the repo root with the binaries of `make gpu-binaries` in
# .carry/. Each part starts its own gpreemptd with an SLO policy and runs
# gpreempt-bench with the slo: scenario interleaved with its baselines
# (--repeat $BENCH_REPEAT):
#
#   must1    eager PyTorch LC + training BE: slo:pytorch-eager against
#            pytorch-eager-standalone / -be-only; objective p50<=1.05x; the
#            ladder has a 1500us rung (~6.5 min)
#   must2g   CUDA-graph PyTorch LC with hints + training BE:
#            slo:pytorch-prepreempt-defaults against the best static setting
#            (pytorch-prepreempt-be-1us); objectives p50<=1.05x, p99<=1.15x
#            (~8 min)
#   must2s   synthetic LC (500 us prep, hints) + fixed-work BE:
#            slo:prepreempt-defaults against prepreempt-be-1us; objectives
#            p50<=1.05x, p99<=1.15x (~4.5 min)
#   must3    the switch: slo:pytorch@switch, the CUDA-graph LC runs eager
#            from the middle of each 24 s measurement on; window 500ms; the
#            daemon's chosen timeslice and the BE share over time are in
#            results.json ("slo", "be_timeline") and slo.png (~6 min)
#   must3r   the other switch: slo:prepreempt-defaults@switch, the
#            synthetic LC with hints at 5 times its request rate from the
#            middle of each 24 s measurement on; window 500ms (~4 min)
#   must1s   no daemon: the eager LC beside training at fixed BE timeslices
#            around its knee (1ms, 1500us, 2ms), whether any meets must-show
#            1 (~6 min)
#   must4    two LC with different objectives (lc1 p50<=1.05x, lc2
#            p99<=1.30x) and two BE with weights 3:1, both LCs with hints:
#            slo:prepreempt-multi-tenant, shared_floor 50us, against the
#            two LCs alone (prepreempt-multi-tenant:lc-only) (~7 min)
#   traced   must1 with the LC pushing nothing: gpreemptd --trace-requests
#            measures it with uprobes on libcuda (one repetition, ~2.5 min)
#   lclc     no daemon: two LCs with hints, alone and beside two BE at fixed
#            timeslices of weights 3:1 with the 20us slice overhead
#            (560us:200us, 260us:100us, 110us:50us), what SLO mode can reach
#            in must4 (two repetitions, ~4.5 min)
#
# OBJECTIVE_<PART> replaces a part's LC objective: OBJECTIVE_MUST3="p50<=9ms"
# runs must3 against an absolute objective (no references to learn again).
#
# The model's must-shows (docs/SLO.md): SLO mode with every arm offered
# (gate: {mode: auto}; references learnt with BE paused), its point beside
# driver defaults and fixed arms of the same run, MODEL_REPEAT (2)
# repetitions a call (run a part twice for four):
#   model-graph  CUDA-graph PyTorch LC with hints + training BE, p50<=1.05x:
#                defaults, BE 1us with pre-preemption, the gate (~8 min)
#   model-eager  eager PyTorch LC + training BE, p50<=1.10x: defaults, BE
#                1ms, the gate (~8 min)
#   model-llm    eager LLM decode + GEMM BE, absolute $LLM_OBJECTIVE
#                (tpot_p50<=30ms: standalone runs 14-21 ms a token on the H100; over each window's tokens; 2 s windows):
#                defaults, BE 1us, the gate (~7 min)
#   model-synth  synthetic LC (500 us prep, hints) + fixed-work BE,
#                p50<=1.05x, p99<=1.50x: defaults, BE 1us and 50us with
#                pre-preemption (~4 min)
#
# In every slo: run the LC first runs a lead-in (--slo-lead-in, per part
# below) with its latency pushed to the daemon: the measured window shows
# where the daemon settled; its search is in the status record.
#
# Parts are named as arguments or in $PARTS (space- or comma-separated);
# "all" is every part. Every part fits one 10-minute call on its own; run
# them one or two at a time:
#
#   PARTS=must1 scripts/gpu-run-slo.sh
#   PARTS=must2s,must4 scripts/gpu-run-slo.sh
#
# MPS=1 (only 1) runs every LC worker as a client of an MPS control daemon started for
# the run (its own pipe directory, given to the LC workers alone with
# gpreempt-bench --lc-env): the LCs share the MPS server's channel group, the
# BE workers stay outside it. The daemon is quit at the end.
#
# CALIBRATE=pause (the default, as gpreemptd's) learns each LC alone, its
# BE processes stopped for slo.pause_windows (5) windows; CALIBRATE=shortest
# beside BE under the ladder's shortest timeslice.
#
# BE_PROGRESS=false runs gpreemptd without measuring BE share (its
# --be-progress: kernel launches of the BE processes, counted by uprobes on
# their libcuda); the default measures it.
#
# DRY_RUN=1 prints the plan (parts, policies, bench commands) and runs
# nothing: it needs no GPU, no root and no binaries.
#
# Results: everything goes to $W (default /tmp/gpreempt-slo-out); $OUT gets
# at most 2 + 2 per part files (8 with three parts: run at most three in one
# call): summary.txt,
# slo-all.tar.gz (logs, policies, daemon status, results.md of every part),
# and per part <part>-results.md and <part>-results.json.gz. They are
# rewritten as soon as each part ends, so a call cut off by its limit still
# returns every finished part. Each part runs in its own process group under
# TIMEOUT_<PART> seconds (default: its bench timeout + 40).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/parts.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/daemon.sh"
OUT=${OUT:-/tmp/gpreempt-out}
W=${W:-/tmp/gpreempt-slo-out}
C=${C:-.carry}
BRUN=/tmp/gpreemptd-slo
BSOCK=$BRUN/gpreemptd.sock
BMADDR=127.0.0.1:19481
BENCH_REPEAT=${BENCH_REPEAT:-3}
# The controller's ladder (slo.ladder). The eager LC's knee lies between
# 1 ms (BE 86-87%) and 3 ms (LC 1.17x), hence must1's 1500us rung.
SLO_LADDER=${SLO_LADDER:-[1us, 50us, 200us, 500us, 1ms, 2ms, 3ms]}
CALIBRATE=${CALIBRATE:-pause}
BE_PROGRESS=${BE_PROGRESS:-true}
MPS=${MPS:-}
MPSDIR=${MPSDIR:-/tmp/gpreempt-slo-mps}
SLO_LADDER_MUST1=${SLO_LADDER_MUST1:-[1us, 50us, 200us, 500us, 1ms, 1500us, 2ms, 3ms]}
# must4: two BE keep their 3:1 split down to a 50us unit timeslice once the
# weights leave the 20us slice overhead out (110us:50us); the LCs with
# hints want the shortest BE timeslice, hence the floor and a 100us rung.
SLO_LADDER_MUST4=${SLO_LADDER_MUST4:-[1us, 50us, 100us, 200us, 500us, 1ms, 2ms, 3ms]}
SHARED_FLOOR_MUST4=${SHARED_FLOOR_MUST4:-50us}
# Bench limits, below the 10-minute limit of one call so that the results
# are still packed (on SIGINT the bench writes what it has).
BENCH_TIMEOUT_MUST1=${BENCH_TIMEOUT_MUST1:-540}
BENCH_TIMEOUT_MUST1S=${BENCH_TIMEOUT_MUST1S:-540}
BENCH_TIMEOUT_MUST2G=${BENCH_TIMEOUT_MUST2G:-540}
BENCH_TIMEOUT_MUST2S=${BENCH_TIMEOUT_MUST2S:-400}
BENCH_TIMEOUT_MUST3=${BENCH_TIMEOUT_MUST3:-540}
BENCH_TIMEOUT_MUST3R=${BENCH_TIMEOUT_MUST3R:-400}
BENCH_TIMEOUT_MUST4=${BENCH_TIMEOUT_MUST4:-400}
BENCH_TIMEOUT_TRACED=${BENCH_TIMEOUT_TRACED:-240}
BENCH_TIMEOUT_LCLC=${BENCH_TIMEOUT_LCLC:-400}
MODEL_REPEAT=${MODEL_REPEAT:-2}
# PIN_ARGS: bench flags that pin the workers (--lc-cpus 2-3 --be-cpus 4-5);
# DAEMON_CPUS: taskset's list for gpreemptd. An eager LC is CPU-bound.
PIN_ARGS=${PIN_ARGS:-}
DAEMON_CPUS=${DAEMON_CPUS:-}
GPREEMPTD_CPUS=$DAEMON_CPUS
# GATE: the request gate's mode for the parts that are not the model's (off
# by default; must3 with GATE=auto: the eager half may take the gate).
GATE=${GATE:-}
LLM_OBJECTIVE=${LLM_OBJECTIVE:-tpot_p50<=30ms}
BENCH_TIMEOUT_MODEL_GRAPH=${BENCH_TIMEOUT_MODEL_GRAPH:-540}
BENCH_TIMEOUT_MODEL_EAGER=${BENCH_TIMEOUT_MODEL_EAGER:-540}
BENCH_TIMEOUT_MODEL_LLM=${BENCH_TIMEOUT_MODEL_LLM:-540}
BENCH_TIMEOUT_MODEL_SYNTH=${BENCH_TIMEOUT_MODEL_SYNTH:-400}
bench_timeout() { part_timeout "$1" BENCH_TIMEOUT; }

ALL_PARTS="must1 must1s must2g must2s must3 must3r must4 traced lclc model-graph model-eager model-llm model-synth"
# A part's own limit (TIMEOUT_<PART>): its bench's plus 40 s to pack.
for p in $ALL_PARTS; do
  v=$(part_var "$p")
  [ -n "${!v:-}" ] || printf -v "$v" %s "$(( $(bench_timeout "$p") + 40 ))"
done
select_parts gpu-run-slo.sh all "$ALL_PARTS" "$@"
DRY=${DRY_RUN:-}
echo "parts:$sel"

# The scenarios of each part: the slo: scenario between its baselines
# (SCENARIOS_<PART> replaces a part's list).
scenarios() {
  local v; v=$(part_var "$1" SCENARIOS)
  [ -n "${!v:-}" ] && { echo "${!v}"; return; }
  case $1 in
    must1) echo pytorch-eager-standalone,slo:pytorch-eager,pytorch-eager-be-only;;
    must2g) echo pytorch-standalone,slo:pytorch-prepreempt-defaults,pytorch-prepreempt-be-1us,pytorch-be-only;;
    must2s) echo standalone,slo:prepreempt-defaults,prepreempt-be-1us,be-only;;
    must3) echo slo:pytorch@switch,pytorch-be-only;;
    must3r) echo slo:prepreempt-defaults@switch,be-only;;
    must1s) echo pytorch-eager-standalone,pytorch-eager-be-1ms,pytorch-eager-be-1500us,pytorch-eager-be-2ms,pytorch-eager-be-only;;
    must4) echo standalone,prepreempt-multi-tenant:lc-only,slo:prepreempt-multi-tenant:be:3:be:1,be-only;;
    traced) echo pytorch-eager-standalone,slo:pytorch-eager,pytorch-eager-be-only;;
    lclc) echo standalone,prepreempt-multi-tenant:lc-only,prepreempt-multi-tenant:560us:200us,prepreempt-multi-tenant:260us:100us,prepreempt-multi-tenant:110us:50us,be-only;;
    model-graph) echo pytorch-standalone,pytorch-prepreempt-defaults,pytorch-prepreempt-be-1us,pytorch-gate-defaults,slo:pytorch-prepreempt-defaults,pytorch-be-only;;
    model-eager) echo pytorch-eager-standalone,pytorch-eager-defaults,pytorch-eager-be-1ms,pytorch-eager-gate-defaults,slo:pytorch-eager,pytorch-eager-be-only;;
    model-llm) echo llm-standalone,llm-defaults,llm-be-1us,llm-gate-defaults,slo:llm-defaults,llm-be-only;;
    model-synth) echo standalone,prepreempt-defaults,prepreempt-be-1us,prepreempt-be-50us,slo:prepreempt-defaults,be-only;;
  esac
}
# The lead-in is long enough for the controller to learn the LC's
# standalone-like latency (8 windows under the shortest BE timeslice) and
# walk its ladder from the safe 200us (about 3 windows a step).
duration() {
  case $1 in
    must1|must1s|traced) echo 12s;;
    must3|must3r) echo 24s;;
    model-graph|model-eager|model-llm) echo 8s;;
    *) echo 10s;;
  esac
}
lead_in() {
  case $1 in
    must1|traced) echo 30s;;
    must3|must3r) echo 10s;;
    model-llm) echo 40s;;
    lclc|must1s) echo 0s;;
    *) echo 20s;;
  esac
}
bench_cmd() {
  local extra="" repeat=$BENCH_REPEAT
  case $1 in must2s|must3r|must4|lclc|model-synth) extra="--prep 500us --hint-launcher poller --lc-calibrate-us 0 --lc-iters 2000";; esac
  case $1 in traced) repeat=1;; lclc) repeat=${LCLC_REPEAT:-2};; model-*) repeat=$MODEL_REPEAT;; esac
  [ "$1" = traced ] && extra="--slo-push=false"
  [ "$MPS" = 1 ] && extra="$extra --lc-env CUDA_MPS_PIPE_DIRECTORY=$MPSDIR/pipe --lc-env CUDA_MPS_LOG_DIRECTORY=$MPSDIR/log"
  # --be-duty 0: these parts steer by BE working throughout and were timed so.
  echo $C/gpreempt-bench run --gpreemptctl $C/gpreemptctl --daemon-socket $BSOCK --be-duty 0 \
    --scenarios "$(scenarios $1)" $extra $PIN_ARGS \
    --duration "$(duration $1)" --slo-lead-in "$(lead_in $1)" --repeat $repeat --out $W/$1
}
# daemon_args: traced measures the LC with uprobes on libcuda.
daemon_args() { echo --be-progress=$BE_PROGRESS; [ "$1" = traced ] && echo --trace-requests; }

# The policy: workers of slo: scenarios carry GPREEMPT_CLASS (lc, be, be:3)
# and GPREEMPT_BENCH_WORKER (lc, lc1, lc2, be1, ...); the baselines' workers
# carry neither and are left alone (default: none).
policy() {
  local lc_objective="p50<=1.05x" window=1s calibrate=$CALIBRATE
  case $1 in must3|must3r) window=500ms;; esac
  # An LLM request every 800 ms: a 2 s window holds two or three, 30-45
  # times per output token (a tpot_ objective's samples; 20 count).
  [ "$1" = model-llm ] && window=2s
  case $1 in
    must2g|must2s) lc_objective="p50<=1.05x, p99<=1.15x";;
    model-eager) lc_objective="p50<=1.10x";;
    model-llm) lc_objective="$LLM_OBJECTIVE";;
    model-synth) lc_objective="p50<=1.05x, p99<=1.50x";;
  esac
  # OBJECTIVE_<PART> replaces a part's LC objective (an absolute one, say).
  local v; v=$(part_var "$1" OBJECTIVE)
  lc_objective=${!v:-$lc_objective}
  case $1 in model-*) calibrate=pause;; esac
  cat <<YAML
version: 1
classes:
  be: {timeslice: 200us, interleave: low, min_share: 0.88, slice_overhead: 20us}
  lc: {timeslice: 5s, interleave: high, objective: "$lc_objective"}
default: none
rules:
YAML
  if [ "$1" = must4 ]; then
    cat <<'YAML'
  - name: lc1
    match: {env: {GPREEMPT_BENCH_WORKER: lc1}}
    class: lc
    objective: "p50<=1.05x"
  - name: lc2
    match: {env: {GPREEMPT_BENCH_WORKER: lc2}}
    class: lc
    objective: "p99<=1.30x"
YAML
  fi
  cat <<YAML
  - name: from-env
    match: {env: {GPREEMPT_CLASS: "*"}}
    class_from_env: GPREEMPT_CLASS
slo:
  enabled: true
  window: $window
  ladder: $(case $1 in must1|traced) echo "$SLO_LADDER_MUST1";; must4) echo "$SLO_LADDER_MUST4";; *) echo "$SLO_LADDER";; esac)
  safe: 200us
  shared_floor: $(case $1 in must4) echo "$SHARED_FLOOR_MUST4";; *) echo 200us;; esac)
  prepreempt_below: 500us
  calibrate: $calibrate
requests:
  default_max: lc
YAML
  # The model's parts offer every arm; GATE=auto offers the gate to the others too.
  case $1 in model-*) echo "gate: {mode: auto}";; *) if [ -n "$GATE" ]; then echo "gate: {mode: $GATE}"; fi;; esac
}

if [ -n "$DRY" ]; then
  echo "W=$W OUT=$OUT C=$C"
  for p in $sel; do
    echo "=== part $p: timeout $(part_timeout $p)s"
    echo "--- policy ($W/$p-policy.yaml):"; policy $p
    echo "--- bench command (timeout $(bench_timeout $p)s):"; bench_cmd $p
  done
  exit 0
fi

rm -rf "$W"; mkdir -p "$OUT" "$W"
write_machine
if [ "$MPS" = 1 ]; then
  rm -rf "$MPSDIR"; mkdir -p "$MPSDIR/pipe" "$MPSDIR/log"
  mpsctl() { CUDA_MPS_PIPE_DIRECTORY="$MPSDIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPSDIR/log" nvidia-cuda-mps-control "$@"; }
  mpsctl -d || { echo "MPS=1: the MPS control daemon did not start" >&2; exit 2; }
  trap 'echo quit | mpsctl; cp "$MPSDIR"/log/*.log "$OUT"/ 2>/dev/null' EXIT
  echo "MPS control daemon started (pipe directory $MPSDIR/pipe); LC workers are its clients" >> "$W/machine.txt"
fi

run_bench_part() {
  local p=$1 f="$W/$1.txt"
  rm -rf "$BRUN"; mkdir -p "$BRUN"; chmod 0755 "$BRUN"
  policy $p > "$W/$p-policy.yaml"
  { echo "\$ gpreemptd --check-config $p-policy.yaml"; $C/gpreemptd --check-config "$W/$p-policy.yaml"; echo "rc=$?"; } > "$f" 2>&1
  start_gpreemptd "$W/$p-gpreemptd.log" "$W/$p-policy.yaml" "$BSOCK" $BMADDR $(daemon_args $p)
  local dpid=$DPID
  { echo '$ gpreemptctl daemon status'; $C/gpreemptctl daemon status --socket "$BSOCK"; echo "\$ $(bench_cmd $p)"; } >> "$f" 2>&1
  # The daemon's status once a second over the whole part (the bench
  # records it only during measurements).
  poll_status "$BSOCK" $dpid > "$W/$p-status.jsonl" 2>/dev/null &
  local spid=$!
  local t0=$SECONDS
  timeout --signal=INT --kill-after=30 "$(bench_timeout $p)" $(bench_cmd $p) > "$W/$p-bench-run.log" 2>&1
  echo "gpreempt-bench rc=$? after $((SECONDS - t0)) s" >> "$f"
  $C/gpreemptctl daemon status --socket "$BSOCK" >> "$f" 2>&1
  curl -s http://$BMADDR/metrics > "$W/$p-metrics.txt"
  kill -TERM $dpid; wait $dpid; echo "daemon exit rc=$?" >> "$f"
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
  {
    # Every change and what it was for, over the whole run; then the last windows kept.
    local n; n=$(grep -cE 'level=(INFO|WARN|ERROR) msg="?slo' "$W/$p-gpreemptd.log")
    echo "== SLO changes (the daemon's log: $n lines$([ "$n" -gt 400 ] && echo ", the first 400; all in slo-all.tar.gz"))"
    grep -E 'level=(INFO|WARN|ERROR) msg="?slo' "$W/$p-gpreemptd.log" | head -400
    echo "== SLO decisions, the last (the daemon's log)"; grep -E 'msg="?slo' "$W/$p-gpreemptd.log" | tail -10
    echo "== bench summary"
    bench_digest "$W/$p" "$W/$p-bench-run.log" "gpreemptd SLO mode"
  } >> "$f" 2>&1
  cat "$f"
  copy_results "$W/$p" "$p"
}

pack() {
  pack_summary machine.txt $(for p in $ALL_PARTS; do echo $p.txt; done) parts.txt
  tar -C "$(dirname "$W")" --exclude='*/rep*/*.json' --exclude='*/*/*.json' --exclude='*/*/results.json' \
    -czf "$OUT/slo-all.tar.gz.tmp" "$(basename "$W")" 2>/dev/null && mv "$OUT/slo-all.tar.gz.tmp" "$OUT/slo-all.tar.gz"
}

for p in $ALL_PARTS; do
  want $p && run_part $p run_bench_part $p
done
pack
ls -la "$OUT"
