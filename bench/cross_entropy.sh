#!/usr/bin/env bash
# A language model's output projection and loss, forward and backward, at GPT-2 small's head
# (vocabulary 50257, width 768, 4 x 1024 tokens): dtrain's linear_cross_entropy (fused over
# chunks of tokens) and dtrain's linear + lm_loss (the logits materialised) against PyTorch's
# F.cross_entropy(h @ W.T, y) (bench/peers/pytorch_cross_entropy.py). Each measurement is a
# fresh process (a peak resident set never falls), the three sides alternating, REPS
# repetitions (default 5) at each thread count (default 1, then 2); medians. PYTHON: the peer's
# interpreter (default .venv/bin/python).
#   time:   the process's median of PASSES timed forward+backward passes after WARMUP untimed
#           ones (defaults 1 and 0: a pass takes seconds at 1 thread, and the repetitions are
#           the processes; the first pass pays the page faults of fresh memory on every side)
#   memory: the growth of the peak resident set (ru_maxrss) over its value once the inputs
#           exist, the same way on both sides (PyTorch has no peak counter on the CPU);
#           dtrain's block-cache peak is printed beside it
# The target (issue 59): fused peak at most half of PyTorch's, and no slower.
#   bench/cross_entropy.sh [BUILD_DIR] [--reps N] [--threads "1 2"] [--batch B] [--seq T]
#                          [--passes P] [--warmup W] [--raw FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/release
reps=5
threads_list="1 2"
batch=4
seq=1024
passes=1
warmup=0
raw=$root/bench/results/cross_entropy.txt
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --threads) threads_list=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --passes) passes=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    *) build=$(cd "$1" && pwd); shift ;;
  esac
done
python=${PYTHON:-$root/.venv/bin/python}
source "$root/bench/provenance.sh"
peer=$("$python" -c 'import torch; print(f"torch {torch.__version__}")')
provenance_text "$peer" "bench/cross_entropy.sh --reps $reps --threads '$threads_list' --batch $batch --seq $seq --passes $passes --warmup $warmup" > "$raw"
# The load before and after: the figures move with other work on the machine, the ratios less.
echo "# load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$raw"
shape=(--batch "$batch" --seq "$seq" --reps "$passes" --warmup "$warmup")
for threads in $threads_list; do
  for rep in $(seq 1 "$reps"); do
    for side in unfused fused torch; do
      if [ "$side" = torch ]; then
        line=$(OMP_NUM_THREADS=$threads "$python" "$root/bench/peers/pytorch_cross_entropy.py" "${shape[@]}" --threads "$threads")
      else
        # The fused process checks itself against the unfused op on 256 tokens after timing.
        check=256
        [ "$side" = unfused ] && check=0
        line=$("$build/bench/bench_cross_entropy" --case "$side" "${shape[@]}" --threads "$threads" --json \
               --check-tokens "$check")
      fi
      echo "threads $threads rep $rep $side $line" >> "$raw"
      echo "$line" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
cache = ", block cache {:.1f} MB".format(d["cache_peak_mb"]) if "cache_peak_mb" in d else ""
print("threads {} rep {} {:7}: {:9.1f} ms, peak resident set growth {:7.1f} MB{}, loss {:.4f}".format(
    *sys.argv[1:4], d["median_ms"], d["rss_growth_mb"], cache, d["loss"]))' \
        "$threads" "$rep" "$side"
    done
  done
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$raw"
# Medians and ratios, from the raw file's lines.
python3 - "$raw" <<'PY' | tee -a "$raw"
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    if not line.startswith("threads "):
        continue
    _, threads, _, _, side, js = line.split(" ", 5)
    runs.setdefault((int(threads), side), []).append(json.loads(js))
for threads in sorted({t for t, _ in runs}):
    med = {}
    for side in ("unfused", "fused", "torch"):
        rs = runs.get((threads, side), [])
        if not rs:
            continue
        med[side] = (statistics.median(r["median_ms"] for r in rs), statistics.median(r["rss_growth_mb"] for r in rs))
        cache = f", block cache {statistics.median(r['cache_peak_mb'] for r in rs):.1f} MB" if side != "torch" else ""
        print(f"threads {threads} {side:7} median of {len(rs)}: {med[side][0]:9.1f} ms, peak resident set growth "
              f"{med[side][1]:7.1f} MB{cache}")
    if "torch" in med:
        for side in ("fused", "unfused"):
            if side in med:
                print(f"threads {threads} dtrain {side} / PyTorch: peak {med[side][1] / med['torch'][1]:.3f}, "
                      f"time {med[side][0] / med['torch'][0]:.3f}")
PY
