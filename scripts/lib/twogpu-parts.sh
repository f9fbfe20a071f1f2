# shellcheck shell=bash
# The parts of scripts/gpu-run-2gpu.sh (issue 42), one function each:
# part_classing, part_slo, part_gate (gate_variant for each variant) and
# part_kube; the script's header says what each shows. Sourced by it, not
# run: they use its settings ($C, $K, $W, $RUN, $OUT, UUID0/UUID1, the
# SLO_, GATE_ and KUBE_ variables), its policy and command functions
# (slo_bench_cmd, gate_lc_cmd), lib/parts.sh, lib/daemon.sh and the
# helpers of twogpu.py ("${TW[@]}").

# start_daemon NAME POLICY SOCK MADDR [ARGS...]: gpreemptd, its log
# $W/NAME-gpreemptd.log, its pid in DPID; says so, with the log's end, if
# it did not start.
start_daemon() {
  local name=$1
  shift
  start_gpreemptd "$W/$name-gpreemptd.log" "$@" || { echo "gpreemptd ($name) did not start:"; tail -20 "$W/$name-gpreemptd.log"; return 1; }
}
dstatus() { "$C/gpreemptctl" -o json daemon status --socket "$1"; }

# --- classing -------------------------------------------------------------------
part_classing() {
  local f=$W/classing.txt sock=$RUN/classing/d.sock trace=$W/classing-trace.jsonl
  mkdir -p "$RUN/classing"
  # Every change of every channel group, at event resolution; it also
  # tells the readers where each new group is.
  "$C/gpreemptctl" -o json trace tsg --duration 120s > "$trace" 2> "$W/classing-trace.err" &
  local tpid=$!
  start_daemon classing "$W/classing-policy.yaml" "$sock" 127.0.0.1:19490 > "$f" 2>&1 || { stop_pids $tpid; return 1; }
  sleep 1
  if ! kill -0 $tpid 2>/dev/null; then
    echo "trace tsg did not run ($(tail -2 "$W/classing-trace.err" | tr '\n' ' ')): groups found by gpreemptctl ps instead" >> "$f"
    trace=
  fi
  "${TW[@]}" classing --bin "$C" --dir "$W/classing" --sock "$sock" --trace "$trace" --uuid0 "$UUID0" --uuid1 "$UUID1" \
    --expect "$CLASSING_EXPECT" --out "$W/classing-reads.json" >> "$f" 2>&1
  echo "classing workers done: rc=$?" >> "$f"
  curl -s http://127.0.0.1:19490/metrics > "$W/classing-metrics.txt"
  stop_pids $tpid
  stop_pids "$DPID"
  "${TW[@]}" classing-report --reads "$W/classing-reads.json" --trace "$W/classing-trace.jsonl" --log "$W/classing-gpreemptd.log" \
    --md "$W/classing.md" --json "$OUT/classing.json.gz" >> "$f" 2>&1
  grep -E '^gpreemptd_(applies_total|apply_failures_total|drift_total|trace_lost|ringbuf)' "$W/classing-metrics.txt" >> "$W/classing.md"
  gzip -f "$W/classing-trace.jsonl"
  cat "$W/classing.md"
}

