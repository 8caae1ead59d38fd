#!/usr/bin/env bash
# Data-parallel efficiency, dtrain against PyTorch DDP (gloo), in one go on this machine:
# bench_ddp and pytorch_ddp.py on the same models, per-rank batch and thread count, at
# 2 ranks and at 1 rank (the reference: no peer to talk to). Writes the JSON lines to
# bench/results/ddp_np2.jsonl and a table, headed by the machine's description, to
# bench/results/ddp_np2.txt (and stdout).
#   bench/peers/run_ddp_comparison.sh [--build DIR] [--quick]
# --build: the CMake build directory holding bench/bench_ddp (default build/release).
# --quick: a few steps per case, to check the script rather than to measure (results go
# to a temporary directory).
# PYTHON selects the peer's interpreter (default .venv/bin/python, from setup-venv.sh);
# for Debian's python3-torch use PYTHON=/usr/bin/python3 OPENBLAS_CORETYPE=SkylakeX.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build/release
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --quick) quick=1; shift ;;
    *) echo "run_ddp_comparison: unknown argument '$1' (expected --build DIR or --quick)" >&2; exit 2 ;;
  esac
done
python=${PYTHON:-$root/.venv/bin/python}
bench_ddp=$build/bench/bench_ddp
[ -x "$bench_ddp" ] || { echo "run_ddp_comparison: $bench_ddp not found (build the bench_ddp target)" >&2; exit 1; }
[ -x "$python" ] || { echo "run_ddp_comparison: $python not found (run bench/peers/setup-venv.sh)" >&2; exit 1; }

results=$root/bench/results
if [ "$quick" = 1 ]; then  # a check must not overwrite measured results
  results=$(mktemp -d)
  trap 'rm -rf "$results"' EXIT
fi
mkdir -p "$results"
jsonl=$results/ddp_np2.jsonl
table=$results/ddp_np2.txt
. "$root/bench/provenance.sh"  # the raw files' first line (docs/PERFORMANCE.md)
provenance_json > "$jsonl"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
threads=1

# model batch-per-rank steps warm-up. ResNet-18 at 32x32 runs about 13 samples/s per
# core, hence few steps.
cases=("mlp 256 30 5" "cnn 64 20 3" "resnet18_cifar 32 10 2")
[ "$quick" = 1 ] && cases=("mlp 64 2 1" "cnn 16 2 1" "resnet18_cifar 4 1 1")

machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) hardware threads, \
$(free -g | awk '/^Mem:/ {print $2}') GB; $(uname -sr); load average at start $(cut -d' ' -f1-3 /proc/loadavg); \
dtrain $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown); \
torch $("$python" -c 'import torch; print(torch.__version__)'); $(date -u +%Y-%m-%dT%H:%MZ)"
echo "machine: $machine"

for c in "${cases[@]}"; do
  read -r model batch steps warmup <<< "$c"
  for ranks in 2 1; do
    echo "== $model, $ranks rank(s), batch $batch per rank: dtrain, then pytorch" >&2
    mpirun -np "$ranks" "$bench_ddp" --model "$model" --batch "$batch" --steps "$steps" --warmup "$warmup" \
      --threads "$threads" --json | tee -a "$jsonl"
    "$python" "$root/bench/peers/pytorch_ddp.py" --model "$model" --ranks "$ranks" --batch "$batch" \
      --steps "$steps" --warmup "$warmup" --threads "$threads" --json | tee -a "$jsonl"
  done
done

python3 - "$jsonl" "$machine; at end $(cut -d' ' -f1-3 /proc/loadavg)" <<'PY' | { provenance_text; cat; } | tee "$table"
import json, sys
rows = [r for r in map(json.loads, filter(str.strip, open(sys.argv[1]))) if "framework" in r]  # not the machine
print(f"machine: {sys.argv[2]}")
print("Data-parallel step time (ms, median; slowest rank per step), 1 thread per rank. eff = step time without")
print("communication / with it; comm = the difference (ms). dtrain overlaps all-reduce with backward (no-ovl:")
print("all-reduce after backward). ratio = dtrain samples/s / pytorch samples/s.")
print(f"{'model':<15}{'ranks':>5}{'batch':>6} | {'dtrain':>8}{'no-comm':>9}{'no-ovl':>8}{'comm':>7}{'eff':>7} |"
      f" {'pytorch':>8}{'no_sync':>9}{'comm':>7}{'eff':>7} | {'samples/s dtrain':>16}{'pytorch':>9}{'ratio':>7}")
peer = {(r["model"], r["ranks"]): r for r in rows if r["framework"] == "pytorch"}
for d in (r for r in rows if r["framework"] == "dtrain"):
    p = peer.get((d["model"], d["ranks"]))
    line = (f"{d['model']:<15}{d['ranks']:>5}{d['batch_per_rank']:>6} | {d['step_ms_median']:>8.1f}"
            f"{d['step_ms_no_comm_median']:>9.1f}{d['step_ms_no_overlap_median']:>8.1f}"
            f"{d['step_ms_median'] - d['step_ms_no_comm_median']:>7.1f}{d['efficiency']:>7.3f} |")
    if p:
        ratio = d["samples_per_s"] / p["samples_per_s"]
        line += (f" {p['step_ms_median']:>8.1f}{p['step_ms_no_comm_median']:>9.1f}"
                 f"{p['step_ms_median'] - p['step_ms_no_comm_median']:>7.1f}{p['efficiency']:>7.3f} |"
                 f" {d['samples_per_s']:>16.1f}{p['samples_per_s']:>9.1f}{ratio:>7.2f}")
    print(line)
PY
