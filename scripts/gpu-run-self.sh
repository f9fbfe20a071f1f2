#!/usr/bin/env bash
# Issue 51's must-shows on the GPU machine: each LC compared with itself
# (BE works half of every 8 s and idles the other half; --be-duty), as
# root, from the repo root with the binaries of `make gpu-binaries` in
# .carry/. Each part starts its own gpreemptd and runs one gpreempt-bench
# whose scenarios are the settings side by side; gpreemptd runs each under
# its own policy (--daemon-policy, reloaded between scenarios):
#
#   static   <lc>-be-200us               gpreemptctl class: lc, be 200us
#   gate     daemon:<lc>-be-200us#gate    classed by gpreemptd, gate: {mode: on}
#   1us      <lc>-be-1us                  gpreemptctl class: lc, be 1us
#   slo      slo:<lc>-defaults            SLO mode, p50<=1.10x, gate auto
#   abs      slo:<lc>-defaults#abs        SLO mode, p50 <= 1.15 x the p50 of
#                                          its own LC's requests in BE's idle
#                                          halves before its lead-in (llm-*:
#                                          @OWN_P50@), else of this run's
#                                          <lc>-standalone
#
# The LC parts (traced: gpreemptd --trace-requests, the LC pushes nothing;
# a part is one repetition, ~9 min at most; run it once per repetition,
# REP=1, 2, 3, which rotates the settings' order between calls):
#
#   gpt2-fixed   GPT-2-medium shape, eager, 64-token prompt, 16 new tokens,
#                one request every 800 ms: standalone, static, gate, 1us,
#                be-only (~5.5 min)
#   gpt2-slo     the same LC: standalone, slo, abs (~6 min)
#   llama-fixed  Llama shape ~330M (24 layers, 1024 wide, GQA 16/4, 2816
#                MLP), batch 2, 128-token prompt, 32 new tokens, one request
#                a second: standalone, static, gate, 1us, be-only (~6.5 min)
#   llama-slo    the same LC: standalone, slo, abs (~7 min)
#   eager        resnet50 eager every 20 ms beside resnet50 training: every
#                setting and be-only (~5 min)
#   graph        resnet50 CUDA graph every 20 ms beside training (--be-duty
#                given, so its BE idles too): every setting (~5 min)
#   pushed       GPT-2 shape, one request a second, the LC pushes its
#                windows (Python Reporter), tpot_p50<=1.10x; no trace:
#                static, slo, be-only (~4.5 min)
#   scraped      GPT-2 shape every 800 ms serving vLLM-named histograms
#                (--llm-metrics-port); gpreemptd scrapes them (a rule's
#                latency: {metrics: ..., preset: vllm}); no push, no trace:
#                static, slo, be-only. vLLM's request buckets are
#                too coarse for p50<=1.10x: SLO mode refuses it (docs/SLO.md)
#                (~4.5 min)
#   scraped-fine the same, from the LC's own request histogram in buckets 5%
#                apart (latency: {metrics: ..., request:
#                app_request_latency_seconds}) (~4.5 min; the scraped parts
#                lead in for 60 s)
#   scraped-llama the Llama shape (as llama-*) serving the same histograms,
#                judged by its fine request histogram as scraped-fine;
#                its lead-in 120 s (~6.5 min)
#   scraped-graph the same LC decoding by a CUDA graph over a static KV
#                cache, as LLM servers decode (the llm-graph- scenarios): one
#                launch a token, so that its CPU core's speed, which moves
#                an eager LC's, should move it less (~4.5 min)
#   steady       the pushed LC (one request a second, 16 tokens,
#                tpot_p50<=1.10x) under SLO mode alone for 460 s after the
#                lead-in (its search converges in 4-5 minutes in the
#                simulator, then three to count): the report's arm line
#                gives the changes after the search converged, each by its
#                cause, and the most in any 30 s, its daemon table when the
#                first window counted and the most BE was stopped in a minute
#                (~9 min: STEADY:575; at 480 s its bench took 522-525 s, past
#                the 525 s a 575 s lane gives it)
#
#   PARTS=gpt2-fixed REP=1 scripts/gpu-run-self.sh
#   PARTS=gpt2-slo REP=1 scripts/gpu-run-self.sh
#
# Each run holds >= 30 LC requests in each half (the bench lengthens it);
# the report's duty table gives each repetition's p50 ratio (BE working /
# BE idle) with its bootstrap CI, and for slo scenarios the daemon's
# latency source and p50 beside the app's (within ±10%).
#
# DURATION=100s measures the scraped and decode parts' runs that long (more
# requests a half, a narrower interval, a longer measurement for SLO mode to
# settle in; the bench's floor is 30 a half). BEONLY_DURATION=60s measures the
# be-only baseline (a rate) that long instead, so that DURATION=400s of SLO
# mode and its baseline fit one call.
# SETTINGS="static slo" runs those settings alone, NO_STANDALONE=1 drops the
# standalone run (the ratios are within each process; abs needs it).
# DRY_RUN=1 prints the plan (policies, bench commands); PIN_ARGS pins the
# workers (--lc-cpus 2-3 --be-cpus 4-5). Results: $W (default
# /tmp/gpreempt-self-out); $OUT gets summary.md, summary.txt,
# self-all.tar.gz and per part <part>-rep<REP>-results.md/.json.gz,
# rewritten as each part ends.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/parts.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/daemon.sh"
OUT=${OUT:-/tmp/gpreempt-out}
W=${W:-/tmp/gpreempt-self-out}
C=${C:-.carry}
REP=${REP:-1}
# DEVICE=N runs the part on GPU N with its own gpreemptd (run directory,
# socket, ports), whose policy classes only that device's workers: two
# parts can run at once, one on each GPU of a two-GPU machine.
DEVICE=${DEVICE:-0}
export GPREEMPT_BENCH_DEVICE=$DEVICE # the bench's --device; its workers inherit it
BRUN=/tmp/gpreemptd-self$DEVICE
BSOCK=$BRUN/gpreemptd.sock
BCONF=$BRUN/policy.yaml
BMADDR=127.0.0.1:$((19482 + DEVICE))
METRICS_PORT=${METRICS_PORT:-$((18080 + DEVICE))}
PIN_ARGS=${PIN_ARGS:-}
# lead_in P: how long SLO mode runs before the measurement. A scraped LC's requests are its
# samples: its reference needs 20 of them while BE idles, ~40 s at 1.25 a second under the duty,
# and with 16 s SLO mode spent half the measurement on its first arm (docs/SLO.md).
# The Llama decode, a request a second, runs ~3 alone a duty period: 20 take ~45-55 s, and its
# one exploration came back 85-134 s in on the H200 (reps 90-92), so 120 s.
lead_in() { case $1 in scraped-llama) echo "${LEAD_IN:-120s}";; scraped*) echo "${LEAD_IN:-60s}";; *) echo "${LEAD_IN:-16s}";; esac; }
ALL_PARTS="gpt2-fixed gpt2-slo llama-fixed llama-slo eager graph pushed scraped scraped-fine scraped-llama scraped-graph steady"
# Bench limits under one 10-minute call; a part's own is 40 s more.
for p in $ALL_PARTS; do
  v=$(part_var "$p" BENCH_TIMEOUT); printf -v "$v" %s "${!v:-520}"
  v=$(part_var "$p"); [ -n "${!v:-}" ] || printf -v "$v" %s "$(( $(part_timeout "$p" BENCH_TIMEOUT) + 40 ))"
