#!/usr/bin/env bash
# One GPU (under benchmarks/device_bg.sh start, from a copy of the tree in /tmp): the clip fold's numbers on CUDA and
# GPT-2 small's steady state side by side (3 rounds), then the compile choice by run length through the Trainer
# (benchmarks/compile_lengths.py, cold caches). Results in /tmp/bg/out.
rm -rf /tmp/g44 && cp -r "$(dirname "$0")/../../../.." /tmp/g44 && cd /tmp/g44 || exit 1
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
python -m pip install -q --no-index .carry/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
out=/tmp/bg/out
{ date -u; nvidia-smi; lscpu; free -g; nproc; cat /proc/loadavg; python3 -V
  python3 -c "import torch,transformers;print('torch',torch.__version__,'transformers',transformers.__version__)"; } > $out/host.txt 2>&1
q=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,pstate,utilization.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$q --format=csv -lms 1000 -f $out/smi.csv &
timeout 120 python benchmarks/clip_fold_check.py --json $out/clip-fold-check.json > $out/clip-fold-check.txt 2>&1
for r in 1 2 3; do
  timeout 240 taskset -c 0-7 python benchmarks/peers.py --workloads gpt2-small --warmup 40 --steps 140 \
    --frameworks bare+compile,braeburn-compile,braeburn-compile-nofold,bare+compile+clip --json $out/peers-$r.json \
    > $out/peers-$r.txt 2>&1
done
echo PEERS DONE
mkdir -p /tmp/caches
python benchmarks/compile_lengths.py --out $out/lengths --caches /tmp/caches
echo ALL DONE
