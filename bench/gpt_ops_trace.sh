#!/usr/bin/env bash
# Where a GPT training step's time goes, per op, from dtrain's own trace: train_gpt with
# --trace over two (GPT-2 124M) or ten (small) updates after warm-up, with the fused kernels
# (--fused true) and without them (--fused false: the composed attention, LayerNorm and head),
# each traced timeline turned into a table by tools/trace_ops.py. One thread, the sizes of
# bench/gpt_speed_sizes.sh (small: 4 x 128 bytes at 12 x 64 tokens; 124m: GPT-2 small at 4 x 64).
# Takes about two minutes.
#   bench/gpt_ops_trace.sh [BUILD_DIR] [--tiktoken FILE] [--raw FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/release
tiktoken=$root/.venv-tests/share/gpt2.tiktoken
raw=$root/bench/results/gpt_ops_trace.txt
while [ $# -gt 0 ]; do
  case "$1" in
    --tiktoken) tiktoken=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    *) build=$(cd "$1" && pwd); shift ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$root/bench/provenance.sh"
provenance_text "" "bench/gpt_ops_trace.sh" > "$raw"
"$build/examples/dtrain-tokenize" encode --tokenizer bytes --out "$work/bytes.tok" /usr/share/games/fortunes > /dev/null
"$build/examples/dtrain-tokenize" encode --tokenizer "gpt2:$tiktoken" --out "$work/gpt2.tok" /usr/share/games/fortunes > /dev/null
for size in small 124m; do
  case $size in
    small) args=(--data "$work/bytes.tok" --tokenizer bytes --layers 4 --heads 4 --embd 128 --block-size 64
                 --global-batch-size 12 --steps 40 --eval-every 40 --trace-steps 30-39) ;;
    124m) args=(--data "$work/gpt2.tok" --tokenizer "gpt2:$tiktoken" --layers 12 --heads 12 --embd 768
                --block-size 64 --global-batch-size 4 --steps 6 --eval-every 6 --trace-steps 4-5) ;;
  esac
  for fused in false true; do
    "$build/examples/train_gpt" "${args[@]}" --bias false --dropout 0 --warmup-steps 2 --eval-windows 1 \
      --log-every 100 --sample 0 --threads 1 --progress none --fused "$fused" --trace "$work/${size}_fused_$fused.json" > /dev/null 2>&1
    echo "## $size, --fused $fused" | tee -a "$raw"
    (cd "$work" && python3 "$root/tools/trace_ops.py" "${size}_fused_$fused.json" --top 12) | tee -a "$raw"
    echo | tee -a "$raw"
  done
done
