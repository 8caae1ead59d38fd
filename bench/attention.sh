#!/usr/bin/env bash
# Causal attention's core, forward and backward, at GPT-2's heads (12 of 64, batch 1), T = 1024
# and 2048: dtrain's fused kernels and its unfused tensor ops (bench_attention) against PyTorch's
# F.scaled_dot_product_attention on its flash path (bench/peers/pytorch_attention.py). Each
# measurement a fresh process (the median of 3 passes after 1 warm-up), the three sides
# alternating, REPS repetitions (default 5), at THREADS (default 1); medians of time and of
# peak memory above the inputs (the resident set's growth on every side, the block cache's peak
# for dtrain too). Issue 59's targets: fused at least 1.0x PyTorch's speed, memory linear in T.
#   bench/attention.sh [BUILD_DIR] [--reps N] [--threads N] [--seqs "1024 2048"] [--raw FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/release
reps=5
threads=1
seqs="1024 2048"
raw=$root/bench/results/attention.txt
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --seqs) seqs=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    *) build=$(cd "$1" && pwd); shift ;;
  esac
done
python=${PYTHON:-$root/.venv/bin/python}
source "$root/bench/provenance.sh"
peer=$("$python" -c 'import torch; print(f"torch {torch.__version__}")')
provenance_text "$peer" "bench/attention.sh --reps $reps --threads $threads --seqs '$seqs'" > "$raw"
echo "# load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$raw"
for t in $seqs; do
  for rep in $(seq 1 "$reps"); do
    for side in fused unfused torch; do
      if [ "$side" = torch ]; then
        line=$(OMP_NUM_THREADS=$threads "$python" "$root/bench/peers/pytorch_attention.py" --seq "$t" --threads "$threads")
      else
        line=$("$build/bench/bench_attention" --case "$side" --seq "$t" --threads "$threads")
      fi
      echo "seq $t rep $rep $side $line" >> "$raw"
    done
  done
  python3 - "$raw" "$t" <<'PY' | tee -a "$raw"
import json, statistics, sys
raw, t = sys.argv[1], sys.argv[2]
runs = {}
for line in open(raw):
    parts = line.split(" ", 5)
    if len(parts) == 6 and parts[0] == "seq" and parts[1] == t:
        runs.setdefault(parts[4], []).append(json.loads(parts[5]))
med = {s: (statistics.median(r["median_ms"] for r in v), statistics.median(r["rss_growth_mb"] for r in v)) for s, v in runs.items()}
cache = statistics.median(r["cache_peak_mb"] for r in runs["fused"])
for s, (ms, mb) in med.items():
    print(f"T {t} {s}: median {ms:.1f} ms, peak resident growth {mb:.1f} MB")
print(f"T {t}: fused speed / PyTorch flash {med['torch'][0] / med['fused'][0]:.3f}, fused / unfused "
      f"{med['unfused'][0] / med['fused'][0]:.3f}; fused block-cache peak {cache:.1f} MB")
PY
done
