#!/bin/bash
# alternate processes: new tree, old tree; each the new benchmark (loop alone, paired rounds)
# usage: ab2.sh PROCESSES STEPS ROUNDS TAG
cd /work/wt/cpu46
for i in $(seq 1 $1); do
  for t in new old; do
    src=/work/wt/cpu46/src; [ $t = old ] && src=/tmp/old-cpu46/src
    PYTHONPATH=$src /work/venv/bin/python benchmarks/cpu_overhead.py --steps $2 --rounds $3 --json /tmp/cpu46/ab/$4-$t-$i.json > /tmp/cpu46/ab/$4-$t-$i.txt 2>&1
    echo "$t $i $(date +%T) load $(cut -d' ' -f1 /proc/loadavg): $(grep 'paired' /tmp/cpu46/ab/$4-$t-$i.txt | cut -c1-160) | $(grep fastest /tmp/cpu46/ab/$4-$t-$i.txt)"
  done
done
