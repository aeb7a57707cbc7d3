#!/usr/bin/env bash
# One GPU, one device call (carry .carry): the bare loop before and after braeburn in one peers.py process, with
# Python's garbage collections inside each timed window recorded (gc_in_window). Results under $OUT.
source benchmarks/device_setup.sh
set +e
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
timeout 230 taskset -c 0-7 python benchmarks/peers.py --workloads gpt2-small --warmup 40 --steps 140 \
  --frameworks bare+compile,braeburn-compile,bare+compile --json $OUT/peers-C.json > $OUT/peers-C.txt 2>&1
grep "^| gpt2" $OUT/peers-C.txt
python -c "import json,sys;[print(r['framework'],r['samples_per_s'],r['gc_in_window'],r.get('peak_mem_gib')) for r in json.load(open('$OUT/peers-C.json'))['results']]"
