#!/usr/bin/env bash
# On a CUDA machine: braeburn's commands for real against the CPU. Results go to $OUT (or ./gpu-out).
# Usage: bash benchmarks/gpu_smoke.sh   (from the repository root; braeburn importable or src/ on PYTHONPATH)
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-}:$PWD/src PYTHONUNBUFFERED=1
B="python3 -m braeburn.cli.main"
{ nvidia-smi -L; python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } 2>&1 | tee "$OUT/env.txt"
$B doctor 2>&1 | tee "$OUT/doctor.txt"
( time python3 examples/custom_loop.py ) 2>&1 | tee "$OUT/custom_loop.txt"
$B check examples/custom_loop.py 2>&1 | tee "$OUT/check.txt"
$B check --mixed-precision no examples/custom_loop.py 2>&1 | tail -4 | tee -a "$OUT/check.txt"
$B bench --workload all --size full --mixed-precision bf16 --steps 20 --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.txt"
( time python3 examples/image_classification.py --output_dir /tmp/digits --overwrite_output_dir ) 2>&1 | tail -25 | tee "$OUT/image_classification.txt"
