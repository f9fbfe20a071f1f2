#!/usr/bin/env bash
# Issue 11 on the GPU machine, as root, from the repo root with the binaries
# of `make gpu-binaries` in .carry/: gpreemptd's must-shows 1 (classing of
# new contexts by env var and by comm, BE restarted 5 times, LC and BE in
# both orders, time from last setup call to classed), 3 (shortened churn:
# 50 short CUDA processes, fds and RSS before/after) and 4 (non-root
# processes through the socket). Results under $OUT. About 3-4 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"
C=${C:-.carry}
CHURN=${CHURN:-50}
RUN=/tmp/gpreemptd-run; rm -rf "$RUN"; mkdir -p "$RUN"; chmod 0755 "$RUN"
SOCK=$RUN/gpreemptd.sock
MADDR=127.0.0.1:19477
{
  date -u; uname -r; nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

cat > "$OUT/policy.yaml" <<'YAML'
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
  # the inference server is known by its name
  - name: lc-by-comm
    match: {comm: "lc-server"}
    class: lc
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

# --- the daemon -----------------------------------------------------------
$C/gpreemptd --check-config "$OUT/policy.yaml" > "$OUT/check-config.txt" 2>&1; echo "rc=$?" >> "$OUT/check-config.txt"
printf 'rules:\n  - class: be\n    clas: lc\n' > "$RUN/bad.yaml"
$C/gpreemptd --check-config "$RUN/bad.yaml" >> "$OUT/check-config.txt" 2>&1; echo "rc=$?" >> "$OUT/check-config.txt"
cat "$OUT/check-config.txt"
$C/gpreemptd --config "$OUT/policy.yaml" --socket "$SOCK" --metrics-addr $MADDR --log-level debug > "$OUT/gpreemptd.log" 2>&1 &
DPID=$!
for i in $(seq 40); do [ -S "$SOCK" ] && break; sleep 0.25; done
{
  echo '$ second daemon on the same socket'; $C/gpreemptd --config "$OUT/policy.yaml" --socket "$SOCK" --metrics-addr 127.0.0.1:19478; echo "rc=$?"
  echo '$ gpreemptctl daemon status'; $C/gpreemptctl daemon status --socket "$SOCK"
  echo '$ gpreemptctl daemon classes'; $C/gpreemptctl daemon classes --socket "$SOCK"
} > "$OUT/daemon-start.txt" 2>&1
cat "$OUT/daemon-start.txt"

# --- must-show 1: LC then BE x5, then BE then LC ----------------------------
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
  echo "== shutdown restores the driver defaults (a second daemon instance on these two)"
  $C/gpreemptctl daemon status --socket "$SOCK"
} > "$OUT/must1.txt" 2>&1
cat "$OUT/must1.txt"

# --- must-show 4: non-root processes through the socket ---------------------
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
  echo "== daemon log: refusals"; grep refused "$OUT/gpreemptd.log"
} > "$OUT/must4.txt" 2>&1
cat "$OUT/must4.txt"

# --- must-show 5 (only with two GPUs): a per-GPU rule ----------------------
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$NGPU" -ge 2 ]; then
  {
    cp "$OUT/policy.yaml" "$RUN/policy-1gpu.yaml"
    python3 - "$OUT/policy.yaml" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
s = s.replace("rules:\n", "rules:\n  - name: gpu0-be\n    match: {comm: pergpu, gpu: 0}\n    class: be\n  - name: gpu1-burstable\n    match: {comm: pergpu, gpu: 1}\n    class: burstable\n", 1)
open(p, "w").write(s)
PY
    curl -s --unix-socket "$SOCK" -XPOST http://d/v1/reload; echo
    G0=$(start_worker g0 CUDA_VISIBLE_DEVICES=0 -- comm=pergpu); G1=$(start_worker g1 CUDA_VISIBLE_DEVICES=1 -- comm=pergpu)
    sleep 1; show $G0; show $G1
    kill $G0 $G1; wait $G0 $G1 2>/dev/null
  } > "$OUT/must5.txt" 2>&1
  cat "$OUT/must5.txt"
fi

# --- must-show 3 (shortened): churn -----------------------------------------
{
  sleep 1; echo "before: $(dstat)"
  : > "$RUN/churn.pids"
  for i in $(seq $CHURN); do
    python3 "$RUN/worker.py" comm=churn life=0.5 > "$RUN/churn$i.out" 2>&1 &
    echo $! >> "$RUN/churn.pids"
    [ $((i % 5)) -eq 0 ] && wait
  done
  wait; sleep 2
  echo "after:  $(dstat)"
  python3 - "$OUT/gpreemptd.log" "$RUN/churn.pids" <<'PY'
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
} > "$OUT/must3.txt" 2>&1
cat "$OUT/must3.txt"

# --- latency: last setup call to classed -------------------------------------
curl -s http://$MADDR/metrics > "$OUT/metrics.txt"
python3 - "$OUT/gpreemptd.log" > "$OUT/latency.txt" <<'PY'
import re, sys
v = []
for m in re.finditer(r'msg=classed .*after_setup=(\S+) new_context=true', open(sys.argv[1]).read()):
    s = m.group(1)
    for unit, f in (("ms", 1e-3), ("µs", 1e-6), ("us", 1e-6), ("ns", 1e-9), ("s", 1)):
        if s.endswith(unit):
            v.append(float(s[:-len(unit)]) * f * 1e3); break
v.sort()
q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
print(f"classed contexts: {len(v)}; last setup call -> classed: p50 {q(.5):.1f} ms, p99 {q(.99):.1f} ms, max {v[-1]:.1f} ms (goal p99 <= 100 ms)" if v else "no classed contexts")
PY
grep -E '^gpreemptd_(classed_latency_seconds_(sum|count)|applies_total|apply_failures_total|drift_total|control_seconds_(sum|count))' "$OUT/metrics.txt" >> "$OUT/latency.txt"
cat "$OUT/latency.txt"

# --- shutdown restores ------------------------------------------------------
{
  BE=$(start_worker be7 GPREEMPT_CLASS=be -- busy=1); sleep 0.5; show $BE
  kill -TERM $DPID; wait $DPID; echo "daemon exit rc=$?"
  $C/gpreemptctl -o json ps --pid "$BE" | python3 -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print('after stop:', [str(g['timeslice_us'])+'us/'+str(g['interleave']) for g in d['groups']])"
  kill $BE; wait $BE 2>/dev/null
  tail -3 "$OUT/gpreemptd.log"
} > "$OUT/shutdown.txt" 2>&1
cat "$OUT/shutdown.txt"
