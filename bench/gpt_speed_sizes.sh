#!/usr/bin/env bash
# train_gpt's training speed (forward, backward, clipped AdamW) against PyTorch's at the three
# sizes of issue 59, on the fortunes: tokens/s and MFU, REPS alternating repetitions (default 5),
# medians, at each thread count of THREADS (default "1").
#   small:  4 layers x 128, 4 heads, bytes (vocabulary 256), batch 12 x 64 (the GPT issue's)
#   medium: 6 layers x 384, 6 heads, GPT-2's BPE (50257), batch 8 x 256
#   124m:   GPT-2 small, 12 layers x 768, 12 heads, GPT-2's BPE (50257), batch 4 x 64
# Every model without biases or dropout, tied embeddings, AdamW with clipping at 1.0. The peer
# (bench/peers/pytorch_gpt.py, PYTHON's torch) runs eager (F.scaled_dot_product_attention, its
# flash path on the CPU) and torch.compile (compile time excluded: its 5 warm-up steps), and at
# 2 threads also eager with OMP_WAIT_POLICY=ACTIVE (dtrain's pool spins before it sleeps); and
# Debian's torch 1.13 eager (/usr/bin/python3 with python3-torch, its own attention: 1.13 has no
# scaled_dot_product_attention) on OpenBLAS (libopenblas0-pthread; OPENBLAS_CORETYPE=SkylakeX on
# AVX-512 CPUs, as run_train_comparison.sh), skipped when that python cannot import torch. The
# best of them per repetition is "the best PyTorch". dtrain's figure: the median of train_gpt's
# tokens/s lines after its first SKIP steps; the peer's: TIME timed steps after 5 warm-up steps.
# MFU: tokens/s x flops_per_token (6 N + 12 L T d, N without the position table) over the
# FMA-loop peak train_gpt measures at start-up at the same thread count (printed per run).
# GPT-2's BPE needs its rank file: --tiktoken FILE (default .venv-tests/share/gpt2.tiktoken,
# which scripts/install-deps.sh --tests fetches).
#   bench/gpt_speed_sizes.sh [BUILD_DIR] [--sizes "small medium 124m"] [--threads "1 2"]
#                            [--reps N] [--tiktoken FILE] [--raw FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/release
reps=5
sizes="small medium 124m"
threads_list=1
tiktoken=$root/.venv-tests/share/gpt2.tiktoken
raw=$root/bench/results/gpt_speed_sizes.txt
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --threads) threads_list=$2; shift 2 ;;
    --tiktoken) tiktoken=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    *) build=$(cd "$1" && pwd); shift ;;
  esac
done
python=${PYTHON:-$root/.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$root/bench/provenance.sh"
peer=$("$python" -c 'import torch; print(f"torch {torch.__version__}")')
provenance_text "$peer" "bench/gpt_speed_sizes.sh --sizes '$sizes' --threads '$threads_list' --reps $reps" > "$raw"
echo "# load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$raw"
debian_python=${DEBIAN_PYTHON:-/usr/bin/python3}
if grep -q -w avx512f /proc/cpuinfo; then
  debian_env=(env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=SkylakeX)
else
  debian_env=(env -u OPENBLAS_L2_SIZE -u OPENBLAS_CORETYPE)
fi
debian=1
if ! "${debian_env[@]}" "$debian_python" -c 'import torch' 2>/dev/null; then
  debian=0
  echo "gpt_speed_sizes: skipping Debian's torch 1.13: $debian_python cannot import torch (apt-get install python3-torch)" |
    tee -a "$raw"
else
  case "$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)" in
    *openblas*) ;;
    *) echo "gpt_speed_sizes: Debian's torch would run on the reference BLAS (apt-get install libopenblas0-pthread)" >&2 ;;
  esac
  echo "# debian peer: $("${debian_env[@]}" "$debian_python" -c 'import torch; print("torch", torch.__version__)'), BLAS $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)" >> "$raw"
