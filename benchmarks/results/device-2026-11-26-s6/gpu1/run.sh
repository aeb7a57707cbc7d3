#!/usr/bin/env bash
# One GPU, under benchmarks/device_bg.sh start (carry [".carry"], built by benchmarks/make_carry.sh), from a copy of
# the tree in /tmp; results in /tmp/bg/out:
#   1. evaluate() on a model compiled for CUDA graphs, with and without the detection (eval_cuda_graph_outputs.py);
#   2. GPT-2 small's steady state, braeburn against bare+compile, 4 rounds, the order rotated each round;
#   3. the long GPT-2 recipe (7,500 steps) side by side, Transformers Trainer and braeburn, each with an empty compile
#      cache (the cold case), torch's compile phases printed;
#   4. MRPC's whole process, braeburn against braeburn copying predictions to the host every batch, 3 rounds.
rm -rf /tmp/g46 && cp -r "$(dirname "$0")/../../../.." /tmp/g46 && cd /tmp/g46 || exit 1
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
source benchmarks/device_setup.sh
set +e
out=/tmp/bg/out
{ date -u; nvidia-smi; lscpu; free -g; nproc; cat /proc/loadavg; python3 -V
  python3 -c "import torch,transformers;print('torch',torch.__version__,'transformers',transformers.__version__)"; } > $out/host.txt 2>&1
q=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,pstate,utilization.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$q --format=csv -lms 1000 -f $out/smi.csv &
echo "== eval cuda graphs $(date -u +%T)"
timeout 180 python benchmarks/eval_cuda_graph_outputs.py --out $out > $out/eval-cuda-graph.txt 2>&1
cat $out/eval-cuda-graph.txt | tail -5
echo "== peers $(date -u +%T)"
for r in 0 1 2 3; do
  timeout 240 taskset -c 0-7 python benchmarks/peers.py --workloads gpt2-small --warmup 40 --steps 140 --rotate $r \
    --frameworks bare+compile,braeburn-compile --json $out/peers-$r.json > $out/peers-$r.txt 2>&1
  grep "^| gpt2" $out/peers-$r.txt
done
echo "== gpt2 long, cold, side by side $(date -u +%T)"
BENCH_COMPILE_TIMES=1 python benchmarks/recipes.py --recipes gpt2 --runners 'transformers;braeburn' --rounds 1 \
  --cold-compile --out /tmp/gpt2long > $out/gpt2-long.txt 2>&1
cp /tmp/gpt2long/recipes.json $out/gpt2-long.json; cp -r /tmp/gpt2long/logs $out/gpt2-long-logs
tail -6 $out/gpt2-long.txt
echo "== mrpc eval A/B $(date -u +%T)"
timeout 420 python benchmarks/recipes.py --recipes mrpc --rounds 3 --runners 'braeburn;braeburn[eval_accumulation_steps=1]' \
  --out /tmp/mrpcab > $out/mrpc-ab.txt 2>&1
cp /tmp/mrpcab/recipes.json $out/mrpc-ab.json; tail -5 $out/mrpc-ab.txt
echo "ALL DONE $(date -u +%T)"
