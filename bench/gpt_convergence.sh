#!/usr/bin/env bash
# train_gpt against its PyTorch reference (bench/peers/pytorch_gpt.py) on Debian's fortunes at
# nanoGPT's small CPU configuration, every setting pinned: 4 layers, 4 heads, width 128, block
# 64, global batch 12, no biases, dropout 0, AdamW betas (0.9, 0.99), weight decay 0.1, clip
# 1.0, lr 1e-3 with 100 warm-up steps then cosine to 1e-4 at step 2000, 2000 steps; the val
# loss over every non-overlapping window of the last 10% of the tokens. Both sides read the
# same token file (dtrain-tokenize encode) and draw the same training windows (keyed by the
# seed, data/token_windows.h); seeds 1, 2, 3 each side, alternating; the medians must agree
# within 0.03. Once with the bytes tokenizer, once with a BPE vocabulary of 2048 trained by
# dtrain-tokenize. Prints a table, a sample of each tokenizer's last dtrain run, and writes
# the raw lines to RAW (default bench/results/gpt_convergence.txt).
#   bench/gpt_convergence.sh [BUILD_DIR] [--steps N] [--seeds "1 2 3"] [--raw FILE]
# About 12 runs of 2-4 minutes on 2 vCPUs. PYTHON: the interpreter with torch (default: the
# repository's .venv-tests, which sees Debian's torch).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/release
steps=2000
seeds="1 2 3"
raw=$root/bench/results/gpt_convergence.txt
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    *) build=$(cd "$1" && pwd); shift ;;
  esac
done
python=${PYTHON:-$root/.venv-tests/bin/python3}
corpus=/usr/share/games/fortunes
[ -d "$corpus" ] || { echo "gpt_convergence: $corpus is missing (scripts/install-deps.sh installs fortunes)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$root/bench/provenance.sh"
peer=$("$python" -c 'import torch; print(f"torch {torch.__version__}")')
{
  provenance_text "$peer" "bench/gpt_convergence.sh --steps $steps --seeds '$seeds'"
} > "$raw"

"$build/examples/dtrain-tokenize" encode --tokenizer bytes --out "$work/bytes.tok" "$corpus"
"$build/examples/dtrain-tokenize" train --vocab 2048 --out "$work/bpe2048.bpe" "$corpus"
"$build/examples/dtrain-tokenize" encode --tokenizer "bpe:$work/bpe2048.bpe" --out "$work/bpe.tok" "$corpus"

common=(--layers 4 --heads 4 --embd 128 --block-size 64 --global-batch-size 12 --bias false --dropout 0
        --betas 0.9,0.99 --weight-decay 0.1 --clip 1 --lr 1e-3 --min-lr 1e-4 --warmup-steps 100 --steps "$steps"
        --eval-every 500)
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for tok in bytes bpe; do
  if [ "$tok" = bytes ]; then spec=bytes; vocab=256; else spec="bpe:$work/bpe2048.bpe"; vocab=2048; fi
  ours=() theirs=()
  for seed in $seeds; do
    out=$("$build/examples/train_gpt" --data "$work/$tok.tok" --tokenizer "$spec" "${common[@]}" --seed "$seed" \
          --sample 300 --log-every 500)
    echo "$out" | sed "s/^/dtrain $tok seed $seed: /" >> "$raw"
    v=$(echo "$out" | sed -n 's/^step [0-9]*: val loss \([0-9.]*\).*/\1/p' | tail -1)
    ours+=("$v")
    echo "dtrain  $tok seed $seed: final val loss $v"
    sample=$(echo "$out" | sed -n '/^sample (/,$p')
    out=$("$python" "$root/bench/peers/pytorch_gpt.py" --tokens "$work/$tok.tok" --vocab "$vocab" "${common[@]}" \
          --seed "$seed")
    echo "$out" | sed "s/^/pytorch $tok seed $seed: /" >> "$raw"
    v=$(echo "$out" | sed -n 's/^step [0-9]*: .*val loss \([0-9.]*\).*/\1/p' | tail -1)
    theirs+=("$v")
    echo "pytorch $tok seed $seed: final val loss $v"
  done
  mo=$(median "${ours[@]}")
  mt=$(median "${theirs[@]}")
  verdict=$(python3 -c "print('within' if abs($mo - $mt) <= 0.03 else 'NOT within')")
  line="$tok: dtrain median val loss $mo (seeds: ${ours[*]}), $peer $mt (seeds: ${theirs[*]}); difference $(python3 -c "print(f'{$mo - $mt:+.4f}')"), $verdict 0.03"
  echo "$line" | tee -a "$raw"
  echo "$sample" | sed "s/^/dtrain $tok sample: /" >> "$raw"
  echo "$sample"
done