done
select_parts gpu-run-self.sh gpt2-fixed "$ALL_PARTS" "$@"
echo "parts:$sel rep $REP"

# runtime P: the scenarios' runtime prefix; workload P: its bench flags.
runtime() { case $1 in scraped-graph) echo llm-graph;; gpt2-*|llama-*|pushed|scraped*|steady) echo llm;; eager) echo pytorch-eager;; graph) echo pytorch;; esac; }
# LLAMA: the Llama-shaped decode's bench flags, traced (llama-*) and scraped alike.
LLAMA="--llm-family llama-330m --llm-batch 2 --llm-prompt 128 --llm-new-tokens 32 --llm-period 1s"
workload() {
  case $1 in
    gpt2-*) echo --llm-family gpt2 --llm-prompt 64 --llm-new-tokens 16 --llm-period 800ms ${DURATION:+--duration $DURATION};;
    llama-*) echo $LLAMA ${DURATION:+--duration $DURATION};;
    pushed) echo --llm-family gpt2 --llm-prompt 64 --llm-new-tokens 16 --llm-period 1s;;
    steady) echo --llm-family gpt2 --llm-prompt 64 --llm-new-tokens 16 --llm-period 1s --duration 460s;;
    scraped-llama) echo $LLAMA --llm-metrics-port $METRICS_PORT --slo-push=false ${DURATION:+--duration $DURATION};;
    scraped*) echo --llm-family gpt2 --llm-prompt 64 --llm-new-tokens 16 --llm-period 800ms --llm-metrics-port $METRICS_PORT --slo-push=false ${DURATION:+--duration $DURATION};;
    eager) echo --pytorch-period 20ms;;
    graph) echo --pytorch-period 20ms --be-duty 8s;;
  esac
  case $1 in gpt2-*|llama-*|eager|graph) echo --slo-push=false;; esac
}
# settings P: the part's settings, rotated by REP so that repetitions made
# by separate calls alternate their order; the standalone run stays first
# (a non-LLM abs objective is taken from it) and be-only next.
settings() {
  local s
  case $1 in
    *-fixed) s="static gate 1us";;
    *-slo) s="slo abs";;
    eager|graph) s="static gate 1us slo abs";;
    pushed|scraped*) s="static slo";;
    steady) s="slo";;
  esac
  s=${SETTINGS:-$s} # SETTINGS="static slo" runs those alone (a shorter call)
  # be-only runs first wherever it is named (scenarios): rotated with the rest, two REPs in a row
  # would run the same order
  local a=() n i out=""
  for i in $s; do [ "$i" = beonly ] && out=" beonly" || a+=("$i"); done
  n=${#a[@]}
  for ((i = n - 1; i >= 0; i--)); do out=" ${a[$(( (i + REP - 1) % n ))]}$out"; done
  echo $out
}
scenario() {
  local rt; rt=$(runtime "$1")
  case $2 in
    standalone) echo $rt-standalone;; beonly) echo $rt-be-only;;
    static) echo $rt-be-200us;; gate) echo daemon:$rt-be-200us#gate;; 1us) echo $rt-be-1us;;
    slo) echo slo:$rt-defaults;; abs) echo slo:$rt-defaults#abs;;
  esac
}
scenarios() {
  local p=$1 list=() s set=" $(settings $1) "
  # the standalone run: wanted unless NO_STANDALONE, and always for a non-LLM abs (its objective comes from it)
  case $p in pushed|scraped*|steady) ;; *)
    if [ -z "${NO_STANDALONE:-}" ] || [[ $set == *" abs "* && $p != gpt2-* && $p != llama-* ]]; then list+=("$(scenario $p standalone)"); fi;;
  esac
  # be-only (BE's rate alone, every share's baseline) before the settings,
  # so that a part cut short by its time limit loses a setting, not it;
  # the slo and steady parts run it only when SETTINGS names it.
  if [[ $set == *" beonly "* ]] || [[ $p != *-slo && $p != steady ]]; then list+=("$(scenario $p beonly)"); fi
  for s in $set; do [ "$s" = beonly ] || list+=("$(scenario $p $s)"); done
  local IFS=,; echo "${list[*]}"
}

