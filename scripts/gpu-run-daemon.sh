#!/usr/bin/env bash
# Issue 11 on the GPU machine, as root, from the repo root with the binaries
# of `make gpu-binaries` in .carry/: gpreemptd's must-shows, in parts:
#
#   must1     classing of new contexts by env var and by comm, BE restarted 5
#             times, LC and BE in both orders (must-show 1)
#   must4     non-root processes through the socket (must-show 4)
#   must5     a per-GPU rule (must-show 5; only on a machine with 2 GPUs)
#   must3     churn: $CHURN (50) short CUDA processes, fds and RSS
#             before/after (must-show 3, shortened; CHURN=200 for the soak)
#   latency   last setup call -> classed, p50/p99/max, and the metrics
#   shutdown  stopping the daemon restores the driver's defaults
#   bench     must-show 2: gpreempt-bench's be-1us and prepreempt-be-1us rows
#             classed by gpreemptctl and, side by side in one run, by the
#             daemon (daemon:be-1us, daemon:prepreempt-be-1us); ~6.5 min
#
# Parts are named as arguments or in $PARTS (space- or comma-separated);
# "all" is every part. The default is every part but bench (about 3-4
# minutes): bench alone fits the 10-minute limit, bench with the others
# does not, so run it in its own call:
#
#   scripts/gpu-run-daemon.sh                 # must1 must4 must5 must3 latency shutdown
#   PARTS=bench scripts/gpu-run-daemon.sh     # must-show 2 only
#   scripts/gpu-run-daemon.sh must1 latency   # a subset
#
# DRY_RUN=1 prints the plan (parts, policies, the bench command) and runs
# nothing: it needs no GPU, no root and no binaries.
#
# Results: everything goes to $W (default /tmp/gpreempt-daemon-out); $OUT
# gets at most 4 files (the device machine returns 8, 2 folders deep):
# summary.txt (every part's result), bench-results.md and
# bench-results.json.gz (bench), and daemon-all.tar.gz (logs, policies,
# metrics, the bench's worker logs; worker JSONs left out). summary.txt and
# daemon-all.tar.gz are rewritten as soon as each part ends, so a call cut
# off by its time limit still returns every finished part.
#
# Each part runs in its own process group under its own time limit
# (TIMEOUT_<PART>, seconds; must3's grows with $CHURN): past it, the part
# and every process it started are killed, its file says so, and the next
# part runs.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/parts.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/daemon.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/policy.sh"
OUT=${OUT:-/tmp/gpreempt-out}
W=${W:-/tmp/gpreempt-daemon-out}
C=${C:-.carry}
CHURN=${CHURN:-50}
RUN=/tmp/gpreemptd-run
SOCK=$RUN/gpreemptd.sock
MADDR=127.0.0.1:19477
# The bench's daemon: its own socket (and lock) and metrics port.
BRUN=/tmp/gpreemptd-bench
BSOCK=$BRUN/gpreemptd.sock
BMADDR=127.0.0.1:19479
BENCH_REPEAT=${BENCH_REPEAT:-3}
BENCH_DURATION=${BENCH_DURATION:-6s}
# Below the 10-minute limit of one call, so the results are still packed:
# on SIGINT the bench stops its workers and writes what it has.
BENCH_TIMEOUT=${BENCH_TIMEOUT:-540}
TIMEOUT_MUST1=${TIMEOUT_MUST1:-150}
TIMEOUT_MUST4=${TIMEOUT_MUST4:-90}
TIMEOUT_MUST5=${TIMEOUT_MUST5:-90}
TIMEOUT_MUST3=${TIMEOUT_MUST3:-$((60 + 2 * CHURN))}
TIMEOUT_LATENCY=${TIMEOUT_LATENCY:-30}
TIMEOUT_SHUTDOWN=${TIMEOUT_SHUTDOWN:-90}
TIMEOUT_BENCH=${TIMEOUT_BENCH:-$((BENCH_TIMEOUT + 40))}

DEFAULT_PARTS="must1 must4 must5 must3 latency shutdown"
ALL_PARTS="$DEFAULT_PARTS bench"
select_parts gpu-run-daemon.sh "$DEFAULT_PARTS" "$ALL_PARTS" "$@"
# The parts before bench share one daemon with the must-show policy.
main_daemon=false
for p in $DEFAULT_PARTS; do want $p && main_daemon=true; done
DRY=${DRY_RUN:-}
echo "parts:$sel(main daemon: $main_daemon)"

