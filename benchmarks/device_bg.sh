#!/usr/bin/env bash
# Run a job on the lent GPU machine that outlasts one device call (10 minutes at most): the job runs in its own
# process session, writes its results under /tmp/bg/out, and each later call waits for it and packs what it
# has so far into $OUT/out.tgz.
#   bash benchmarks/device_bg.sh start 'python benchmarks/recipes.py ... --out /tmp/bg/out'
#   bash benchmarks/device_bg.sh wait 560      # in this call and the next ones, until it says "finished"
# The job must not read the checkout once started: each device call replaces the checkout, so files a running job
# opens later vanish (seen: every job after the next call failed). Have it copy what it needs to /tmp first.
set -uo pipefail
bg=/tmp/bg
case "$1" in
  start)
    mkdir -p "$bg/out"
    setsid nohup bash -c "$2" >"$bg/out/log.txt" 2>&1 </dev/null &
    echo $! >"$bg/pid"
    echo "started pid $(cat "$bg/pid")";;
  wait)
    deadline=$((SECONDS + $2))
    while kill -0 "$(cat "$bg/pid")" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
    kill -0 "$(cat "$bg/pid")" 2>/dev/null && echo "still running" || echo "finished"
    # at most 8 files come back from a device call: everything so far as one archive, without the recipes'
    # working folders (checkpoints) and token caches
    mkdir -p "${OUT:-/tmp/bg-copy}"
    tar czf "${OUT:-/tmp/bg-copy}/out.tgz" --exclude=work --exclude='*.npy' -C "$bg/out" .
    tail -n 60 "$bg/out/log.txt";;
esac