# The policies: workers of daemon: and slo: scenarios carry
# GPREEMPT_CLASS; those of the others carry nothing and are left alone.
policy() { # policy PART KIND (plain, gate, slo, abs, alone)
  local obj="p50<=1.10x" rules=""
  case $1 in pushed|steady) obj="tpot_p50<=1.10x";; esac
  # an LLM LC's from its own requests alone (another process's alone moves 20-80%)
  [ "$2" = abs ] && case $1 in gpt2-*|llama-*) obj="p50<=@OWN_P50*1.15@";; *) obj="p50<=@ALONE_P50*1.15@";; esac
  # while those run: SLO mode on (BE's rate alone learnt), held at 200us, started afresh after
  [ "$2" = alone ] && obj="p50<=1h"
  local latency="preset: vllm"
  case $1 in scraped-fine|scraped-llama|scraped-graph) latency="request: app_request_latency_seconds";; esac
  case $1 in scraped*)
    rules="  - name: scraped
    match: {env: {GPREEMPT_BENCH_WORKER: lc, GPREEMPT_BENCH_DEVICE: \"$DEVICE\"}}
    class: lc
    latency: {metrics: \"http://127.0.0.1:$METRICS_PORT/metrics\", $latency}
";;
  esac
  cat <<YAML
version: 1
classes:
  be: {timeslice: 200us, interleave: low}
  lc: {timeslice: 5s, interleave: high, objective: "$obj"}
default: none
rules:
$rules  - name: from-env
    match: {env: {GPREEMPT_CLASS: "*", GPREEMPT_BENCH_DEVICE: "$DEVICE"}}
    class_from_env: GPREEMPT_CLASS
requests:
  default_max: lc
YAML
  case $2 in
    gate) echo "gate: {mode: on}";;
    slo|abs|alone) # alone: the same SLO mode, held at 200us while the LC's alone is taken
      printf 'gate: {mode: auto}\nslo:\n  enabled: true\n  window: 1s\n  safe: 200us\n  calibrate: pause\n'
      if [ "$2" = alone ]; then echo '  ladder: [200us]'; fi;;
  esac
}
bench_cmd() {
  local p=$1 pol="" s
  for s in gate slo abs; do
    case " $(settings $p) " in *" $s "*) pol="$pol --daemon-policy $(scenario $p $s)=$W/$p-$s.yaml";; esac
  done
  case "$p: $(settings $p) " in gpt2-*" abs "*|llama-*" abs "*) pol="$pol --own-alone-policy $W/$p-alone.yaml";; esac
  echo $C/gpreempt-bench run --gpreemptctl $C/gpreemptctl --daemon-socket $BSOCK --daemon-config $BCONF \
    --daemon-policy default=$W/$p-plain.yaml$pol --scenarios "$(scenarios $p)" $(workload $p) $PIN_ARGS \
    --slo-lead-in $(lead_in $p) ${BEONLY_DURATION:+--be-only-duration $BEONLY_DURATION} --repeat 1 --out $W/$p \
    --time-limit "$(part_timeout $p BENCH_TIMEOUT)s"
}
daemon_args() { echo --be-progress=true; case $1 in pushed|scraped*|steady) ;; *) echo --trace-requests;; esac; }

