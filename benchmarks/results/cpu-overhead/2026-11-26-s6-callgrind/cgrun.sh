#!/bin/bash
# usage: cgrun.sh TREE WHO N OUTPREFIX
here=$(cd "$(dirname "$0")" && pwd)
. /work/venv/bin/activate
cd $1
sync=$(mktemp -d)
PYTHONHASHSEED=0 PYTHONPATH=src valgrind --tool=callgrind $VGOPTS --instr-atstart=no --callgrind-out-file=$sync/cg.out python $here/cgloop.py $2 $3 $sync > $sync/log 2>&1 &
vpid=$!
wait_for() { while [ ! -f $sync/$1 ]; do sleep 0.2; if ! kill -0 $vpid 2>/dev/null; then echo died; cat $sync/log; exit 1; fi; done; }
for tag in one two; do
  wait_for $tag.start
  callgrind_control -i on $vpid > /dev/null; callgrind_control -z $vpid >/dev/null; touch $sync/$tag.start.go
  wait_for $tag.stop
  callgrind_control -d $tag $vpid > /dev/null; callgrind_control -i off $vpid > /dev/null; touch $sync/$tag.stop.go
done
wait $vpid
cp $sync/cg.out.*1 $4.1; cp $sync/cg.out.*2 $4.2
ls -la $4.*
