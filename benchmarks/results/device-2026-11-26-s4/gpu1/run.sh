#!/usr/bin/env bash
# One H200, after this session's code changes: (1) GPT-2 small steady state, bare+compile against braeburn
# compile=true (its defaults: clipping at 1.0, linear schedule), 3 alternating rounds, each a
# process; beside it, on cores 12-13, the tiny-MLP CPU overhead (braeburn's Trainer against the bare loop);
# (2) the MRPC recipe's whole process, 3 interleaved rounds. Everything under $OUT.
set -u
source benchmarks/device_setup.sh; set +e
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv; lscpu -e | head -20; cat /proc/loadavg
  python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"; } > $OUT/host.txt 2>&1
( sleep 20; CUDA_VISIBLE_DEVICES= timeout 200 taskset -c 12,13 python benchmarks/cpu_overhead.py --steps 300 --rounds 7 --clock cpu > $OUT/cpu-overhead.txt 2>&1 ) &
for round in 1 2 3; do
  timeout 150 taskset -c 0-7 python3 benchmarks/peers.py --workloads gpt2-small --warmup 40 --steps 140 \
    --frameworks bare+compile,braeburn-compile --json "$OUT/peers-$round.json" 2>&1 | grep "^| gpt2" | tee -a $OUT/peers.txt
done
wait
timeout 290 python3 benchmarks/recipes.py --recipes mrpc --rounds 3 --runners 'bare;transformers;braeburn' --out /tmp/mrpc > /tmp/mrpc.log 2>&1
cp /tmp/mrpc/recipes.json $OUT/mrpc-recipes.json 2>/dev/null; tail -n 25 /tmp/mrpc.log > $OUT/mrpc-table.txt
cat $OUT/peers.txt; tail -8 $OUT/cpu-overhead.txt; cat $OUT/mrpc-table.txt