BENCH_SCENARIOS=standalone,be-1us,daemon:be-1us,prepreempt-be-1us,daemon:prepreempt-be-1us,be-only
bench_cmd() {
  echo $C/gpreempt-bench run --gpreemptctl $C/gpreemptctl \
    --scenarios $BENCH_SCENARIOS \
    --prep 500us --hint-launcher poller --lc-calibrate-us 0 --lc-iters 2000 \
    --duration $BENCH_DURATION --repeat $BENCH_REPEAT --out $W/bench
}

# must-show 2: the daemon classes only what says GPREEMPT_CLASS (the bench's
# daemon:* workers); the gpreemptctl scenarios' workers carry no such
# variable and are left alone. be at 1us, as the bench's be-1us gives
# gpreemptctl.
bench_policy() { env_policy 1us; }

if [ -n "$DRY" ]; then
  echo "W=$W OUT=$OUT C=$C CHURN=$CHURN"
  for p in $sel; do echo "part $p: timeout $(part_timeout $p)s"; done
  if want bench; then
    echo "--- bench policy ($W/bench-policy.yaml):"; bench_policy
    echo "--- bench command (timeout ${BENCH_TIMEOUT}s):"; bench_cmd
  fi
  exit 0
fi

rm -rf "$W" "$RUN"; mkdir -p "$OUT" "$W" "$RUN"; chmod 0755 "$RUN"
write_machine

# --- shared by the must-show parts -----------------------------------------
cat > "$W/policy.yaml" <<'YAML'
version: 1
classes:
  be: {timeslice: 200us, interleave: low}
  lc: {timeslice: 5s, interleave: high}
default: none
rules:
  # the trainer says what it is (GPREEMPT_CLASS=be)
  - name: from-env
    match: {env: {GPREEMPT_CLASS: "*"}}
    class_from_env: GPREEMPT_CLASS
  # the inference server is known by its name (any process may take a
  # name: trusted here, on a machine running only this script's workers)
  - name: lc-by-comm
    match: {comm: "lc-server"}
    class: lc
    trust_self_set: true
  - name: churn-by-comm
    match: {comm: "churn"}
    class: be
requests:
  default_max: be
  limits:
    - {match: {uid: 65534}, max: lc}
YAML

# A CUDA worker: sets its comm, makes a context, optionally asks the daemon
# for a class over the socket (its own pid), then works until killed (or
# for --life seconds).
cat > "$RUN/worker.py" <<'PY'
import ctypes, json, os, socket, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:])
if "comm" in args:
    ctypes.CDLL(None).prctl(15, args["comm"].encode(), 0, 0, 0)
