#!/usr/bin/env bash
# First device call of the session (one H200): (a) the README's fast tier on the device's stack, pinned to cores 0,1,
# GPU hidden (as CI has none); (b) the tiny-MLP CPU overhead on cores 8,9, beside it. Run from the carried tree.
set -u
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
python -m pip install -q --no-index .wheels/*.whl 2>&1 | tail -1
{ date -u; git log -1 --oneline 2>/dev/null; python -c "import torch, transformers, accelerate, braeburn; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__, braeburn.__file__)"; nproc; lscpu | grep -E 'Model name|^CPU\(s\)'; cat /proc/loadavg; python -c "import lightning; print('lightning', lightning.__version__)"; } > $OUT/host.txt 2>&1
export PYTHONUNBUFFERED=1
( CUDA_VISIBLE_DEVICES= timeout 560 taskset -c 0,1 python -m pytest -n 2 -p no:cacheprovider -rf -q --tb=short 2>&1 | tail -300 > $OUT/fast-tier-failures.txt ) &
fast=$!
sleep 2
CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1 timeout 500 taskset -c 8,9 python benchmarks/cpu_overhead.py --steps 300 --rounds 7 --clock cpu > $OUT/cpu-overhead.txt 2>&1
CUDA_VISIBLE_DEVICES= timeout 300 taskset -c 8,9 python benchmarks/cpu_overhead_ab.py --trees new=. --steps 500 --rounds 5 > $OUT/cpu-overhead-ab.txt 2>&1
cat /proc/loadavg >> $OUT/host.txt
wait $fast
tail -5 $OUT/fast-tier-failures.txt; tail -12 $OUT/cpu-overhead.txt; tail -12 $OUT/cpu-overhead-ab.txt
