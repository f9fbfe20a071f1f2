#!/usr/bin/env bash
# gpreemptd's node agent on a GPU machine, end to end, as far as one machine
# allows: pod objects from a local API server, GPU processes in the pods'
# cgroups, classed on the real driver, and the bench's LC/BE pair measured.
# As root, from the repo root, with the binaries of `make k8s-carry` in the
# carried folder .k8s/ (all xz-compressed: kube-apiserver, etcd, kubecp,
# gpreemptctl, gpreemptd, gpreempt-bench; ~50 MB, where .carry alone is
# 85 MB uncompressed). Without .k8s/gpreemptd.xz, gpreemptctl, gpreemptd
# and gpreempt-bench are taken from .carry/ (make gpu-binaries).
#
#   scripts/gpu-run-kube.sh             # the whole run (~1-2 minutes)
#   GPUS=2 scripts/gpu-run-kube.sh      # two GPUs: lc-server's workers on GPU 0,
#                                         # be-trainer's on GPU 1 (issue 42)
#   WORKERS=fake scripts/gpu-run-kube.sh  # no GPU: everything but the GPU
#                                         # workers (sleep in their place)
#   DRY_RUN=1 scripts/gpu-run-kube.sh   # print the plan, run nothing
#
# Steps (each under its own time limit):
#   1. unpack the control plane; kubecp starts etcd + kube-apiserver on
#      127.0.0.1 (as test/e2e/k8s does) and creates three pods: lc-server
#      (inference, gpreempt.io/class=lc) and be-trainer (training, be) on
#      this node, elsewhere (training, be) on another node.
#   2. gpreemptd --kubernetes --mode $MODE (bpf) with a kubeconfig for it.
#   3. the other node's pod: a short GPU process in its cgroup, left alone.
#   4. phase "annotated": gpreempt-bench lc in lc-server's cgroup (a
#      $LEAD_IN s lead-in, then $WINDOW measured), gpreempt-bench be in
#      be-trainer's, started in the lead-in; gpreemptctl -o json ps
#      of both (lc: 5 s, be: the policy's $BE_TIMESLICE).
#   5. be-trainer's annotation patched to lc (curl): the running BE's groups
#      re-classed (ps again); then phase "be-as-lc": a fresh pair, both lc.
#   6. Events of both namespaces (curl); summary: LC p50/p99/max, BE
#      kernels/s, per phase.
#
# Each worker is started by a wrapper that moves itself into the pod's
# container cgroup (kubepods.slice/kubepods-burstable.slice/
# kubepods-burstable-pod<UID>.slice/cri-containerd-<ID>.scope, as kubelet's
# systemd driver and containerd name it) and then execs the worker, so the
# CUDA context is created inside the pod. That tree is made under
# $CG_PARENT (default: a private directory under the cgroup2 mount, as the
# e2e test does; the agent matches the kubelet-named part wherever it sits).
#
# GPUS=2 (a machine with two GPUs) puts each pod on a GPU of its own:
# lc-server's workers on GPU 0, be-trainer's on GPU 1, each started with
# CUDA_VISIBLE_DEVICES=<that GPU's UUID> inside the pod (as a device plugin
# gives a container its GPU), and checks with NVML (nvidia-smi) that each
# worker runs on its pod's GPU. Both are still classed by their pod's
# annotation alone; on separate GPUs the "be-as-lc" phase no longer starves
# the LC.
#
# Results: $W (default /tmp/gpreempt-kube-out) holds everything; $OUT gets
# summary.txt and kube-all.tar.gz (logs, policies, ps, events, worker JSONs).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/daemon.sh"
OUT=${OUT:-/tmp/gpreempt-out}
W=${W:-/tmp/gpreempt-kube-out}
K=${K:-.k8s}
RUN=/tmp/gpreempt-kube-run
if [ -e "$K/gpreemptd.xz" ]; then C=${C:-$RUN/assets}; else C=${C:-.carry}; fi
MODE=${MODE:-bpf}
WORKERS=${WORKERS:-gpu}
WINDOW=${WINDOW:-10}          # seconds of LC requests per phase
PERIOD_US=3500                # gpreempt-bench lc's default period
BE_TIMESLICE=${BE_TIMESLICE:-200us}
NODE=${NODE:-gpu-node-a}
OTHER_NODE=gpu-node-b
SOCK=$RUN/gpreemptd.sock
MADDR=127.0.0.1:19481
REQUESTS=$((WINDOW * 1000000 / PERIOD_US))
LEAD_IN=${LEAD_IN:-5}         # seconds the LC runs (unmeasured) before it measures; the BE starts in them
GPUS=${GPUS:-1}               # 2: lc-server on GPU 0, be-trainer on GPU 1
case $GPUS in
  1) LC_GPU=; BE_GPU=;;
  2) LC_GPU=0; BE_GPU=1;;
  *) echo "gpu-run-kube.sh: GPUS=$GPUS: want 1 or 2" >&2; exit 2;;
