#!/usr/bin/env bash
# One GPU, one device call (carry .carry): what the runner's place in a peers.py process does to GPT-2 small's
# steady state. Process A runs the bare loop twice then the bare loop without the graph break (pinned loss lookup);
# process B runs braeburn first, then the pinned bare loop, then braeburn again. Results under $OUT.
source benchmarks/device_setup.sh
set +e
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
timeout 200 taskset -c 0-7 python benchmarks/peers.py --workloads gpt2-small --warmup 40 --steps 140 \
  --frameworks bare+compile,bare+compile,bare+compile+pin --json $OUT/peers-A.json > $OUT/peers-A.txt 2>&1
grep "^| gpt2" $OUT/peers-A.txt
timeout 200 taskset -c 0-7 python benchmarks/peers.py --workloads gpt2-small --warmup 40 --steps 140 \
  --frameworks braeburn-compile,bare+compile+pin,braeburn-compile --json $OUT/peers-B.json > $OUT/peers-B.txt 2>&1
grep "^| gpt2" $OUT/peers-B.txt
