#!/usr/bin/env bash
# Sharded data parallelism's speed, dtrain against PyTorch, in one go on this machine:
# bench_zero_speed (dp, zero=1, zero=2, zero=3) and pytorch_zero.py (DDP,
# ZeroRedundancyOptimizer with DDP, FSDP2 fully_shard with and without resharding after
# forward), 2 ranks x 1 thread, the LeNet CNN at batch 64 per rank and the 50M MLP at 256,
# in alternating repetitions (--reps, default 5). Writes the JSON lines to
# bench/results/zero_comparison.jsonl and a table of medians over the repetitions (each
# repetition's figure is itself a median over its updates) to zero_comparison.txt.
#   bench/peers/run_zero_comparison.sh [--build DIR] [--reps N] [--quick]
# PYTHON selects the peer's interpreter (default .venv/bin/python, from setup-venv.sh; it
# needs torch >= 2.6 for FSDP2's fully_shard).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build/release
reps=5
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --quick) quick=1; reps=1; shift ;;
    *) echo "run_zero_comparison: unknown argument '$1' (expected --build DIR, --reps N or --quick)" >&2; exit 2 ;;
  esac
done
python=${PYTHON:-$root/.venv/bin/python}
bench=$build/bench/bench_zero_speed
[ -x "$bench" ] || { echo "run_zero_comparison: $bench not found (build the bench_zero_speed target)" >&2; exit 1; }
"$python" -c 'from torch.distributed.fsdp import fully_shard' 2>/dev/null ||
  { echo "run_zero_comparison: $python has no torch with FSDP2 (run bench/peers/setup-venv.sh)" >&2; exit 1; }

results=$root/bench/results
if [ "$quick" = 1 ]; then  # a check must not overwrite measured results
  results=$(mktemp -d)
  trap 'rm -rf "$results"' EXIT
fi
jsonl=$results/zero_comparison.jsonl
table=$results/zero_comparison.txt
. "$root/bench/provenance.sh"  # the raw files' first line (docs/PERFORMANCE.md)
provenance_json > "$jsonl"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# model batch-per-rank updates warm-up (the 50M MLP takes 3-7 s an update).
cases=("cnn 64 20 3" "mlp_50m 256 5 2")
[ "$quick" = 1 ] && cases=("cnn 16 2 1" "mlp_50m 16 1 1")

machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc --all) hardware threads, \
$(free -g | awk '/^Mem:/ {print $2}') GB; load average at start $(cut -d' ' -f1-3 /proc/loadavg); \
dtrain $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown); \
torch $("$python" -c 'import torch; print(torch.__version__)'); Open MPI $(mpirun --version | head -1 | awk '{print $NF}'); \
$(date -u +%Y-%m-%dT%H:%MZ)"
echo "machine: $machine"

for rep in $(seq 1 "$reps"); do
  for c in "${cases[@]}"; do
    read -r model batch steps warmup <<< "$c"
    echo "== repetition $rep, $model, batch $batch per rank: dtrain, then pytorch" >&2
    mpirun -np 2 "$bench" --model "$model" --batch "$batch" --steps "$steps" --warmup "$warmup" --threads 1 --json |
      grep '"framework"' | sed "s/^{/{\"rep\": $rep, /" | tee -a "$jsonl"
    "$python" "$root/bench/peers/pytorch_zero.py" --model "$model" --batch "$batch" --steps "$steps" \
      --warmup "$warmup" --threads 1 --json | sed "s/^{/{\"rep\": $rep, /" | tee -a "$jsonl"
  done
done

provenance_text > "$table"
"$python" - "$jsonl" "$machine" "$reps" >> "$table" <<'PY'
import json, statistics, sys

rows = [r for r in (json.loads(line) for line in open(sys.argv[1]) if line.strip()) if "provenance" not in r]
print(f"machine: {sys.argv[2]}")
print(f"medians over {sys.argv[3]} alternating repetitions; 2 ranks x 1 thread; Adam lr 1e-4")
pairs = [("dp", "ddp"), ("zero=1", "zero1"), ("zero=2", "fsdp2_zero2"), ("zero=3", "fsdp2_zero3")]
print(f"{'model':<9}{'dtrain':<8}{'samples/s':>10}{'vs dp':>7}  {'pytorch':<12}{'samples/s':>10}{'vs ddp':>7}"
      f"{'dtrain/pytorch':>15}")
for model in dict.fromkeys(r["model"] for r in rows):
    def median(framework, key, value):
        v = [r[value] for r in rows if r["model"] == model and r["framework"] == framework
             and r.get("spec", r.get("mode")) == key and r[value] is not None]
        return statistics.median(v) if v else float("nan")
    for ours, theirs in pairs:
        a, b = median("dtrain", ours, "samples_per_s"), median("pytorch", theirs, "samples_per_s")
        print(f"{model:<9}{ours:<8}{a:>10.1f}{median('dtrain', ours, 'vs_first'):>7.3f}  {theirs:<12}{b:>10.1f}"
              f"{median('pytorch', theirs, 'vs_ddp'):>7.3f}{a / b:>15.2f}")
PY
cat "$table"
