#!/usr/bin/env bash
# One GPU, one device call (carry .carry, built by benchmarks/make_carry.sh): compile=auto's choice for the 3,000-step
# GPT-2 recipe with the gains measured on the H200 (stops after 100 steps, once decided), then the MRPC seed recipe's
# whole process, 3 interleaved rounds of the bare loop, the Transformers Trainer and braeburn. Results under $OUT.
source benchmarks/device_setup.sh
set +e
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
{ date -u; nvidia-smi; nproc; python3 -V; python3 -c "import torch,transformers;print(torch.__version__,transformers.__version__)"; } > $OUT/host.txt 2>&1
mkdir -p /tmp/caches
timeout 200 python benchmarks/compile_lengths.py --out /tmp/lengths --caches /tmp/caches --steps 3000 --marks 500 \
  --only auto-3000-decision > $OUT/auto-3000.txt 2>&1
cp /tmp/lengths/compile_lengths.json $OUT/auto-3000-decision.json
timeout 330 python benchmarks/recipes.py --recipes mrpc --rounds 3 --runners 'bare;transformers;braeburn' --out /tmp/mrpc \
  > /tmp/mrpc.log 2>&1
cp /tmp/mrpc/recipes.json $OUT/mrpc-recipes.json; tar czf $OUT/mrpc-logs.tgz -C /tmp/mrpc logs
tail -n 25 /tmp/mrpc.log > $OUT/mrpc-table.txt
grep -o '"reason": "[^"]*"' $OUT/auto-3000-decision.json; cat $OUT/mrpc-table.txt
