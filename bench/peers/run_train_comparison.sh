#!/usr/bin/env bash
# One process's training throughput, dtrain against PyTorch, in one go on this machine:
# bench_train, pytorch_train.py under the virtualenv's torch and under Debian's torch 1.13
# on mlp and cnn (batch 64 and 256), resnet18_cifar (batch 128) and resnet18_224 (batch
# 16) at 1 and 2 threads; then the time to 90% Fashion-MNIST test accuracy of
# train_mnist --model cnn against pytorch_mnist_tta.py at 1 and 2 threads. Prints the
# machine's description and the tables (stdout), the JSON lines as they come.
#   bench/peers/run_train_comparison.sh [BUILD_DIR] [--quick] [--raw FILE] [--case "MODEL BATCH STEPS WARMUP"]...
#                                       [--reps N] [--no-tta]
# BUILD_DIR: the CMake build directory holding bench/bench_train and examples/train_mnist
# (default build/release; --build DIR works too). --raw: also write the JSON lines to FILE.
# --case (repeatable): measure these throughput cases instead of the default list, e.g.
# --case "resnet50_224 8 4 1". --reps N: N alternating repetitions of the throughput part
# (default 1), each JSON line tagged with its "rep"; the table gives medians and the spread.
# --no-tta: skip the time-to-accuracy part (train_mnist is then not needed).
# --quick: a step or two per case and a short training, to check the script rather than
# to measure. About 30 minutes on 2 vCPUs otherwise; do not run it while anything else
# loads the machine.
# PYTHON selects the virtualenv's interpreter (default .venv/bin/python, from
# setup-venv.sh); the Debian peer is /usr/bin/python3 with python3-torch, skipped if
# that cannot import torch.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
peers=$root/bench/peers
build=$root/build/release
quick=0
raw=
custom_cases=()
reps=1
tta=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --raw) raw=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --case) custom_cases+=("$2"); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --no-tta) tta=0; shift ;;
    -*) echo "run_train_comparison: unknown argument '$1' (expected BUILD_DIR, --quick, --raw FILE, --case SPEC," \
             "--reps N or --no-tta)" >&2
        exit 2 ;;
    *) build=$(cd "$1" && pwd); shift ;;
  esac
done
venv_python=${PYTHON:-$root/.venv/bin/python}
debian_python=/usr/bin/python3
bench_train=$build/bench/bench_train
train_mnist=$build/examples/train_mnist
[ -x "$bench_train" ] || { echo "run_train_comparison: $bench_train not found (build the bench_train target)" >&2; exit 1; }
[ -x "$venv_python" ] || { echo "run_train_comparison: $venv_python not found (run bench/peers/setup-venv.sh)" >&2; exit 1; }
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || { echo "run_train_comparison: --reps expects a positive integer, got '$reps'" >&2; exit 2; }
if [ "$tta" = 1 ]; then
  [ -x "$train_mnist" ] || { echo "run_train_comparison: $train_mnist not found (build train_mnist)" >&2; exit 1; }
  # Checked up front: finding out after half an hour of throughput cases would waste them.
  "$train_mnist" --help | grep -q -- --target-accuracy \
    || { echo "run_train_comparison: $train_mnist has no --target-accuracy flag (rebuild it)" >&2; exit 1; }
fi
# Debian's torch links the generic libblas.so.3: OpenBLAS when that is the alternative
# installed, whose kernel choice OPENBLAS_CORETYPE pins (the environment's Haswell is not
# this CPU's best); the reference BLAS otherwise, which the machine line names.
debian_env=(env OPENBLAS_CORETYPE=SkylakeX)
debian=1
if ! "${debian_env[@]}" "$debian_python" -c 'import torch' 2>/dev/null; then
  debian=0
  echo "run_train_comparison: skipping the Debian torch 1.13 peer: $debian_python cannot import torch" \
       "(apt-get install python3-torch)" >&2
