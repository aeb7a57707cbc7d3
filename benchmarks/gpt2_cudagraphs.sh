#!/usr/bin/env bash
# Issue 28: do CUDA graphs (torch.compile's mode "reduce-overhead") take away the GPU's idle share of a compiled
# step, and is braeburn behind bare+compile on GPT-2 small beyond the noise? Steady state (peers.py), two
# alternating rounds a process, one process a (workload, mode); then whether "--sdpa flash" runs eagerly. About
# 8 minutes on an H200. Results in OUT_DIR (one .txt and one .json a process).
#   bash benchmarks/gpt2_cudagraphs.sh OUT_DIR
set -uo pipefail
out=${1:?usage: gpt2_cudagraphs.sh OUT_DIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
peers() {  # name, then peers.py's arguments
  local name=$1; shift
  python benchmarks/peers.py --warmup 25 --steps 75 --json "$out/$name.json" "$@" >"$out/$name.txt" 2>&1
  grep -E "^device|^variant|^\| (gpt2|bert)" "$out/$name.txt"
}
both=braeburn-compile,bare+compile,braeburn-compile,bare+compile
peers gpt2-default --workloads gpt2-small --frameworks $both
peers gpt2-graphs --workloads gpt2-small --frameworks $both --compile-mode reduce-overhead
peers bert-default --workloads bert-base --frameworks braeburn-compile,braeburn-compile
peers bert-graphs --workloads bert-base --frameworks braeburn-compile,braeburn-compile --compile-mode reduce-overhead
python benchmarks/peers.py --workloads gpt2-small --frameworks bare --warmup 2 --steps 4 --sdpa flash \
  >"$out/flash-eager.txt" 2>&1
grep -E '^\{|Warning|because' "$out/flash-eager.txt" | cut -c1-400 | head -12
