#!/bin/bash
# usage: cgrun.sh TREE TAG WHO N  -> $OUT/cgs.TAG.WHO.{1,2} (OUT: /tmp unless set)
here=$(cd "$(dirname "$0")" && pwd); OUT=${OUT:-/tmp}
. /work/venv/bin/activate
cd $1
sync=$(mktemp -d)
PYTHONHASHSEED=0 PYTHONPATH=src valgrind --tool=callgrind $VGOPTS --instr-atstart=no --callgrind-out-file=$sync/cg.out python $here/cgone.py $3 $4 $sync > $sync/log 2>&1 &
vpid=$!
wait_for() { while [ ! -f $sync/$1 ]; do sleep 0.5; if ! kill -0 $vpid 2>/dev/null; then echo died; cat $sync/log; exit 1; fi; done; }
wait_for ready
callgrind_control -i on $vpid > /dev/null; callgrind_control -z $vpid >/dev/null; touch $sync/ready.go
wait_for one
callgrind_control -d one $vpid > /dev/null; touch $sync/one.go
wait_for two
callgrind_control -d two $vpid > /dev/null; touch $sync/two.go
wait $vpid
ls $sync
cp $sync/cg.out.*1 $OUT/cgs.$2.$3.1 2>/dev/null; cp $sync/cg.out.*2 $OUT/cgs.$2.$3.2 2>/dev/null
ls -la $OUT/cgs.$2.$3.*
