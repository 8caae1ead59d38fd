#!/usr/bin/env bash
# Parameter servers, dtrain against TensorFlow's ParameterServerStrategy, in one go on this
# machine: the Fashion-MNIST CNN at 64 samples per update, 2 workers and 1 or 2 servers
# (3-4 processes on 2 vCPUs: oversubscribed, as the results say), train_mnist's recipe with
# momentum 0.7 for the asynchronous runs on both sides (0.9 in sync mode; see bench_ps.cpp).
#   1. throughput: --reps alternating repetitions (default 5) of bench_ps (async, no
#      straggler, the first --limit-train samples, default 6400, one epoch) and
#      tf_ps_mnist.py on the same layout and data; samples/s of training;
#   2. time to 88% test accuracy (4 evaluations per epoch, at most 2 epochs, the whole
#      training set) for sync, async, ssp:1 and ssp:4 with 1 server, and sync and async
#      with 2, each without and with worker 1 slowed 2x (bench_ps), then TensorFlow's
#      without and with its worker 1 slowed by its measured step time (--tta-reps, default 1).
# Writes the JSON lines, each tagged with its part and repetition, to
# bench/results/ps_comparison.jsonl and the table (ps_table.py), headed by the machine and
# versions, to bench/results/ps_comparison.txt (and stdout).
#   bench/peers/run_ps_comparison.sh [--build DIR] [--reps N] [--tta-reps N] [--limit-train N] [--quick]
# --quick: one repetition on 640 samples and a target of 50%, to check the script rather
# than to measure (results go to a temporary directory).
# PYTHON selects the peer's interpreter (default .venv/bin/python, from setup-venv.sh).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build/release
reps=5
tta_reps=1
limit=6400
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --tta-reps) tta_reps=$2; shift 2 ;;
    --limit-train) limit=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    *) echo "run_ps_comparison: unknown argument '$1' (expected --build DIR, --reps N, --tta-reps N, --limit-train N or --quick)" >&2
       exit 2 ;;
  esac
done
python=${PYTHON:-$root/.venv/bin/python}
bench=$build/bench/bench_ps
peer=$root/bench/peers/tf_ps_mnist.py
[ -x "$bench" ] || { echo "run_ps_comparison: $bench not found (build the bench_ps target)" >&2; exit 1; }
[ -x "$python" ] || { echo "run_ps_comparison: $python not found (run bench/peers/setup-venv.sh)" >&2; exit 1; }
for n in "$reps" "$tta_reps" "$limit"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "run_ps_comparison: expected a positive integer, got '$n'" >&2; exit 2; }
done

results=$root/bench/results
target=0.88
full=0  # the whole training set
if [ "$quick" = 1 ]; then  # a check must not overwrite measured results
  results=$(mktemp -d)
  trap 'rm -rf "$results"' EXIT
  reps=1
  tta_reps=1
  limit=640
  target=0.5
  full=640
fi
mkdir -p "$results"
out=$results/ps_comparison.jsonl
: >"$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpirun=(mpirun -np 4)

# Appends stdin's JSON lines to the results, tagged.
tag() { "$python" -c 'import json, sys
extra = json.loads(sys.argv[1])
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        print(json.dumps({**json.loads(line), **extra}), flush=True)' "$1" >>"$out"; }

for rep in $(seq 1 "$reps"); do
  echo "throughput, repetition $rep of $reps" >&2
  "${mpirun[@]}" "$bench" --json --model cnn --modes async --servers 1,2 --slow none --epochs 1 --evals-per-epoch 1 \
    --target 0.99 --limit-train "$limit" | tag "{\"part\": \"throughput\", \"rep\": $rep}"
  for ps in 1 2; do
    "$python" "$peer" --json --workers 2 --ps "$ps" --epochs 1 --limit-train "$limit" --momentum 0.7 \
      | tag "{\"part\": \"throughput\", \"rep\": $rep}"
  done
done

for rep in $(seq 1 "$tta_reps"); do
  echo "time to accuracy, repetition $rep of $tta_reps" >&2
  "${mpirun[@]}" "$bench" --json --model cnn --modes sync,async,ssp:1,ssp:4 --servers 1 --epochs 2 \
    --evals-per-epoch 4 --target "$target" --limit-train "$full" | tag "{\"part\": \"tta\", \"rep\": $rep}"
  "${mpirun[@]}" "$bench" --json --model cnn --modes sync,async --servers 2 --epochs 2 \
    --evals-per-epoch 4 --target "$target" --limit-train "$full" | tag "{\"part\": \"tta\", \"rep\": $rep}"
  # TensorFlow: unslowed, then worker 1 slowed by its median step time in that run.
  tf_limit=()
  [ "$full" != 0 ] && tf_limit=(--limit-train "$full")
  tf_json=$("$python" "$peer" --json --workers 2 --ps 1 --epochs 2 --eval-every-steps 235 --stop-at-target --momentum 0.7 \
    --target-accuracy "$target" "${tf_limit[@]}")
  echo "$tf_json" | tag "{\"part\": \"tta\", \"rep\": $rep, \"slowed\": false}"
  step_ms=$(echo "$tf_json" | "$python" -c 'import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
train = [r for r in rows if "samples_per_s" in r]
# the workers run in parallel: each step of one worker takes workers / (steps/s)
print(round(1000 * 2 * train[0]["batch_per_worker"] / train[0]["samples_per_s"]))')
  "$python" "$peer" --json --workers 2 --ps 1 --epochs 2 --eval-every-steps 235 --stop-at-target --momentum 0.7 \
    --target-accuracy "$target" --straggler-worker 1 --straggler-delay-ms "$step_ms" "${tf_limit[@]}" \
    | tag "{\"part\": \"tta\", \"rep\": $rep, \"slowed\": true, \"slow_ms\": $step_ms}"
done

{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), commit $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' (dirty)')"
  "$python" "$root/bench/peers/ps_table.py" "$out"
} | tee "$results/ps_comparison.txt"
