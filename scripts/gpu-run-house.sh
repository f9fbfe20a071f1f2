#!/usr/bin/env bash
# The GPU checks behind the package re-house (docs/DESIGN.md): the GPU tests
# of tsg (the GPU id of each group, both sources), prepreempt and NVML, the
# outside-module example, and the same pre-preemption benchmark run by the
# binaries of the previous layout (OLD, default .carry-old) and of this one
# (.carry), alternating, three times each. Run on the GPU machine as root
# from the repository root after `make gpu-binaries`; results go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/gpreempt-out}; mkdir -p "$OUT"
C=$PWD/.carry; OLD=${OLD:-$PWD/.carry-old}; W=/tmp/house; mkdir -p $W
export GPREEMPT_LIB=$C/libgpreempt.so
S=$OUT/house.txt
{ date -u; uname -r; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv; } > $S
echo "== GPU tests" >> $S
(cd tsg && $C/tsg.test -test.run GPU -test.v 2>&1 | grep -E '^(=== RUN|--- |    |ok|PASS|FAIL)' | grep -v '=== RUN') >> $S
(cd prepreempt && $C/prepreempt.test -test.run GPU 2>&1 | tail -3) >> $S
(cd internal/gpu && $C/gpu.test 2>&1 | tail -2) >> $S
echo "== examples/go-lc-server" >> $S
$C/go-lc-server -requests 200 >> $S 2>&1; echo "rc=$?" >> $S
args=(--scenarios standalone,be-1us,prepreempt-be-1us,be-only --prep 500us --hint-launcher poller
      --lc-calibrate-us 0 --lc-iters 2000 --duration ${DURATION:-6s})
for i in 1 2 3; do
  for side in old new; do
    d=$OLD; [ $side = new ] && d=$C
    s=$(date +%s)
    $d/gpreempt-bench run --gpreemptctl $d/gpreemptctl "${args[@]}" --out $W/$side$i > $W/$side$i.log 2>&1
    echo "$side $i rc=$? $(( $(date +%s) - s ))s" >> $S
  done
done
python3 - "$W" >> $S <<'PY'
import json, statistics, sys, os
w = sys.argv[1]
rows = {}
for side in ("old", "new"):
    for i in (1, 2, 3):
        p = os.path.join(w, f"{side}{i}", "results.json")
        try:
            r = json.load(open(p))
        except Exception as e:
            print(side, i, "no results:", e); continue
        for sc in r.get("scenarios", []):
            if sc.get("rep", 0) > 1:
                continue
            k = (side, sc["name"])
            rows.setdefault(k, []).append((sc.get("lc_p50_vs_standalone", 0), sc.get("lc_p99_vs_standalone", 0), sc.get("be_vs_be_only", 0)))
print("side scenario runs | p50 ratio median [min-max] | p99 ratio median [min-max] | BE kept median [min-max]")
for (side, name), v in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    cols = []
    for j in range(3):
        xs = [x[j] for x in v if x[j]]
        cols.append(f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]" if xs else "-")
    print(f"{side} {name} {len(v)} | " + " | ".join(cols))
PY
for i in 1 2 3; do $C/gpreempt-bench compare $W/old$i/results.json $W/new$i/results.json > $W/compare$i.txt 2>&1; done
cat $W/compare1.txt >> $S
tar -C $W -czf $OUT/house.tar.gz --exclude='*.png' . 2>/dev/null
