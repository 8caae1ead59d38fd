#!/usr/bin/env bash
# train_gpt's training speed against PyTorch's on the same model and data (nanoGPT's small CPU
# configuration: 4 layers, 4 heads, width 128, block 64, global batch 12, bytes of the
# fortunes), at 1 and 2 threads: tokens/s and peak resident memory. Recorded, not targeted
# (the speed issue's targets come later). The peer at its best: eager with the OpenMP
# runtime's default and with OMP_WAIT_POLICY=ACTIVE (dtrain's pool spins before it sleeps),
# and torch.compile where torch >= 2 (PYTHON's torch). REPS alternating repetitions of each
# (default 5); medians. dtrain's figure: the median of train_gpt's tokens/s lines after its
# first 20 steps; the peer's: 40 timed steps after 5 warm-up steps. Peak memory: the process's
# maximum resident set (getrusage of the child).
#   bench/gpt_speed.sh [BUILD_DIR] [--reps N] [--raw FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/release
reps=5
raw=$root/bench/results/gpt_speed.txt
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    *) build=$(cd "$1" && pwd); shift ;;
  esac
done
python=${PYTHON:-$root/.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/examples/dtrain-tokenize" encode --tokenizer bytes --out "$work/bytes.tok" /usr/share/games/fortunes > /dev/null
source "$root/bench/provenance.sh"
peer=$("$python" -c 'import torch; print(f"torch {torch.__version__}")')
compile_ok=$("$python" -c 'import torch; print(int(int(torch.__version__.split(".")[0]) >= 2))')
provenance_text "$peer" "bench/gpt_speed.sh --reps $reps" > "$raw"
model=(--layers 4 --heads 4 --embd 128 --block-size 64 --global-batch-size 12 --bias false --dropout 0)
# Runs a command; prints its stdout, then "maxrss_kb N".
measured() { python3 -c '
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True, env=None)
sys.stdout.write(r.stdout)
print("maxrss_kb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)' "$@"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for threads in 1 2; do
  declare -A tps=() rss=()
  sides=(dtrain eager eager_active)
  [ "$compile_ok" = 1 ] && sides+=(compile)
  for rep in $(seq 1 "$reps"); do
    for side in "${sides[@]}"; do
      case $side in
        dtrain)
          out=$(measured "$build/examples/train_gpt" --data "$work/bytes.tok" --tokenizer bytes "${model[@]}" \
                --steps 60 --warmup-steps 5 --eval-every 60 --eval-windows 1 --log-every 10 --sample 0 --threads "$threads")
          t=$(echo "$out" | sed -n 's/^step \([0-9]*\): train loss.* \([0-9]*\) tokens\/s.*/\1 \2/p' | awk '$1 > 20 {print $2}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') ;;
        *)
          env_args=(OMP_NUM_THREADS="$threads")
          [ "$side" = eager_active ] && env_args+=(OMP_WAIT_POLICY=ACTIVE)
          flags=()
          [ "$side" = compile ] && flags+=(--compile)
          out=$(env "${env_args[@]}" bash -c "$(declare -f measured); measured \"\$@\"" _ "$python" \
                "$root/bench/peers/pytorch_gpt.py" --tokens "$work/bytes.tok" --vocab 256 --layers 4 --heads 4 \
                --embd 128 --block-size 64 --global-batch-size 12 --threads "$threads" --time-steps 40 "${flags[@]}")
          t=$(echo "$out" | sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p') ;;
      esac
      m=$(echo "$out" | sed -n 's/^maxrss_kb //p')
      echo "threads $threads rep $rep $side: tokens/s $t, peak RSS $((m / 1024)) MB" | tee -a "$raw"
      tps[$side]="${tps[$side]:-} $t"
      rss[$side]="${rss[$side]:-} $m"
    done
  done
  for side in "${sides[@]}"; do
    # shellcheck disable=SC2086
    echo "threads $threads $side: median tokens/s $(median ${tps[$side]}), median peak RSS $(( $(median ${rss[$side]}) / 1024 )) MB" | tee -a "$raw"
  done
  unset tps rss
done
