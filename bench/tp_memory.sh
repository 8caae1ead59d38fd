#!/usr/bin/env bash
# Activation memory per rank under tensor parallelism, with and without sequence parallelism:
# bench_tp_memory at tp 1, 2 and 4 (mpirun -np T) on train_gpt's small configuration (4 layers,
# 4 heads, width 128, block 64, batch 12, bytes' 256 ids). Deterministic counts (the block
# cache's), so one run each.
#   bench/tp_memory.sh [BUILD_DIR] [--raw FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/release
raw=$root/bench/results/tp_memory.txt
while [ $# -gt 0 ]; do
  case "$1" in
    --raw) raw=$2; shift 2 ;;
    *) build=$(cd "$1" && pwd); shift ;;
  esac
done
source "$root/bench/provenance.sh"
provenance_text "" "bench/tp_memory.sh" > "$raw"
for np in 1 2 4; do
  mpirun --allow-run-as-root --oversubscribe -np "$np" "$build/bench/bench_tp_memory" | tee -a "$raw"
done