write_policies() {
  local k
  for k in plain gate slo abs alone; do policy "$1" $k > "$W/$1-$k.yaml"; done
}

# DRY_RUN=1: the plan, nothing started: the policies, the bench's command and its runs' planned
# times (the bench in $C, --plan); rc 2 where they outlast the bench's limit or no bench is there.
if [ -n "${DRY_RUN:-}" ]; then
  mkdir -p "$W"
  rc=0
  for p in $sel; do
    echo "=== part $p (rep $REP): timeout $(part_timeout $p)s"
    write_policies $p
    for k in plain gate slo abs alone; do echo "--- $k policy:"; cat "$W/$p-$k.yaml"; done
    echo "--- gpreemptd $(daemon_args $p | tr '\n' ' ')"
    echo "--- bench: $(bench_cmd $p)"
    if [ -x "$C/gpreempt-bench" ]; then $(bench_cmd $p) --plan 2>&1 || rc=2
    else echo "gpu-run-self.sh: no $C/gpreempt-bench: plan not checked (make gpu-binaries)"; rc=2; fi
  done
  exit $rc
fi

rm -rf "$W"; mkdir -p "$OUT" "$W"
write_machine

run_self_part() {
  local p=$1 f="$W/$1.txt"
  rm -rf "$BRUN"; mkdir -p "$BRUN"; chmod 0755 "$BRUN"
  write_policies $p
  cp "$W/$p-plain.yaml" "$BCONF"
  { echo "\$ gpreemptd --check-config (each policy; abs with its placeholder filled)"
    for k in plain gate slo abs alone; do sed 's/@\(ALONE\|OWN\)_P50[^@]*@/900ms/' "$W/$p-$k.yaml" > "$W/$p-$k.check.yaml"
      $C/gpreemptd --check-config "$W/$p-$k.check.yaml" > /dev/null; echo "$k rc=$?"; done; } > "$f" 2>&1
  start_gpreemptd "$W/$p-gpreemptd.log" "$BCONF" "$BSOCK" $BMADDR $(daemon_args $p)
  local dpid=$DPID
  poll_status "$BSOCK" $dpid > "$W/$p-status.jsonl" 2>/dev/null &
  local spid=$! t0=$SECONDS
  echo "\$ $(bench_cmd $p)" >> "$f"
  timeout --signal=INT --kill-after=30 "$(part_timeout $p BENCH_TIMEOUT)" $(bench_cmd $p) > "$W/$p-bench-run.log" 2>&1
  echo "gpreempt-bench rc=$? after $((SECONDS - t0)) s" >> "$f"
  curl -s http://$BMADDR/metrics > "$W/$p-metrics.txt"
  kill -TERM $dpid; wait $dpid; echo "daemon exit rc=$?" >> "$f"
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
  { echo "== bench summary"; bench_digest "$W/$p" "$W/$p-bench-run.log" "gpreemptd SLO mode"; } >> "$f" 2>&1
  cat "$f"
  copy_results "$W/$p" "$p-rep$REP"
  self_summary "$p" >> "$W/summary.md"
}