# --- slo ------------------------------------------------------------------------
part_slo() {
  local f=$W/slo.txt sock=$RUN/slo/d.sock t0=$SECONDS
  mkdir -p "$RUN/slo"
  : > "$f"
  # Phase 1: an LC and a BE on each GPU, then a BE on both.
  start_daemon slo-dual "$W/slo-policy.yaml" "$sock" 127.0.0.1:19491 >> "$f" 2>&1 || return 1
  "${TW[@]}" statuspoll --sock "$sock" --out "$W/slo-dual-status.jsonl" &
  local poll=$! g pids=()
  for g in 0 1; do
    local u=$UUID0; [ $g = 1 ] && u=$UUID1
    env CUDA_VISIBLE_DEVICES="$u" GPREEMPT_CLASS=be "$C/gpreempt-bench" be --duration 60s --out "$RUN/slo/be$g.json" > "$W/slo-dual-be$g.log" 2>&1 &
    pids+=($!)
    env CUDA_VISIBLE_DEVICES="$u" GPREEMPT_CLASS=lc "$C/gpreempt-bench" lc --push-latency "$sock" --push-period 1s --requests 17000 --warmup 10 \
      --out "$RUN/slo/lc$g.json" > "$W/slo-dual-lc$g.log" 2>&1 &
    pids+=($!)
  done
  local i=0
  for g in be0 lc0 be1 lc1; do wait_ready "$W/slo-dual-$g.log" "${pids[$i]}" 30 || echo "slo: $g not READY" >> "$f"; i=$((i + 1)); done
  sleep 6
  dstatus "$sock" > "$W/slo-snap-a.json" 2>&1
  env -u CUDA_VISIBLE_DEVICES GPREEMPT_CLASS=be "${TW[@]}" dual --life 40 > "$W/slo-dual-both.log" 2>&1 &
  local dual=$!
  wait_ready "$W/slo-dual-both.log" $dual 60 || echo "slo: the two-GPU process not READY: $(tail -3 "$W/slo-dual-both.log" | tr "\n" " ")" >> "$f"
  sleep 4
  dstatus "$sock" > "$W/slo-snap-b.json" 2>&1
  stop_pids $dual
  sleep 4
  dstatus "$sock" > "$W/slo-snap-c.json" 2>&1
  stop_pids "${pids[@]}"
  stop_pids $poll
  stop_pids "$DPID"
  echo "phase 1 (the two-GPU process): $((SECONDS - t0)) s" >> "$f"

  # Phase 2: a bench run a GPU, at once, on one daemon.
  start_daemon slo "$W/slo-policy.yaml" "$sock" 127.0.0.1:19491 >> "$f" 2>&1 || return 1
  "${TW[@]}" statuspoll --sock "$sock" --out "$W/slo-status.jsonl" &
  poll=$!
  # What the part has left, less the report's: on SIGINT the bench stops
  # its workers and writes what it has.
  local left=$((TIMEOUT_SLO - (SECONDS - t0) - 30)) b0 b1
  echo "phase 2: bench timeout ${left}s" >> "$f"
  # shellcheck disable=SC2046 # the command is words by design
  CUDA_VISIBLE_DEVICES=$UUID0 timeout --signal=INT --kill-after=20 $left $(slo_bench_cmd 0) > "$W/slo-gpu0-bench.log" 2>&1 &
  b0=$!
  # shellcheck disable=SC2046
  CUDA_VISIBLE_DEVICES=$UUID1 timeout --signal=INT --kill-after=20 $left $(slo_bench_cmd 1) > "$W/slo-gpu1-bench.log" 2>&1 &
  b1=$!
  wait $b0; echo "GPU 0 bench rc=$? at $((SECONDS - t0)) s" >> "$f"
  wait $b1; echo "GPU 1 bench rc=$? at $((SECONDS - t0)) s" >> "$f"
  dstatus "$sock" > "$W/slo-status-end.json" 2>&1
  curl -s http://127.0.0.1:19491/metrics > "$W/slo-metrics.txt"
  stop_pids $poll
  stop_pids "$DPID"
  local dualpid
  dualpid=$(sed -n 's/^READY pid=\([0-9]*\).*/\1/p' "$W/slo-dual-both.log" | head -1)
  "${TW[@]}" slo-report --status "$W/slo-status.jsonl" --dual-status "$W/slo-dual-status.jsonl" --results0 "$W/slo-gpu0/results.json" --results1 "$W/slo-gpu1/results.json" \
    --snap-a "$W/slo-snap-a.json" --snap-b "$W/slo-snap-b.json" --snap-c "$W/slo-snap-c.json" --dual-pid "${dualpid:-0}" \
    --objective0 "$SLO_OBJECTIVE0" --objective1 "$SLO_OBJECTIVE1" --md "$W/slo.md" >> "$f" 2>&1
  {
    echo
    grep -E '^slo:|^phase|bench rc' "$f"
    for g in 0 1; do
      echo "### GPU $g: $(slo_bench_cmd $g | sed "s|$W/||")"
      bench_digest "$W/slo-gpu$g" "$W/slo-gpu$g-bench.log" "gpreemptd SLO mode"
      echo
    done
    echo "SLO changes (the daemon's log, $(grep -c 'msg="slo: BE timeslice changed"' "$W/slo-gpreemptd.log") in all; the last 30):"
    echo '```'
    grep 'msg="slo: BE timeslice changed"' "$W/slo-gpreemptd.log" |
      sed -E 's/^time=([^ ]*) .* gpus=([^ ]*) from=([^ ]*) to=([^ ]*) cause=([^ ]*).*/\1 GPUs \2: \3 -> \4 (\5)/' | tail -30
    grep -E '^gpreemptd_slo_be_timeslice_seconds' "$W/slo-metrics.txt"
    echo '```'
  } >> "$W/slo.md"
  for g in 0 1; do copy_results "$W/slo-gpu$g" "slo-gpu$g"; rm -f "$OUT/slo-gpu$g-results.md"; done
  cat "$W/slo.md"
}

