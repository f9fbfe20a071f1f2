#!/usr/bin/env bash
# What the request gate's tracing costs an LC alone (no BE, nothing to hold back): the GPT-2-medium
# decode LC (16 new tokens every 800 ms, on CPUs 2,3 as the bench pins it), by a CUDA graph
# (graph) and eager (eager), and with LCS="resnet" an eager resnet50 every 20 ms (~229 launches
# a 6 ms request), each in a process of its own under gpreemptd (not pinned, as the lanes run it) with
#   none     the gate off (no probes)
#   between  gate: {mode: on, launch_probes: between} (launch probes detached for each request,
#            attached after it)
#   always   gate: {mode: on, launch_probes: always} (a trap a launch)
#   auto     gate: {mode: on} (the default: always for an LC whose requests end before a detach)
# For each: the LC's p50 latency and time to first token, and per request its main thread's time
# off its CPU (the request's wall time less the thread's CPU time) and its CPU time. In the graph
# LC's 'between' run, every switch of the LC's main thread off its CPU with the kernel stack it
# left from and who ran next (scripts/lib/offcpu.sh, summed by scripts/probe/offcpu.py).
# Output under $OUT: gate-cost.txt (RESULT lines), gate-cost-<lc>-<mode>.json (the app's requests),
# gate-cost-<lc>-<mode>-gpreemptd.log, gate-cost-stacks.txt.
#   bash scripts/probe/gate-cost.sh [REQUESTS]      (binaries in .carry/, or xz'd in $XZ_DIR)
#   LCS="resnet" bash scripts/probe/gate-cost.sh 40 (REQUESTS x 40 for resnet50: 1,600 in 32 s)
set -u # as root on the GPU machine, from the repo root
source "$(dirname "${BASH_SOURCE[0]}")/../lib/daemon.sh" # start_gpreemptd, wait_ready, stop_pids
source "$(dirname "${BASH_SOURCE[0]}")/../lib/offcpu.sh"  # offcpu_start, offcpu_stop
source "$(dirname "${BASH_SOURCE[0]}")/../lib/policy.sh"  # env_policy
N=${1:-40}
LCS=${LCS:-graph eager}
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT" .carry
C=.carry
if [ -n "${XZ_DIR:-}" ]; then
  for b in gpreemptd gpreemptctl; do xz -dc "$XZ_DIR/$b.xz" > $C/$b && chmod +x $C/$b; done
fi
W=/tmp/gate-cost; rm -rf $W; mkdir -p $W
policy() { # policy MODE: env_policy's (lc by GPREEMPT_CLASS, under requests.default_max: lc), the gate as MODE says
  env_policy 2ms
  case $1 in
    between|always) echo "gate: {mode: on, launch_probes: $1}";;
    auto) echo "gate: {mode: on}";;
  esac
}
for lc in $LCS; do
  for mode in none between always auto; do
    policy $mode > $W/policy.yaml
    # a policy that warns (its LC capped below lc, say) would measure nothing of the gate
    if "$C/gpreemptd" --check-config $W/policy.yaml 2>&1 | grep warning; then exit 2; fi
    start_gpreemptd $W/$lc-$mode-gpreemptd.log $W/policy.yaml $W/gpreemptd.sock 127.0.0.1:19490
    case $lc in
      resnet) lcmd="bench/pytorch/lc_infer.py --period 20ms --requests $((N * 40))";;
      graph) lcmd="bench/pytorch/lc_decode.py --family gpt2 --prompt 64 --new-tokens 16 --period 800ms --requests $N --graph";;
      *) lcmd="bench/pytorch/lc_decode.py --family gpt2 --prompt 64 --new-tokens 16 --period 800ms --requests $N";;
    esac
    GPREEMPT_CLASS=lc taskset -c 2,3 python3 -u $lcmd --out $W/$lc-$mode.json > $W/$lc-$mode.out 2>&1 &
    P=$!
    wait_ready $W/$lc-$mode.out $P 120
    [ "$lc-$mode" = graph-between ] && { echo $P > $W/stacks.pid; offcpu_start python3; }
    wait $P
    [ "$lc-$mode" = graph-between ] && offcpu_stop $W/stacks.trace.xz
    # a run whose LC gpreemptd did not class lc measured nothing of the gate
    grep -q "classed pid=$P .*class=lc " $W/$lc-$mode-gpreemptd.log || echo "RESULT $lc $mode: the LC was not classed lc"
    "$C/gpreemptctl" -o json daemon status --socket $W/gpreemptd.sock > $W/$lc-$mode-status.json 2>/dev/null
    kill -TERM $DPID; wait $DPID
    cp $W/$lc-$mode.json "$OUT/gate-cost-$lc-$mode.json"; cp $W/$lc-$mode-gpreemptd.log "$OUT/gate-cost-$lc-$mode-gpreemptd.log"
  done
done
python3 - $W <<'PY' | tee "$OUT/gate-cost.txt"
import json, sys, statistics as st
w = sys.argv[1]
for lc in ("graph", "eager", "resnet"):
    for mode in ("none", "between", "always", "auto"):
        try:
            s = json.load(open(f"{w}/{lc}-{mode}.json"))["samples"]
        except Exception as e:
            print(f"RESULT {lc} {mode} missing: {e}"); continue
        ms = lambda k: st.median(x.get(k, 0) for x in s) / 1e6  # resnet50's have no tokens, no loop
        off = [(x["latency_ns"] - x["cpu_ns"]) / 1e6 for x in s]
        print(f"RESULT {lc:5s} {mode:7s} n={len(s)} p50={ms('latency_ns'):.1f}ms ttft_p50={ms('ttft_ns'):.1f}ms "
              f"tpot_p50={ms('tpot_ns'):.2f}ms off_cpu_mean={st.mean(off):.1f}ms off_cpu_p50={st.median(off):.1f}ms "
              f"cpu_p50={ms('cpu_ns'):.1f}ms meter_p50={ms('cpu_meter_ns'):.2f}ms")
PY
# the graph LC's main thread under 'between': its time off its CPU by the kernel stack it left from
[ -s $W/stacks.pid ] && python3 "$(dirname "${BASH_SOURCE[0]}")/offcpu.py" $W/stacks.trace.xz "$(cat $W/stacks.pid)" |
  tee "$OUT/gate-cost-stacks.txt"
for m in none between always auto; do for lc in $LCS; do
  echo "== $lc $m: probes off $(grep -c 'launch probes off' $W/$lc-$m-gpreemptd.log), on $(grep -c 'launch probes on' $W/$lc-$m-gpreemptd.log), kept $(grep -c 'launch probes kept on' $W/$lc-$m-gpreemptd.log), off again $(grep -c 'off for its requests again' $W/$lc-$m-gpreemptd.log); $(grep -o '"launches_held": *[0-9]*' $W/$lc-$m-status.json)"
  grep -o 'launch probes off.*took=[0-9.]*[mµ]*s' $W/$lc-$m-gpreemptd.log | head -3; done; done