# self_summary P: the part's markdown: its command, the summary table,
# the within-process tables and the daemon's view, from results.md.
self_summary() {
  local md="$W/$1/results.md"
  echo "## $1, repetition $REP"; echo
  echo '```'; bench_cmd "$1"; echo '```'; echo
  if [ -f "$md" ]; then
    awk '/^\| scenario \| reps/{f=1} f&&/^$/{exit} f' "$md"; echo
    awk '/^Within each LC process|^gpreemptd.s view/{f=1} /^GPU during|^Host CPUs|^Every run/{f=0} f' "$md"
    awk '/^gpreemptd SLO mode/{f=1} f&&/^$/&&n++{exit} f' "$md" # each run's arms and changes
  else
    echo "no results.md:"; echo; tail -5 "$W/$1-bench-run.log" | sed 's/^/    /'
  fi
  echo
}

pack() {
  [ -f "$W/summary.md" ] && cp "$W/summary.md" "$OUT/summary.md"
  pack_summary machine.txt $(for p in $ALL_PARTS; do echo $p.txt; done) parts.txt
  tar -C "$(dirname "$W")" --exclude='*/*/*.json' --exclude='*/results.json' \
    -czf "$OUT/self-all.tar.gz.tmp" "$(basename "$W")" 2>/dev/null && mv "$OUT/self-all.tar.gz.tmp" "$OUT/self-all.tar.gz"
}

echo "# Self-comparison must-shows (scripts/gpu-run-self.sh), $(date -u +%F)" > "$W/summary.md"
for p in $ALL_PARTS; do
  want $p && run_part $p run_self_part $p
done
pack
ls -la "$OUT"
