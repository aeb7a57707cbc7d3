#!/usr/bin/env bash
# The README's fast test tier (`python -m pytest -n 2`), timed on 2 cores with two CPU burners beside it, N times:
# each run's wall time and pass/fail go to OUT/results.tsv (and OUT/run-I.log), and the end prints the median, the
# fastest, the slowest and how many of N passed (also in OUT/summary.txt).
#
#   bash benchmarks/test_time.sh OUT                       # 10 runs, one after another, on the first 2 cores
#   bash benchmarks/test_time.sh OUT --runs 10 --pairs 4   # 4 runs at a time, each on its own 2 cores (8 in all)
#   bash benchmarks/test_time.sh OUT --runs 1 -- tests/plan/test_rules.py   # pytest arguments after --
#
# Each pair of cores gets its own run and its own 2 burners (`python3 -c "while True: pass"`), all pinned to that
# pair with `taskset` where it exists (Linux); without it nothing is pinned and the header says so. --cpus LIST
# picks the cores (default: those this process may use, in order: pair P takes the (2P+1)th and (2P+2)th); on a
# machine with hyperthreads give cores that are not siblings (lscpu -e). --no-burners times an idle pair.
# Run it from the repository root of a checkout whose environment has braeburn and its test extra installed
# (PYTHON picks the interpreter; default: python). Each run gets its own pytest temporary folder, so pairs never
# share one.
set -uo pipefail

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] && [ "${1#-}" = "$1" ] || usage
out=$1; shift
runs=10; pairs=1; cpus=""; burners=2; pytest_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --no-burners) burners=0; shift ;;
    --) shift; pytest_args=("$@"); break ;;
    *) echo "test_time.sh: unknown argument $1" >&2; usage ;;
  esac
done
python=${PYTHON:-python}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out" && out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/braeburn-test-time-XXXXXX")
now() { python3 -c 'import time; print(f"{time.time():.3f}")'; }

if [ -z "$cpus" ]; then
  cpus=$(python3 -c 'import os
cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else range(os.cpu_count())
print(",".join(map(str, cores)))')
fi
IFS=, read -r -a cpu_list <<<"$cpus"
if [ $((pairs * 2)) -gt "${#cpu_list[@]}" ]; then
  echo "test_time.sh: --pairs $pairs needs $((pairs * 2)) cores; ${#cpu_list[@]} given ($cpus)" >&2
  exit 2
fi
pin=""
command -v taskset >/dev/null 2>&1 && pin=taskset

pids=()
cleanup() {  # the burners this script started, by their ids
  for pid in ${pids[@]+"${pids[@]}"}; do kill "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

burner() {  # burner CORES: becomes a CPU burner pinned to CORES (where taskset exists)
  if [ -n "$pin" ]; then exec taskset -c "$1" python3 -c "while True: pass"; else exec python3 -c "while True: pass"; fi
}

pair_cores() { echo "${cpu_list[$(($1 * 2))]},${cpu_list[$(($1 * 2 + 1))]}"; }

on_cores() {  # on_cores CORES COMMAND...: COMMAND pinned to CORES where taskset exists
  if [ -n "$pin" ]; then taskset -c "$1" "${@:2}"; else "${@:2}"; fi
}

run_pair() {  # run_pair P: this pair's share of the runs, one after another, burners beside each
  local pair=$1 cores i start end code summary
  cores=$(pair_cores "$pair")
  for ((i = pair + 1; i <= runs; i += pairs)); do
    start=$(now)
    (cd "$repo" && on_cores "$cores" "$python" -m pytest -n 2 -p no:cacheprovider --basetemp="$work/run-$i" \
      ${pytest_args[@]+"${pytest_args[@]}"} >"$out/run-$i.log" 2>&1)
    code=$?
    end=$(now)
    summary=$(grep -E "^=+ .*(passed|failed|error).* in [0-9.]+s" "$out/run-$i.log" | tail -n 1 | tr -d '=' | xargs)
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$i" "$pair" "$cores" "$(python3 -c "print(f'{$end - $start:.1f}')")" \
      "$([ "$code" -eq 0 ] && echo passed || echo "FAILED (exit $code)")" "$summary" >>"$out/results.tsv"
    rm -rf "$work/run-$i"
  done
}

{
  echo "# test_time.sh: $runs runs of \`$python -m pytest -n 2 ${pytest_args[*]+${pytest_args[*]}}\` (the README's fast tier), $pairs at a time"
  echo "# commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ), $(uname -sm)," \
       "$("$python" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo 'no torch')," \
       "${#cpu_list[@]} cores offered ($cpus), load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
  echo "# each run on 2 cores with $burners CPU burners beside it; $([ -n "$pin" ] && echo 'pinned with taskset' \
       || echo 'NOT pinned (no taskset here)')"
  printf 'run\tpair\tcores\tseconds\tresult\tpytest summary\n'
} >"$out/results.tsv"

for ((pair = 0; pair < pairs; pair++)); do
  for ((b = 0; b < burners; b++)); do
    burner "$(pair_cores "$pair")" &  # exec: $! is the burner itself, not a shell above it
    pids+=($!)
  done
done
runners=()
for ((pair = 0; pair < pairs; pair++)); do
  run_pair "$pair" &
  runners+=($!)
done
wait "${runners[@]}"

python3 - "$out/results.tsv" "$runs" <<'EOF' | tee "$out/summary.txt"
import statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line[:1].isdigit()]
seconds = sorted(float(row[3]) for row in rows)
passed = sum(row[4] == "passed" for row in rows)
print(f"{passed} of {sys.argv[2]} runs passed ({len(rows)} finished)")
if seconds:
    print(f"wall time: median {statistics.median(seconds):.1f} s, min {seconds[0]:.1f} s, max {seconds[-1]:.1f} s")
for row in rows:
    if row[4] != "passed":
        print(f"run {row[0]} (cores {row[2]}): {row[4]}: {row[5]}")
EOF
grep -q "^$runs of $runs runs passed" "$out/summary.txt"
