#!/usr/bin/env bash
# 4-GPU scaling: GPT-2 small and BERT-base, braeburn DDP / FSDP (new default, and the old
# reshard_after_forward=True for GPT-2) / Accelerate, 3 interleaved rounds each; then BERT-base compiled, timed after
# its compile window. Runs from a copy in /tmp (a later device call replaces the checkout). Results in /tmp/bg/out.
rm -rf /tmp/g44 && cp -r "$(dirname "$0")" /tmp/g44 && cd /tmp/g44 || exit 1
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=/tmp/bg/out
{ date; nvidia-smi; nvidia-smi topo -m; lscpu; free -g; nproc; cat /proc/loadavg
  python3 -c "import torch,transformers,accelerate;print('torch',torch.__version__,'transformers',transformers.__version__,'accelerate',accelerate.__version__)"; } > $out/host.txt 2>&1
q=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,pstate,utilization.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$q --format=csv -lms 1000 -f $out/smi.csv &
common="--gpus 4 --warmup 15 --steps 75"
python3 benchmarks/scaling.py $common --rounds 3 --workloads gpt2-small \
  --frameworks 'braeburn-ddp,braeburn-fsdp,braeburn-fsdp[reshard_after_forward=True],accelerate' --out $out/gpt2
python3 benchmarks/scaling.py $common --rounds 3 --workloads bert-base \
  --frameworks 'braeburn-ddp,braeburn-fsdp,accelerate' --out $out/bert
python3 benchmarks/scaling.py $common --rounds 1 --workloads bert-base --job-timeout 300 \
  --frameworks 'braeburn-ddp[compile=true]' --out $out/bert-compiled
echo ALL DONE
