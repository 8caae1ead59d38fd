#!/usr/bin/env bash
# Two-process training of the LeNet-style CNN on Fashion-MNIST, 3 epochs, global batch 64,
# SGD Nesterov lr 0.05 with warm-up + cosine, weight decay 5e-4: dtrain's train_mnist
# under mpirun against TensorFlow's MultiWorkerMirroredStrategy with two localhost
# workers (tf_mwms_mnist.py), one after the other on this machine, 1 thread per process.
# Writes both logs and a summary to bench/results/tf_mwms_vs_dtrain.txt (and stdout).
#   bench/peers/run_tf_comparison.sh [--build DIR] [--epochs N] [--limit-train N]
# --build: the CMake build directory holding examples/train_mnist (default build/release).
# --limit-train: train on the first N examples (a quick check of the script).
# PYTHON selects the peer's interpreter (default .venv/bin/python, from setup-venv.sh).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build/release
epochs=3
limit=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --limit-train) limit=(--limit-train "$2"); shift 2 ;;
    *) echo "run_tf_comparison: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
python=${PYTHON:-$root/.venv/bin/python}
train_mnist=$build/examples/train_mnist
[ -x "$train_mnist" ] || { echo "run_tf_comparison: $train_mnist not found (build train_mnist)" >&2; exit 1; }
[ -x "$python" ] || { echo "run_tf_comparison: $python not found (run bench/peers/setup-venv.sh)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

mkdir -p "$root/bench/results"
out=$root/bench/results/tf_mwms_vs_dtrain.txt
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) hardware threads; load average at start \
$(cut -d' ' -f1-3 /proc/loadavg); dtrain $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown); \
$(date -u +%Y-%m-%dT%H:%MZ)"

echo "== dtrain: mpirun -np 2 train_mnist --model cnn --epochs $epochs --threads 1 ${limit[*]}" >&2
# The progress bar redraws with \r; keep only the finished lines.
mpirun -np 2 "$train_mnist" --model cnn --epochs "$epochs" --threads 1 "${limit[@]}" | tr '\r' '\n' \
  | grep -a -E '^(train_mnist:|epoch [0-9]+/[0-9]+:|final test accuracy)' | tee "$logs/dtrain.txt"
echo "== tensorflow: tf_mwms_mnist.py --workers 2 --epochs $epochs --threads 1 ${limit[*]}" >&2
"$python" "$root/bench/peers/tf_mwms_mnist.py" --workers 2 --epochs "$epochs" --threads 1 "${limit[@]}" \
  | tee "$logs/tf.txt"

{
  echo "machine: $machine; at end $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "Fashion-MNIST, LeNet-style CNN, 2 processes x 1 thread, global batch 64, $epochs epochs;"
  echo "seconds per epoch cover training only (evaluation excluded on both sides); tensorflow's train"
  echo "loss includes the L2 penalty, dtrain's (weight decay in the optimizer) does not."
  echo
  echo "--- dtrain: mpirun -np 2 train_mnist --model cnn --epochs $epochs --threads 1 ${limit[*]}"
  cat "$logs/dtrain.txt"
  echo
  echo "--- tensorflow MultiWorkerMirroredStrategy: tf_mwms_mnist.py --workers 2 --epochs $epochs ${limit[*]}"
  cat "$logs/tf.txt"
  echo
  python3 - "$logs/dtrain.txt" "$logs/tf.txt" <<'PY'
import re, statistics, sys
def parse(path):
    text = open(path).read()
    seconds = [float(s) for s in re.findall(r"^epoch \d+/\d+:.*?([\d.]+) s\s*$", text, re.M)]
    accuracy = re.search(r"final test accuracy: ([\d.]+)%", text)
    return seconds, float(accuracy.group(1)) if accuracy else float("nan")
(d_s, d_acc), (t_s, t_acc) = parse(sys.argv[1]), parse(sys.argv[2])
print(f"{'':<12}{'s/epoch (each)':>28}{'median':>9}{'test acc %':>12}")
for name, s, acc in (("dtrain", d_s, d_acc), ("tensorflow", t_s, t_acc)):
    print(f"{name:<12}{' '.join(f'{x:.1f}' for x in s):>28}{statistics.median(s):>9.1f}{acc:>12.2f}")
print(f"epoch time tensorflow / dtrain (medians; above 1: dtrain faster): "
      f"{statistics.median(t_s) / statistics.median(d_s):.2f}")
PY
} | { . "$root/bench/provenance.sh"; provenance_text; cat; } | tee "$out"
