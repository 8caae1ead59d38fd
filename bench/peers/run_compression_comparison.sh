#!/usr/bin/env bash
# Gradient compression on a slow link, dtrain against PyTorch DDP's communication hooks
# (gloo), in one go: two emulated hosts (bench/netns/run_netns.sh, one rank each) joined by
# a tc-shaped link, the CNN and ResNet-20, alternating repetitions of
#   bench_ddp --exchanges bf16,powersgd:2:0,powersgd:4:0   (plain all-reduce, no communication
#                                                          and each exchange, in turn per step)
#   pytorch_ddp.py --hook none|bf16|powersgd:2|powersgd:4  (each with its no_sync steps)
# JSON lines to bench/results/compression_netns.jsonl, the table of medians over the
# repetitions (bench/peers/compression_table.py) to compression_netns.txt and stdout.
#   sudo bench/peers/run_compression_comparison.sh [--reps N] [--link 1gbit] [--build DIR] [--quick]
# --quick: 1 repetition of a few steps, to check the script (results to a temporary directory).
# PYTHON selects the peer's interpreter (default .venv/bin/python, bench/peers/setup-venv.sh).
# Both sides run with one thread per rank and their defaults for buckets (dtrain 4 MiB,
# DDP 25 MiB); PowerSGD compresses from the first timed step on both (warm-up steps first).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build/release
reps=5
link=1gbit
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift 2 ;;
    --link) link=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --quick) quick=1; reps=1; shift ;;
    *) echo "run_compression_comparison: unknown argument '$1' (expected --reps N, --link RATE, --build DIR or --quick)" >&2
       exit 2 ;;
  esac
done
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$build/bench/bench_ddp" ] || { echo "run_compression_comparison: $build/bench/bench_ddp not found" >&2; exit 1; }
[ -x "$python" ] || { echo "run_compression_comparison: $python not found (run bench/peers/setup-venv.sh)" >&2; exit 1; }

results=$root/bench/results
if [ "$quick" = 1 ]; then  # a check must not overwrite measured results
  results=$(mktemp -d)
  trap 'rm -rf "$results"' EXIT
fi
jsonl=$results/compression_netns.jsonl
table=$results/compression_netns.txt
. "$root/bench/provenance.sh"  # the raw files' first line (docs/PERFORMANCE.md)
provenance_json > "$jsonl"

# The peer joins its gloo group over the emulated link: host 0's address, its interface.
export MASTER_ADDR=10.200.0.1 MASTER_PORT=29531 GLOO_SOCKET_IFNAME=eth0
machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) hardware threads; $(uname -sr); \
dtrain $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown); \
torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null); $(date -u +%Y-%m-%dT%H:%MZ); \
2 emulated hosts x 1 rank, $link; load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "machine: $machine"

netns() { "$root/bench/netns/run_netns.sh" --hosts 2 --ranks-per-host 1 --links "$link" --bench-dir "$build/bench" -- "$@"; }

# model batch-per-rank steps warm-up
cases=("cnn 64 20 3" "resnet20_cifar 64 10 3")
[ "$quick" = 1 ] && cases=("cnn 16 2 3" "resnet20_cifar 4 1 3")
for ((rep = 1; rep <= reps; ++rep)); do
  for c in "${cases[@]}"; do
    read -r model batch steps warmup <<< "$c"
    echo "== repetition $rep, $model: dtrain, then pytorch" >&2
    netns bench_ddp --json --model "$model" --batch "$batch" --steps "$steps" --warmup "$warmup" --threads 1 \
      --exchanges bf16,powersgd:2:0,powersgd:4:0 | sed "s/^{/{\"rep\":$rep,/" >> "$jsonl"
    for hook in none bf16 powersgd:2 powersgd:4; do
      netns "$python" "$root/bench/peers/pytorch_ddp.py" --json --model "$model" --batch "$batch" --steps "$steps" \
        --warmup "$warmup" --threads 1 --hook "$hook" | sed "s/^{/{\"rep\":$rep,/" >> "$jsonl"
    done
  done
done

python3 "$root/bench/peers/compression_table.py" "$jsonl" "$machine; at end $(cut -d' ' -f1-3 /proc/loadavg)" \
  | { provenance_text; cat; } | tee "$table"
