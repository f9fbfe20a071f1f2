#!/usr/bin/env bash
# gpu-run-self.sh's parts on a machine of several GPUs, one lane per GPU at
# once: lane N runs on GPU N, with its own gpreemptd (DEVICE=N) and its
# own CPUs. Each lane's specs are "PART:SETTINGS:TIMEOUT", separated by ';'
# (SETTINGS as gpu-run-self.sh's SETTINGS; TIMEOUT in seconds). The
# binaries come from .carry/ (make gpu-binaries) or, xz'd, from $XZ_DIR.
#
#   REP=1 LANE0="gpt2-slo:static gate 1us slo beonly:570" \
#     LANE1="llama-slo:static gate 1us slo beonly:575" scripts/gpu-run-lanes.sh
#
# REP<N> (REP1=2) gives lane N its own repetition number, so that one call
# can run two repetitions of the same part, one on each GPU; DURATION<N>
# its own DURATION (gpu-run-self.sh's): SLO mode a long measurement on one
# GPU, the fixed settings beside it on the other. XZ_DIR<N>
# gives lane N its own binaries (xz'd, as XZ_DIR's; scripts/ab-binaries.sh
# makes them of another commit), unpacked into .carry<N>/: an A/B of two
# builds on one part, one on each GPU. DRY_RUN=1 with the same variables
# checks a call on any machine first: each part's plan against its
# TIMEOUT (gpreempt-bench --plan), rc 2 where one would be cut.
#
# A lane's LC workers get two CPUs and its BE workers two (BE_FAR=1: from the far
# end of the list), near its GPU (its local_cpulist) and apart from every other lane's; the daemons are
# not pinned. $OUT gets gpu<N>-<part>-rep<REP>.md per part (with SLO mode's
# measurements replayed by scripts/probe/span_alone.py where it ran) and
# raw-rep<REP>.tgz (logs, status, summaries, each part's results.json.gz
# while the archive stays under 40 MiB). OFFCPU=1 adds offcpu.trace.xz to
# it: each python3 thread's switches off its CPU, wakeups and switches back,
# with the kernel stack of each sleep (scripts/probe/offcpu.py TRACE TID sums them).
# $OUT/irq.txt: each GPU's interrupts by CPU over the call (scripts/probe/irq_delta.py), whether
# its lane's LC CPUs took any, their rates while BE's duty worked and idled, and its vectors'
# CPUs: a GPU's interrupts on an LC's CPU may slow it while BE's work makes them; before them, the
# timer, rescheduling, function-call and TLB-shootdown interrupts of the lane's LC and BE CPUs
# (and the CPUs that took most) while BE worked and idled.
set -u
here=$(dirname "${BASH_SOURCE[0]}") # scripts/
OUT=${OUT:-/tmp/gpreempt-out}
REP=${REP:-1}
mkdir -p .carry "$OUT"
unxz_to() { # unxz_to DIR CARRY: the binaries xz'd in DIR into CARRY/; 1 if one is missing or bad
  mkdir -p "$2" || return 1
  for b in gpreemptd gpreempt-bench gpreemptctl; do # each whole or not at all: a failure leaves the one there
    xz -dc "$1/$b.xz" > "$2/$b.new" && chmod +x "$2/$b.new" && mv -f "$2/$b.new" "$2/$b" || { rm -f "$2/$b.new"; return 1; }
  done
}
if [ -n "${XZ_DIR:-}" ] && ! unxz_to "$XZ_DIR" .carry; then echo "gpu-run-lanes.sh: XZ_DIR=$XZ_DIR: no binaries to unpack" >&2; exit 2; fi
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID # CUDA's ordinals as NVML's
[ -n "${DRY_RUN:-}" ] || nvidia-smi --query-gpu=index,name,pci.bus_id,clocks.sm,power.draw,temperature.gpu --format=csv,noheader

# cpus FILE: the CPU list in FILE (as sysfs writes it: 0-3,8), one per line.
cpus() { tr ',' '\n' < "$1" | while IFS=- read -r a b; do seq "$a" "${b:-$a}"; done; }

# pci_bus N: GPU N's PCI address as sysfs and /proc/interrupts name it (DDDD:BB:DD.F; nvidia-smi pads the
# domain to 8 digits), nothing where nvidia-smi gives none.
pci_bus() {
  local bus
  bus=$(nvidia-smi -i "$1" --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null | tr 'A-Z' 'a-z')
  bus=${bus: -12}
  [[ $bus =~ ^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$ ]] && echo "$bus"
}

irq_delta() { python3 "$here/probe/irq_delta.py" "$@"; }

# local_cpus N: GPU N's local CPUs (every online CPU if unknown).
local_cpus() {
  local bus f=/sys/devices/system/cpu/online
  bus=$(pci_bus "$1")
  [ -n "$bus" ] && [ -r "/sys/bus/pci/devices/$bus/local_cpulist" ] && f=/sys/bus/pci/devices/$bus/local_cpulist
  cpus "$f"
}