fi
# train_mnist is an MPI program even in one process; as root Open MPI wants these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
jsonl=${raw:-$work/raw.jsonl}  # written as the results come: a failure late keeps the earlier ones
: > "$jsonl"

# model batch steps warm-up. A ResNet-18 step takes seconds at these batches (torch 2 here:
# about 45 samples/s at 32x32, 12 at 224x224), hence fewer steps.
cases=("mlp 64 30 5" "mlp 256 20 3" "cnn 64 20 3" "cnn 256 20 3" "resnet18_cifar 128 10 2" "resnet18_224 16 10 2")
target=0.9
tta_limits=()
if [ "$quick" = 1 ]; then
  cases=("mlp 64 2 1" "mlp 256 2 1" "cnn 64 2 1" "cnn 256 2 1" "resnet18_cifar 8 1 1" "resnet18_224 2 1 1")
  target=0.3
  tta_limits=(--epochs 1 --limit-train 1280 --limit-test 500)
fi
[ ${#custom_cases[@]} -gt 0 ] && cases=("${custom_cases[@]}")

torch_versions="torch $("$venv_python" -c 'import torch; print(torch.__version__)') ($venv_python)"
if [ "$debian" = 1 ]; then
  torch_versions+=", torch $("${debian_env[@]}" "$debian_python" -c 'import torch; print(torch.__version__)') \
($debian_python, BLAS $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3))"
fi
machine="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) hardware threads, \
$(free -g | awk '/^Mem:/ {print $2}') GB; $(uname -sr); load average at start $(cut -d' ' -f1-3 /proc/loadavg); \
dtrain $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown); $torch_versions; \
$(date -u +%Y-%m-%dT%H:%MZ)"
echo "machine: $machine"

json_lines() { sed -n '/^{/p' | tee -a "$jsonl"; }
# The throughput part's lines carry their repetition (bench_train's machine line too: harmless).
rep_lines() { sed -n "/^{/s/^{/{\"rep\": $1, /p" | tee -a "$jsonl"; }

# Per case and thread count all three in a row, so that they see similar machine load;
# each in a fresh process, as OpenMP sizes its pool once per process. Repetitions go round
# all the cases, so that each case's are spread over the run.
for rep in $(seq 1 "$reps"); do
  for c in "${cases[@]}"; do
    read -r model batch steps warmup <<< "$c"
    args=(--model "$model" --batch "$batch" --steps "$steps" --warmup "$warmup" --json)
    for threads in 1 2; do
      echo "== $model batch $batch, $threads thread(s), repetition $rep of $reps: dtrain, torch (venv)$([ "$debian" = 1 ] \
&& echo ', torch (Debian)')" >&2
      "$bench_train" "${args[@]}" --threads "$threads" | rep_lines "$rep"
      "$venv_python" "$peers/pytorch_train.py" "${args[@]}" --threads "$threads" | rep_lines "$rep"
      if [ "$debian" = 1 ]; then
        "${debian_env[@]}" "$debian_python" "$peers/pytorch_train.py" "${args[@]}" --threads "$threads" | rep_lines "$rep"
      fi
    done
  done
done

[ "$tta" = 1 ] && for threads in 1 2; do
  echo "== time to $target test accuracy, $threads thread(s): dtrain, then torch (venv)" >&2
  # The progress bar redraws with \r; keep the finished lines.
  "$train_mnist" --model cnn --threads "$threads" --target-accuracy "$target" "${tta_limits[@]}" | tr '\r' '\n' \
    | grep -a -E '^(train_mnist:|epoch [0-9]+/[0-9]+:|reached|did not reach)' | tee "$work/dtrain_tta.log" >&2
  python3 "$peers/train_table.py" dtrain-tta --threads "$threads" --target "$target" < "$work/dtrain_tta.log" \
    | json_lines
  "$venv_python" "$peers/pytorch_mnist_tta.py" --threads "$threads" --target-accuracy "$target" "${tta_limits[@]}" \
    --json | json_lines
done

echo
python3 "$peers/train_table.py" table "$jsonl" --machine "$machine; load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
