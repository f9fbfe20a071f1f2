#!/usr/bin/env bash
# On the GPU machine (two GPUs), from the repo root, binaries xz'd in $XZ_DIR: the launch-gap CPU
# meter's check (scripts/probe/launch_speed.py) on GPT-2 (GPU 0) and the Llama shape (GPU 1) at once,
# each probe's files archived as $OUT/MODE.tar (traced-lc.sh's, 20 s alone then beside BE).
set -u
mkdir -p .carry; for b in gpreemptctl; do xz -dc "$XZ_DIR/$b.xz" > .carry/$b && chmod +x .carry/$b; done
nvidia-smi --query-gpu=index,clocks.sm,clocks.max.sm --format=csv,noheader
i=0
for m in gpt2 llama; do
  (mkdir -p /tmp/w-$m && CUDA_VISIBLE_DEVICES=$i OUT=/tmp/w-$m bash scripts/probe/traced-lc.sh $m > /tmp/w-$m/run.log 2>&1) &
  i=$((i + 1))
done
wait
for m in gpt2 llama; do
  echo "== $m"; cat /tmp/w-$m/probe-$m.txt 2>/dev/null || tail -20 /tmp/w-$m/run.log
  for ph in alone beside; do
    echo "-- $m $ph"; python3 scripts/probe/launch_speed.py /tmp/w-$m/calls-$m-$ph.jsonl.gz /tmp/w-$m/lc-$m.json 2>&1 | tail -15
  done
  tar -C /tmp/w-$m -cf $OUT/$m.tar .
done
