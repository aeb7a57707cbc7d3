#!/usr/bin/env bash
# Issue 28's GPU measurements that are still open, as one background job on the lent GPU machine (about 15 minutes
# on an H100), each step's results in its own folder under OUT_DIR:
#   short/      MRPC and digits, three interleaved rounds: the floors (digits: bare, which makes the example's
#               outputs, and bare-train), the Transformers Trainer on MRPC, braeburn's defaults
#   breakdown/  the gpt2 recipe, braeburn's defaults with step_breakdown on: late steps split into compute and idle
#               (the ~3.7 ms a step that docs/benchmarks.md leaves unexplained), and its checkpoints' cost on the
#               training thread now that the snapshot is a pinned copy
#   snapshot.txt  benchmarks/snapshot_cost.py on the GPU: the snapshot as a copy against serialising it
# Prepare with bash benchmarks/make_carry.sh here, then in the first device call (carry [".carry"]):
#   source benchmarks/device_setup.sh; set +e
#   bash benchmarks/device_bg.sh start 'bash benchmarks/issue28_gpu.sh /tmp/bg/out'
#   bash benchmarks/device_bg.sh wait 560          # again in the next calls, until it prints "finished"
set -uo pipefail
out=${1:?usage: issue28_gpu.sh OUT_DIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$out/gpu.txt" 2>&1
python -c "import torch, transformers; print(torch.__version__, transformers.__version__)" >>"$out/gpu.txt" 2>&1
python benchmarks/snapshot_cost.py --rounds 5 >"$out/snapshot.txt" 2>&1
python benchmarks/recipes.py --recipes digits,mrpc --rounds 3 --out "$out/short"
python benchmarks/recipes.py --recipes gpt2 --runners 'braeburn[step_breakdown=true]' --rounds 1 \
  --gpt2-steps 7500 --out "$out/breakdown"
echo "issue28_gpu: done"
