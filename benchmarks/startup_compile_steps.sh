#!/usr/bin/env bash
# Issue 44 on a lent GPU, parts 1-3, from a carried copy of the worktree (benchmarks/make_carry.sh's .carry/ inside
# it): bash benchmarks/startup_compile_steps.sh PART OUT   (PART: startup, compile or steps); everything lands in
# OUT/PART.tgz (the device tool brings back few files, none deep).
set -uo pipefail
part=$1 dest=$2 out=/tmp/startup-compile-steps-$1
mkdir -p "$out" "$dest"
trap 'tar czf "$dest/$part.tgz" -C "$out" .' EXIT
source benchmarks/device_setup.sh
set +e  # device_setup.sh sets -e: one failed measurement must not lose the others
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv > "$out/gpu.csv" 2>&1
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())" \
  | tee "$out/versions.txt"
mrpc_example() {  # the recipe's braeburn command (benchmarks/recipes.py's), output to $1
  echo examples/text_classification.py --model_name_or_path all-MiniLM-L6-v2 --task_name mrpc --data_dir "$BRAEBURN_MRPC_DIR" \
    --do_train --do_eval --max_seq_length 128 --per_device_train_batch_size 32 --learning_rate 5e-5 \
    --num_train_epochs 3 --output_dir "$1" --overwrite_output_dir --seed 42
}
case $part in
startup)
  python3 -X importtime -c "import braeburn; from braeburn import Trainer, TrainingConfig" 2> "$out/importtime.txt"
  python3 benchmarks/startup_phases.py --out "$out/phases" --rounds "${PHASE_ROUNDS:-3}" --profile -- \
    $(mrpc_example /tmp/mrpc-phases) 2>&1 | tail -80
  python3 benchmarks/recipes.py --recipes mrpc --rounds "${ROUNDS:-3}" --runners "${RUNNERS:-bare;transformers;braeburn}" \
    --out "$out/mrpc" --work /tmp/recipes 2>&1 | tail -20
  ;;
phases)  # part 1's accounting alone: the braeburn recipe phase by phase, then the bare loop's own phase times
  python3 benchmarks/recipes.py --recipes mrpc --rounds 1 --runners "bare" --out "$out/warmup" --work /tmp/recipes \
    2>&1 | tail -3
  python3 benchmarks/startup_phases.py --out "$out/phases" --rounds "${PHASE_ROUNDS:-3}" -- \
    $(mrpc_example /tmp/mrpc-phases) 2>&1 | tail -100
  python3 benchmarks/recipes.py --recipes mrpc --rounds 2 --runners "bare" --out "$out/bare" --work /tmp/recipes \
    2>&1 | tail -3
  ;;
compile)  # part 2's costs, then part 3's steady state (bare+compile against braeburn, alternating)
  timeout 330 python3 benchmarks/regional_compile.py --out "$out/regional" 2>&1 | tail -12
  for round in 1 2; do
    timeout 120 python3 benchmarks/peers.py --workloads gpt2-small --frameworks bare+compile,braeburn --warmup 40 \
      --steps 120 --json "$out/peers-$round.json" 2>&1 | tail -6
  done
  ;;
steps)  # part 3: GPT-2 small steady state, compiled, with and without clipping, alternating rounds
  for round in 1 2 3; do
    timeout 170 python3 benchmarks/peers.py --workloads gpt2-small --warmup 40 --steps 140 \
      --frameworks bare+compile,braeburn-compile,bare+compile+clip,braeburn-compile-noclip \
      --json "$out/peers-$round.json" 2>&1 | grep "^| gpt2"
  done
  ;;
esac