import torch
x = torch.randn(2048, 2048, device="cuda")
torch.cuda.synchronize()
def ask(body):
    s = socket.socket(socket.AF_UNIX); s.connect(args["sock"])
    b = json.dumps(body).encode()
    s.sendall(b"POST /v1/class HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
    r = b""
    while True:
        c = s.recv(65536)
        if not c: break
        r += c
    return r.decode().split("\r\n")[0] + " " + r.decode().split("\r\n\r\n", 1)[-1].strip().replace("\n", " ")
if "ask" in args:
    print("ASK own pid", args["ask"], "->", ask({"pid": os.getpid(), "class": args["ask"]}), flush=True)
if "askpid" in args:
    print("ASK pid", args["askpid"], "->", ask({"pid": int(args["askpid"]), "class": "be"}), flush=True)
print("READY", os.getpid(), flush=True)
end = time.time() + float(args.get("life", "1e9"))
while time.time() < end:
    y = x @ x
    torch.cuda.synchronize()
    time.sleep(0.001 if args.get("busy") else 0.05)
PY
chmod 0644 "$RUN/worker.py"

start_worker() { # name env... -- args...
  local name=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" python3 "$RUN/worker.py" "$@" > "$RUN/$name.out" 2>&1 &
  local pid=$!
  for i in $(seq 120); do grep -q READY "$RUN/$name.out" 2>/dev/null && break; sleep 0.25; done
  echo $pid
}
procs() { curl -s --unix-socket "$SOCK" http://d/v1/processes; }
show() { # pid: the daemon's view and gpreemptctl's read-back
  local pid=$1
  procs | python3 -c "import json,sys; [print('daemon: pid', p['pid'], p['comm'], 'class', p['class'], 'rule', p['rule'], [str(g['timeslice_us'])+'us/'+str(g['interleave']) for g in p['groups']]) for p in json.load(sys.stdin) if p['pid']==$pid]"
  $C/gpreemptctl -o json ps --pid "$pid" | python3 -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print('gpreemptctl ps:', [str(g['timeslice_us'])+'us/'+str(g['interleave']) for g in d['groups']])"
}
dstat() { echo "fds=$(ls /proc/$DPID/fd | wc -l) rss_kb=$(awk '/VmRSS/{print $2}' /proc/$DPID/status) threads=$(awk '/Threads/{print $2}' /proc/$DPID/status)"; }

# classed_summary LOG latency|bench: from gpreemptd's debug LOG, the time
# from a context's last setup call to its classing (after_setup= of each
# "msg=classed" line). latency: new contexts only, p50, p99 and max
# against the goal; bench: every line, counted by class, p50 and max.
classed_summary() {
  python3 - "$1" "$2" <<'PY'
import re, sys
log, mode = open(sys.argv[1]).read(), sys.argv[2]
v, classes = [], {}
if mode == "latency":
    pattern = r'msg=classed .*after_setup=(\S+) new_context=true'
else:
    pattern = r'msg=classed .*?class=(\S+).*?after_setup=(\S+)'
for m in re.finditer(pattern, log):
    if mode != "latency":
        classes[m.group(1)] = classes.get(m.group(1), 0) + 1
    s = m.group(m.lastindex)
    for unit, f in (("ms", 1e-3), ("µs", 1e-6), ("us", 1e-6), ("ns", 1e-9), ("s", 1)):
        if s.endswith(unit):
            v.append(float(s[:-len(unit)]) * f * 1e3); break
v.sort()
q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
if mode == "latency":
    print(f"classed contexts: {len(v)}; last setup call -> classed: p50 {q(.5):.1f} ms, p99 {q(.99):.1f} ms, max {v[-1]:.1f} ms (goal p99 <= 100 ms)" if v else "no classed contexts")
else:
    print(f"classed: {classes}; after last setup call p50 {q(.5):.1f} ms, max {v[-1]:.1f} ms" if v else "no classed lines in the daemon's log")
PY
}

# --- the daemon of the must-show parts ------------------------------------
DPID=
start_main_daemon() {
  $C/gpreemptd --check-config "$W/policy.yaml" > "$W/check-config.txt" 2>&1; echo "rc=$?" >> "$W/check-config.txt"
  printf 'rules:\n  - class: be\n    clas: lc\n' > "$RUN/bad.yaml"
  $C/gpreemptd --check-config "$RUN/bad.yaml" >> "$W/check-config.txt" 2>&1; echo "rc=$?" >> "$W/check-config.txt"
  cat "$W/check-config.txt"
  start_gpreemptd "$W/gpreemptd.log" "$W/policy.yaml" "$SOCK" $MADDR
  {
    echo '$ second daemon on the same socket'; $C/gpreemptd --config "$W/policy.yaml" --socket "$SOCK" --metrics-addr 127.0.0.1:19478; echo "rc=$?"
    echo '$ gpreemptctl daemon status'; $C/gpreemptctl daemon status --socket "$SOCK"
    echo '$ gpreemptctl daemon classes'; $C/gpreemptctl daemon classes --socket "$SOCK"
  } > "$W/daemon-start.txt" 2>&1
  cat "$W/daemon-start.txt"
}

# --- must-show 1: LC then BE x5, then BE then LC ----------------------------
part_must1() {
  {
    echo "== LC first (lc-server by comm), then the trainer (GPREEMPT_CLASS=be) restarted 5 times"
    LC=$(start_worker lc -- comm=lc-server); sleep 0.5; show $LC
    for i in 1 2 3 4 5; do
      BE=$(start_worker be$i GPREEMPT_CLASS=be -- busy=1); sleep 0.5; show $BE
      kill $BE; wait $BE 2>/dev/null
    done
    kill $LC; wait $LC 2>/dev/null
    echo "== BE first, then LC"
    BE=$(start_worker be6 GPREEMPT_CLASS=be -- busy=1)
    LC=$(start_worker lc2 -- comm=lc-server); sleep 0.5; show $BE; show $LC
    # Left running through the next parts; killed at the end.
    echo $BE $LC >> "$RUN/leftover.pids"
    echo "== shutdown restores the driver defaults (a second daemon instance on these two)"
    $C/gpreemptctl daemon status --socket "$SOCK"
  } > "$W/must1.txt" 2>&1
  cat "$W/must1.txt"
}

# --- must-show 4: non-root processes through the socket ---------------------
part_must4() {
  {
    echo "== uid 65534 (policy max lc) asks lc for its own pid"
    setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp python3 "$RUN/worker.py" comm=lc-app ask=lc sock=$SOCK > "$RUN/nobody.out" 2>&1 &
    N=$!; for i in $(seq 120); do grep -q READY "$RUN/nobody.out" && break; sleep 0.25; done
    cat "$RUN/nobody.out"; show $N
    echo "== uid 12345 (policy max be) asks lc: refused; asks for the nobody process's pid: refused"
    setpriv --reuid=12345 --regid=12345 --clear-groups env HOME=/tmp python3 "$RUN/worker.py" ask=lc askpid=$N sock=$SOCK life=1 > "$RUN/u12345.out" 2>&1
    cat "$RUN/u12345.out"
    echo "== curl as uid 12345 for another pid, and a reload as non-root"
    setpriv --reuid=12345 --regid=12345 --clear-groups curl -s --unix-socket "$SOCK" -d "{\"pid\":$N,\"class\":\"be\"}" http://d/v1/class
    setpriv --reuid=12345 --regid=12345 --clear-groups curl -s --unix-socket "$SOCK" -XPOST http://d/v1/reload
    kill $N; wait $N 2>/dev/null
    echo "== daemon log: refusals"; grep refused "$W/gpreemptd.log"
  } > "$W/must4.txt" 2>&1
  cat "$W/must4.txt"
}

# --- must-show 5 (only with two GPUs): a per-GPU rule ----------------------
part_must5() {
  NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
  if [ "$NGPU" -ge 2 ]; then
    {
      cp "$W/policy.yaml" "$RUN/policy-1gpu.yaml"
      python3 - "$W/policy.yaml" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
s = s.replace("rules:\n", "rules:\n  - name: gpu0-be\n    match: {comm: pergpu, gpu: 0}\n    class: be\n  - name: gpu1-burstable\n    match: {comm: pergpu, gpu: 1}\n    class: burstable\n    trust_self_set: true\n", 1)
open(p, "w").write(s)
PY
      curl -s --unix-socket "$SOCK" -XPOST http://d/v1/reload; echo
      G0=$(start_worker g0 CUDA_VISIBLE_DEVICES=0 -- comm=pergpu); G1=$(start_worker g1 CUDA_VISIBLE_DEVICES=1 -- comm=pergpu)
      sleep 1; show $G0; show $G1
      kill $G0 $G1; wait $G0 $G1 2>/dev/null
    } > "$W/must5.txt" 2>&1
    cat "$W/must5.txt"
  fi
}

# --- must-show 3 (shortened): churn -----------------------------------------
part_must3() {
  {
    sleep 1; echo "before: $(dstat)"
    : > "$RUN/churn.pids"
    # Batches of 5 at once; wait for the batch's own pids only (a bare
    # wait would also wait for must1's workers, which never end).
    batch=()
    for i in $(seq $CHURN); do
      python3 "$RUN/worker.py" comm=churn life=0.5 > "$RUN/churn$i.out" 2>&1 &
      batch+=($!); echo $! >> "$RUN/churn.pids"
      if [ ${#batch[@]} -eq 5 ]; then wait "${batch[@]}"; batch=(); fi
    done
    [ ${#batch[@]} -gt 0 ] && wait "${batch[@]}"
    sleep 2
    echo "after:  $(dstat)"
    python3 - "$W/gpreemptd.log" "$RUN/churn.pids" <<'PY'
import re, sys
log, pids = open(sys.argv[1]).read(), set(open(sys.argv[2]).read().split())
classed = {}
for m in re.finditer(r'msg=classed pid=(\d+) comm=(\S+) class=(\S+)', log):
    classed.setdefault(m.group(1), set()).add(m.group(3))
missed = sorted(p for p in pids if p not in classed)
wrong = sorted(p for p in pids if p in classed and classed[p] != {"be"})
print(f"churn: {len(pids)} processes, classed {len(pids) - len(missed)}, missed {len(missed)} {missed}, mis-classed {len(wrong)} {wrong}")
PY
    echo "daemon state left: $(procs | python3 -c 'import json,sys; print(len(json.load(sys.stdin)), "processes")')"
  } > "$W/must3.txt" 2>&1
  cat "$W/must3.txt"
}

# --- latency: last setup call to classed -------------------------------------
part_latency() {
  curl -s http://$MADDR/metrics > "$W/metrics.txt"
  classed_summary "$W/gpreemptd.log" latency > "$W/latency.txt"
  grep -E '^gpreemptd_(classed_latency_seconds_(sum|count)|applies_total|apply_failures_total|drift_total|control_seconds_(sum|count))' "$W/metrics.txt" >> "$W/latency.txt"
  cat "$W/latency.txt"
}

# --- shutdown restores ------------------------------------------------------
part_shutdown() {
  {
    BE=$(start_worker be7 GPREEMPT_CLASS=be -- busy=1); sleep 0.5; show $BE
    # The daemon is the main shell's child: poll here; its exit status
    # goes to parts.txt.
    kill -TERM $DPID; for i in $(seq 150); do kill -0 $DPID 2>/dev/null || break; sleep 0.1; done
    echo "daemon stopped: $(kill -0 $DPID 2>/dev/null && echo no || echo yes)"
    $C/gpreemptctl -o json ps --pid "$BE" | python3 -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print('after stop:', [str(g['timeslice_us'])+'us/'+str(g['interleave']) for g in d['groups']])"
    kill $BE; wait $BE 2>/dev/null
    tail -3 "$W/gpreemptd.log"
  } > "$W/shutdown.txt" 2>&1
  cat "$W/shutdown.txt"
}

# --- must-show 2: the bench, gpreemptctl and daemon side by side ------------
part_bench() {
  rm -rf "$BRUN"; mkdir -p "$BRUN"
  bench_policy > "$W/bench-policy.yaml"
  {
    echo '$ gpreemptd --check-config bench-policy.yaml'
    $C/gpreemptd --check-config "$W/bench-policy.yaml"; echo "rc=$?"
  } > "$W/bench.txt" 2>&1
  start_gpreemptd "$W/gpreemptd-bench.log" "$W/bench-policy.yaml" "$BSOCK" $BMADDR
  local bpid=$DPID
  {
    echo '$ gpreemptctl daemon status'; $C/gpreemptctl daemon status --socket "$BSOCK"
    echo "\$ $(bench_cmd)"
  } >> "$W/bench.txt" 2>&1
  local t0=$SECONDS
  timeout --signal=INT --kill-after=30 "$BENCH_TIMEOUT" $(bench_cmd) > "$W/bench-run.log" 2>&1
  local rc=$?
  echo "gpreempt-bench rc=$rc after $((SECONDS - t0)) s" >> "$W/bench.txt"
  curl -s http://$BMADDR/metrics > "$W/bench-metrics.txt"
  kill -TERM $bpid; wait $bpid; echo "bench daemon exit rc=$?" >> "$W/bench.txt"
  {
    echo "== the daemon's side: contexts classed (last setup call -> classed), drift"
    classed_summary "$W/gpreemptd-bench.log" bench
    grep -E '^gpreemptd_(applies_total|apply_failures_total|drift_total)' "$W/bench-metrics.txt"
    echo "== bench summary and the daemon's classing (results.md)"
    bench_digest "$W/bench" "$W/bench-run.log" "Classed by gpreemptd"
  } >> "$W/bench.txt" 2>&1
  cat "$W/bench.txt"
  copy_results "$W/bench" bench
}

# --- pack for $OUT (at most 8 files come back) ----------------------------------
pack() {
  pack_summary machine.txt check-config.txt daemon-start.txt must1.txt must4.txt must5.txt must3.txt latency.txt shutdown.txt bench.txt parts.txt
  tar -C "$(dirname "$W")" --exclude='*/bench/*/*.json' --exclude='*/bench/*/rep*/*.json' --exclude='*/bench/results.json' \
    -czf "$OUT/daemon-all.tar.gz.tmp" "$(basename "$W")" 2>/dev/null && mv "$OUT/daemon-all.tar.gz.tmp" "$OUT/daemon-all.tar.gz"
}

# --- run the parts -------------------------------------------------------------
if $main_daemon; then
  start_main_daemon
  pack
  for p in must1 must4 must5 must3 latency shutdown; do want $p && run_part $p part_$p; done
  # Without the shutdown part the daemon still goes, restoring its groups.
  if [ -n "$DPID" ]; then
    kill -0 "$DPID" 2>/dev/null && kill -TERM "$DPID"
    wait "$DPID"; echo "daemon exit rc=$?" | tee -a "$W/parts.txt"
  fi
fi
want bench && run_part bench part_bench
if [ -f "$RUN/leftover.pids" ]; then kill $(cat "$RUN/leftover.pids") 2>/dev/null; fi

pack
ls -la "$OUT"
