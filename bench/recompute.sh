#!/usr/bin/env bash
# Activation recomputation per transformer block (train_gpt --recompute): bench_recompute on
# GPT-2 124M (12 layers, 12 heads, width 768, vocabulary 50257) at batch 4 x 64 tokens (7
# repetitions), then at one sequence of 512 tokens (5), where attention's T^2 probabilities
# are a third of a block's activations; one thread. For none, attention and full: the
# activations kept after the forward, the peak of forward + backward over parameters and
# gradients (the block cache's counts: deterministic) and the median step time over the
# alternating repetitions; every mode's loss and gradients checked equal to none's first.
# About five minutes.
#   bench/recompute.sh [BUILD_DIR] [--raw FILE] [-- BENCH FLAGS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/release
raw=$root/bench/results/recompute.txt
flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --raw) raw=$2; shift 2 ;;
    --) shift; flags=("$@"); break ;;
    *) build=$(cd "$1" && pwd); shift ;;
  esac
done
source "$root/bench/provenance.sh"
provenance_text "" "bench/recompute.sh" > "$raw"
for shape in "--batch 4 --block 64 --reps 7" "--batch 1 --block 512 --reps 5"; do
  # shellcheck disable=SC2086 # the shape is several flags
  "$build/bench/bench_recompute" --threads 1 $shape "${flags[@]}" | tee -a "$raw"
done
