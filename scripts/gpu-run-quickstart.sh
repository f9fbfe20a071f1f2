#!/usr/bin/env bash
# The README's daemon quickstart on the GPU machine, as root from the repo
# root, with the binaries of `make gpu-binaries` in .carry (they stand in
# for `make build && make install`: the GPU machine has no Go). It runs
# the README's commands as written, without systemd (the README's
# "Without systemd" form), and reads the daemon's status every 10 ms from
# the BE's start until the BE is listed with its class: the transcript and
# the time to class go to $OUT/quickstart.txt.
set -uo pipefail
OUT=${OUT:-/tmp/quickstart-out}; mkdir -p "$OUT" bin
T=$OUT/quickstart.txt
cp .carry/gpreemptd .carry/gpreemptctl .carry/gpreempt-bench bin/
export PATH=$PWD/bin:$PATH
say() { echo "\$ $*" >> "$T"; }
{ echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"; } > "$T"
say "gpreemptd --version"; bin/gpreemptd --version >> "$T" 2>&1
say "gpreemptd --check-config deploy/gpreemptd.yaml"; bin/gpreemptd --check-config deploy/gpreemptd.yaml >> "$T" 2>&1
say "bin/gpreemptd --config deploy/gpreemptd.yaml &"
bin/gpreemptd --config deploy/gpreemptd.yaml > "$OUT/gpreemptd.log" 2>&1 &
D=$!
for i in $(seq 200); do [ -S /run/gpreempt/gpreemptd.sock ] && break; sleep 0.05; done
say "GPREEMPT_CLASS=be bin/gpreempt-bench be --duration 60s --out /dev/null &"
t0=$(date +%s%N)
GPREEMPT_CLASS=be bin/gpreempt-bench be --duration 20s --out /dev/null > "$OUT/be.log" 2>&1 &
BE=$!
# Poll: the first read that lists the BE's pid with a class.
classed=""
for i in $(seq 500); do
  if gpreemptctl -o json daemon status 2>/dev/null | python3 -c '
import json,sys
s=json.load(sys.stdin)
for p in s.get("processes") or []:
    if p.get("pid")=='"$BE"' and p.get("class") and not p.get("pending"): sys.exit(0)
sys.exit(1)'; then classed=$(( ($(date +%s%N) - t0) / 1000000 )); break; fi
  sleep 0.01
done
echo "# the BE (pid $BE) was listed with a class ${classed:-never} ms after it started (status read every 10 ms)" >> "$T"
say "gpreemptctl daemon status"; gpreemptctl daemon status >> "$T" 2>&1
say "gpreemptctl ps"; gpreemptctl ps >> "$T" 2>&1
kill $BE; wait $BE 2>/dev/null
kill $D; wait $D
echo "# gpreemptd exit $?; its log:" >> "$T"; cat "$OUT/gpreemptd.log" >> "$T"
cat "$T"
