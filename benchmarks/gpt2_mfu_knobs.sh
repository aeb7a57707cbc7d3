#!/usr/bin/env bash
# Issue 28's GPU measurements that are still open, as one background job on the lent GPU machine (about 22 minutes
# on an H100), each step's results in its own folder under OUT_DIR, in this order:
#   snapshot.txt  benchmarks/snapshot_cost.py on the GPU: the snapshot as a copy against serialising it
#   breakdown/  the gpt2 recipe, braeburn's defaults with step_breakdown on: late steps split into compute and idle
#               (the ~3.7 ms a step that docs/benchmarks.md leaves unexplained), and its checkpoints' cost on the
#               training thread now that the snapshot is a pinned copy; gpu.csv samples the SM clock, power and
#               temperature every 2 s meanwhile (does the GPU slow down as the run goes on?)
#   short/      MRPC and digits, three interleaved rounds: the floors (digits: bare, which makes the example's
#               outputs, and bare-train), the Transformers Trainer on MRPC, braeburn's defaults
#   mfu/        GPT-2 small compiled, steady state, one process a variant: today's defaults against bare+compile,
#               then one knob at a time (attention backend, no dropout, inductor tuning, max-autotune)
# Prepare with bash benchmarks/make_carry.sh here, then in the first device call (carry [".carry"]):
#   source benchmarks/device_setup.sh; set +e
#   bash benchmarks/device_bg.sh start 'bash benchmarks/gpt2_mfu_knobs.sh /tmp/bg/out'
#   bash benchmarks/device_bg.sh wait 560          # again in the next calls, until it prints "finished"
set -uo pipefail
out=${1:?usage: gpt2_mfu_knobs.sh OUT_DIR}
cd "$(dirname "$0")/.."
mkdir -p "$out/mfu"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$out/gpu.txt" 2>&1
python -c "import torch, transformers; print(torch.__version__, transformers.__version__)" >>"$out/gpu.txt" 2>&1
echo "== snapshot $(date +%T)"
python benchmarks/snapshot_cost.py --rounds 5 >"$out/snapshot.txt" 2>&1
echo "== breakdown $(date +%T)"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu --format=csv \
  -l 2 >"$out/gpu.csv" 2>&1 &
smi=$!
python benchmarks/recipes.py --recipes gpt2 --runners 'braeburn[step_breakdown=true]' --rounds 1 \
  --gpt2-steps 7500 --out "$out/breakdown"
kill "$smi"
echo "== short $(date +%T)"
python benchmarks/recipes.py --recipes digits,mrpc --rounds 3 --out "$out/short"
echo "== mfu $(date +%T)"
mfu() {  # name, then peers.py's arguments
  local name=$1; shift
  python benchmarks/peers.py --workloads gpt2-small --warmup 25 --steps 60 --json "$out/mfu/$name.json" "$@" \
    >"$out/mfu/$name.txt" 2>&1
  grep -E "^variant|^\| gpt2" "$out/mfu/$name.txt"
}
mfu defaults --frameworks braeburn-compile,bare+compile --profile 5
mfu flash --frameworks braeburn-compile --sdpa flash
mfu no-dropout --frameworks braeburn-compile --gpt2-dropout 0
mfu no-dropout-flash --frameworks braeburn-compile --gpt2-dropout 0 --sdpa flash
mfu coordinate-descent --frameworks braeburn-compile --inductor coordinate_descent_tuning=True
timeout 420 bash -c "$(declare -f mfu); out=$out; mfu max-autotune --frameworks braeburn-compile \
  --compile-mode max-autotune-no-cudagraphs"
echo "gpt2_mfu_knobs: done $(date +%T)"