esac
TIMEOUT_CP=${TIMEOUT_CP:-150}
TIMEOUT_PHASE=$((WINDOW + LEAD_IN + 60))
DRY=${DRY_RUN:-}

daemon_policy() {
  cat <<YAML
version: 1
classes:
  be: {timeslice: $BE_TIMESLICE, interleave: low}
  lc: {timeslice: 5s, interleave: high}
# processes of no annotated pod are left alone
default: none
YAML
}
kube_policy() {
  cat <<'YAML'
maxClass:
  default: lc
YAML
}

cg_mount() { awk '$9 == "cgroup2" {print $5; exit}' FS=' ' /proc/self/mountinfo; }
CG_PARENT=${CG_PARENT:-$(cg_mount)/gpreempt-kube}
# The agent recognises pods only under the kubelet's cgroup root: here the
# tree's parent, as /proc/PID/cgroup names it.
KUBELET_ROOT=/${CG_PARENT#"$(cg_mount)"/}

echo "W=$W OUT=$OUT C=$C K=$K MODE=$MODE WORKERS=$WORKERS WINDOW=${WINDOW}s ($REQUESTS LC requests) BE_TIMESLICE=$BE_TIMESLICE"
echo "node=$NODE other=$OTHER_NODE cgroups under $CG_PARENT GPUS=$GPUS${LC_GPU:+ (lc-server on GPU $LC_GPU, be-trainer on GPU $BE_GPU)}"
if [ -n "$DRY" ]; then
  echo "--- step timeouts: control plane ${TIMEOUT_CP}s, each phase ${TIMEOUT_PHASE}s"
  echo "--- daemon policy:"; daemon_policy
  echo "--- kubernetes policy:"; kube_policy
  echo "--- daemon: $C/gpreemptd --mode $MODE --kubernetes --node-name $NODE --kubelet-cgroup-root $KUBELET_ROOT --kubeconfig $RUN/cp/kubeconfig --kubernetes-policy $RUN/kubernetes.yaml --config $RUN/gpreemptd.yaml --socket $SOCK --metrics-addr $MADDR"
  echo "--- workers: $C/gpreempt-bench be --duration $((WINDOW + 20))s; $C/gpreempt-bench lc --requests $REQUESTS"
  [ "$GPUS" = 2 ] && echo "--- lc-server's workers: CUDA_VISIBLE_DEVICES=<UUID of GPU $LC_GPU>; be-trainer's: CUDA_VISIBLE_DEVICES=<UUID of GPU $BE_GPU>"
  exit 0
fi

[ "$(id -u)" = 0 ] || { echo "gpu-run-kube.sh: run as root (cgroups, the driver's control device)" >&2; exit 2; }
if [ "$GPUS" = 2 ] && [ "$WORKERS" != fake ] && [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -lt 2 ]; then
  echo "gpu-run-kube.sh: GPUS=2 needs two GPUs; nvidia-smi -L lists: $(nvidia-smi -L 2>&1 | tr '\n' ' ')" >&2; exit 2
fi
BINS="kube-apiserver etcd kubecp"
[ "$C" = "$RUN/assets" ] && BINS="$BINS gpreemptctl gpreemptd gpreempt-bench"
for b in $BINS; do
  [ -e "$K/$b.xz" ] || { echo "gpu-run-kube.sh: missing $K/$b.xz (make k8s-carry)" >&2; exit 2; }
done
if [ "$C" != "$RUN/assets" ]; then
  for b in gpreemptctl gpreemptd gpreempt-bench; do
    [ -x "$C/$b" ] || { echo "gpu-run-kube.sh: missing $C/$b (make gpu-binaries)" >&2; exit 2; }
  done
fi
mkdir -p "$OUT"; rm -rf "$W" "$RUN"; mkdir -p "$W" "$RUN/assets" "$RUN/cp"; chmod 0755 "$RUN"
SUMMARY=$W/summary.txt
say() { echo "$*" | tee -a "$SUMMARY"; }
cleanup() {
  for p in $(cat "$RUN/worker.pids" 2>/dev/null); do kill "$p" 2>/dev/null; done
  [ -n "${DPID:-}" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
  [ -n "${CPPID:-}" ] && kill "$CPPID" 2>/dev/null && wait "$CPPID" 2>/dev/null
  sleep 0.5
  [ -d "$CG_PARENT" ] && find "$CG_PARENT" -depth -type d -exec rmdir {} + 2>/dev/null
  cp "$RUN"/*.log "$RUN"/*.yaml "$RUN"/cp/*.log "$W"/ 2>/dev/null
  tar -C "$W" -czf "$OUT/kube-all.tar.gz" . 2>/dev/null
  cp "$SUMMARY" "$OUT/summary.txt" 2>/dev/null
}
trap cleanup EXIT
{ date -u; uname -r; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1; } > "$W/machine.txt"
cat "$W/machine.txt" >> "$SUMMARY"

# --- 1. control plane and pods ----------------------------------------------
t0=$(date +%s.%N)
for b in $BINS; do
  xz -dc "$K/$b.xz" > "$RUN/assets/$b" && chmod 0755 "$RUN/assets/$b" || { say "FAIL unpack $b"; exit 1; }
done
"$RUN/assets/kubecp" -assets "$RUN/assets" -dir "$RUN/cp" -node "$NODE" -other-node "$OTHER_NODE" > "$RUN/kubecp.log" 2>&1 &
CPPID=$!
for i in $(seq $((TIMEOUT_CP * 4))); do [ -e "$RUN/cp/ready" ] && break; kill -0 $CPPID 2>/dev/null || break; sleep 0.25; done
[ -e "$RUN/cp/ready" ] || { say "FAIL control plane not up in ${TIMEOUT_CP}s"; tail -20 "$RUN/kubecp.log" "$RUN"/cp/*.log; exit 1; }
say "control plane up in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s (unpack included)"
. "$RUN/cp/pods.env"
URL=$(cat "$RUN/cp/url"); TOKEN=$(cat "$RUN/cp/token")
api() { curl -sk --max-time 10 -H "Authorization: Bearer $TOKEN" "$@"; }
api "$URL/api/v1/pods" | python3 -c 'import json,sys; [print("pod", p["metadata"]["namespace"]+"/"+p["metadata"]["name"], "node", p["spec"]["nodeName"], "uid", p["metadata"]["uid"], "class", p["metadata"]["annotations"].get("gpreempt.io/class")) for p in json.load(sys.stdin)["items"]]' | tee -a "$SUMMARY"

# --- 2. the agent -------------------------------------------------------------
daemon_policy > "$RUN/gpreemptd.yaml"; kube_policy > "$RUN/kubernetes.yaml"
$C/gpreemptd --mode "$MODE" --kubernetes --node-name "$NODE" --kubelet-cgroup-root "$KUBELET_ROOT" --kubeconfig "$RUN/cp/kubeconfig" \
  --kubernetes-policy "$RUN/kubernetes.yaml" --config "$RUN/gpreemptd.yaml" \
  --socket "$SOCK" --metrics-addr $MADDR --log-level debug > "$RUN/gpreemptd.log" 2>&1 &
DPID=$!
wait_sock "$SOCK" $DPID 20
[ -S "$SOCK" ] || { say "FAIL gpreemptd did not start"; tail -20 "$RUN/gpreemptd.log" | tee -a "$SUMMARY"; exit 1; }
say "gpreemptd up (pid $DPID, mode $MODE): $($C/gpreemptctl daemon status --socket "$SOCK" 2>&1 | tr '\n' ' ')"

# in_pod CGROUP CMD...: make the pod's container cgroup, move a shell into
# it, exec CMD there (before it opens the GPU).
in_pod() {
  local dir=$CG_PARENT/$1; shift
  mkdir -p "$dir" || return 1
  exec sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$dir" "$@"
}
# gpu_uuid INDEX: the UUID of GPU INDEX (nvidia-smi's index, NVML's).
gpu_uuid() { nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$1" | tr -d ' '; }
# worker NAME CGROUP ROLE ARGS...: start a worker in a pod, wait for READY.
# With GPU=INDEX set for the call, the worker sees that GPU alone
# (CUDA_VISIBLE_DEVICES=its UUID, as a device plugin sets it).
worker() {
  local name=$1 cg=$2 role=$3; shift 3
  local envp=()
  [ -n "${GPU:-}" ] && [ "$WORKERS" != fake ] && envp=(env "CUDA_VISIBLE_DEVICES=$(gpu_uuid "$GPU")")
  if [ "$WORKERS" = fake ]; then
    in_pod "$cg" sh -c 'echo READY pid=$$; exec sleep "$0"' "$WINDOW" > "$W/$name.out" 2>&1 &
  else
    in_pod "$cg" "${envp[@]}" $C/gpreempt-bench "$role" "$@" > "$W/$name.out" 2>&1 &
  fi
  local pid=$!; echo $pid >> "$RUN/worker.pids"
  for i in $(seq 240); do grep -q READY "$W/$name.out" 2>/dev/null && break; alive $pid || break; sleep 0.25; done
  grep -q "$CG_PARENT\|$(basename "$cg")" /proc/$pid/cgroup 2>/dev/null \
    && echo "$name: pid $pid in $(grep '^0::' /proc/$pid/cgroup | cut -d: -f3)" >> "$W/placement.txt"
  echo $pid
}
# ps_groups NAME PID: gpreemptctl's read-back of the driver, one line.
# A read-back that finds no group is tried again (4 tries, 0.5 s apart),
# and every failed try is kept in ps-NAME.tries and named in the summary:
# once (H100, 2026-11-22) a BE the daemon had classed read back "no
# /dev/nvidiactl open" a second after READY.
ps_groups() {
  local name=$1 pid=$2 try
  : > "$W/ps-$name.tries"
  for try in 1 2 3 4; do
    $C/gpreemptctl -o json ps --pid "$pid" > "$W/ps-$name.json" 2>&1 && grep -q '"groups"' "$W/ps-$name.json" && break
    { echo "try $try at $(date +%T.%N):"; cat "$W/ps-$name.json"; ls -l /proc/$pid/fd 2>&1 | grep -c nvidia | sed 's/^/nvidia fds listed: /'; } >> "$W/ps-$name.tries"
    sleep 0.5
  done
  [ -s "$W/ps-$name.tries" ] && say "$name pid $pid: read-back failed $(grep -c '^try' "$W/ps-$name.tries") time(s) first: $(sed -n 2p "$W/ps-$name.tries")"
  python3 - "$W/ps-$name.json" "$name" "$pid" <<'PY' | tee -a "$SUMMARY"
import json, sys
path, name, pid = sys.argv[1:]
try:
    d = json.load(open(path))
except Exception as e:
    print(f"{name} pid {pid}: no read-back ({open(path).read().strip()[:200]})"); sys.exit()
d = d[0] if isinstance(d, list) and d else d
gs = d.get("groups", []) if isinstance(d, dict) else []
print(f"{name} pid {pid}:", [f"{g.get('timeslice_us')}us/{g.get('interleave')}" for g in gs])
PY
}
# A worker is started in a command substitution, so it is no child of
# this shell: once it exits it may stay a zombie (state Z) until reaped.
alive() { [ -e /proc/$1/stat ] && [ "$(awk '{print $3}' /proc/$1/stat 2>/dev/null)" != Z ]; }
# expect NAME US: every group of ps-NAME.json at US microseconds.
expect() {
  if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d=d[0] if isinstance(d,list) else d; gs=d["groups"]; sys.exit(0 if gs and all(g["timeslice_us"]==int(sys.argv[2]) for g in gs) else 1)' "$W/ps-$1.json" "$2" 2>/dev/null
  then say "PASS $1: every group at ${2}us"; else say "FAIL $1: want every group at ${2}us"; fi
}
BE_US=${BE_TIMESLICE%us}
# on_gpu NAME PID INDEX: with GPUS=2, whether NVML lists PID on GPU INDEX
# (and on no other).
on_gpu() {
  [ "$GPUS" = 2 ] && [ "$WORKERS" != fake ] || return 0
  local want got
  want=$(gpu_uuid "$3")
  got=$(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | awk -F', *' -v p="$2" '$1 == p {print $2}' | sort -u | tr '\n' ' ')
  if [ "${got% }" = "$want" ]; then say "PASS gpu $1: pid $2 on GPU $3 ($want)"; else say "FAIL gpu $1: pid $2 on '${got% }', want GPU $3 ($want)"; fi
}
wait_pid() { # PID SECONDS
  for i in $(seq $(($2 * 4))); do alive $1 || return 0; sleep 0.25; done
  kill $1 2>/dev/null; return 1
}

# --- 3. the other node's pod ------------------------------------------------
say "== elsewhere (other node's pod): left at the driver's defaults"
O=$(worker other "$OTHER_CGROUP" be --duration 4s --out "$W/be-other.json")
sleep 1; ps_groups other "$O"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d=d[0] if isinstance(d,list) else d; gs=d["groups"]; sys.exit(0 if gs and not any(g["timeslice_us"] in (int(sys.argv[2]), 5000000) for g in gs) else 1)' "$W/ps-other.json" "$BE_US" 2>/dev/null \
  && say "PASS other: left alone" || say "FAIL other: want the driver's defaults"
wait_pid "$O" 20

# --- 4-5. the LC/BE pair -----------------------------------------------------
phase() { # NAME
  local ph=$1
  say "== phase $ph: be-trainer ($(api "$URL/api/v1/namespaces/$BE_NS/pods/$BE_POD" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["annotations"].get("gpreempt.io/class"))')), lc-server (lc), ${WINDOW}s"
  # The LC starts first and runs a lead-in of $LEAD_IN s before it
  # measures; the BE starts inside that lead-in. Started the other way
  # round, a BE classed lc (5 s timeslice) held the LC's context creation
  # and warm-up until the BE ended (H100, 2026-11-22): the LC then
  # measured a GPU of its own.
  L=$(GPU=$LC_GPU worker lc-$ph "$LC_CGROUP" lc --requests $REQUESTS --lead-in ${LEAD_IN}s --out "$W/lc-$ph.json")
  B=$(GPU=$BE_GPU worker be-$ph "$BE_CGROUP" be --duration $((WINDOW + LEAD_IN + 10))s --out "$W/be-$ph.json")
  sleep 1; ps_groups be-$ph "$B"; ps_groups lc-$ph "$L"
  on_gpu lc-$ph "$L" "${LC_GPU:-0}"; on_gpu be-$ph "$B" "${BE_GPU:-0}"
  expect lc-$ph 5000000
  if [ $ph = annotated ]; then expect be-$ph "$BE_US"; else expect be-$ph 5000000; fi
  wait_pid "$L" $TIMEOUT_PHASE || say "phase $ph: lc worker past ${TIMEOUT_PHASE}s, killed"
  overlap $ph
}
# overlap PHASE: how much of the LC's measurement ran while the BE ran,
# from the workers' own records: the BE's "be ready" log line to its
# "be done" (or now, if it still runs), and the LC's measured requests
# (lc-PHASE.json; the lead-in before them is not kept). Both pods lc at a
# 5 s timeslice starve each other (H100, 2026-11-22: the LC's context
# creation, or its lead-in, waited out the BE's whole run): "be-as-lc"
# reports that, "annotated" must overlap fully.
overlap() {
  [ "$WORKERS" = fake ] && return
  python3 - "$W" "$1" "$(alive "$B" && echo running)" <<'PY' | tee -a "$SUMMARY"
import datetime, json, re, sys, time
w, ph, running = sys.argv[1:]
def at(path, msg):
    m = re.search(r'time=(\S+) level=\S+ msg="' + msg + '"', open(path).read())
    return datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp() if m else None
b0, b1 = at(f"{w}/be-{ph}.out", "be ready"), at(f"{w}/be-{ph}.out", "be done")
if b1 is None and running:
    b1 = time.time()
try:
    lc = json.load(open(f"{w}/lc-{ph}.json"))
    # mono -> wall: the LC's last request ended at "lc done"
    l1 = at(f"{w}/lc-{ph}.out", "lc done")
    off = l1 - lc["measure_end_mono_ns"] / 1e9
    arr = [s["arrival_mono_ns"] / 1e9 + off for s in lc["samples"]]
except Exception as e:
    print(f"FAIL overlap-{ph}: no LC record ({e})"); sys.exit()
if b0 is None or b1 is None:
    print(f"FAIL overlap-{ph}: no BE run in its log"); sys.exit()
inside = sum(1 for a in arr if b0 <= a <= b1)
tag = "PASS" if inside == len(arr) else ("INFO" if ph != "annotated" else "FAIL")
hms = lambda t: datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M:%S.%f")[:12]
print(f"{tag} overlap-{ph}: {inside} of {len(arr)} measured LC requests arrived while the BE ran (BE {hms(b0)}-{hms(b1)}{' and on' if running else ''}, LC {hms(arr[0])}-{hms(arr[-1])})")
PY
}
phase annotated
say "== be-trainer annotated lc (JSON merge patch); the running BE re-classed"
api -X PATCH -H 'Content-Type: application/merge-patch+json' \
  -d '{"metadata":{"annotations":{"gpreempt.io/class":"lc"}}}' \
  "$URL/api/v1/namespaces/$BE_NS/pods/$BE_POD" > /dev/null
sleep 2; ps_groups be-annotated-after-patch "$B"; expect be-annotated-after-patch 5000000
kill -INT "$B" 2>/dev/null; wait_pid "$B" 20
phase be-as-lc
kill -INT "$B" 2>/dev/null; wait_pid "$B" 20

# --- 6. events and summary ----------------------------------------------------
say "== be-trainer annotated with an unknown class: refused, with a Warning Event"
api -X PATCH -H 'Content-Type: application/merge-patch+json' \
  -d '{"metadata":{"annotations":{"gpreempt.io/class":"platinum"}}}' \
  "$URL/api/v1/namespaces/$BE_NS/pods/$BE_POD" > /dev/null
sleep 2
grep -E '"pod class"|annotation refused' "$RUN/gpreemptd.log" | sed 's/^time=[^ ]* //' | tee -a "$SUMMARY"
for ns in "$LC_NS" "$BE_NS"; do api "$URL/api/v1/namespaces/$ns/events"; done > "$W/events.json"
python3 - "$W/events.json" <<'PY' | tee -a "$SUMMARY"
import json, sys
text = open(sys.argv[1]).read()
dec, i, n, reasons = json.JSONDecoder(), 0, 0, set()
while i < len(text):
    while i < len(text) and text[i].isspace(): i += 1
    if i >= len(text): break
    obj, i = dec.raw_decode(text, i)
    for e in obj.get("items", []):
        n += 1
        reasons.add(e["reason"])
        io = e["involvedObject"]
        print(f"event {e['type']} {e['reason']} {io['namespace']}/{io['name']}: {e['message']}")
print(f"events: {n}")
for r in ("GPUClassed", "GPUClassRefused"):
    print(f"PASS event {r}" if r in reasons else f"FAIL event {r}: none recorded")
PY
python3 - "$W" <<'PY' | tee -a "$SUMMARY"
import json, os, sys
w = sys.argv[1]
def load(p):
    try: return json.load(open(os.path.join(w, p)))
    except Exception: return None
for ph in ("annotated", "be-as-lc"):
    lc, be = load(f"lc-{ph}.json"), load(f"be-{ph}.json")
    line = f"{ph:10s}"
    if lc and lc.get("samples"):
        l = sorted(s["latency_ns"] for s in lc["samples"])
        q = lambda f: l[min(len(l) - 1, int(f * len(l)))] / 1000
        line += f"  LC n={len(l)} p50={q(.5):.0f}us p99={q(.99):.0f}us max={l[-1]/1000:.0f}us late={lc.get('late')}"
    else:
        line += "  LC: no result"
    line += f"  BE {be['kernels_per_sec']:.1f} kernels/s" if be else "  BE: no result"
    print(line)
PY
say "placement:"; cat "$W/placement.txt" >> "$SUMMARY" 2>/dev/null
grep -iE "error|refus|warn" "$RUN/gpreemptd.log" | tail -20 > "$W/daemon-warnings.txt"
exit 0