# --- gate -----------------------------------------------------------------------
gate_variant() { # plain|pergpu
  local v=$1
  local d=$RUN/gate-$v pre=$W/gate-$v sock=$RUN/gate-$v/d.sock
  mkdir -p "$d"
  start_daemon "gate-$v" "$W/gate-$v-policy.yaml" "$sock" 127.0.0.1:19492 || return 1
  env CUDA_VISIBLE_DEVICES="$UUID0" GPREEMPT_CLASS=be "$C/gpreempt-bench" be --duration 120s --out "$d/be0.json" > "$pre-be0.log" 2>&1 &
  local be0=$!
  env CUDA_VISIBLE_DEVICES="$UUID1" GPREEMPT_CLASS=be "$C/gpreempt-bench" be --duration 120s --out "$d/be1.json" > "$pre-be1.log" 2>&1 &
  local be1=$!
  wait_ready "$pre-be0.log" $be0 30 && wait_ready "$pre-be1.log" $be1 30 || echo "gate $v: a BE not READY"
  sleep 1.5
  "${TW[@]}" procstate --out "$d/procstate.json" $be0 $be1 &
  local ps=$!
  # shellcheck disable=SC2046
  env CUDA_VISIBLE_DEVICES="$UUID0" GPREEMPT_CLASS=lc $(gate_lc_cmd) --out "$d/lc.json" > "$pre-lc.log" 2>&1 &
  local lc=$!
  wait_ready "$pre-lc.log" $lc 60 || echo "gate $v: the LC not READY: $(tail -3 "$pre-lc.log" | tr "\n" " ")"
  dstatus "$sock" > "$pre-processes.json" 2>&1
  for _ in $(seq 400); do kill -0 $lc 2>/dev/null || break; sleep 0.1; done
  stop_pids $lc
  sleep 1
  dstatus "$sock" > "$pre-status.json" 2>&1
  curl -s http://127.0.0.1:19492/metrics | grep -E '^gpreemptd_gate' > "$pre-metrics.txt"
  stop_pids $ps
  stop_pids $be0 $be1
  stop_pids "$DPID"
  local title="class_from_env only (as gpu-run-gate.sh dgate)"
  [ "$v" = pergpu ] && title="class_from_env behind a rule on gpu [0, 1]: classed once NVML lists the process"
  "${TW[@]}" gate-report --variant "$v" --title "$title" --be0 "$d/be0.json" --be1 "$d/be1.json" --lc "$d/lc.json" \
    --procstate "$d/procstate.json" --status "$pre-status.json" --processes "$pre-processes.json" --md "$pre.md" --json "$pre.json"
  grep -iE 'request gate|could not stop' "$W/gate-$v-gpreemptd.log" | grep -v 'level=DEBUG' | head -5 >> "$pre.md"
}
part_gate() {
  local v
  : > "$W/gate.txt"
  { echo "## gate (must-show 3): the request gate on GPU 0 leaves GPU 1's BE alone"; echo; } > "$W/gate.md"
  for v in $GATE_VARIANTS; do
    gate_variant "$v" >> "$W/gate.txt" 2>&1
    { cat "$W/gate-$v.md" 2>/dev/null; grep -E "^gate $v:|did not start" "$W/gate.txt"; echo; } >> "$W/gate.md"
  done
  # shellcheck disable=SC2086 # one argument a variant
  python3 - "$OUT/gate.json.gz" "$RUN" "$W" $GATE_VARIANTS <<'PY'
import gzip, json, os, sys
out, run, w, variants = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def load(p):
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None
d = {v: {k: load(os.path.join(run, f"gate-{v}", f"{k}.json")) for k in ("be0", "be1", "lc", "procstate")}
     | {"report": load(os.path.join(w, f"gate-{v}.json")), "status": load(os.path.join(w, f"gate-{v}-status.json"))} for v in variants}
with gzip.open(out, "wt") as f:
    json.dump(d, f)
PY
  cat "$W/gate.md"
}

# --- kube -----------------------------------------------------------------------
part_kube() {
  { echo "## kube (must-show 4): the node agent, a pod a GPU"; echo; } > "$W/kube.md"
  if [ ! -e "$K/kube-apiserver.xz" ]; then
    echo "skipped: no $K/kube-apiserver.xz (make k8s-carry, and carry .k8s)" | tee -a "$W/kube.md"
    return 0
  fi
  # gpu-run-kube.sh takes gpreemptd & co. from .k8s where they are there,
  # else from C.
  local kenv=(env -u C)
  [ -e "$K/gpreemptd.xz" ] || kenv=(env "C=$C")
  "${kenv[@]}" GPUS=2 K="$K" W="$W/kube" OUT="$W/kube-out" WINDOW="$KUBE_WINDOW" LEAD_IN="$KUBE_LEAD_IN" \
    bash "$HERE/gpu-run-kube.sh" > "$W/kube-console.txt" 2>&1
  local rc=$?
  {
    echo "GPUS=2 WINDOW=$KUBE_WINDOW LEAD_IN=$KUBE_LEAD_IN scripts/gpu-run-kube.sh: rc=$rc"
    echo '```'
    grep -E '^(PASS|FAIL|INFO)|^(be|lc|other)-[a-z-]* pid|^annotated|^be-as-lc|control plane' "$W/kube-out/summary.txt" 2>/dev/null || tail -20 "$W/kube-console.txt"
    echo '```'
    echo "PASS lines: $(grep -c '^PASS' "$W/kube-out/summary.txt" 2>/dev/null), FAIL lines: $(grep -c '^FAIL' "$W/kube-out/summary.txt" 2>/dev/null)"
  } >> "$W/kube.md"
  cp "$W/kube-out/kube-all.tar.gz" "$OUT/" 2>/dev/null
  cat "$W/kube.md"
}