# self_part N PART SETTINGS TIMEOUT [VAR=VALUE...] [COMMAND...]: gpu-run-self.sh runs PART on GPU N
# (lane()'s carry, REP and DURATION in scope) under COMMAND (timeout), its own limits inside
# TIMEOUT so that it stops its bench and daemon itself: the bench refuses at once a schedule its
# plan says TIMEOUT would cut (--time-limit), where a run cut keeps nothing of itself.
self_part() {
  local v=${2^^}; v=${v//-/_}
  env "TIMEOUT_$v=$(($4 - 10))" "BENCH_TIMEOUT_$v=$(($4 - 50))" \
    C="$carry" DEVICE=$1 PIN_ARGS="${pins[$1]:-}" SETTINGS="$3" NO_STANDALONE=${NO_STANDALONE-1} PARTS=$2 REP=$REP DURATION="$DURATION" \
    OUT=/tmp/o$1-$2 W=/tmp/w$1-$2 "${@:5}" bash "$here/gpu-run-self.sh"
}

lane() { # lane N SPEC...
  local d=$1 spec part settings tmo rv=REP$1 xv=XZ_DIR$1 dv=DURATION$1 carry=.carry rc=0
  local REP=${!rv:-$REP} DURATION=${!dv:-${DURATION:-}}
  shift
  if [ -n "${!xv:-}" ]; then
    carry=.carry$d
    unxz_to "${!xv}" "$carry" || { echo "gpu$d: $xv=${!xv}: no binaries to unpack"; return 1; }
  fi
  for spec in "$@"; do
    IFS=: read -r part settings tmo <<<"$spec"
    echo "=== gpu$d $part [$settings] rep $REP ${pins[$d]:-} $(date +%T)"
    if [ -n "${DRY_RUN:-}" ]; then self_part "$d" "$part" "$settings" "$tmo" DRY_RUN=1 W="$(mktemp -d)" || rc=2; continue; fi
    self_part "$d" "$part" "$settings" "$tmo" timeout --kill-after=10 "$tmo" > /tmp/o$d-$part.log 2>&1
    echo "gpu$d $part rc=$? $(date +%T)"
    cp /tmp/o$d-$part/summary.md "$OUT/gpu$d-$part-rep$REP.md" 2>/dev/null || tail -30 /tmp/o$d-$part.log
    # SLO mode's measurements replayed on the app's own requests, beside the app's ratio per arm
    local res st=/tmp/w$d-$part/$part-status.jsonl
    res=$(ls /tmp/o$d-$part/*-results.json.gz 2>/dev/null | head -1)
    if [ -n "$res" ] && [ -s "$st" ] && [ -f "$OUT/gpu$d-$part-rep$REP.md" ]; then
      { echo; echo "SLO mode's measurements replayed (scripts/probe/span_alone.py):"
        python3 "$here/probe/span_alone.py" "$res:$st"; } >> "$OUT/gpu$d-$part-rep$REP.md" 2>&1
    fi
  done
  return $rc
}
lanes=()
for ((d = 0; ; d++)); do v=LANE$d; [ -n "${!v:-}" ] || break; lanes+=("${!v}"); done
[ ${#lanes[@]} -gt 0 ] || { echo "gpu-run-lanes.sh: no LANE0 given" >&2; exit 2; }
# DRY_RUN=1: each part's plan (gpu-run-self.sh's, with the bench's --plan against the bench's
# limit in its lane's TIMEOUT), on any machine with the binaries built, nothing started; rc 2
# where a plan is refused or cannot be checked.
if [ -n "${DRY_RUN:-}" ]; then
  rc=0
  for ((d = 0; d < ${#lanes[@]}; d++)); do IFS=';' read -ra specs <<<"${lanes[$d]}"; lane $d "${specs[@]}" || rc=2; done
  exit $rc
fi

# An earlier call on the same machine left its parts here: the archive holds this call's alone.
rm -rf /tmp/lane[0-9]*.log /tmp/lane-clocks.log /tmp/lane-irqs.log /tmp/o[0-9]-* /tmp/w[0-9]-* /tmp/offcpu.trace.xz /tmp/irq-*.txt
cat /proc/interrupts > /tmp/irq-start.txt
irq_start=$(cut -d' ' -f1 /proc/uptime)

# The GPUs' SM clock, power and temperature each second, on the clock the app's requests are
# stamped with (CLOCK_BOOTTIME, CLOCK_MONOTONIC's but for suspend), on CPUs 0,1 (the daemons');
# and the GPUs' interrupt counts by CPU with the CPUs' timer, rescheduling, function-call and
# TLB-shootdown interrupts (lane-irqs.log, for irq_delta.py --series).
taskset -c 0,1 bash -c 'while :; do
  nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits |
    sed "s/^/$(cut -d" " -f1 /proc/uptime), /"
  { echo "@ $(cut -d" " -f1 /proc/uptime)"; awk "NR == 1 || /nvidia/ || /^ *(LOC|RES|CAL|TLB):/" /proc/interrupts; } >> /tmp/lane-irqs.log
  sleep 1
done' > /tmp/lane-clocks.log 2>&1 &
clocks=$!
trap 'kill $clocks 2>/dev/null' EXIT
if [ "${OFFCPU:-0}" = 1 ]; then
  source "$here/lib/offcpu.sh"
  offcpu_start python3
fi

declare -A used=([0]=1 [1]=1) # CPUs 0-1 stay for the daemons and the shell
pins=()
for ((d = 0; d < ${#lanes[@]}; d++)); do
  free=()
  for c in $(local_cpus $d); do [ -n "${used[$c]:-}" ] || free+=("$c"); done
  if [ ${#free[@]} -lt 4 ]; then # too few near it: any free CPUs, else none pinned
    free=()
    for c in $(cpus /sys/devices/system/cpu/online); do [ -n "${used[$c]:-}" ] || free+=("$c"); done
  fi
  if [ ${#free[@]} -lt 4 ]; then echo "lane $d: fewer than 4 free CPUs: not pinned"; pins+=(""); continue; fi
  be=("${free[2]}" "${free[3]}")
  [ "${BE_FAR:-0}" = 1 ] && be=("${free[-2]}" "${free[-1]}") # the list's far end: BE's CPU work slows an LC beside it (cpu-beside-be.sh)
  pins+=("--lc-cpus ${free[0]},${free[1]} --be-cpus ${be[0]},${be[1]}")
  for c in "${free[@]:0:2}" "${be[@]}"; do used[$c]=1; done
done

pids=()
for ((d = 0; d < ${#lanes[@]}; d++)); do
  IFS=';' read -ra specs <<<"${lanes[$d]}"
  lane $d "${specs[@]}" > /tmp/lane$d.log 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
kill $clocks
cat /proc/interrupts > /tmp/irq-end.txt
for ((d = 0; d < ${#lanes[@]}; d++)); do # one GPU's vectors name its PCI address
  bus=$(pci_bus "$d")
  lc=${pins[$d]#--lc-cpus }; lc=${lc%% *}
  be_cpus=${pins[$d]#*--be-cpus }; be_cpus=${be_cpus%% *}
  echo "== GPU $d ($bus), its LC on CPUs ${lc:-unpinned}, BE on ${be_cpus:-unpinned}, persistence mode $(nvidia-smi -i "$d" --query-gpu=persistence_mode --format=csv,noheader 2>/dev/null)"
  # the ticks and IPIs the LC's and BE's CPUs took, by BE's half: what else could slow an LC's CPU while BE works
  for kind in "Local timer" "Rescheduling" "Function call" "TLB shootdowns"; do
    irq_delta --series /tmp/lane-irqs.log --match "$kind" --cpus "${lc:+$lc,$be_cpus}"
  done
  if [ -z "$bus" ]; then echo "  no PCI address from nvidia-smi"; continue; fi
  irq_delta /tmp/irq-start.txt /tmp/irq-end.txt --match "$bus" \
    --cpus "$lc" --seconds "$(awk "BEGIN { print $(cut -d' ' -f1 /proc/uptime) - $irq_start }")"
  irq_delta --series /tmp/lane-irqs.log --match "$bus" --cpus "$lc"
  vectors=$(awk -v b="$bus" 'index($0, b) { sub(":", "", $1); print $1 }' /proc/interrupts)
  [ -n "$vectors" ] || echo "  no vector of it now (without persistence mode the driver removes them once no process holds the GPU)"
  for n in $vectors; do
    echo "  irq $n: effective affinity CPUs $(cat "/proc/irq/$n/effective_affinity_list" 2>/dev/null)" # read, never set
  done
done > "$OUT/irq.txt" 2>&1
{ echo "== every 'nvidia' line"; irq_delta /tmp/irq-start.txt /tmp/irq-end.txt; } >> "$OUT/irq.txt" 2>&1
[ "${OFFCPU:-0}" = 1 ] && offcpu_stop /tmp/offcpu.trace.xz
cat /tmp/lane[0-9]*.log
nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
# Each part's results.json.gz (the app's own requests, the daemon's status) comes back for request-by-request
# analysis, unless that makes the archive too large to carry back.
raw="$OUT/raw-rep$REP${REP1:+-$REP1}.tgz"
mapfile -t kept < <(cd /tmp && ls -d o[0-9]-* w[0-9]-* lane*.log irq-*.txt offcpu.trace.xz 2>/dev/null)
tar -C /tmp -czf "$raw" --exclude='*.json' "${kept[@]}" 2>/dev/null
if [ "$(stat -c %s "$raw")" -gt $((40 << 20)) ]; then
  tar -C /tmp -czf "$raw" --exclude='*.json' --exclude='*.json.gz' "${kept[@]}" 2>/dev/null
fi
for f in "$OUT"/gpu*-rep*.md; do echo "##### $f"; grep -v '^$' "$f" | head -70; done
echo "##### $OUT/irq.txt"; grep -v "^  irq [0-9]*: effective" "$OUT/irq.txt" 2>/dev/null | head -90
