#!/usr/bin/env bash
# The request gate on the GPU machine (docs/GATE.md), as root from the repo
# root, with gpreempt-bench, gpreemptctl and libgpreempt.so in .carry
# (make gpu-binaries). Parts, in the order given:
#   smoke  lc_decode.py alone, eager and graph, two requests each
#   llm    eager LLM decode: standalone, defaults, BE 1 us, BE 1 ms, the gate, be-only
#   graph  LLM decode with a CUDA graph a step: standalone, defaults, BE 1 us, the gate, be-only
#   eager  eager resnet50 (pytorch-eager): standalone, BE 1 ms, the gate, be-only
#   synth  synthetic pre-preemption (500 us prep, BE 1 us)
#   dgate  eager LLM decode with gpreemptd's gate (no app change): gpreemptd
#          classes the workers from GPREEMPT_CLASS (BE at 2 ms, the driver's
#          default, LC 5 s) and holds BE stopped for each traced request;
#          daemon:llm-standalone is the LC alone under the daemon (its
#          tracing's cost); DGATE_SCENARIOS replaces the list
# REPEAT sets the interleaved repetitions (default 5); DGATE_ARGS adds
# gpreempt-bench flags to dgate (--gemm-size 4096: a BE drawing less power;
# --lc-cpus 2-3 --be-cpus 4-5: pinned workers); DAEMON_CPUS pins gpreemptd
# (taskset's list).
# Results under $OUT/<part>/.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/daemon.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/policy.sh"
OUT=${OUT:-/tmp/gate-out}; RUNS=${RUNS:-/tmp/gate-runs}; mkdir -p "$OUT" "$RUNS"
C=$PWD/.carry
export GPREEMPT_LIB=$C/libgpreempt.so PYTHONUNBUFFERED=1
B=$C/gpreempt-bench
R=${REPEAT:-5}
run() { # part args...
  local part=$1; shift
  echo "== $part: gpreempt-bench $*" | tee -a "$OUT/summary.md"
  local s; s=$(date +%s)
  # --be-duty 0 first: these parts were timed with BE working throughout
  # (DGATE_ARGS may give one; the last value counts).
  "$B" run --gpreemptctl "$C/gpreemptctl" --be-duty 0 --out "$RUNS/$part" "$@" > "$RUNS/$part.log" 2>&1
  echo "rc=$? ($(( $(date +%s) - s )) s)" | tee -a "$OUT/summary.md"
  mkdir -p "$OUT/$part"
  cp "$RUNS/$part/results.md" "$OUT/$part/" 2>/dev/null && gzip -c "$RUNS/$part/results.json" > "$OUT/$part/results.json.gz"
  cat "$RUNS/$part/results.md" >> "$OUT/summary.md" 2>/dev/null || tail -30 "$RUNS/$part.log" | tee -a "$OUT/summary.md"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader | tee -a "$OUT/summary.md"
for part in "$@"; do
  case $part in
    smoke)
      for f in "" --graph; do
        python3 bench/pytorch/lc_decode.py $f --requests 2 --warmup 1 --period 300ms --out - 2>&1 |
          python3 -c 'import json,sys; t=sys.stdin.read(); 
try:
  r=json.loads(t); print("smoke '"$f"'", [round(s["latency_ns"]/1e6,1) for s in r["samples"]], "ms; ttft", [round(s["ttft_ns"]/1e6,1) for s in r["samples"]])
except Exception: print(t[-3000:])' | tee -a "$OUT/summary.md"
      done ;;
    llm)   run llm --scenarios ${LLM_SCENARIOS:-llm-standalone,llm-defaults,llm-be-1us,llm-gate-defaults,llm-be-only} \
             --duration "${LLM_DURATION:-12s}" --repeat "$R" ;;
    graph) run graph --scenarios llm-graph-standalone,llm-graph-defaults,llm-graph-gate-defaults,llm-graph-be-only \
             --duration "${LLM_DURATION:-12s}" --repeat "${GRAPH_REPEAT:-3}" ;;
    eager) run eager --scenarios ${EAGER_SCENARIOS:-pytorch-eager-standalone,pytorch-eager-be-1ms,pytorch-eager-gate-defaults,pytorch-eager-be-only} \
             --duration 8s --repeat "${EAGER_REPEAT:-$R}" ;;
    synth) run synth --scenarios standalone,prepreempt-be-1us,be-only --prep 500us --hint-launcher poller \
             --lc-calibrate-us 0 --lc-iters 2000 --duration 10s --repeat "${SYNTH_REPEAT:-3}" ;;
    dgate)
      D=/tmp/gpreemptd-gate; mkdir -p $D
      gate_policy plain "${GATE_IDLE:-25ms}" > $D/policy.yaml
      $C/gpreemptd --check-config $D/policy.yaml 2>&1 | tee -a "$OUT/summary.md"
      GPREEMPTD_CPUS=${DAEMON_CPUS:-}
      start_gpreemptd $D/gpreemptd.log $D/policy.yaml $D/d.sock 127.0.0.1:19480
      # shellcheck disable=SC2086 # DGATE_ARGS: flags, split on purpose
      run dgate --daemon-socket $D/d.sock --scenarios "${DGATE_SCENARIOS:-llm-standalone,daemon:llm-standalone,daemon:llm-be-2ms,llm-be-only}" \
        --duration "${LLM_DURATION:-8s}" --repeat "${DGATE_REPEAT:-3}" ${DGATE_ARGS:-}
      $C/gpreemptctl -o json daemon status --socket $D/d.sock > "$OUT/dgate/status.json" 2>&1
      $C/gpreemptctl daemon status --socket $D/d.sock 2>&1 | grep '^gate:' | tee -a "$OUT/summary.md"
      curl -s 127.0.0.1:19480/metrics | grep gpreemptd_gate >> "$OUT/summary.md"
      kill $DPID; wait $DPID
      grep -c "request gate" $D/gpreemptd.log | sed 's/^/gate log lines: /' | tee -a "$OUT/summary.md"
      grep -i "gate" $D/gpreemptd.log | grep -iv debug | head -20 >> "$OUT/summary.md"
      # How long each hold's launch probes took to come off (they trap until then).
      echo "launch probes off, took: $(grep 'launch probes off' $D/gpreemptd.log | sed 's/.*took=//' | tr '\n' ' ')" | tee -a "$OUT/summary.md"
      xz -c $D/gpreemptd.log > "$OUT/dgate/gpreemptd.log.xz" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
