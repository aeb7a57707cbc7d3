#!/usr/bin/env bash
# 2 GPUs (under benchmarks/device_bg.sh start, from a copy of the tree in /tmp): FSDP against DDP with today's
# defaults together (one FSDP unit for a model that fits, the heap frozen after the first step), the old FSDP
# default for reference, and BERT-base's DDP efficiency against one process, plain and with each rank pinned to
# its own cores. Results in /tmp/bg/out.
rm -rf /tmp/g44 && cp -r "$(dirname "$0")/../../../.." /tmp/g44 && cd /tmp/g44 || exit 1
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=/tmp/bg/out
{ date -u; nvidia-smi; nvidia-smi topo -m; lscpu; free -g; nproc; cat /proc/loadavg; python3 -V
  python3 -c "import torch,transformers,accelerate;print('torch',torch.__version__,'transformers',transformers.__version__,'accelerate',accelerate.__version__)"; } > $out/host.txt 2>&1
q=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,pstate,utilization.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$q --format=csv -lms 1000 -f $out/smi.csv &
half=$(( $(nproc) / 2 ))
common="--gpus 2 --warmup 15 --steps 75"
python3 benchmarks/scaling.py $common --rounds 3 --workloads gpt2-small --no-single \
  --frameworks 'braeburn-ddp,braeburn-fsdp' --out $out/gpt2
python3 benchmarks/scaling.py $common --rounds 3 --workloads bert-base \
  --frameworks "braeburn-ddp,braeburn-fsdp,braeburn-ddp[pin=$half]" --out $out/bert
python3 benchmarks/scaling.py $common --rounds 1 --workloads gpt2-small --no-single \
  --frameworks 'braeburn-ddp,braeburn-fsdp[fsdp_units=block,freeze_heap=False]' --out $out/gpt2-old
echo ALL DONE