fi
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for size in $sizes; do
  case $size in
    small) model=(--layers 4 --heads 4 --embd 128 --block-size 64 --global-batch-size 12); tok=bytes; vocab=256
           steps=60; skip=20; every=10; time_steps=40 ;;
    medium) model=(--layers 6 --heads 6 --embd 384 --block-size 256 --global-batch-size 8); tok=gpt2; vocab=50257
            steps=9; skip=3; every=1; time_steps=5 ;;
    124m) model=(--layers 12 --heads 12 --embd 768 --block-size 64 --global-batch-size 4); tok=gpt2; vocab=50257
          steps=9; skip=3; every=1; time_steps=5 ;;
    *) echo "gpt_speed_sizes.sh: unknown size '$size' (small, medium, 124m)" >&2; exit 2 ;;
  esac
  tokens=$work/$tok.tok
  if [ ! -f "$tokens" ]; then
    if [ "$tok" = bytes ]; then tokenizer=bytes; else tokenizer=gpt2:$tiktoken; fi
    "$build/examples/dtrain-tokenize" encode --tokenizer "$tokenizer" --out "$tokens" /usr/share/games/fortunes > /dev/null
  fi
  tokenizer_flag=bytes
  [ "$tok" = gpt2 ] && tokenizer_flag=gpt2:$tiktoken
  peer_model=(--layers "${model[1]}" --heads "${model[3]}" --embd "${model[5]}" --block-size "${model[7]}"
              --global-batch-size "${model[9]}")
  for threads in $threads_list; do
    declare -A tps=()
    sides=(dtrain eager compile)
    [ "$threads" -gt 1 ] && sides+=(eager_active)
    [ "$debian" = 1 ] && sides+=(debian)
    best=()
    for rep in $(seq 1 "$reps"); do
      rep_best=0
      for side in "${sides[@]}"; do
        case $side in
          dtrain)
            out=$("$build/examples/train_gpt" --data "$tokens" --tokenizer "$tokenizer_flag" "${model[@]}" --bias false \
                  --dropout 0 --steps "$steps" --warmup-steps 2 --eval-every "$steps" --eval-windows 1 \
                  --log-every "$every" --sample 0 --threads "$threads" --progress lines 2>&1)
            t=$(echo "$out" | sed -n 's/^step \([0-9]*\): train loss.* \([0-9.]*\) tokens\/s.*/\1 \2/p' |
                awk -v s="$skip" '$1 > s {print $2}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
            mfu_peak=$(echo "$out" | sed -n 's/^train_gpt: peak \([0-9.]*\) GFLOP\/s per rank.* \([0-9.e+]*\) FLOPs per token$/\1 \2/p') ;;
          *)
            env_args=(OMP_NUM_THREADS="$threads")
            [ "$side" = eager_active ] && env_args+=(OMP_WAIT_POLICY=ACTIVE)
            flags=()
            [ "$side" = compile ] && flags+=(--compile)
            side_python=(env "${env_args[@]}" "$python")
            [ "$side" = debian ] && side_python=("${debian_env[@]}" "${env_args[@]}" OPENBLAS_NUM_THREADS="$threads" "$debian_python")
            out=$("${side_python[@]}" "$root/bench/peers/pytorch_gpt.py" --tokens "$tokens" --vocab "$vocab" \
                  "${peer_model[@]}" --threads "$threads" --time-steps "$time_steps" "${flags[@]}" 2>&1)
            t=$(echo "$out" | sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p')
            if [ "$side" != dtrain ] && awk -v a="$t" -v b="$rep_best" 'BEGIN {exit !(a > b)}'; then rep_best=$t; fi ;;
        esac
        echo "$size threads $threads rep $rep $side: tokens/s $t" | tee -a "$raw"
        tps[$side]="${tps[$side]:-} $t"
      done
      best+=("$rep_best")
    done
    # shellcheck disable=SC2086
    d=$(median ${tps[dtrain]})
    read -r peak flops <<< "$mfu_peak"
    for side in "${sides[@]}"; do
      # shellcheck disable=SC2086
      echo "$size threads $threads $side: median tokens/s $(median ${tps[$side]})" | tee -a "$raw"
    done
    b=$(median "${best[@]}")
    echo "$size threads $threads best PyTorch per repetition: median tokens/s $b" | tee -a "$raw"
    awk -v d="$d" -v b="$b" -v p="$peak" -v f="$flops" -v s="$size" -v n="$threads" 'BEGIN {
      printf "%s threads %s: dtrain / best PyTorch %.3f; dtrain MFU %.1f%% (peak %s GFLOP/s, %s FLOPs per token)\n",
             s, n, d / b, 100 * d * f / (p * 1e9), p, f }' | tee -a "$raw"
    unset tps
  done
done
