#!/usr/bin/env bash
# CI, run again and again as CI runs it: a fresh clone of this repository, `bash .ci/run` with CI=true and no
# standard input (a fresh virtual environment, the README's test command). A flaky test shows up here as a failed
# run; a suite that passes 20 runs in a row under load has no flaky test left that this finds.
#
#   bash benchmarks/ci_soak.sh 20                 # 20 runs, one after another
#   bash benchmarks/ci_soak.sh 20 --load          # each beside a second copy of the suite (the load of a busy box)
#   bash benchmarks/ci_soak.sh 20 --pairs         # 10 pairs of fresh-clone CI runs side by side: every run is the
#                                                 # other's load, and both count (half the wall time of --load)
#
# SOAK_REF picks the commit every run clones (default: HEAD when the soak starts, so commits made during a soak
# do not change what it tests). Writes one line per run and keeps the log of every failed run under $SOAK_DIR
# (default /tmp/braeburn-ci-soak).
set -uo pipefail
runs=${1:-20}
mode=${2:-}
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${SOAK_DIR:-/tmp/braeburn-ci-soak}
ref=$(git -C "$repo" rev-parse "${SOAK_REF:-HEAD}")
mkdir -p "$dir"
[ -d "$repo/../shared" ] && [ ! -e "$dir/shared" ] && ln -s "$repo/../shared" "$dir/shared"
echo "ci_soak: $runs runs of ${ref:0:7} ${mode:-(one at a time)}, started $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"

fresh_clone() {  # fresh_clone NAME: a clone of $ref in $dir/NAME
  rm -rf "$dir/$1" && git clone -q "$repo" "$dir/$1" && git -C "$dir/$1" checkout -q "$ref"
}

ci_run() {  # ci_run NAME: .ci/run in the clone NAME, as CI runs it; its log is $dir/NAME.log
  (cd "$dir/$1" && CI=true bash .ci/run </dev/null >"$dir/$1.log" 2>&1)
}

report() {  # report NAME CODE SECONDS: one line; a passed run's clone and log are removed
  local summary
  summary=$(grep -E "[0-9]+ passed" "$dir/$1.log" | tail -n 1)
  if [ "$2" -eq 0 ]; then
    passed=$((passed + 1)); rm -rf "$dir/$1" "$dir/$1.log"
    echo "$1: passed in $3 s: $summary"
  else
    echo "$1: FAILED (exit $2) in $3 s: $summary; log: $dir/$1.log"
  fi
}

passed=0
if [ "$mode" = "--pairs" ]; then
  for i in $(seq 1 $(((runs + 1) / 2))); do
    fresh_clone "run-$i-a" && fresh_clone "run-$i-b"
    start=$SECONDS
    (ci_run "run-$i-a"; echo $? >"$dir/run-$i-a.rc"; echo $((SECONDS - start)) >"$dir/run-$i-a.s") &
    (ci_run "run-$i-b"; echo $? >"$dir/run-$i-b.rc"; echo $((SECONDS - start)) >"$dir/run-$i-b.s") &
    wait
    for side in a b; do
      report "run-$i-$side" "$(cat "$dir/run-$i-$side.rc")" "$(cat "$dir/run-$i-$side.s")"
      rm -f "$dir/run-$i-$side.rc" "$dir/run-$i-$side.s"
    done
  done
  runs=$(((runs + 1) / 2 * 2))
else
  for i in $(seq 1 "$runs"); do
    fresh_clone "run-$i"
    if [ "$mode" = "--load" ]; then  # the load: the suite again, in the first clone's environment
      (cd "$dir/run-$i" && sleep 120 && [ -x .venv/bin/python ] && .venv/bin/python -m pytest -q -n 2 \
        -p no:cacheprovider >"$dir/load-$i.log" 2>&1) &
      loader=$!
    fi
    start=$SECONDS
    ci_run "run-$i"
    code=$?
    [ "$mode" = "--load" ] && wait "$loader"
    report "run-$i" "$code" "$((SECONDS - start))"
  done
fi
echo "ci_soak: $passed of $runs runs passed, ended $(date -u +%FT%TZ)"
[ "$passed" -eq "$runs" ]
