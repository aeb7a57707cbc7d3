#!/usr/bin/env bash
# The GPU lane: the whole test suite on a CUDA machine, where the tests marked requires("cuda") run
# instead of being skipped (tests/devices/test_gpu_lane.py: compile, bf16 autocast, fused AdamW, channels-last,
# checkpoint round-trips and exact resume on the GPU, the examples on the GPU, NCCL on two GPUs).
#
#   bash benchmarks/gpu_lane.sh            from the repository root; braeburn installed or not (src/ is put
#                                          on PYTHONPATH); results in $OUT (default benchmarks/results/gpu-lane)
#   PART=lane bash benchmarks/gpu_lane.sh  the GPU tests only (PART=suite: every other test; default: both)
#
# First the lane alone (verbose: each GPU test's outcome is in lane.txt), then every other test. Uses
# pytest-xdist when installed ($WORKERS workers, default 4) and pytest-timeout when installed (the
# pyproject's `timeout` is then honoured; without it pytest only warns that the option is unknown).
set -uo pipefail
OUT=${OUT:-benchmarks/results/gpu-lane}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{
  nvidia-smi -L
  $PY -c "import sys, torch, braeburn; print('python', sys.version.split()[0], '| torch', torch.__version__, \
'| cuda', torch.version.cuda, '| GPUs', torch.cuda.device_count(), '| braeburn from', braeburn.__file__)"
  $PY -m pip list 2>/dev/null | grep -i -E "^(torch|transformers|accelerate|lightning|tensorboard|pytest|scikit-learn|matplotlib) "
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
PART=${PART:-all}
parallel=()
$PY -c "import xdist" 2>/dev/null && parallel=(-n "${WORKERS:-4}")
lane=0 suite=0
if [ "$PART" != suite ]; then
  $PY -m pytest -m requires -v -rs -p no:cacheprovider --junitxml="$OUT/lane.xml" 2>&1 | tee "$OUT/lane.txt"
  lane=${PIPESTATUS[0]}
fi
if [ "$PART" != lane ]; then
  $PY -m pytest -m "not requires" -q -rfEs -p no:cacheprovider "${parallel[@]}" --junitxml="$OUT/suite.xml" 2>&1 \
    | tee "$OUT/suite.txt"
  suite=${PIPESTATUS[0]}
fi
echo "GPU lane exit $lane, rest of the suite exit $suite" | tee "$OUT/summary.txt"
tail -n 1 "$OUT"/lane.txt "$OUT"/suite.txt 2>/dev/null >> "$OUT/summary.txt"
[ "$lane" -eq 0 ] && [ "$suite" -eq 0 ]
