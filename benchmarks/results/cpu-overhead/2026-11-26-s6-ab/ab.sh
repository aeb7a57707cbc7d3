#!/bin/bash
# alternate processes: new tree, old tree; each the new benchmark (loop alone, paired rounds)
# usage, from the new checkout's root: NEW=. OLD=/tmp/old OUT=/tmp/ab bash ab.sh PROCESSES STEPS ROUNDS TAG
# (git worktree add /tmp/old 1289ac7); then python pool.py TAG $OUT
OUT=${OUT:-/tmp/ab}; mkdir -p $OUT; NEW=${NEW:-.}; OLD=${OLD:-/tmp/old}
for i in $(seq 1 $1); do
  for t in new old; do
    src=$NEW/src; [ $t = old ] && src=$OLD/src
    PYTHONPATH=$src /work/venv/bin/python benchmarks/cpu_overhead.py --steps $2 --rounds $3 --json $OUT/$4-$t-$i.json > $OUT/$4-$t-$i.txt 2>&1
    echo "$t $i $(date +%T) load $(cut -d' ' -f1 /proc/loadavg): $(grep 'paired' $OUT/$4-$t-$i.txt | cut -c1-160) | $(grep fastest $OUT/$4-$t-$i.txt)"
  done
done
